"""Composition theorems and Poisson amplification against hand computations and oracles."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from privml.accounting._composition import (
    OPTIMAL_COMPOSITION_MAX_COUNT,
    EpsilonDelta,
    advanced_composition,
    advanced_composition_delta,
    advanced_composition_heterogeneous,
    advanced_composition_per_step_epsilon,
    basic_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
    optimal_composition_per_step_epsilon,
    poisson_amplification,
)

epsilons = st.floats(min_value=1e-3, max_value=3.0)
deltas = st.sampled_from([0.0, 1e-8, 1e-6, 1e-4])
small_counts = st.integers(min_value=1, max_value=60)


# ---------------------------------------------------------------------- basic
def test_basic_composition_sums():
    assert basic_composition([0.5, 0.25, 1.0], [1e-6, 0.0, 2e-6]) == pytest.approx((1.75, 3e-6), rel=1e-15)
    assert basic_composition([0.5, 0.25], [1e-6, 0.0], counts=[2, 4]) == (2.0, 2e-6)
    assert basic_composition([], []) == (0.0, 0.0)


def test_basic_composition_counts_equal_repetition():
    expanded = basic_composition([0.3] * 7 + [0.1] * 3, [1e-7] * 7 + [0.0] * 3)
    grouped = basic_composition([0.3, 0.1], [1e-7, 0.0], counts=[7, 3])
    assert grouped == pytest.approx(expanded, rel=1e-15)


@pytest.mark.parametrize(
    "eps, dels, counts",
    [
        ([0.0], [0.0], None),
        ([-1.0], [0.0], None),
        ([math.nan], [0.0], None),
        ([math.inf], [0.0], None),
        ([1.0], [1.5], None),
        ([1.0], [-1e-9], None),
        ([1.0, 2.0], [0.0], None),
        ([[1.0]], [[0.0]], None),
        ([1.0], [0.0], [0]),
        ([1.0], [0.0], [1, 2]),
    ],
)
def test_basic_composition_rejects_bad_input(eps, dels, counts):
    with pytest.raises(ValueError):
        basic_composition(eps, dels, counts=counts)


def test_counts_must_be_integers():
    with pytest.raises(TypeError):
        basic_composition([1.0], [0.0], counts=[1.5])


# ------------------------------------------------------------------- advanced
def test_advanced_composition_reference_value():
    # eps sqrt(2k ln(1/delta')) + k eps (e^eps - 1) for eps = 1e-3, k = 1e4,
    # delta' = 1e-6: 0.525657... + 0.010005... (computed by hand).
    total = advanced_composition(0.001, 1e-8, 10_000, 1e-6)
    assert total.epsilon == pytest.approx(0.5356571786, rel=1e-9)
    assert total.delta == pytest.approx(10_000 * 1e-8 + 1e-6, rel=1e-12)


def test_advanced_composition_can_exceed_basic():
    # One step at eps = 1 with delta' = 1e-5: sqrt(2 ln 1e5) + (e - 1) > 1.
    assert advanced_composition(1.0, 0.0, 1, 1e-5).epsilon > 1.0


def test_advanced_composition_beats_basic_for_many_small_steps():
    assert advanced_composition(0.01, 0.0, 10_000, 1e-6).epsilon < 0.1 * 10_000 * 0.01


@given(eps=epsilons, delta=deltas, count=small_counts)
@settings(max_examples=50, deadline=None)
def test_heterogeneous_reduces_to_homogeneous(eps, delta, count):
    homogeneous = advanced_composition(eps, delta, count, 1e-6)
    expanded = advanced_composition_heterogeneous([eps] * count, [delta] * count, 1e-6)
    grouped = advanced_composition_heterogeneous([eps], [delta], 1e-6, counts=[count])
    assert expanded == pytest.approx(homogeneous, rel=1e-12)
    assert grouped == pytest.approx(homogeneous, rel=1e-12)


def test_heterogeneous_reference_value():
    eps = np.array([0.1, 0.2, 0.05])
    expected = math.sqrt(2 * math.log(1e5) * np.sum(eps**2)) + float(np.sum(eps * np.expm1(eps)))
    total = advanced_composition_heterogeneous(eps.tolist(), [1e-7, 0.0, 1e-7], 1e-5)
    assert total.epsilon == pytest.approx(expected, rel=1e-13)
    assert total.delta == pytest.approx(1e-5 + 2e-7, rel=1e-13)


@given(
    eps=st.lists(epsilons, min_size=1, max_size=20),
    slack=st.floats(min_value=1e-10, max_value=0.5),
)
@settings(max_examples=50, deadline=None)
def test_advanced_composition_delta_inverts_epsilon(eps, slack):
    dels = [1e-9] * len(eps)
    total = advanced_composition_heterogeneous(eps, dels, slack)
    assert advanced_composition_delta(eps, dels, total.epsilon) == pytest.approx(min(1.0, total.delta), rel=1e-9)


def test_advanced_composition_delta_is_vacuous_below_drift():
    # The drift k eps (e^eps - 1) = 10 (e - 1) > 10: the bound certifies nothing there.
    assert advanced_composition_delta([1.0], [0.0], 10.0, counts=[10]) == 1.0
    assert advanced_composition_delta([], [], 1.0) == 0.0


@given(total=st.floats(min_value=0.01, max_value=20.0), count=st.integers(1, 100_000))
@settings(max_examples=60, deadline=None)
def test_advanced_per_step_round_trip(total, count):
    step = advanced_composition_per_step_epsilon(total, count, 1e-6)
    assert advanced_composition(step, 0.0, count, 1e-6).epsilon <= total
    # The next value up (by more than the search tolerance) exceeds the target.
    assert advanced_composition(step * (1 + 1e-9), 0.0, count, 1e-6).epsilon > total


@pytest.mark.parametrize(
    "args",
    [
        (0.0, 0.0, 10, 1e-6),
        (1.0, 1.0, 10, 1e-6),
        (1.0, 0.0, 0, 1e-6),
        (1.0, 0.0, 10, 0.0),
        (1.0, 0.0, 10, 1.0),
    ],
)
def test_advanced_composition_rejects_bad_input(args):
    with pytest.raises(ValueError):
        advanced_composition(*args)


def test_advanced_per_step_rejects_bad_input():
    with pytest.raises(ValueError):
        advanced_composition_per_step_epsilon(-1.0, 10, 1e-6)
    with pytest.raises(ValueError):
        advanced_composition_per_step_epsilon(1.0, 10, 0.0)
    with pytest.raises(TypeError):
        advanced_composition_per_step_epsilon(1.0, 2.5, 1e-6)


# -------------------------------------------------------------------- optimal
def kov_closed_form(eps: float, delta: float, k: int, i: int) -> float:
    """KOV15 Thm 3.3 at eps' = (k - 2i) eps, summed directly in 50-digit arithmetic."""
    with mpmath.workdps(50):
        e, d = mpmath.mpf(eps), mpmath.mpf(delta)
        delta_i = mpmath.fsum(
            mpmath.binomial(k, ell) * (mpmath.exp((k - ell) * e) - mpmath.exp((k - 2 * i + ell) * e))
            for ell in range(i)
        ) / (1 + mpmath.exp(e)) ** k
        return float(1 - (1 - d) ** k * (1 - delta_i))


def brute_force_delta(eps: float, delta: float, k: int, total_eps: float) -> float:
    """Hockey-stick divergence of k-fold randomised response, by enumerating all 2^k outputs."""
    p = math.exp(eps) / (1 + math.exp(eps))
    hockey = 0.0
    for bits in itertools.product((0, 1), repeat=k):
        flips = sum(bits)
        prob_d = p ** (k - flips) * (1 - p) ** flips
        prob_d_prime = (1 - p) ** (k - flips) * p**flips
        hockey += max(0.0, prob_d - math.exp(total_eps) * prob_d_prime)
    return -math.expm1(k * math.log1p(-delta) + math.log1p(-hockey))


@pytest.mark.parametrize(
    "eps, delta, k",
    [(0.1, 0.0, 20), (0.5, 1e-6, 10), (1.0, 1e-3, 7), (0.05, 1e-8, 101), (2.0, 0.0, 30)],
)
def test_optimal_matches_kov_closed_form_on_the_grid(eps, delta, k):
    for i in range(0, k // 2 + 1):
        expected = kov_closed_form(eps, delta, k, i)
        assert optimal_composition_delta(eps, delta, k, (k - 2 * i) * eps) == pytest.approx(
            expected, rel=1e-9, abs=1e-15
        )


@given(
    eps=st.floats(min_value=0.05, max_value=2.0),
    delta=deltas,
    k=st.integers(1, 10),
    total=st.floats(min_value=0.0, max_value=8.0),
)
@settings(max_examples=60, deadline=None)
def test_optimal_matches_brute_force_between_grid_points(eps, delta, k, total):
    expected = brute_force_delta(eps, delta, k, total)
    assert optimal_composition_delta(eps, delta, k, total) == pytest.approx(expected, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize(
    "eps, delta, k, total",
    [(0.5, 1e-6, 10, 2.0), (0.1, 0.0, 100, 1.0), (1.0, 1e-5, 5, 3.0), (0.01, 0.0, 10_000, 1.0)],
)
def test_optimal_matches_dp_accounting_pld(eps, delta, k, total):
    # The PLD of the (eps, delta) dominating pair, self-composed, is the same
    # object computed by convolution (dp_accounting 0.6.0, test-only oracle).
    from dp_accounting.pld import common, privacy_loss_distribution

    pld = privacy_loss_distribution.from_privacy_parameters(
        common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=1e-4
    ).self_compose(k)
    assert optimal_composition_delta(eps, delta, k, total) == pytest.approx(
        pld.get_delta_for_epsilon(total), rel=1e-8
    )


@given(eps=epsilons, delta=deltas)
@settings(max_examples=40, deadline=None)
def test_one_step_is_the_step_itself(eps, delta):
    assert optimal_composition_delta(eps, delta, 1, eps) == pytest.approx(delta, rel=1e-12, abs=1e-300)
    assert optimal_composition_epsilon(eps, delta, 1, delta) == pytest.approx(eps, rel=1e-9)
    assert optimal_composition_epsilon(eps, delta, 1, delta) <= eps * (1 + 1e-12)


def test_optimal_is_tighter_than_advanced_and_basic_on_a_grid():
    for eps, k, delta_target in itertools.product([0.01, 0.1, 0.5, 1.0], [1, 10, 100, 1000], [1e-8, 1e-5]):
        optimal = optimal_composition_epsilon(eps, 0.0, k, delta_target)
        drv = advanced_composition(eps, 0.0, k, delta_target).epsilon
        assert optimal <= min(drv, k * eps) * (1 + 1e-9)


def test_optimal_epsilon_large_count_against_gaussian_limit():
    # k = 1e6 steps of eps = 1e-3 randomised response tend to 1-GDP (the privacy
    # loss is a sum of +-eps with KL eps tanh(eps/2) ~ eps^2/2 each; Dong, Roth
    # and Su 2019, Thm 3.5): delta(eps') = Phi(-eps'/mu + mu/2) - e^eps' Phi(-eps'/mu - mu/2).
    mu, total = 1.0, 1.0
    gdp = norm.cdf(-total / mu + mu / 2) - math.exp(total) * norm.cdf(-total / mu - mu / 2)
    assert optimal_composition_delta(1e-3, 0.0, 10**6, total) == pytest.approx(gdp, rel=1e-2)
    eps = optimal_composition_epsilon(1e-3, 0.0, 10**6, gdp)
    assert eps == pytest.approx(total, rel=1e-2)


def mp_randomised_response_delta(eps: float, k: int, total: float) -> mpmath.mpf:
    """sum_l C(k,l) p^(k-l) (1-p)^l (1 - e^(eps' - (k-2l) eps))_+ in 50-digit arithmetic (delta = 0)."""
    with mpmath.workdps(50):
        e, t = mpmath.mpf(eps), mpmath.mpf(total)
        p = mpmath.exp(e) / (1 + mpmath.exp(e))
        return mpmath.fsum(
            mpmath.binomial(k, ell) * p ** (k - ell) * (1 - p) ** ell * (1 - mpmath.exp(t - (k - 2 * ell) * e))
            for ell in range(k + 1)
            if (k - 2 * ell) * e > t
        )


@pytest.mark.parametrize("k, eps, total", [(500, 0.5, 249.75), (500, 0.5, 200.0), (300, 1.0, 280.0)])
def test_optimal_delta_is_accurate_far_in_the_tail(k, eps, total):
    # Values down to 1e-100 and below, where a linear-space sum would lose them.
    expected = mp_randomised_response_delta(eps, k, total)
    assert 0 < expected < 1e-20
    assert optimal_composition_delta(eps, 0.0, k, total) == pytest.approx(float(expected), rel=1e-9)


def test_optimal_epsilon_for_a_delta_below_the_smallest_double_weight():
    # p^k alone underflows (k log p ~ -948); the search works on log delta.
    k, eps, target = 2000, 0.5, 1e-300
    total = optimal_composition_epsilon(eps, 0.0, k, target)
    assert 0 < total < k * eps
    assert mp_randomised_response_delta(eps, k, total) <= target
    assert mp_randomised_response_delta(eps, k, total * (1 - 1e-9)) > target


@given(eps=epsilons, delta=deltas, k=small_counts, a=st.floats(0.0, 10.0), b=st.floats(0.0, 10.0))
@settings(max_examples=60, deadline=None)
def test_optimal_delta_falls_with_total_epsilon(eps, delta, k, a, b):
    lo, hi = sorted((a, b))
    assert optimal_composition_delta(eps, delta, k, hi) <= optimal_composition_delta(eps, delta, k, lo) + 1e-13


@given(e1=epsilons, e2=epsilons, k=small_counts, total=st.floats(0.0, 10.0))
@settings(max_examples=60, deadline=None)
def test_optimal_delta_grows_with_step_epsilon_and_count(e1, e2, k, total):
    lo, hi = sorted((e1, e2))
    # Slack: near delta = 1 (vacuous) the complement 1 - delta_RR keeps only ~1e-15 absolute precision.
    assert optimal_composition_delta(lo, 1e-7, k, total) <= optimal_composition_delta(hi, 1e-7, k, total) + 1e-13
    assert optimal_composition_delta(lo, 1e-7, k, total) <= optimal_composition_delta(lo, 1e-7, k + 1, total) + 1e-13


@given(eps=epsilons, delta=deltas, k=st.integers(1, 500), target=st.sampled_from([1e-10, 1e-6, 1e-3, 0.1]))
@settings(max_examples=60, deadline=None)
def test_optimal_epsilon_round_trip(eps, delta, k, target):
    total = optimal_composition_epsilon(eps, delta, k, target)
    # The steps' own failure probability, computed as the implementation does
    # (1 - (1 - delta)**k loses ~1e-11 relative to cancellation near the boundary).
    floor = -math.expm1(k * math.log1p(-delta))
    if floor > target * (1 + 1e-12):
        assert total == math.inf
        return
    assert 0.0 <= total <= k * eps * (1 + 1e-12)
    assert optimal_composition_delta(eps, delta, k, total) <= target
    if total > 0:
        # Within the relative search tolerance of the smallest such epsilon.
        assert optimal_composition_delta(eps, delta, k, total * (1 - 1e-9)) > target


def test_optimal_epsilon_edge_cases():
    # Pure steps and delta = 0: only basic composition's k eps is certified.
    assert optimal_composition_epsilon(0.3, 0.0, 10, 0.0) == 3.0
    # The steps' own deltas exceed the target: nothing can be certified.
    assert optimal_composition_epsilon(0.3, 1e-3, 10, 1e-3) == math.inf
    # A target above delta(0) needs no epsilon at all.
    assert optimal_composition_epsilon(0.3, 0.0, 10, 0.9) == 0.0


@given(total=st.floats(0.05, 10.0), k=st.integers(1, 300), target=st.sampled_from([1e-8, 1e-5, 1e-2]))
@settings(max_examples=40, deadline=None)
def test_optimal_per_step_round_trip(total, k, target):
    step = optimal_composition_per_step_epsilon(total, k, target, delta=1e-12)
    assert step >= total / k * (1 - 1e-12)
    assert optimal_composition_delta(step, 1e-12, k, total) <= target
    assert optimal_composition_delta(step * (1 + 1e-9), 1e-12, k, total) > target
    # Never worse than the advanced-composition inverse with the same budget.
    drv = advanced_composition_per_step_epsilon(total, k, target - k * 1e-12)
    assert step >= drv * (1 - 1e-9)


def test_optimal_per_step_unreachable_delta():
    with pytest.raises(ValueError, match="unreachable"):
        optimal_composition_per_step_epsilon(1.0, 10, 1e-6, delta=1e-6)


@pytest.mark.parametrize(
    "call",
    [
        lambda: optimal_composition_delta(0.0, 0.0, 10, 1.0),
        lambda: optimal_composition_delta(0.1, 1.0, 10, 1.0),
        lambda: optimal_composition_delta(0.1, 0.0, 0, 1.0),
        lambda: optimal_composition_delta(0.1, 0.0, 10, -1.0),
        lambda: optimal_composition_delta(0.1, 0.0, OPTIMAL_COMPOSITION_MAX_COUNT + 1, 1.0),
        lambda: optimal_composition_epsilon(0.1, 0.0, 10, 1.0),
        lambda: optimal_composition_epsilon(0.1, 0.0, 10, math.nan),
        lambda: optimal_composition_per_step_epsilon(0.0, 10, 1e-5),
    ],
)
def test_optimal_rejects_bad_input(call):
    with pytest.raises(ValueError):
        call()


# -------------------------------------------------------------- amplification
def test_poisson_amplification_formula():
    eps, delta = poisson_amplification(1.0, 1e-5, 0.01)
    assert eps == pytest.approx(math.log(1 + 0.01 * (math.e - 1)), rel=1e-14)
    assert delta == pytest.approx(1e-7, rel=1e-14)
    assert poisson_amplification(0.7, 1e-6, 1.0) == pytest.approx((0.7, 1e-6), rel=1e-15)
    assert isinstance(poisson_amplification(0.7, 1e-6, 0.5), EpsilonDelta)


def test_poisson_amplification_of_a_vacuous_delta():
    assert poisson_amplification(0.5, 1.0, 0.25) == pytest.approx((math.log1p(0.25 * math.expm1(0.5)), 0.25))
    assert basic_composition([0.5], [1.0]) == (0.5, 1.0)


def test_poisson_amplification_tiny_rate_keeps_precision():
    # log1p/expm1: q (e^eps - 1) for q = 1e-12 is far below the spacing of floats near 1.
    eps, _ = poisson_amplification(1e-6, 0.0, 1e-12)
    assert eps == pytest.approx(1e-12 * math.expm1(1e-6), rel=1e-9)


def test_poisson_amplification_of_huge_epsilon_does_not_overflow():
    eps, _ = poisson_amplification(1000.0, 0.0, 0.5)
    assert eps == pytest.approx(1000.0 + math.log(0.5), rel=1e-15)
    # Both branches agree where they meet.
    below = poisson_amplification(699.999, 0.0, 0.25).epsilon
    above = poisson_amplification(700.0, 0.0, 0.25).epsilon
    assert above - below == pytest.approx(0.001, rel=1e-6)


def test_advanced_composition_of_huge_epsilon_is_infinite_not_an_error():
    assert advanced_composition(800.0, 0.0, 2, 1e-6).epsilon == math.inf


def rr_outputs_under_poisson(eps: float, delta: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Output distributions of a subsampled (eps, delta) randomised response, without / with the target.

    The mechanism answers "is the target in the sample?": with probability delta
    it reveals the answer (outputs R0 / R1), otherwise it reports it truthfully
    with probability p = e^eps / (1 + e^eps). It is (eps, delta)-DP under
    add/remove-one. Outputs: (R0, R1, 0, 1).
    """
    p = math.exp(eps) / (1 + math.exp(eps))

    def answer(bit: int) -> np.ndarray:
        truthful = np.array([p, 1 - p]) if bit == 0 else np.array([1 - p, p])
        reveal = np.array([delta, 0.0]) if bit == 0 else np.array([0.0, delta])
        return np.concatenate([reveal, (1 - delta) * truthful])

    without = answer(0)
    with_target = q * answer(1) + (1 - q) * answer(0)
    return without, with_target


def hockey_stick(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    return float(np.sum(np.maximum(p - math.exp(eps) * q, 0.0)))


@pytest.mark.parametrize("eps, delta, q", [(1.0, 0.0, 0.1), (0.3, 1e-3, 0.5), (3.0, 1e-2, 0.01), (0.5, 0.0, 1.0)])
def test_poisson_amplification_is_exact_for_randomised_response(eps, delta, q):
    without, with_target = rr_outputs_under_poisson(eps, delta, q)
    amp_eps, amp_delta = poisson_amplification(eps, delta, q)
    # Both directions of add/remove are covered by the amplified guarantee...
    assert hockey_stick(with_target, without, amp_eps) <= amp_delta * (1 + 1e-12) + 1e-15
    assert hockey_stick(without, with_target, amp_eps) <= amp_delta * (1 + 1e-12) + 1e-15
    # ...and the likelihood ratio of output "1" attains e^amp_eps: the epsilon is tight.
    ratio = with_target[3] / without[3]
    assert math.log(ratio) == pytest.approx(amp_eps, rel=1e-12)
    if delta == 0:
        assert hockey_stick(with_target, without, amp_eps * (1 - 1e-3)) > 0


@given(eps=epsilons, q1=st.floats(1e-4, 1.0), q2=st.floats(1e-4, 1.0))
@settings(max_examples=50, deadline=None)
def test_poisson_amplification_is_monotone_and_never_worse(eps, q1, q2):
    lo, hi = sorted((q1, q2))
    assert poisson_amplification(eps, 1e-6, lo).epsilon <= poisson_amplification(eps, 1e-6, hi).epsilon
    assert poisson_amplification(eps, 1e-6, hi).epsilon <= eps * (1 + 1e-15)


@pytest.mark.parametrize("args", [(0.0, 0.0, 0.5), (1.0, 1.5, 0.5), (1.0, -0.1, 0.5), (1.0, 0.0, 0.0), (1.0, 0.0, 1.5)])
def test_poisson_amplification_rejects_bad_input(args):
    with pytest.raises(ValueError):
        poisson_amplification(*args)
