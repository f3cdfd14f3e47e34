"""Tests for ExponentialMechanism: probabilities, the Gumbel-max sampler, statistical privacy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privml.accounting._events import ExponentialEvent
from privml.audit import neighbour_distribution_test
from privml.mechanisms import ExponentialMechanism
from privml.neighbouring import Neighbouring

N = 200_000


# ----------------------------------------------------------------- probabilities
def test_probabilities_reference_values() -> None:
    mech = ExponentialMechanism(epsilon=2.0, sensitivity=1.0)
    # P ~ exp(eps u / (2 Delta)) = exp(u): softmax([0, 1, 2]).
    expected = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(mech.probabilities([0.0, 1.0, 2.0]), expected, rtol=1e-14)
    mono = ExponentialMechanism(epsilon=2.0, sensitivity=1.0, monotonic=True)
    expected_mono = np.exp([0.0, 2.0, 4.0]) / np.exp([0.0, 2.0, 4.0]).sum()
    np.testing.assert_allclose(mono.probabilities([0.0, 1.0, 2.0]), expected_mono, rtol=1e-14)


def test_probabilities_do_not_overflow() -> None:
    mech = ExponentialMechanism(epsilon=1.0, sensitivity=1e-6)
    p = mech.probabilities([1e3, 1e3 - 1e-6, -1e3])
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
    assert p[0] / p[1] == pytest.approx(np.exp(0.5), rel=1e-9)
    assert mech.select([1e3, 1e3 - 1e-6, -1e3]) in (0, 1)


def test_probabilities_are_shift_invariant() -> None:
    mech = ExponentialMechanism(epsilon=0.7, sensitivity=2.0)
    u = np.array([3.0, -1.0, 0.5, 2.0])
    np.testing.assert_allclose(mech.probabilities(u), mech.probabilities(u + 1e4), rtol=1e-9)


# ----------------------------------------------------------------- sampler
@pytest.mark.parametrize("monotonic", [False, True])
def test_gumbel_max_frequencies_match_probabilities(monotonic: bool) -> None:
    mech = ExponentialMechanism(epsilon=1.5, sensitivity=1.0, monotonic=monotonic, random_state=50)
    u = np.array([0.0, 1.0, 1.5, -2.0, 3.0, 0.2])
    counts = np.bincount(mech._sample(u, N), minlength=u.size)
    expected = N * mech.probabilities(u)
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # Power: the same counts reject the law of the other temperature.
    other = ExponentialMechanism(epsilon=1.5, sensitivity=1.0, monotonic=not monotonic)
    assert stats.chisquare(counts, N * other.probabilities(u)).pvalue < 1e-10


def test_public_select_has_the_same_law() -> None:
    mech = ExponentialMechanism(epsilon=1.0, sensitivity=0.5, random_state=51)
    u = [0.0, 0.3, 0.6, 0.9]
    picks = np.array([mech.select(u) for _ in range(20_000)])
    counts = np.bincount(picks, minlength=4)
    assert stats.chisquare(counts, 20_000 * mech.probabilities(u)).pvalue > 1e-3
    assert all(isinstance(mech.randomise(u), int) for _ in range(3))


def test_select_is_one_draw_of_the_vectorised_sampler() -> None:
    u = [0.1, 0.4, 0.2]
    a = ExponentialMechanism(epsilon=1.0, random_state=9)
    b = ExponentialMechanism(epsilon=1.0, random_state=9)
    assert [a.select(u) for _ in range(50)] == [int(b._sample(u, 1)[0]) for _ in range(50)]


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize("eps", [0.0, -0.5, float("nan"), float("inf")])
def test_rejects_bad_epsilon(eps: float) -> None:
    with pytest.raises(ValueError):
        ExponentialMechanism(epsilon=eps)


def test_rejects_delta_and_bad_options() -> None:
    with pytest.raises(ValueError, match="pure"):
        ExponentialMechanism(epsilon=1.0, delta=1e-6)
    with pytest.raises(TypeError):
        ExponentialMechanism(epsilon=1.0, monotonic="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ExponentialMechanism(epsilon=1.0, sensitivity=0.0)


@pytest.mark.parametrize("bad", [[], [[0.0, 1.0]], [0.0, float("nan")], [float("inf"), 0.0]])
def test_rejects_bad_utilities(bad: object) -> None:
    mech = ExponentialMechanism(epsilon=1.0, random_state=0)
    with pytest.raises(ValueError):
        mech.select(bad)
    with pytest.raises(ValueError):
        mech.probabilities(bad)


def test_event_zcdp_and_guarantee() -> None:
    mech = ExponentialMechanism(epsilon=0.8, sensitivity=1.0, neighbouring="add/remove-one")
    assert mech.event == ExponentialEvent(0.8, Neighbouring.ADD_REMOVE_ONE)
    assert mech.zcdp_rho == pytest.approx(0.08)
    assert mech.privacy.epsilon == 0.8 and mech.privacy.delta == 0.0
    assert "monotonic=False" in repr(mech)


def test_zcdp_bound_holds_for_worst_case_pair() -> None:
    # rho-zCDP: Renyi divergence D_alpha(P || Q) <= rho alpha for all alpha > 1 (Bun & Steinke 2016).
    epsilon = 1.0
    mech = ExponentialMechanism(epsilon=epsilon, sensitivity=1.0)
    u = np.zeros(10)
    u_prime = np.array([1.0] + [-1.0] * 9)
    p, q = mech.probabilities(u_prime), mech.probabilities(u)
    for alpha in (1.5, 2.0, 4.0, 16.0):
        for x, y in ((p, q), (q, p)):
            renyi = np.log(np.sum(x**alpha * y ** (1 - alpha))) / (alpha - 1)
            assert renyi <= mech.zcdp_rho * alpha + 1e-12


# ----------------------------------------------------------------- statistical privacy
def _selections(mech: ExponentialMechanism, u: np.ndarray, u_prime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return mech._sample(u, N), mech._sample(u_prime, N)


# Worst case for the standard mechanism: candidate 0 gains Delta, all others lose Delta.
U = np.zeros(10)
U_PRIME = np.array([1.0] + [-1.0] * 9)
# Monotone neighbours: every utility moves the same way (here only candidate 0, by Delta).
U_MONO_PRIME = np.array([1.0] + [0.0] * 9)


@pytest.mark.parametrize("broken", [False, True])
def test_selected_index_respects_epsilon(broken: bool) -> None:
    epsilon = 1.0
    mech = ExponentialMechanism(epsilon=epsilon, sensitivity=1.0, random_state=60 + broken)
    if broken:
        mech.sensitivity = 0.5  # temperature doubled: exp(eps u / Delta) on non-monotone utilities
    a, b = _selections(mech, U, U_PRIME)
    result = neighbour_distribution_test(a, b, epsilon=epsilon)
    assert result.violated is broken
    # Exact ratio for this pair: P'(0)/P(0) = 10 e^(eps/2) / (e^(eps/2) + 9 e^(-eps/2)) = 2.32 (4.51 if broken).
    exact = np.log(mech.probabilities(U_PRIME)[0] / mech.probabilities(U)[0])
    assert exact == pytest.approx(np.log(4.5095) if broken else np.log(2.3195), abs=1e-3)


@pytest.mark.parametrize("broken", [False, True])
def test_monotone_option_respects_epsilon_on_monotone_neighbours(broken: bool) -> None:
    epsilon = 1.0
    mech = ExponentialMechanism(epsilon=epsilon, sensitivity=1.0, monotonic=True, random_state=62 + broken)
    if broken:
        mech.sensitivity = 0.5
    a, b = _selections(mech, U, U_MONO_PRIME)
    assert neighbour_distribution_test(a, b, epsilon=epsilon).violated is broken


def test_monotone_option_is_not_private_for_non_monotone_neighbours() -> None:
    # Documents why ``monotonic`` is opt-in: on the non-monotone worst case it leaks ~2 eps.
    epsilon = 1.0
    mech = ExponentialMechanism(epsilon=epsilon, sensitivity=1.0, monotonic=True, random_state=64)
    a, b = _selections(mech, U, U_PRIME)
    assert neighbour_distribution_test(a, b, epsilon=epsilon).violated
