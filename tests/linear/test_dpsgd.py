"""Tests for DPSGDClassifier: the mechanism step by step, its accounting, and audits.

Statistical tests use fixed seeds and tolerances of several standard errors,
so they are deterministic and still fail on the bugs they target (each such
test also shows a deliberately broken variant failing the same check).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats
from sklearn.base import clone

from privml.accounting._analytic_gaussian import gaussian_epsilon
from privml.accounting._calibration import make_accountant
from privml.accounting._events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent
from privml.audit import neighbour_distribution_test
from privml.data import load_dataset
from privml.exceptions import PrivacyLeakWarning
from privml.io import load_model, save_model
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._dpsgd_steps import _Averager, clipped_gradient_sum, learning_rate_schedule, poisson_sample
from privml.losses import LogisticLoss, MultinomialLogisticLoss
from privml.neighbouring import Neighbouring

DIGITS_CLASSES = list(range(10))


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", bias=True, random_state=0)


def quiet(**params) -> DPSGDClassifier:
    """A one-step, constant-rate, no-averaging model: its weights are -lr * (update)."""
    defaults = dict(
        steps=1, learning_rate=1.0, lr_schedule="constant", averaging="none", accountant="rdp", random_state=0
    )
    return DPSGDClassifier(**{**defaults, **params})


# ------------------------------------------------------------ broken variants
class NoClipping(DPSGDClassifier):
    """Broken: sums raw per-example gradients (the accountant still assumes norm <= C)."""

    def _clipped_sum(self, loss, weights, X, y, clip, row_norms):
        return X.T @ loss._score_gradients(X @ weights, y)


class PerClassClipping(DPSGDClassifier):
    """Broken: clips each class's weight column separately to C (the per-tensor pitfall)."""

    def _clipped_sum(self, loss, weights, X, y, clip, row_norms):
        residuals = loss._score_gradients(X @ weights, y)  # (b, k)
        norms = row_norms[:, None] * np.abs(residuals)  # norm of column c of x_i r_i^T
        return X.T @ (residuals * clip / np.maximum(norms, clip))


class RealisedBatchNormalisation(DPSGDClassifier):
    """Broken: divides by the realised Poisson batch size (private) instead of the public q n."""

    def _batches(self, n, plan, rng):
        for index, _ in super()._batches(n, plan, rng):
            yield index, float(max(index.size, 1))


class StepCounter(DPSGDClassifier):
    """Counts optimiser steps (one clipped sum per step)."""

    def _clipped_sum(self, loss, weights, X, y, clip, row_norms):
        self.counted_steps = getattr(self, "counted_steps", 0) + 1
        return super()._clipped_sum(loss, weights, X, y, clip, row_norms)


# ------------------------------------------------------------------- clipping
@pytest.mark.parametrize("loss", [LogisticLoss(), MultinomialLogisticLoss(4)], ids=["binary", "softmax"])
def test_clipping_bounds_every_whole_per_example_gradient(loss) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 7))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True)) * rng.uniform(1, 3, size=(300, 1))
    y = rng.choice([-1, 1], 300) if loss.n_outputs is None else rng.integers(0, 4, 300)
    w = rng.normal(scale=5.0, size=loss.parameter_shape(7))
    clip = 0.2
    total, norms = clipped_gradient_sum(loss, w, X, y, clip)
    explicit = loss.per_example_gradients(w, X, y)  # (n, d k), materialised
    # the ghost norm ||x|| ||r|| is the norm of the whole flattened per-example gradient
    np.testing.assert_allclose(norms, np.linalg.norm(explicit, axis=1), rtol=1e-12)
    clipped = explicit * np.minimum(1.0, clip / np.linalg.norm(explicit, axis=1))[:, None]
    assert np.all(np.linalg.norm(clipped, axis=1) <= clip * (1 + 1e-12))
    assert np.mean(norms > clip) > 0.5  # the clip binds for most rows here
    np.testing.assert_allclose(total.reshape(-1), clipped.sum(axis=0), rtol=1e-10, atol=1e-12)


def test_clipping_leaves_short_gradients_and_empty_batches_alone() -> None:
    loss = MultinomialLogisticLoss(3)
    X = np.array([[0.6, 0.8], [0.0, 0.0]])
    y = np.array([0, 2])
    w = np.zeros((2, 3))
    total, norms = clipped_gradient_sum(loss, w, X, y, clip_norm=10.0)
    np.testing.assert_allclose(total, loss.per_example_gradients(w, X, y).sum(axis=0).reshape(2, 3))
    assert norms[1] == 0.0
    empty, _ = clipped_gradient_sum(loss, w, X[:0], y[:0], clip_norm=1.0)
    assert empty.shape == (2, 3) and not empty.any()


# -------------------------------------------------------------------- sampling
def test_poisson_sample_sizes_are_binomial() -> None:
    n, q, draws = 40, 0.3, 4000
    rng = np.random.default_rng(1)
    sizes = np.array([poisson_sample(n, q, rng).size for _ in range(draws)])
    ks = np.arange(n + 1)
    expected = draws * stats.binom.pmf(ks, n, q)
    observed = np.bincount(sizes, minlength=n + 1)
    keep = expected >= 5
    # pool the sparse tails into one cell so the chi-square approximation holds
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # and each record is kept independently with probability q
    membership = np.array([np.isin(0, poisson_sample(n, q, rng)) for _ in range(draws)])
    assert abs(membership.mean() - q) < 4 * math.sqrt(q * (1 - q) / draws)


def _recovered_batch_sizes(cls, seeds: range, n: int = 200, q: float = 0.3) -> np.ndarray:
    """Fit one step on n identical records whose gradient is known, recover |B| from the weights.

    With x = e_1, y = +1 and w = 0 every per-example gradient is -0.5 e_1
    (norm 0.5 < C), so one step with learning rate 1 and a tiny noise gives
    w_1 = 0.5 |B| / divisor. Divisor q n (correct): w_1 * 2 q n = |B|.
    """
    X = np.tile([1.0, 0.0], (n, 1))
    y = np.ones(n, dtype=int)
    out = []
    for seed in seeds:
        model = quiet(
            epsilon=1e4, noise_multiplier=0.05, clip_norm=1.0, sample_rate=q, classes=[0, 1], random_state=seed
        )
        model = cls(**model.get_params()).fit(X, y)
        out.append(model.weights_[0] * 2 * q * n)
    return np.array(out)


def test_normalisation_by_expected_batch_size_and_binomial_batches() -> None:
    n, q = 200, 0.3
    sizes = _recovered_batch_sizes(DPSGDClassifier, range(400), n, q)
    # noise on the recovered size is 2 * 0.05 = 0.1 std: rounding recovers |B| exactly
    assert np.all(np.abs(sizes - np.round(sizes)) < 0.5)
    sizes = np.round(sizes)
    mean, var = n * q, n * q * (1 - q)
    assert abs(sizes.mean() - mean) < 4 * math.sqrt(var / sizes.size)
    assert 0.75 * var < sizes.var() < 1.3 * var
    assert stats.kstest(sizes, stats.binom(n, q).cdf).statistic < 0.1
    # dividing by the realised size instead makes the update blind to |B|: caught
    broken = _recovered_batch_sizes(RealisedBatchNormalisation, range(50), n, q)
    assert broken.var() < 0.05 * var


@pytest.mark.parametrize("l2", [0.0, 0.5])
def test_two_steps_match_a_hand_computation_with_l2_outside_the_clip(l2: float) -> None:
    # n identical records x = e_1, y = +1, full batches, C = 0.1 below every
    # gradient norm here (expit(-w_1) >= 0.45): each clipped mean is -0.1 e_1.
    # Step 1 from 0: w_1 = 0.1. Step 2: w_2 = w_1 - (-0.1 + l2 w_1) = 0.2 - 0.1 l2.
    # Regularising inside the clip, or dividing it by q n, gives another answer.
    n = 10_000
    X = np.tile([1.0, 0.0], (n, 1))
    model = quiet(
        epsilon=20.0, noise_multiplier=1.0, clip_norm=0.1, sample_rate=1.0, steps=2, l2=l2, classes=[0, 1]
    ).fit(X, np.ones(n, dtype=int))
    # noise: std s C / n = 1e-5 per step on each coordinate
    assert model.weights_[0] == pytest.approx(0.2 - 0.1 * l2, abs=1e-4)
    assert abs(model.weights_[1]) < 1e-4


# ----------------------------------------------------------------------- noise
def test_noise_on_the_clipped_sum_has_std_s_times_c() -> None:
    # All records are zero, so every gradient is zero and the step releases only
    # -lr * noise / (q n): the noise std on the summed gradient must be s C.
    n, d, k, q, s, clip = 50, 300, 5, 0.4, 1.7, 0.3
    X = np.zeros((n, d))
    y = np.arange(n) % k
    samples = []
    for seed in range(4):
        model = quiet(
            epsilon=50.0, noise_multiplier=s, clip_norm=clip, sample_rate=q, classes=list(range(k)), random_state=seed
        ).fit(X, y)
        samples.append(-model.weights_.ravel() * q * n)
        assert model.fit_info_["noise_std"] == pytest.approx(s * clip)
    noise = np.concatenate(samples)  # 6000 draws
    se = noise.std() / math.sqrt(2 * noise.size)
    assert abs(noise.std() - s * clip) < 4 * se
    assert abs(noise.mean()) < 4 * s * clip / math.sqrt(noise.size)
    assert stats.kstest(noise / (s * clip), "norm").pvalue > 1e-3


def test_direct_design_noise_is_the_analytic_gaussian_of_sensitivity_2c() -> None:
    n, d, clip, eps, delta = 40, 500, 0.5, 2.0, 1e-5
    X = np.zeros((n, d))
    y = np.arange(n) % 2
    model = DPSGDClassifier(
        epsilon=eps, delta=delta, clip_norm=clip, batch_size=n, design="direct", learning_rate=1.0,
        lr_schedule="constant", averaging="none", classes=[0, 1], random_state=3,
    ).fit(X, y)
    sigma = model.fit_info_["noise_std"]
    # hand computation: Balle and Wang (2018) Thm 8 with sensitivity 2C (replace-one)
    delta_at = stats.norm.cdf(2 * clip / (2 * sigma) - eps * sigma / (2 * clip)) - math.exp(eps) * stats.norm.cdf(
        -2 * clip / (2 * sigma) - eps * sigma / (2 * clip)
    )
    assert delta_at == pytest.approx(delta, rel=1e-6)
    noise = -model.weights_ * n  # one batch of all n records, divisor n
    assert abs(noise.std() - sigma) < 4 * sigma / math.sqrt(2 * d)
    assert model.fit_info_["sensitivity"] == 2 * clip


# ------------------------------------------------------------------ accounting
@pytest.mark.parametrize("design", ["poisson", "linear", "direct"])
def test_accountant_counts_exactly_the_optimiser_steps(design: str, digits) -> None:
    kwargs = {} if design == "direct" else {"epochs": 3}
    model = StepCounter(
        epsilon=2.0, batch_size=100, design=design, classes=DIGITS_CLASSES, random_state=0, **kwargs
    ).fit(digits.X_train, digits.y_train)
    event = model.privacy_event_
    count = event.count if isinstance(event, SelfComposedEvent) else 1
    assert model.counted_steps == model.fit_info_["steps"]
    expected = digits.X_train.shape[0] // 100 if design == "direct" else round(3 / (100 / digits.X_train.shape[0]))
    assert model.counted_steps == expected
    if design != "direct":
        assert count == model.counted_steps
        assert isinstance(event.event, PoissonSampledEvent)
        assert event.event.sampling_probability == pytest.approx(100 / digits.X_train.shape[0])


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
@pytest.mark.parametrize("epsilon", [0.3, 3.0])
def test_target_epsilon_calibration_is_tight_and_safe(accountant: str, epsilon: float, digits) -> None:
    model = DPSGDClassifier(
        epsilon=epsilon, batch_size=256, epochs=5, accountant=accountant, classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    assert model.privacy_.epsilon <= epsilon
    assert model.privacy_.epsilon > 0.98 * epsilon
    assert model.privacy_.neighbouring is Neighbouring.ADD_REMOVE_ONE
    assert model.privacy_.accountant == accountant
    # the stated event re-accounted from scratch gives the same guarantee
    again = make_accountant(accountant).compose(model.privacy_event_).get_epsilon(1e-5)
    assert again == pytest.approx(model.privacy_.epsilon, rel=1e-12)


def test_poisson_accounting_matches_dp_accounting_oracle(digits) -> None:
    model = DPSGDClassifier(
        epsilon=1.0, batch_size=256, epochs=4, classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    info = model.fit_info_
    gaussian = dp_accounting.GaussianDpEvent(info["noise_multiplier"])
    step = dp_accounting.PoissonSampledDpEvent(info["sample_rate"], gaussian)
    event = dp_accounting.SelfComposedDpEvent(step, info["steps"])
    oracle = dp_accounting.pld.PLDAccountant().compose(event).get_epsilon(1e-5)
    assert model.privacy_.epsilon == pytest.approx(oracle, rel=1e-6)


def test_direct_design_guarantee_is_one_step(digits) -> None:
    eps, delta = 0.7, 1e-6
    model = DPSGDClassifier(
        epsilon=eps, delta=delta, batch_size=200, design="direct", classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    info = model.fit_info_
    assert model.privacy_.neighbouring is Neighbouring.REPLACE_ONE
    assert info["steps"] == digits.X_train.shape[0] // 200 and info["epochs"] == 1.0
    # the whole pass costs what one Gaussian step of sensitivity 2C costs, however many steps
    one_step = gaussian_epsilon(delta, 2 * info["clip_norm"] / info["noise_std"])
    assert model.privacy_.epsilon == pytest.approx(one_step, rel=1e-9)
    assert model.privacy_.epsilon <= eps and model.privacy_.epsilon == pytest.approx(eps, rel=1e-6)
    pure = DPSGDClassifier(
        epsilon=eps, delta=0.0, batch_size=200, design="direct", classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    assert pure.fit_info_["noise"] == "l2-laplace"
    assert pure.fit_info_["noise_scale"] == pytest.approx(2 * pure.fit_info_["clip_norm"] / eps)
    assert (pure.privacy_.epsilon, pure.privacy_.delta) == (pytest.approx(eps), 0.0)


@pytest.mark.parametrize("delta", [1e-5, 0.0])
def test_linear_design_is_basic_composition_of_amplified_steps(delta: float, digits) -> None:
    eps = 2.0
    model = DPSGDClassifier(
        epsilon=eps, delta=delta, batch_size=100, epochs=2, design="linear", classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    info = model.fit_info_
    q, T = info["sample_rate"], info["steps"]
    # hand computation: T * log(1 + q (e^eps0 - 1)) <= eps, T q delta0 <= delta (Li et al. 2012; basic composition)
    eps0, delta0 = info["step_epsilon"], info["step_delta"]
    assert T * math.log1p(q * math.expm1(eps0)) == pytest.approx(model.privacy_.epsilon, rel=1e-9)
    assert model.privacy_.epsilon <= eps and model.privacy_.epsilon == pytest.approx(eps, rel=1e-5)
    assert eps0 == pytest.approx(math.log1p(math.expm1(eps / T) / q), rel=1e-5)
    assert T * q * delta0 <= delta and T * q * delta0 == pytest.approx(delta, rel=1e-8)
    if delta > 0:
        # the step's Gaussian is exactly (eps0, delta0)-DP for sensitivity C (analytic Gaussian)
        assert gaussian_epsilon(delta0, 1 / info["noise_multiplier"]) == pytest.approx(eps0, rel=1e-6)
    else:
        assert info["noise"] == "l2-laplace" and info["noise_scale"] == pytest.approx(info["clip_norm"] / eps0)
    if delta > 0:
        # the lecture's point: the tight accountant certifies far less for the same noise
        tight = make_accountant("pld").compose(
            SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(info["noise_multiplier"])), T)
        )
        assert tight.get_epsilon(delta) < 0.5 * eps


def test_explicit_noise_multiplier_is_accounted_and_capped(digits) -> None:
    model = DPSGDClassifier(
        epsilon=5.0, noise_multiplier=2.0, batch_size=256, epochs=2, classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    assert model.fit_info_["noise_multiplier"] == 2.0
    assert 0 < model.privacy_.epsilon < 5.0
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="above the target epsilon"):
        DPSGDClassifier(
            epsilon=0.1, noise_multiplier=2.0, batch_size=256, epochs=2, classes=DIGITS_CLASSES, random_state=rng
        ).fit(digits.X_train, digits.y_train)
    assert rng.bit_generator.state == state  # refused before any noise was drawn


# ------------------------------------------------------------------- utility
@pytest.mark.parametrize("design", ["poisson", "linear", "direct"])
def test_each_design_learns_at_eps_10_and_degrades_as_eps_falls(design: str, digits) -> None:
    def accuracy(eps: float) -> float:
        scores = []
        for seed in range(2):
            model = DPSGDClassifier(
                epsilon=eps, batch_size=64 if design == "direct" else None, design=design,
                classes=DIGITS_CLASSES, random_state=seed,
            ).fit(digits.X_train, digits.y_train)
            scores.append(model.score(digits.X_test, digits.y_test))
        return float(np.mean(scores))

    high, low = accuracy(10.0), accuracy(0.05)
    assert high > 0.5  # chance is 0.1
    assert low < high - 0.15


def test_poisson_beats_linear_composition_at_equal_budget(digits) -> None:
    # the accountant buys less noise for the same (epsilon, delta) and schedule
    common = dict(epsilon=1.0, batch_size=128, epochs=10, classes=DIGITS_CLASSES, random_state=0)
    poisson = DPSGDClassifier(design="poisson", **common).fit(digits.X_train, digits.y_train)
    linear = DPSGDClassifier(design="linear", **common).fit(digits.X_train, digits.y_train)
    assert poisson.fit_info_["noise_multiplier"] < 0.2 * linear.fit_info_["noise_multiplier"]
    assert poisson.score(digits.X_test, digits.y_test) > linear.score(digits.X_test, digits.y_test) + 0.1


# ------------------------------------------------------------------- auditing
def _audit_outputs(cls, X, y, direction, seeds, **params) -> np.ndarray:
    out = np.empty(len(seeds))
    for i, seed in enumerate(seeds):
        model = cls(**{**params, "random_state": seed}).fit(X, y)
        out[i] = model.weights_.ravel() @ direction
    return out


def test_audit_passes_dpsgd_and_catches_broken_clipping() -> None:
    """Add/remove one canary; project the released weights on a fixed direction.

    D holds 200 records of zero features (zero gradients whatever the model),
    D' adds a canary with ||x|| = 1 whose 20-class softmax gradient at W = 0
    has norm ~0.97, far above C = 0.01. One full-batch step with s = 2:
    correct DP-SGD moves the output by at most C, within the claimed epsilon
    (~2, PLD). Without clipping the canary moves it by ~100 C; clipping each
    class column separately to C (the per-tensor pitfall) by C sqrt(20) ~ 4.5 C
    along the chosen direction. The neighbour test at the claimed epsilon
    flags both. (n enters the divisor q n; the 0.5% change from n to n + 1 is
    far below what a thousand runs can see.)
    """
    k, n, runs, delta = 20, 200, 1000, 1e-5
    X = np.zeros((n, 2))
    y = np.arange(n) % k
    X_canary = np.vstack([X, [[1.0, 0.0]]])
    y_canary = np.append(y, 0)
    params = dict(
        epsilon=10.0, delta=delta, noise_multiplier=2.0, clip_norm=0.01, sample_rate=1.0, steps=1,
        learning_rate=1.0, lr_schedule="constant", averaging="none", accountant="rdp", classes=list(range(k)),
    )
    # the outputs do not depend on the accountant: claim the tight (PLD) epsilon, run the cheap one
    claimed = DPSGDClassifier(**{**params, "accountant": "pld"}).fit(X_canary, y_canary).privacy_.epsilon
    assert claimed == pytest.approx(2.0, abs=0.1)
    # the per-class clipped canary gradient's direction: -1 on its class, +1 elsewhere (feature 0)
    direction = np.zeros((2, k))
    direction[0] = 1.0
    direction[0, 0] = -1.0
    direction = direction.ravel() / np.linalg.norm(direction)

    seeds_a, seeds_b = range(runs), range(runs, 2 * runs)
    without = _audit_outputs(DPSGDClassifier, X, y, direction, seeds_a, **params)
    correct = _audit_outputs(DPSGDClassifier, X_canary, y_canary, direction, seeds_b, **params)
    result = neighbour_distribution_test(without, correct, epsilon=claimed, delta=delta)
    assert not result.violated and result.epsilon_lower_bound < 0.5 * claimed

    # Zero-feature records have zero gradients under any clipping, so D's
    # outputs are the same for the broken variants: only D' is re-run.
    per_class = _audit_outputs(PerClassClipping, X_canary, y_canary, direction, seeds_b, **params)
    result = neighbour_distribution_test(without, per_class, epsilon=claimed, delta=delta)
    assert result.violated and result.epsilon_lower_bound > claimed
    few = 300  # a shift of ~20 noise standard deviations needs few runs
    unclipped = _audit_outputs(NoClipping, X_canary, y_canary, direction, seeds_b[:few], **params)
    result = neighbour_distribution_test(without[:few], unclipped, epsilon=claimed, delta=delta)
    assert result.violated and result.epsilon_lower_bound > claimed


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.0, "delta": 0.0}, "delta"),
        ({"epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"epsilon": 1.0, "clip_norm": 0.0}, "clip_norm"),
        ({"epsilon": 1.0, "clip_norm": -1.0}, "clip_norm"),
        ({"epsilon": 1.0, "sample_rate": 0.1, "batch_size": 10}, "not both"),
        ({"epsilon": 1.0, "sample_rate": 1.5}, "sample_rate"),
        ({"epsilon": 1.0, "batch_size": 0}, "batch_size"),
        ({"epsilon": 1.0, "batch_size": 10_000}, "exceeds"),
        ({"epsilon": 1.0, "epochs": 2, "steps": 10}, "not both"),
        ({"epsilon": 1.0, "epochs": 0.0}, "epochs"),
        ({"epsilon": 1.0, "steps": 0}, "steps"),
        ({"epsilon": 1.0, "design": "direct", "epochs": 3}, "one pass"),
        ({"epsilon": 1.0, "design": "direct", "steps": 3}, "one pass"),
        ({"epsilon": 1.0, "design": "sgd"}, "design"),
        ({"epsilon": 1.0, "accountant": "basic"}, "accountant"),
        ({"epsilon": 1.0, "learning_rate": 0.0}, "learning_rate"),
        ({"epsilon": 1.0, "lr_schedule": "linear"}, "lr_schedule"),
        ({"epsilon": 1.0, "averaging": "polyak"}, "averaging"),
        ({"epsilon": 1.0, "tail_fraction": 1.5}, "tail_fraction"),
        ({"epsilon": 1.0, "ema_decay": 1.0}, "ema_decay"),
        ({"epsilon": 1.0, "l2": -0.1}, "l2"),
        ({"epsilon": 1.0, "noise_multiplier": -1.0}, "noise_multiplier"),
        ({"epsilon": 1.0, "noise_multiplier": 0.3, "accountant": "rdp"}, "above the target epsilon"),
    ],
)
def test_bad_hyperparameters_fail_before_any_noise(params: dict, message: str, digits) -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=message):
        DPSGDClassifier(classes=DIGITS_CLASSES, random_state=rng, **params).fit(digits.X_train, digits.y_train)
    assert rng.bit_generator.state == state


def test_bad_data_fails_before_any_noise(digits) -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    X = digits.X_train.copy()
    X[3, 2] = np.nan
    model = DPSGDClassifier(epsilon=1.0, classes=DIGITS_CLASSES, random_state=rng)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(X, digits.y_train)
    with pytest.raises(ValueError, match="shape"):
        model.fit(digits.X_train, digits.y_train[:-1])
    with pytest.raises(ValueError, match="not in the public class set"):
        DPSGDClassifier(epsilon=1.0, classes=[0, 1], random_state=rng).fit(digits.X_train, digits.y_train)
    with pytest.raises(TypeError):
        DPSGDClassifier(epsilon="one", classes=DIGITS_CLASSES, random_state=rng).fit(digits.X_train, digits.y_train)
    assert rng.bit_generator.state == state


def test_missing_classes_warn_of_the_leak(digits) -> None:
    with pytest.warns(PrivacyLeakWarning):
        DPSGDClassifier(epsilon=1.0, epochs=1, random_state=0).fit(digits.X_train, digits.y_train)


# ------------------------------------------------------------- API and files
def test_hyperparameters_are_stored_as_given_and_clone() -> None:
    model = DPSGDClassifier(epsilon=2, batch_size=64, lr_schedule="step", design="linear")
    params = model.get_params()
    assert params["epsilon"] == 2 and params["batch_size"] == 64 and params["sample_rate"] is None
    assert clone(model).get_params() == params


def test_binary_model_and_fit_info_is_data_independent(digits) -> None:
    keep = digits.y_train < 2
    model = DPSGDClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(
        digits.X_train[keep], digits.y_train[keep]
    )
    assert model.weights_.shape == (digits.X_train.shape[1],)
    test = digits.y_test < 2
    assert model.score(digits.X_test[test], digits.y_test[test]) > 0.9
    info = model.fit_info_
    for key in ("noise_multiplier", "steps", "expected_batch_size", "epochs", "accountant", "epsilon", "design"):
        assert key in info
    assert info["expected_batch_size"] == pytest.approx(info["sample_rate"] * keep.sum())
    # nothing derived from the records: the same settings on other data give the same info
    other = DPSGDClassifier(epsilon=1.0, classes=[0, 1], random_state=1).fit(
        np.zeros((keep.sum(), digits.X_train.shape[1])), np.arange(keep.sum()) % 2
    )
    assert other.fit_info_ == info


def test_save_load_round_trip(tmp_path, digits) -> None:
    model = DPSGDClassifier(epsilon=1.0, epochs=3, classes=DIGITS_CLASSES, random_state=0).fit(
        digits.X_train, digits.y_train
    )
    path = save_model(model, tmp_path / "dpsgd")
    loaded = load_model(path)
    assert isinstance(loaded, DPSGDClassifier)
    np.testing.assert_array_equal(loaded.predict(digits.X_test), model.predict(digits.X_test))
    np.testing.assert_array_equal(loaded.weights_, model.weights_)
    assert loaded.privacy_ == model.privacy_
    assert loaded.fit_info_ == model.fit_info_
    assert loaded.get_params() == {**model.get_params(), "random_state": None}  # a seed is never stored


def test_progress_bar_on_stderr(capsys, digits) -> None:
    DPSGDClassifier(epsilon=1.0, epochs=2, batch_size=512, progress=True, classes=DIGITS_CLASSES, random_state=0).fit(
        digits.X_train, digits.y_train
    )
    captured = capsys.readouterr()
    assert "DP-SGD" in captured.err and captured.out == ""


def test_same_seed_same_model(digits) -> None:
    def fit() -> DPSGDClassifier:
        model = DPSGDClassifier(epsilon=1.0, epochs=2, classes=DIGITS_CLASSES, random_state=7)
        return model.fit(digits.X_train, digits.y_train)

    np.testing.assert_array_equal(fit().weights_, fit().weights_)


# ------------------------------------------------------ schedules and averaging
def test_learning_rate_schedules() -> None:
    np.testing.assert_array_equal(learning_rate_schedule("constant", 0.5, 4), [0.5] * 4)
    cosine = learning_rate_schedule("cosine", 2.0, 100)
    assert cosine[0] == 2.0 and 0 < cosine[-1] < 0.01 and np.all(np.diff(cosine) < 0)
    np.testing.assert_allclose(learning_rate_schedule("step", 1.0, 8), [1, 1, 1, 1, 0.1, 0.1, 0.01, 0.01])
    inv = learning_rate_schedule("inverse_sqrt", 1.0, 10)
    assert inv[0] == 1.0 and inv[-1] == pytest.approx(1 / math.sqrt(10))
    with pytest.raises(ValueError, match="lr_schedule"):
        learning_rate_schedule("warmup", 1.0, 3)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("none", lambda it: it[-1]),
        ("uniform", lambda it: it.mean(axis=0)),
        ("tail", lambda it: it[-3:].mean(axis=0)),  # ceil(0.5 * 5) = 3 iterates
        ("ema", lambda it: _ema(it, 0.9)),
    ],
)
def test_averaging(kind: str, expected) -> None:
    iterates = np.random.default_rng(0).normal(size=(5, 3))
    averager = _Averager(kind, steps=5, tail_fraction=0.5, ema_decay=0.9)
    for step, w in enumerate(iterates):
        averager.update(step, w)
    np.testing.assert_allclose(averager.result(iterates[-1]), expected(iterates))


def _ema(iterates: np.ndarray, decay: float) -> np.ndarray:
    out = iterates[0]
    for w in iterates[1:]:
        out = decay * out + (1 - decay) * w
    return out


# ---------------------------------------------------------------------- MNIST
@pytest.mark.slow
def test_mnist_default_reaches_85_percent_at_epsilon_1() -> None:
    data = load_dataset("mnist", bias=True)
    model = DPSGDClassifier(epsilon=1.0, delta=1e-5, classes=DIGITS_CLASSES, random_state=0).fit(
        data.X_train, data.y_train
    )
    assert model.privacy_.epsilon <= 1.0
    assert model.score(data.X_test, data.y_test) >= 0.85
