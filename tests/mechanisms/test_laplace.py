"""Tests for LaplaceMechanism: validation, distribution, and statistical privacy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privml.accounting._events import LaplaceEvent
from privml.audit import neighbour_distribution_test
from privml.mechanisms import LaplaceMechanism
from privml.neighbouring import Neighbouring

N = 200_000


def _broken(mech: LaplaceMechanism) -> LaplaceMechanism:
    """The classic bug: noise calibrated to half the true sensitivity."""
    mech.sensitivity = mech.sensitivity / 2
    return mech


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_rejects_bad_epsilon(eps: float) -> None:
    with pytest.raises(ValueError):
        LaplaceMechanism(epsilon=eps)


@pytest.mark.parametrize("delta", [1e-5, 0.5])
def test_rejects_nonzero_delta_for_pure_mechanism(delta: float) -> None:
    with pytest.raises(ValueError, match="pure"):
        LaplaceMechanism(epsilon=1.0, delta=delta)


@pytest.mark.parametrize("delta", [-0.1, 1.0, float("nan")])
def test_rejects_delta_out_of_range(delta: float) -> None:
    with pytest.raises(ValueError):
        LaplaceMechanism(epsilon=1.0, delta=delta)


@pytest.mark.parametrize("sens", [0.0, -1.0, float("nan"), float("inf")])
def test_rejects_bad_sensitivity(sens: float) -> None:
    with pytest.raises(ValueError):
        LaplaceMechanism(epsilon=1.0, sensitivity=sens)


def test_constructor_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        LaplaceMechanism(1.0)  # type: ignore[misc]


@pytest.mark.parametrize("value", [float("nan"), [1.0, float("inf")], "abc"])
def test_rejects_non_finite_values_before_drawing_noise(value: object) -> None:
    mech = LaplaceMechanism(epsilon=1.0, random_state=3)
    state = mech._rng.bit_generator.state
    with pytest.raises(ValueError):
        mech.randomise(value)
    assert mech._rng.bit_generator.state == state


# ----------------------------------------------------------------- behaviour
def test_scalar_and_array_outputs() -> None:
    mech = LaplaceMechanism(epsilon=2.0, sensitivity=3.0, random_state=0)
    assert mech.scale == 1.5
    out = mech.randomise(5.0)
    assert isinstance(out, float)
    x = np.arange(6.0).reshape(2, 3)
    noisy = mech.randomise(x)
    assert noisy.shape == (2, 3)
    assert not np.shares_memory(noisy, x)
    np.testing.assert_array_equal(x, np.arange(6.0).reshape(2, 3))


def test_seeded_runs_are_reproducible() -> None:
    a = LaplaceMechanism(epsilon=1.0, random_state=42).randomise(np.zeros(5))
    b = LaplaceMechanism(epsilon=1.0, random_state=42).randomise(np.zeros(5))
    np.testing.assert_array_equal(a, b)


def test_noise_is_laplace_with_scale_sensitivity_over_epsilon() -> None:
    mech = LaplaceMechanism(epsilon=0.5, sensitivity=2.0, random_state=1)
    noise = mech.randomise(np.full(N, 10.0)) - 10.0
    assert stats.kstest(noise, stats.laplace(scale=4.0).cdf).pvalue > 1e-3
    # ... and the test has power against a scale error of 10%.
    assert stats.kstest(noise, stats.laplace(scale=4.4).cdf).pvalue < 1e-6


def test_event_and_guarantee() -> None:
    mech = LaplaceMechanism(epsilon=0.25, sensitivity=7.0, neighbouring="add/remove-one")
    assert mech.event == LaplaceEvent(4.0, Neighbouring.ADD_REMOVE_ONE)
    assert mech.event.epsilon == 0.25
    g = mech.privacy
    assert (g.epsilon, g.delta, g.neighbouring) == (0.25, 0.0, Neighbouring.ADD_REMOVE_ONE)


# ----------------------------------------------------------------- statistical privacy
def _scalar_samples(mech: LaplaceMechanism, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """M(D) with f(D) = 0 and M(D') with f(D') = shift, N draws each."""
    return mech.randomise(np.zeros(N)), mech.randomise(np.full(N, shift))


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_scalar_neighbours_respect_epsilon_and_broken_variant_is_caught(epsilon: float) -> None:
    sens = 1.0
    mech = LaplaceMechanism(epsilon=epsilon, sensitivity=sens, random_state=10)
    result = neighbour_distribution_test(*_scalar_samples(mech, sens), epsilon=epsilon)
    assert not result.violated
    # A correct mechanism is tight in the tails, so the certified bound is close to epsilon.
    assert result.epsilon_lower_bound > 0.6 * epsilon

    broken = _broken(LaplaceMechanism(epsilon=epsilon, sensitivity=sens, random_state=11))
    caught = neighbour_distribution_test(*_scalar_samples(broken, sens), epsilon=epsilon)
    assert caught.violated
    assert caught.epsilon_lower_bound > 1.2 * epsilon


def _vector_samples(mech: LaplaceMechanism, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return mech.randomise(np.zeros((N, shift.size))), mech.randomise(np.tile(shift, (N, 1)))


def _l1_privacy_loss(out: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """||y - f(D')||_1 - ||y - f(D)||_1: the privacy-loss statistic (times epsilon / Delta_1).

    Rounded to 1e-9 so that float rounding of the two differences (which
    depends on which neighbour produced y) cannot itself be a distinguisher.
    """
    return np.round(np.abs(out - shift).sum(axis=1) - np.abs(out).sum(axis=1), 9)


@pytest.mark.parametrize("broken", [False, True])
def test_vector_neighbours_projection_and_l1_loss(broken: bool) -> None:
    epsilon = 1.0
    shift = np.array([0.5, 0.5, 0.0])  # L1 norm = Delta_1 = 1
    mech = LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, random_state=20 + broken)
    if broken:
        _broken(mech)
    a, b = _vector_samples(mech, shift)
    direction = shift / np.linalg.norm(shift)
    projected = neighbour_distribution_test(a @ direction, b @ direction, epsilon=epsilon)
    loss = neighbour_distribution_test(_l1_privacy_loss(a, shift), _l1_privacy_loss(b, shift), epsilon=epsilon)
    assert projected.violated is broken
    assert loss.violated is broken
