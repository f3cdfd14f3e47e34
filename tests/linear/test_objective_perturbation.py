"""Tests for objective perturbation (CMS11 Alg. 2; KST12 / vdMH20 for replace-one)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

import privml.linear._objective_perturbation as objective_module
from privml.audit import neighbour_distribution_test
from privml.data import load_dataset
from privml.exceptions import ConvergenceError, PrivacyLeakWarning
from privml.linear._objective_perturbation import (
    AUTO_FLAT_NOISE,
    ObjectivePerturbationClassifier,
    objective_constants,
)
from privml.linear._objective_perturbation_constants import cms11_constants, kst12_constants, objective_gaussian_sigma
from privml.linear._solvers import DEFAULT_TOL
from privml.losses import HuberHingeLoss, LogisticLoss, MultinomialLogisticLoss
from privml.neighbouring import Neighbouring

# Huber hinge (h = 0.5) with n lambda = 200 keeps every margin below 1 - h,
# where the loss is linear: the minimiser is then w = (sum_i y_i x_i - b) / (n Lambda)
# exactly, so b can be read back from the release and its law tested.
LINEAR_N, LINEAR_L2 = 20, 10.0


def _linear_regime_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(21)
    X = rng.standard_normal((LINEAR_N, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, rng.integers(0, 2, size=LINEAR_N)


def _recovered_noise(n_fits: int, **params) -> tuple[np.ndarray, dict]:
    X, y = _linear_regime_data()
    signed = 2 * y - 1
    noise, info = [], {}
    for seed in range(n_fits):
        model = ObjectivePerturbationClassifier(
            l2=LINEAR_L2, loss="huber", classes=[0, 1], random_state=seed, **params
        ).fit(X, y)
        info = model.fit_info_
        assert np.max(signed * (X @ model.weights_)) < 0.5  # still in the linear part
        total_l2 = LINEAR_L2 + info["extra_l2"]
        noise.append(signed @ X - LINEAR_N * total_l2 * model.weights_)
    return np.array(noise), info


# ------------------------------------------------------------ the constants
@pytest.mark.parametrize("delta", [0.0, 1e-5])
@pytest.mark.parametrize("k", [2, 4])
def test_fit_uses_the_kst12_constants(k: int, delta: float) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 3)) / 2
    y = rng.integers(0, k, size=30)
    model = ObjectivePerturbationClassifier(
        epsilon=0.7, delta=delta, l2=0.05, classes=list(range(k)), random_state=0
    ).fit(X, y)
    loss = LogisticLoss() if k == 2 else MultinomialLogisticLoss(k)
    expected = kst12_constants(
        0.7, delta, 30, 0.05, lipschitz=loss.lipschitz, smoothness=loss.smoothness, rank=loss.hessian_rank,
        trace=0.25 if k == 2 else 1 - 1 / k, directions=1 if k == 2 else k - 1,
    )
    info = model.fit_info_
    assert info["variant"] == "kst12"
    for field in ("extra_l2", "epsilon_jacobian", "epsilon_noise", "noise", "noise_scale", "noise_sensitivity"):
        assert info[field] == getattr(expected, field)
    assert info["noise"] == ("gaussian" if delta else "l2-laplace")
    assert model.nonprivate_diagnostics_["grad_norm"] <= DEFAULT_TOL
    assert model.weights_.shape == ((3,) if k == 2 else (3, k))
    assert (model.privacy_.epsilon, model.privacy_.delta) == (0.7, delta)
    assert model.privacy_.neighbouring is Neighbouring.REPLACE_ONE


def test_small_lambda_gets_extra_regularisation() -> None:
    X, y = _linear_regime_data()
    model = ObjectivePerturbationClassifier(epsilon=1.0, l2=1e-6, classes=[0, 1], random_state=0).fit(X, y)
    info = model.fit_info_
    assert info["extra_l2"] > 0
    assert info["epsilon_jacobian"] == pytest.approx(0.5, rel=1e-9)
    assert info["epsilon_jacobian"] + info["epsilon_noise"] == pytest.approx(1.0)


@pytest.mark.parametrize("n, l2", [(20, 10.0), (20, 1e-3)], ids=["no-extra", "extra"])
def test_cms11_variant_uses_algorithm_2(n: int, l2: float) -> None:
    X, y = _linear_regime_data()
    model = ObjectivePerturbationClassifier(
        epsilon=0.8, l2=l2, variant="cms11", classes=[0, 1], random_state=0
    ).fit(X[:n], y[:n])
    expected = cms11_constants(0.8, n, l2, LogisticLoss().smoothness)
    assert model.fit_info_["variant"] == "cms11"
    assert model.fit_info_["extra_l2"] == expected.extra_l2
    assert model.fit_info_["noise_scale"] == expected.noise_scale
    assert (model.fit_info_["extra_l2"] > 0) == (l2 < 1)


def test_objective_constants_dispatch() -> None:
    loss = HuberHingeLoss(0.25)
    assert objective_constants("cms11", 1.0, 0.0, 50, 0.1, loss) == cms11_constants(1.0, 50, 0.1, 2.0, 1.0)
    assert objective_constants("kst12", 1.0, 0.0, 50, 0.1, loss) == kst12_constants(
        1.0, 0.0, 50, 0.1, lipschitz=1.0, smoothness=2.0, rank=1, trace=2.0, directions=1
    )


@pytest.mark.parametrize("delta", [1e-5, 0.0])
def test_auto_l2_rule(delta: float) -> None:
    # lambda = max(1/n, 2 L m / (n tau)), m the rms of b per coordinate in sensitivities 2L.
    rng = np.random.default_rng(4)
    n, d, k = 40, 4, 3
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.arange(n) % k
    model = ObjectivePerturbationClassifier(epsilon=1.0, delta=delta, classes=list(range(k)), random_state=0)
    lipschitz, dim = math.sqrt(2), d * k
    if delta > 0:
        m = objective_gaussian_sigma(1.0, delta, lipschitz, k - 1) / (2 * lipschitz)
        expected = 2 * lipschitz * m / (n * AUTO_FLAT_NOISE["gaussian"])
    else:
        expected = 2 * lipschitz * math.sqrt(dim + 1) / (n * AUTO_FLAT_NOISE["l2-laplace"])
    assert expected > 1 / n  # the noise term, not the floor, is checked here
    assert model.fit(X, y).fit_info_["l2"] == pytest.approx(expected, rel=1e-12)
    assert model.fit_info_["l2_rule"].startswith("auto")
    # Falls with epsilon, floors at scikit-learn's 1/n.
    weak = ObjectivePerturbationClassifier(epsilon=1e3, delta=delta, classes=list(range(k)), random_state=0)
    assert weak.fit(X, y).fit_info_["l2"] == 1 / n


# ------------------------------------------------------------ the noise b
def test_laplace_b_has_the_claimed_law() -> None:
    noise, info = _recovered_noise(400, epsilon=1.0)
    assert info["noise"] == "l2-laplace"
    # b ~ exp(-eps_b ||b|| / (2L)): norm Gamma(d, 2L / eps_b), 2L = 2 under replace-one.
    assert info["noise_scale"] == pytest.approx(2.0 / info["epsilon_noise"])
    norms = np.linalg.norm(noise, axis=1)
    assert stats.kstest(norms, stats.gamma(a=3, scale=info["noise_scale"]).cdf).pvalue > 1e-3
    assert stats.kstest(norms, stats.gamma(a=3, scale=info["noise_scale"] / 2).cdf).pvalue < 1e-8


def test_gaussian_b_has_the_claimed_law() -> None:
    noise, info = _recovered_noise(200, epsilon=1.0, delta=1e-5)
    sigma = objective_gaussian_sigma(info["epsilon_noise"], 1e-5, 1.0, 1)
    assert info["noise"] == "gaussian" and info["noise_scale"] == pytest.approx(sigma)
    assert stats.kstest(noise.ravel() / sigma, "norm").pvalue > 1e-3
    assert stats.kstest(noise.ravel() / (sigma / 2), "norm").pvalue < 1e-8


# ------------------------------------------------------ neighbouring datasets
NEIGHBOUR_X = np.array([[1.0], [0.6], [-0.8], [0.4], [-0.3], [0.9], [-1.0], [0.2], [0.5], [-0.6]])
NEIGHBOUR_Y = np.array([1, 1, 0, 1, 0, 1, 0, 0, 1, 0])
N_NEIGHBOUR = 1000


def _neighbour_releases(**params) -> tuple[np.ndarray, np.ndarray]:
    # Flipping the label of x = 1 moves b_D(w) by exactly 2L = 2 in the linear
    # part of the Huber hinge: the noise term's privacy loss reaches eps_b.
    y_neighbour = NEIGHBOUR_Y.copy()
    y_neighbour[0] = 1 - y_neighbour[0]
    settings = dict(l2=10.0, loss="huber", classes=[0, 1], **params)
    a = [ObjectivePerturbationClassifier(random_state=s, **settings).fit(NEIGHBOUR_X, NEIGHBOUR_Y).weights_[0]
         for s in range(N_NEIGHBOUR)]
    b = [ObjectivePerturbationClassifier(random_state=10**6 + s, **settings).fit(NEIGHBOUR_X, y_neighbour).weights_[0]
         for s in range(N_NEIGHBOUR)]
    return np.array(a), np.array(b)


def test_neighbour_distributions_respect_epsilon() -> None:
    a, b = _neighbour_releases(epsilon=1.0)
    result = neighbour_distribution_test(a, b, epsilon=1.0)
    assert not result.violated
    assert result.epsilon_lower_bound > 0.3


def test_neighbour_test_catches_the_add_remove_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    # Noise calibrated to one gradient (shift L, as in KST12 / vdMH20 under
    # add/remove) is too small for replace-one neighbours.
    def one_gradient(*args, **kwargs):
        constants = kst12_constants(*args, **kwargs)
        return dataclasses.replace(constants, noise_scale=constants.noise_scale / 2)

    monkeypatch.setattr(objective_module, "kst12_constants", one_gradient)
    a, b = _neighbour_releases(epsilon=1.0)
    assert neighbour_distribution_test(a, b, epsilon=1.0).violated


# --------------------------------------------------------------- accuracy
@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", bias=True)


def _mean_accuracy(data, epsilon: float, delta: float) -> float:
    classes = list(range(10))
    return float(np.mean([
        ObjectivePerturbationClassifier(epsilon=epsilon, delta=delta, classes=classes, random_state=seed)
        .fit(data.X_train, data.y_train).score(data.X_test, data.y_test)
        for seed in range(3)
    ]))


@pytest.mark.parametrize("delta", [1e-5, 0.0])
def test_accuracy_on_digits_degrades_with_epsilon(digits, delta: float) -> None:
    high = _mean_accuracy(digits, 10.0, delta)
    low = _mean_accuracy(digits, 0.3, delta)
    assert high > 0.6  # chance is 0.1
    assert low < high - 0.2


@pytest.mark.parametrize("variant", ["cms11", "kst12"])
def test_binary_huber_on_breast_cancer(variant: str) -> None:
    data = load_dataset("breast_cancer", bias=True, random_state=0)
    accuracy = np.mean([
        ObjectivePerturbationClassifier(epsilon=10.0, loss="huber", variant=variant, classes=[0, 1], random_state=seed)
        .fit(data.X_train, data.y_train).score(data.X_test, data.y_test)
        for seed in range(3)
    ])
    assert accuracy > 0.8  # majority class of the test split: 0.67


# -------------------------------------------------------------- validation
def _fit_untouched(rng: np.random.Generator, X, y, **params) -> None:
    """Fit must fail without drawing from ``rng``."""
    state = rng.bit_generator.state
    with pytest.raises((ValueError, TypeError)):
        ObjectivePerturbationClassifier(random_state=rng, **params).fit(X, y)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize(
    "params",
    [
        {"epsilon": 0.0}, {"epsilon": -0.5}, {"epsilon": math.inf}, {"epsilon": None},
        {"epsilon": 1.0, "delta": -1e-9}, {"epsilon": 1.0, "delta": 1.5},
        {"epsilon": 1.0, "l2": "small"}, {"epsilon": 1.0, "l2": -0.1},
        {"epsilon": 1.0, "variant": "cms"}, {"epsilon": 1.0, "variant": "cms11", "delta": 1e-5},
        {"epsilon": 1.0, "loss": "squared"}, {"epsilon": 1.0, "tol": -1.0}, {"epsilon": 1.0, "max_iter": 0},
    ],
)
def test_bad_parameters_fail_before_noise(params: dict) -> None:
    X, y = _linear_regime_data()
    _fit_untouched(np.random.default_rng(0), X, y, classes=[0, 1], **params)


def test_bad_data_fails_before_noise() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((15, 2)) / 2
    y = rng.integers(0, 3, size=15)
    for bad in (np.nan, -np.inf):
        X_bad = X.copy()
        X_bad[0, 0] = bad
        _fit_untouched(rng, X_bad, y, epsilon=1.0, classes=[0, 1, 2])
    _fit_untouched(rng, X, y, epsilon=1.0, classes=[0, 1])  # label 2 is not a class
    _fit_untouched(rng, X, y, epsilon=1.0, classes=[0, 1, 2], variant="cms11")  # binary only
    _fit_untouched(rng, X, y, epsilon=1.0, classes=[0, 1, 2], loss="huber")


def test_a_tiny_iteration_cap_still_releases_the_certified_minimiser() -> None:
    X, y = _linear_regime_data()
    model = ObjectivePerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0, l2=1e-3, max_iter=1)
    model.fit(X, y)
    assert model.nonprivate_diagnostics_["grad_norm"] <= DEFAULT_TOL
    assert ConvergenceError  # kept for compatibility; private fits never raise it


def test_inferred_classes_warn_and_predict_checks_features() -> None:
    X, y = _linear_regime_data()
    with pytest.warns(PrivacyLeakWarning):
        model = ObjectivePerturbationClassifier(epsilon=1.0, random_state=0).fit(X, y)
    assert set(model.predict(X)) <= {0, 1}
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :2])


# --------------------------------------------------------------- MNIST scale
@pytest.mark.slow
def test_mnist_accuracy_at_epsilon_one() -> None:
    data = load_dataset("mnist", bias=True)
    model = ObjectivePerturbationClassifier(epsilon=1.0, delta=1e-5, classes=list(range(10)), random_state=0)
    assert model.fit(data.X_train, data.y_train).score(data.X_test, data.y_test) >= 0.85
