"""Tests for the exact discrete samplers and mechanisms (CKS20 Algorithms 1-3, Theorem 7).

Oracles: closed-form pmfs (discrete Laplace), pmfs summed in 60-digit
arithmetic with mpmath (discrete Gaussian, Theorem 7 delta), dp_accounting's
privacy-loss classes, and the statistical neighbour test of privml.audit.
Every statistical check is run against a deliberately wrong variant too, to
show that it can fail.
"""

from __future__ import annotations

import math
import secrets
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_mechanism as plm
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privml.accounting._events import EpsilonDeltaEvent
from privml.audit import neighbour_distribution_test
from privml.mechanisms import _discrete as discrete
from privml.mechanisms import _discrete_gaussian_privacy as discrete_gaussian_privacy
from privml.mechanisms import _discrete_samplers as discrete_samplers
from privml.mechanisms._discrete import DiscreteGaussianMechanism, DiscreteLaplaceMechanism
from privml.mechanisms._discrete_gaussian_privacy import calibrate_discrete_gaussian, discrete_gaussian_delta
from privml.mechanisms._discrete_samplers import sample_bernoulli_exp, sample_discrete_gaussian, sample_discrete_laplace
from privml.neighbouring import Neighbouring

N = 200_000


# ---------------------------------------------------------------- oracles


def dlap_pmf(y: np.ndarray, scale: float) -> np.ndarray:
    """P[Y = y] = tanh(1 / (2 t)) exp(-|y| / t)."""
    return math.tanh(1 / (2 * scale)) * np.exp(-np.abs(y) / scale)


def dlap_variance(scale: float) -> float:
    """Var DLap(t) = 2 e^{-1/t} / (1 - e^{-1/t})^2."""
    r = math.exp(-1 / scale)
    return 2 * r / (1 - r) ** 2


def dgauss_pmf(y: np.ndarray, sigma2: float) -> np.ndarray:
    """N_Z(0, sigma2) pmf, normalised over |y| <= 60 sigma + 60 (mass beyond is < 1e-700)."""
    m = int(60 * math.sqrt(sigma2)) + 60
    z = np.exp(-np.arange(-m, m + 1) ** 2 / (2 * sigma2)).sum()
    return np.exp(-np.asarray(y, dtype=float) ** 2 / (2 * sigma2)) / z


def theorem7_delta_mp(epsilon: float, sigma2: float, sensitivity: int) -> mpmath.mpf:
    """sum_y max(0, p(y) - e^eps p(y + Delta)), in 60-digit arithmetic."""
    with mpmath.workdps(60):
        s2 = mpmath.mpf(sigma2)
        m = int(60 * math.sqrt(sigma2)) + sensitivity + 50
        w = [mpmath.exp(-mpmath.mpf(y) ** 2 / (2 * s2)) for y in range(-m, m + sensitivity + 1)]
        z = mpmath.fsum(w[: 2 * m + 1])
        e = mpmath.exp(mpmath.mpf(epsilon))
        return mpmath.fsum(max(0, w[i] - e * w[i + sensitivity]) for i in range(2 * m + 1)) / z


def chi2_pvalue(samples: np.ndarray, pmf, lo: int, hi: int) -> float:
    """Chi-square goodness of fit over y = lo..hi plus the two pooled tails."""
    samples = np.asarray(samples, dtype=np.int64)
    support = np.arange(lo, hi + 1)
    p = pmf(support)
    observed = np.concatenate(
        [[np.sum(samples < lo)], np.bincount(samples[(samples >= lo) & (samples <= hi)] - lo, minlength=support.size),
         [np.sum(samples > hi)]]
    )
    p_left = pmf(np.arange(lo - 2000, lo)).sum()
    p_right = pmf(np.arange(hi + 1, hi + 2001)).sum()
    expected = samples.size * np.concatenate([[p_left], p, [p_right]])
    expected *= samples.size / expected.sum()  # absorb the far-tail mass beyond 2000 (< 1e-100)
    return float(stats.chisquare(observed, expected).pvalue)


def binomial_z(successes: int, n: int, p: float) -> float:
    return (successes - n * p) / math.sqrt(n * p * (1 - p))


# ---------------------------------------------------------------- Algorithm 1


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7, 3), Fraction(4)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    x = sample_bernoulli_exp(gamma, size=N, rng=11)
    assert x.dtype == bool
    assert abs(binomial_z(int(x.sum()), N, math.exp(-gamma))) < 5
    # the same check rejects a gamma 10% off
    assert abs(binomial_z(int(x.sum()), N, math.exp(-1.1 * gamma))) > 5


def test_bernoulli_exp_zero_and_scalar() -> None:
    assert sample_bernoulli_exp(0, size=1000, rng=0).all()
    assert sample_bernoulli_exp(Fraction(0), rng=0) is True
    assert isinstance(sample_bernoulli_exp(Fraction(3, 2), rng=0), bool)


def test_bernoulli_exp_huge_denominator_uses_exact_big_integers() -> None:
    # 3^50 > 2^64: uniform draws go through the Python-int rejection path
    gamma = Fraction(3**50 + 1, 3**50)  # 1 + 3^-50
    x = sample_bernoulli_exp(gamma, size=N, rng=5)
    assert abs(binomial_z(int(x.sum()), N, math.exp(-1))) < 5
    assert sample_bernoulli_exp(Fraction(1, 3**50), size=1000, rng=5).mean() > 0.99


# ---------------------------------------------------------------- Algorithm 2


@pytest.mark.parametrize("scale", [Fraction(3, 2), Fraction(1, 3), Fraction(10)])
def test_discrete_laplace_pmf_mean_variance(scale: Fraction) -> None:
    t = float(scale)
    x = sample_discrete_laplace(scale, size=N, rng=21)
    assert x.dtype == np.int64
    hi = int(t * 6) + 2
    assert chi2_pvalue(x, lambda y: dlap_pmf(y, t), -hi, hi) > 1e-3
    # broken variant: the same test rejects the pmf of a 10% larger scale
    assert chi2_pvalue(x, lambda y: dlap_pmf(y, 1.1 * t), -hi, hi) < 1e-6
    var = dlap_variance(t)
    assert abs(x.mean()) < 5 * math.sqrt(var / N)
    # Var of the sample variance: (mu4 - var^2)/N; mu4 of DLap is below 25 var^2 here
    assert abs(x.var() / var - 1) < 5 * math.sqrt(24 / N)


def test_discrete_laplace_huge_scale_returns_python_ints() -> None:
    x = sample_discrete_laplace(Fraction(10**30), size=50, rng=1)
    assert x.dtype == object
    assert all(isinstance(v, int) for v in x)
    assert max(abs(v) for v in x) > 2**63  # beyond int64, exact
    assert isinstance(sample_discrete_laplace(2, rng=0), int)


# ---------------------------------------------------------------- Algorithm 3


@pytest.mark.parametrize("sigma2", [Fraction(2), Fraction(7, 3), Fraction(1, 4), Fraction(2 * 3**40 + 1, 3**40)])
def test_discrete_gaussian_pmf_mean_variance(sigma2: Fraction) -> None:
    s2 = float(sigma2)
    n = N if sigma2.denominator < 2**20 else 50_000  # the last one runs on Python ints
    x = sample_discrete_gaussian(sigma2, size=n, rng=31)
    hi = int(4 * math.sqrt(s2)) + 1
    assert chi2_pvalue(x, lambda y: dgauss_pmf(y, s2), -hi, hi) > 1e-3
    assert chi2_pvalue(x, lambda y: dgauss_pmf(y, 1.15 * s2), -hi, hi) < 1e-6
    support = np.arange(-60 * (hi + 1), 60 * (hi + 1) + 1)
    var = float(np.sum(support**2 * dgauss_pmf(support, s2)))
    assert var <= s2 * (1 + 1e-12)  # CKS20: the variance is below sigma2
    assert abs(x.mean()) < 5 * math.sqrt(var / n)
    assert abs(x.var() / var - 1) < 5 * math.sqrt(4 / n)


def test_discrete_gaussian_large_sigma_moments() -> None:
    # sigma^2 = 10^12: the acceptance test of Algorithm 3 needs integers beyond int64
    x = sample_discrete_gaussian(Fraction(10**12), size=4000, rng=3)
    assert abs(x.var() / 1e12 - 1) < 5 * math.sqrt(2 / 4000)
    assert abs(float(x.mean())) < 5 * 1e6 / math.sqrt(4000)


def test_samplers_shapes() -> None:
    assert sample_discrete_gaussian(2, size=(2, 3), rng=0).shape == (2, 3)
    assert sample_discrete_laplace(2, size=0, rng=0).shape == (0,)
    assert isinstance(sample_discrete_gaussian(Fraction(9, 4), rng=0), int)


# ---------------------------------------------------------------- exact uniform integers


class _FixedWords(discrete_samplers._WordSource):
    def __init__(self, words: list[int]) -> None:
        super().__init__(None)
        self._queue = list(words)

    def words(self, count: int) -> np.ndarray:
        out, self._queue = self._queue[:count], self._queue[count:]
        return np.array(out, dtype=np.uint64)


def test_uniform_below_rejects_the_biased_top_words() -> None:
    # 2^64 mod 3 = 1, so the single word 2^64 - 1 must be rejected
    src = _FixedWords([2**64 - 1, 5])
    assert src.below(3, 1).tolist() == [2]
    src = _FixedWords([2**64 - 2])
    assert src.below(3, 1).tolist() == [(2**64 - 2) % 3]


@pytest.mark.parametrize("high", [3, 10**6 + 3, 3 * 2**62 + 1])
def test_uniform_below_is_uniform(high: int) -> None:
    src = discrete_samplers._as_source(7)
    x = src.below(high, 60_000)
    assert all(0 <= int(v) < high for v in x)
    k = min(high, 6)  # k nearly equal buckets (sizes differ by at most one value)
    buckets = np.array([int(v) * k // high for v in x])
    assert stats.chisquare(np.bincount(buckets, minlength=k)).pvalue > 1e-3


# ---------------------------------------------------------------- Theorem 7 delta and calibration


@pytest.mark.parametrize(
    ("epsilon", "sigma", "sensitivity"),
    [(1.0, 10.0, 1), (1.0, 3.74, 1), (0.2, 0.3, 2), (3.0, 1.7, 4), (0.1, 25.0, 1)],
)
def test_delta_matches_high_precision_sum_from_above(epsilon: float, sigma: float, sensitivity: int) -> None:
    exact = theorem7_delta_mp(epsilon, sigma**2, sensitivity)
    got = discrete_gaussian_delta(epsilon, sigma**2, sensitivity)
    assert got >= exact
    assert got <= exact * (1 + 2e-9)


@pytest.mark.parametrize(("epsilon", "sigma", "sensitivity"), [(1.0, 2.0, 1), (0.5, 3.0, 3), (2.0, 0.8, 1)])
def test_delta_matches_dp_accounting(epsilon: float, sigma: float, sensitivity: int) -> None:
    oracle = plm.DiscreteGaussianPrivacyLoss(sigma, sensitivity=sensitivity).get_delta_for_epsilon(epsilon)
    assert discrete_gaussian_delta(epsilon, sigma**2, sensitivity) == pytest.approx(oracle, rel=1e-7)


def test_delta_accepts_fraction_and_is_monotone_in_sensitivity() -> None:
    assert discrete_gaussian_delta(1.0, Fraction(4), 1) == discrete_gaussian_delta(1.0, 4.0, 1)
    deltas = [discrete_gaussian_delta(1.0, 9.0, k) for k in range(1, 6)]
    assert all(a < b for a, b in zip(deltas, deltas[1:]))


@pytest.mark.parametrize(("epsilon", "delta", "sensitivity"), [(1.0, 1e-5, 1), (0.3, 1e-6, 1), (2.0, 1e-3, 5), (8.0, 1e-2, 1)])
def test_calibration_is_valid_and_nearly_minimal(epsilon: float, delta: float, sensitivity: int) -> None:
    s2 = calibrate_discrete_gaussian(epsilon, delta, sensitivity)
    assert isinstance(s2, Fraction)
    assert discrete_gaussian_delta(epsilon, s2, sensitivity) <= delta
    assert discrete_gaussian_delta(epsilon, float(s2) * (1 - 1e-5), sensitivity) > delta
    assert theorem7_delta_mp(epsilon, float(s2), sensitivity) <= delta  # independent oracle


def test_calibration_close_to_analytic_gaussian_reference() -> None:
    # SPEC: the analytic continuous Gaussian needs sigma = 3.7306 at (1, 1e-5), Delta = 1;
    # the discrete Gaussian needs a slightly larger one (measured 3.7405).
    sigma = math.sqrt(calibrate_discrete_gaussian(1.0, 1e-5, 1))
    assert sigma == pytest.approx(3.7405, abs=5e-4)
    assert abs(sigma / 3.7306 - 1) < 0.01


# ---------------------------------------------------------------- conservative rational rounding


def test_limit_denominator_alone_rounds_the_wrong_way() -> None:
    eps = Fraction(1 / 3)  # the float 1/3 is just below 1/3
    assert eps.limit_denominator(10**6) > eps  # naive conversion would under-noise
    assert discrete_gaussian_privacy._rational_below(eps, 10**6) <= eps
    assert DiscreteLaplaceMechanism(epsilon=1 / 3).noise_scale() >= 1 / eps


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    eps=st.floats(min_value=1e-4, max_value=50, allow_nan=False),
    sens=st.integers(min_value=1, max_value=1000),
)
def test_laplace_scale_never_below_sensitivity_over_epsilon(eps: float, sens: int) -> None:
    t = DiscreteLaplaceMechanism(epsilon=eps, sensitivity=sens).noise_scale()
    exact = Fraction(sens) / Fraction(eps)
    assert exact <= t <= exact * (1 + Fraction(2, 10**6) / Fraction(eps))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(x=st.fractions(min_value=Fraction(1, 10**9), max_value=10**6))
def test_rational_helpers_bracket_their_input(x: Fraction) -> None:
    lo, hi = discrete_gaussian_privacy._rational_below(x, 1000), discrete_gaussian_privacy._rational_above(x, 1000)
    assert 0 < lo <= x <= hi
    assert hi.denominator <= 1000
    assert hi - x <= Fraction(1, 1000)


# ---------------------------------------------------------------- granularity


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    a=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    r=st.floats(min_value=0, max_value=10, allow_nan=False),
    g=st.sampled_from([0.01, 0.3, 1.0, 2.5, 1e-3]),
)
def test_grid_rounding_moves_close_values_at_most_ceil_steps(a: float, r: float, g: float) -> None:
    b = a + r
    steps = discrete._round_to_grid(np.array([a, b]), Fraction(g))
    gap = Fraction(b) - Fraction(a)  # exact distance of the floats
    assert abs(int(steps[1]) - int(steps[0])) <= math.ceil(gap / Fraction(g))


def test_grid_sensitivity_and_outputs() -> None:
    mech = DiscreteLaplaceMechanism(epsilon=0.5, sensitivity=1.0, granularity=0.01, random_state=0)
    assert mech.noise_scale() == 200  # ceil(1 / 0.01) steps / 0.5
    # d coordinates can each round one step apart: 0.0049 vs 0.0051 per coordinate
    steps = discrete._round_to_grid(np.array([[0.0049] * 3, [0.0051] * 3]), Fraction(0.01))
    assert int(np.abs(steps[1] - steps[0]).sum()) == 3 == math.ceil(0.0006 / 0.01) + 3 - 1
    assert mech.noise_scale(3) == Fraction(1 + 2 + 99, 1) / Fraction(1, 2)
    out = mech.randomise(np.array([1.234, 5.0, -2.0]))
    assert out.dtype == np.float64
    assert np.allclose(np.round(out / 0.01), out / 0.01)
    assert isinstance(mech.randomise(3.14159), float)
    assert DiscreteLaplaceMechanism(epsilon=1.0, sensitivity=1.0, granularity=0.3).noise_scale() == 4
    gauss = DiscreteGaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=0.5, granularity=0.25)
    assert gauss.sigma2 == calibrate_discrete_gaussian(1.0, 1e-5, 2)


# ---------------------------------------------------------------- privacy: neighbour test + broken variants


class _HalfNoiseLaplace(DiscreteLaplaceMechanism):
    """Broken on purpose: half the required scale (true epsilon is twice the claim)."""

    def noise_scale(self, dimension: int = 1) -> Fraction:
        return super().noise_scale(dimension) / 2


class _HalfNoiseGaussian(DiscreteGaussianMechanism):
    """Broken on purpose: sigma halved."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sigma2 = self.sigma2 / 4


def _audit(cls, sensitivity: int, n: int, **kwargs):
    mech_a = cls(sensitivity=sensitivity, random_state=101, **kwargs)
    mech_b = cls(sensitivity=sensitivity, random_state=202, **kwargs)
    out_a = mech_a.randomise(np.zeros(n, dtype=np.int64))
    out_b = mech_b.randomise(np.full(n, sensitivity, dtype=np.int64))
    return neighbour_distribution_test(out_a, out_b, epsilon=mech_a.epsilon, delta=mech_a.delta)


@pytest.mark.parametrize(("epsilon", "sensitivity"), [(1.0, 1), (0.5, 3)])
def test_laplace_neighbour_test_passes_and_catches_half_noise(epsilon: float, sensitivity: int) -> None:
    good = _audit(DiscreteLaplaceMechanism, sensitivity, N, epsilon=epsilon)
    assert not good.violated
    assert good.epsilon_lower_bound <= epsilon
    bad = _audit(_HalfNoiseLaplace, sensitivity, N, epsilon=epsilon)
    assert bad.violated
    assert bad.epsilon_lower_bound > 1.5 * epsilon


def test_gaussian_neighbour_test_passes_and_catches_half_noise() -> None:
    good = _audit(DiscreteGaussianMechanism, 1, N, epsilon=1.0, delta=1e-3)
    assert not good.violated
    broken = _HalfNoiseGaussian(epsilon=1.0, delta=1e-3, sensitivity=1)
    assert discrete_gaussian_delta(1.0, broken.sigma2, 1) > 0.05  # what the break costs
    bad = _audit(_HalfNoiseGaussian, 1, N, epsilon=1.0, delta=1e-3)
    assert bad.violated


def test_laplace_event_would_understate_discrete_laplace() -> None:
    # Sensitivity 1: the discrete Laplace's loss is +-eps (randomised response), so it
    # is strictly less private than a continuous Laplace at the same eps for eps' < eps.
    eps = 1.0
    discrete_tv = plm.DiscreteLaplacePrivacyLoss(eps, sensitivity=1).get_delta_for_epsilon(0.0)
    continuous_tv = plm.LaplacePrivacyLoss(1 / eps, sensitivity=1).get_delta_for_epsilon(0.0)
    assert discrete_tv == pytest.approx(math.tanh(eps / 2), rel=1e-9)
    assert discrete_tv > continuous_tv + 0.05
    mech = DiscreteLaplaceMechanism(epsilon=eps, neighbouring="add/remove-one")
    assert mech.event == EpsilonDeltaEvent(eps, 0.0, Neighbouring.ADD_REMOVE_ONE)


def test_gaussian_event_and_privacy() -> None:
    mech = DiscreteGaussianMechanism(epsilon=0.5, delta=1e-6, sensitivity=2)
    assert mech.event == EpsilonDeltaEvent(0.5, 1e-6, Neighbouring.REPLACE_ONE)
    assert mech.privacy.delta == 1e-6
    assert mech.pure is False and DiscreteLaplaceMechanism.pure is True


# ---------------------------------------------------------------- mechanism outputs


def test_integer_outputs_and_big_inputs() -> None:
    mech = DiscreteLaplaceMechanism(epsilon=1.0, random_state=0)
    assert isinstance(mech.randomise(42), int)
    assert isinstance(mech.randomise(np.int64(42)), int)
    big = 10**30
    assert abs(mech.randomise(big) - big) < 10**3
    out = mech.randomise([1, 2, 3])
    assert out.dtype == np.int64 and out.shape == (3,)
    assert mech.randomise(np.array([[1.0, 2.0]])).shape == (1, 2)
    value = np.array([5, 6], dtype=np.int64)
    mech.randomise(value)
    assert value.tolist() == [5, 6]


# ---------------------------------------------------------------- randomness source


def test_int_seed_is_deterministic() -> None:
    for sampler, arg in [(sample_discrete_laplace, Fraction(5, 2)), (sample_discrete_gaussian, Fraction(7, 3))]:
        a, b, c = sampler(arg, size=500, rng=9), sampler(arg, size=500, rng=9), sampler(arg, size=500, rng=10)
        assert np.array_equal(a, b) and not np.array_equal(a, c)
    m1 = DiscreteGaussianMechanism(epsilon=1.0, delta=1e-5, random_state=4)
    m2 = DiscreteGaussianMechanism(epsilon=1.0, delta=1e-5, random_state=4)
    assert np.array_equal(m1.randomise(np.zeros(100, dtype=int)), m2.randomise(np.zeros(100, dtype=int)))
    assert sample_bernoulli_exp(Fraction(1, 2), size=300, rng=1).tolist() == sample_bernoulli_exp(
        Fraction(1, 2), size=300, rng=1
    ).tolist()


def test_default_source_is_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = secrets.token_bytes

    def counting(n: int) -> bytes:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(secrets, "token_bytes", counting)
    DiscreteLaplaceMechanism(epsilon=1.0, random_state=3).randomise(np.zeros(10, dtype=int))
    assert calls == []
    a = DiscreteLaplaceMechanism(epsilon=0.01).randomise(np.zeros(1000, dtype=int))
    assert calls
    b = sample_discrete_laplace(100, size=1000)
    assert not np.array_equal(a, b)
    assert discrete_samplers._as_source(None).cryptographic and not discrete_samplers._as_source(1).cryptographic


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: sample_bernoulli_exp(0.5), TypeError),
        (lambda: sample_bernoulli_exp(True), TypeError),
        (lambda: sample_bernoulli_exp(Fraction(-1, 2)), ValueError),
        (lambda: sample_discrete_laplace(0), ValueError),
        (lambda: sample_discrete_laplace(1.5), TypeError),
        (lambda: sample_discrete_laplace(2, size=-1), ValueError),
        (lambda: sample_discrete_laplace(2, size=1.5), TypeError),
        (lambda: sample_discrete_gaussian(Fraction(-1, 2)), ValueError),
        (lambda: sample_discrete_gaussian(2, rng="seed"), TypeError),
        (lambda: discrete_gaussian_delta(0.0, 1.0), ValueError),
        (lambda: discrete_gaussian_delta(1.0, 1.0, 0), ValueError),
        (lambda: discrete_gaussian_delta(1.0, -1.0), ValueError),
        (lambda: calibrate_discrete_gaussian(1.0, 0.0), ValueError),
        (lambda: DiscreteLaplaceMechanism(epsilon=0.0), ValueError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0, sensitivity=1.5), TypeError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0, sensitivity=0), ValueError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0, granularity=0.0), ValueError),
        (lambda: DiscreteLaplaceMechanism(1.0), TypeError),
        (lambda: DiscreteGaussianMechanism(epsilon=1.0, delta=0.0), ValueError),
        (lambda: DiscreteGaussianMechanism(epsilon=1.0, delta=1.0), ValueError),
        (lambda: DiscreteGaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=2.5), TypeError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0).randomise(1.5), ValueError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0).randomise(np.nan), ValueError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0).randomise(True), TypeError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0).randomise(np.array([1, "a"], dtype=object)), TypeError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0, granularity=0.1).randomise(np.inf), ValueError),
        (lambda: DiscreteLaplaceMechanism(epsilon=1.0).noise_scale(0), ValueError),
    ],
)
def test_invalid_arguments(call, error) -> None:
    with pytest.raises(error):
        call()
