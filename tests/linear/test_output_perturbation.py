"""Tests for output perturbation (CMS11 Alg. 1; vdMH20 Thm 1-2), replace-one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import privml.linear._output_perturbation as output_module
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.audit import neighbour_distribution_test
from privml.data import load_dataset
from privml.exceptions import ConvergenceError, PrivacyLeakWarning
from privml.linear._output_perturbation import AUTO_SCORE_NOISE, OutputPerturbationClassifier
from privml.linear._sensitivity import auto_l2, erm_sensitivity, rms_noise_multiplier
from privml.linear._solvers import DEFAULT_TOL, minimise_objective
from privml.losses import LogisticLoss, MultinomialLogisticLoss, RegularisedObjective
from privml.neighbouring import Neighbouring

N_FITS = 400


def _small_data(k: int | None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    X = rng.standard_normal((20, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = rng.integers(0, k or 2, size=20)
    return X, y


def _optimum(X: np.ndarray, y: np.ndarray, k: int | None, l2: float) -> np.ndarray:
    loss = MultinomialLogisticLoss(k) if k else LogisticLoss()
    labels = y if k else 2 * y - 1
    return minimise_objective(RegularisedObjective(loss, X, labels, l2)).weights


def _noise_samples(
    X: np.ndarray, y: np.ndarray, k: int | None, n_fits: int = N_FITS, **params
) -> tuple[np.ndarray, dict]:
    classes = list(range(k or 2))
    optimum = _optimum(X, y, k, params["l2"])
    noise, info = [], {}
    for seed in range(n_fits):
        model = OutputPerturbationClassifier(classes=classes, random_state=seed, **params).fit(X, y)
        noise.append((model.weights_ - optimum).ravel())
        info = model.fit_info_
    return np.array(noise), info


# --------------------------------------------------------------- noise scale
@pytest.mark.parametrize("k", [None, 3], ids=["binary", "multinomial"])
def test_l2_laplace_noise_has_the_claimed_scale(k: int | None) -> None:
    X, y = _small_data(k)
    l2, eps = 0.2, 1.0
    noise, info = _noise_samples(X, y, k, epsilon=eps, l2=l2)
    lipschitz = math.sqrt(2) if k else 1.0
    sensitivity = erm_sensitivity(lipschitz, len(y), l2, grad_tol=DEFAULT_TOL)
    assert info["sensitivity"] == pytest.approx(sensitivity) and info["noise"] == "l2-laplace"
    assert info["noise_scale"] == pytest.approx(sensitivity / eps)
    # ||noise|| ~ Gamma(dim, Delta_2 / eps) (CMS11 Alg. 1 sampler).
    norms = np.linalg.norm(noise, axis=1)
    claimed = stats.gamma(a=noise.shape[1], scale=sensitivity / eps)
    assert stats.kstest(norms, claimed.cdf).pvalue > 1e-3
    # The same test catches the add/remove slip: half the scale.
    assert stats.kstest(norms, stats.gamma(a=noise.shape[1], scale=sensitivity / (2 * eps)).cdf).pvalue < 1e-8


@pytest.mark.parametrize("k", [None, 3], ids=["binary", "multinomial"])
def test_gaussian_noise_has_the_claimed_std(k: int | None) -> None:
    X, y = _small_data(k)
    l2, eps, delta = 0.2, 1.0, 1e-5
    # Each fit calibrates sigma by bisection; 200 fits give 600+ coordinates.
    noise, info = _noise_samples(X, y, k, n_fits=200, epsilon=eps, delta=delta, l2=l2)
    lipschitz = math.sqrt(2) if k else 1.0
    sigma = analytic_gaussian_sigma(eps, delta, erm_sensitivity(lipschitz, len(y), l2, grad_tol=DEFAULT_TOL))
    assert info["noise"] == "gaussian" and info["noise_scale"] == pytest.approx(sigma)
    # Every coordinate is N(0, sigma^2), independently.
    assert stats.kstest(noise.ravel() / sigma, "norm").pvalue > 1e-3
    assert stats.kstest(noise.ravel() / (sigma / 2), "norm").pvalue < 1e-8
    assert np.abs(np.corrcoef(noise.T) - np.eye(noise.shape[1])).max() < 0.2


def test_a_broken_scale_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # An estimator that used half the sensitivity (one gradient: the add/remove
    # bound) releases noise that fails the test against the claimed scale.
    X, y = _small_data(None)
    correct = erm_sensitivity(1.0, len(y), 0.2, grad_tol=DEFAULT_TOL)
    monkeypatch.setattr(output_module, "erm_sensitivity", lambda *a, **k: erm_sensitivity(*a, **k) / 2)
    noise, _ = _noise_samples(X, y, None, epsilon=1.0, l2=0.2)
    norms = np.linalg.norm(noise, axis=1)
    assert stats.kstest(norms, stats.gamma(a=3, scale=correct).cdf).pvalue < 1e-8


# ------------------------------------------------------- neighbouring datasets
# Huber hinge with a strong regulariser keeps every margin in its linear part,
# where flipping one label moves the minimiser by exactly the sensitivity
# 2/(n lambda): the privacy loss then reaches epsilon and a too-small noise
# scale shows up as a violation.
NEIGHBOUR_X = np.array([[1.0], [0.6], [-0.8], [0.4], [-0.3], [0.9], [-1.0], [0.2], [0.5], [-0.6]])
NEIGHBOUR_Y = np.array([1, 1, 0, 1, 0, 1, 0, 0, 1, 0])
N_NEIGHBOUR = 1000


def _neighbour_releases(**params) -> tuple[np.ndarray, np.ndarray]:
    y_neighbour = NEIGHBOUR_Y.copy()
    y_neighbour[0] = 1 - y_neighbour[0]
    settings = dict(l2=10.0, loss="huber", classes=[0, 1], **params)
    a = [OutputPerturbationClassifier(random_state=s, **settings).fit(NEIGHBOUR_X, NEIGHBOUR_Y).weights_[0]
         for s in range(N_NEIGHBOUR)]
    b = [OutputPerturbationClassifier(random_state=10**6 + s, **settings).fit(NEIGHBOUR_X, y_neighbour).weights_[0]
         for s in range(N_NEIGHBOUR)]
    return np.array(a), np.array(b)


def test_neighbour_distributions_respect_epsilon() -> None:
    a, b = _neighbour_releases(epsilon=1.0)
    result = neighbour_distribution_test(a, b, epsilon=1.0)
    assert not result.violated
    assert result.epsilon_lower_bound > 0.3  # the shift is real: the test has something to see


def test_neighbour_test_catches_half_the_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output_module, "erm_sensitivity", lambda *a, **k: erm_sensitivity(*a, **k) / 2)
    a, b = _neighbour_releases(epsilon=1.0)
    assert neighbour_distribution_test(a, b, epsilon=1.0).violated


# --------------------------------------------------------------- accuracy
@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", bias=True)


def _mean_accuracy(data, epsilon: float, delta: float) -> float:
    classes = list(range(10))
    return float(np.mean([
        OutputPerturbationClassifier(epsilon=epsilon, delta=delta, classes=classes, random_state=seed)
        .fit(data.X_train, data.y_train).score(data.X_test, data.y_test)
        for seed in range(3)
    ]))


def test_accuracy_on_digits_degrades_with_epsilon(digits) -> None:
    high = _mean_accuracy(digits, 10.0, 1e-5)
    low = _mean_accuracy(digits, 0.3, 1e-5)
    assert high > 0.6  # chance is 0.1
    assert low < high - 0.2


# ------------------------------------------------------------ the l2 rule
def _auto(n: int, dim: int, epsilon: float, delta: float, lipschitz: float) -> float:
    """Output perturbation's l2="auto": the shared rule at the rms noise per score."""
    return auto_l2(n, lipschitz, rms_noise_multiplier(epsilon, delta, dim), AUTO_SCORE_NOISE)


def test_auto_l2_rule() -> None:
    n, dim = 60_000, 7850
    multiplier = analytic_gaussian_sigma(1.0, 1e-5, 1.0)
    expected = 2 * math.sqrt(2) * multiplier / (n * AUTO_SCORE_NOISE)
    assert _auto(n, dim, 1.0, 1e-5, math.sqrt(2)) == pytest.approx(expected)
    # L2-Laplace: per-coordinate rms sqrt(dim + 1) / eps sensitivities.
    assert _auto(n, dim, 1.0, 0.0, 1.0) == pytest.approx(2 * math.sqrt(dim + 1) / (n * AUTO_SCORE_NOISE))
    # Falls with epsilon, floors at scikit-learn's 1/n.
    assert _auto(n, dim, 0.1, 1e-5, 1.0) > _auto(n, dim, 1.0, 1e-5, 1.0)
    assert _auto(n, dim, 1e4, 1e-5, 1.0) == 1 / n


@pytest.mark.parametrize(("k", "delta"), [(None, 1e-6), (None, 0.0), (3, 1e-6)])
def test_fit_reports_the_auto_l2_and_guarantee(k: int | None, delta: float) -> None:
    X, y = _small_data(k)
    model = OutputPerturbationClassifier(epsilon=0.5, delta=delta, classes=list(range(k or 2)), random_state=0)
    model.fit(X, y)
    # (n, number of parameters, L) = (20, 3, 1) binary, (20, 9, sqrt 2) with 3 classes.
    dim, lipschitz = (3, 1.0) if k is None else (9, math.sqrt(2))
    assert model.fit_info_["l2"] == _auto(20, dim, 0.5, delta, lipschitz)
    assert model.fit_info_["l2_rule"].startswith("auto")
    assert model.nonprivate_diagnostics_["grad_norm"] <= DEFAULT_TOL
    assert (model.privacy_.epsilon, model.privacy_.delta) == (0.5, delta)
    assert model.privacy_.neighbouring is Neighbouring.REPLACE_ONE
    assert model.get_params()["l2"] == "auto"  # hyper-parameters stay as given


def test_same_seed_same_model() -> None:
    X, y = _small_data(None)
    first = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=3).fit(X, y)
    second = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=3).fit(X, y)
    assert np.array_equal(first.weights_, second.weights_)


# -------------------------------------------------------------- validation
def _fit_untouched(rng: np.random.Generator, X, y, **params) -> None:
    """Fit must fail without drawing from ``rng``."""
    state = rng.bit_generator.state
    with pytest.raises((ValueError, TypeError)):
        OutputPerturbationClassifier(random_state=rng, **params).fit(X, y)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    "params",
    [
        {"epsilon": 0.0}, {"epsilon": -1.0}, {"epsilon": math.inf}, {"epsilon": math.nan}, {"epsilon": "1"},
        {"epsilon": 1.0, "delta": -0.1}, {"epsilon": 1.0, "delta": 1.0},
        {"epsilon": 1.0, "l2": "large"}, {"epsilon": 1.0, "l2": -1.0}, {"epsilon": 1.0, "l2": 0.0},
        {"epsilon": 1.0, "loss": "hinge"}, {"epsilon": 1.0, "tol": 0.0}, {"epsilon": 1.0, "max_iter": 0},
    ],
)
def test_bad_parameters_fail_before_noise(params: dict) -> None:
    X, y = _small_data(None)
    _fit_untouched(np.random.default_rng(0), X, y, classes=[0, 1], **params)


def test_bad_data_fails_before_noise() -> None:
    X, y = _small_data(3)
    rng = np.random.default_rng(0)
    for bad in (np.nan, np.inf):
        X_bad = X.copy()
        X_bad[2, 1] = bad
        _fit_untouched(rng, X_bad, y, epsilon=1.0, classes=[0, 1, 2])
    _fit_untouched(rng, X, y, epsilon=1.0, classes=[0, 1])  # label 2 outside the classes
    _fit_untouched(rng, X, y[:-1], epsilon=1.0, classes=[0, 1, 2])
    _fit_untouched(rng, X, y, epsilon=1.0, classes=[0, 1, 2], loss="huber")  # binary loss, 3 classes


def test_a_tiny_iteration_cap_still_releases_the_certified_minimiser() -> None:
    # Failing when the capped solver stops short would release a data-dependent bit.
    X, y = _small_data(None)
    capped = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0, l2=1e-2, max_iter=1).fit(X, y)
    full = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0, l2=1e-2).fit(X, y)
    assert capped.nonprivate_diagnostics_["grad_norm"] <= DEFAULT_TOL
    np.testing.assert_allclose(capped.weights_, full.weights_, atol=1e-7)
    assert ConvergenceError  # kept for compatibility; private fits never raise it


def test_inferred_classes_warn() -> None:
    X, y = _small_data(None)
    with pytest.warns(PrivacyLeakWarning):
        OutputPerturbationClassifier(epsilon=1.0, random_state=0).fit(X, y)


def test_predict_checks_feature_count() -> None:
    X, y = _small_data(None)
    model = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y)
    assert model.predict(X).shape == (20,)
    assert np.allclose(model.predict_proba(X).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :2])


# --------------------------------------------------------------- MNIST scale
@pytest.mark.slow
def test_mnist_accuracy_at_epsilon_one() -> None:
    data = load_dataset("mnist", bias=True)
    model = OutputPerturbationClassifier(epsilon=1.0, delta=1e-5, classes=list(range(10)), random_state=0)
    assert model.fit(data.X_train, data.y_train).score(data.X_test, data.y_test) >= 0.85
