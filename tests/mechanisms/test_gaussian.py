"""Tests for GaussianMechanism: calibration, validation and statistical privacy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privml.accounting._analytic_gaussian import gaussian_delta
from privml.accounting._events import GaussianEvent
from privml.audit import neighbour_distribution_test
from privml.mechanisms import GaussianMechanism
from privml.neighbouring import Neighbouring

N = 200_000


# ----------------------------------------------------------------- calibration
def test_reference_sigma_analytic() -> None:
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    assert mech.sigma == pytest.approx(3.7306, abs=5e-5)
    assert mech.calibration == "analytic"


def test_sigma_scales_with_sensitivity() -> None:
    one = GaussianMechanism(epsilon=0.7, delta=1e-6, sensitivity=1.0)
    three = GaussianMechanism(epsilon=0.7, delta=1e-6, sensitivity=3.0)
    assert three.sigma == pytest.approx(3 * one.sigma, rel=1e-14)
    assert three.noise_multiplier == one.noise_multiplier


def test_classic_calibration_reference_and_refusal() -> None:
    mech = GaussianMechanism(epsilon=0.5, delta=1e-5, sensitivity=1.0, calibration="classic")
    assert mech.sigma == pytest.approx(2 * 4.8448, abs=1e-4)
    assert mech.sigma > GaussianMechanism(epsilon=0.5, delta=1e-5).sigma
    with pytest.raises(ValueError, match="epsilon < 1"):
        GaussianMechanism(epsilon=1.0, delta=1e-5, calibration="classic")


def test_analytic_sigma_is_exactly_on_the_privacy_curve() -> None:
    mech = GaussianMechanism(epsilon=2.0, delta=1e-7, sensitivity=0.3)
    mu = mech.sensitivity / mech.sigma
    assert gaussian_delta(2.0, mu) == pytest.approx(1e-7, rel=1e-9)


# ----------------------------------------------------------------- validation
def test_requires_positive_delta() -> None:
    with pytest.raises(ValueError, match="delta"):
        GaussianMechanism(epsilon=1.0, delta=0.0)
    with pytest.raises(TypeError):
        GaussianMechanism(epsilon=1.0)  # type: ignore[call-arg]


@pytest.mark.parametrize("delta", [-1e-5, 1.0, 2.0, float("nan")])
def test_rejects_delta_out_of_range(delta: float) -> None:
    with pytest.raises(ValueError):
        GaussianMechanism(epsilon=1.0, delta=delta)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_rejects_bad_epsilon(eps: float) -> None:
    with pytest.raises(ValueError):
        GaussianMechanism(epsilon=eps, delta=1e-5)


def test_rejects_unknown_calibration_and_bad_values() -> None:
    with pytest.raises(ValueError, match="calibration"):
        GaussianMechanism(epsilon=1.0, delta=1e-5, calibration="optimal")  # type: ignore[arg-type]
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5, random_state=0)
    with pytest.raises(ValueError):
        mech.randomise([0.0, float("nan")])
    with pytest.raises(ValueError):
        GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=0.0)


# ----------------------------------------------------------------- behaviour
def test_noise_is_normal_with_sigma() -> None:
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=2.0, random_state=1)
    noise = mech.randomise(np.zeros(N))
    assert stats.kstest(noise, stats.norm(scale=mech.sigma).cdf).pvalue > 1e-3
    assert stats.kstest(noise, stats.norm(scale=1.05 * mech.sigma).cdf).pvalue < 1e-6
    assert isinstance(mech.randomise(1.0), float)
    assert mech.randomise(np.ones((2, 5))).shape == (2, 5)


def test_event_records_noise_multiplier_and_relation() -> None:
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=4.0, neighbouring="add/remove-one")
    assert mech.event == GaussianEvent(mech.sigma / 4.0, Neighbouring.ADD_REMOVE_ONE)
    assert mech.privacy.delta == 1e-5 and mech.privacy.neighbouring is Neighbouring.ADD_REMOVE_ONE
    assert "sigma=" in repr(mech)


# ----------------------------------------------------------------- statistical privacy
@pytest.mark.parametrize(
    ("epsilon", "delta", "calibration"),
    [(1.0, 1e-5, "analytic"), (0.5, 1e-3, "analytic"), (0.5, 1e-3, "classic"), (3.0, 1e-4, "analytic")],
)
def test_scalar_neighbours_respect_epsilon_delta(epsilon: float, delta: float, calibration: str) -> None:
    mech = GaussianMechanism(epsilon=epsilon, delta=delta, calibration=calibration, random_state=40)
    a, b = mech.randomise(np.zeros(N)), mech.randomise(np.ones(N))
    assert not neighbour_distribution_test(a, b, epsilon=epsilon, delta=delta).violated


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (0.5, 1e-3), (3.0, 1e-4)])
def test_half_sensitivity_is_caught(epsilon: float, delta: float) -> None:
    mech = GaussianMechanism(epsilon=epsilon, delta=delta, random_state=41)
    mech.sensitivity = 0.5  # sigma now calibrated to half the true shift of 1
    a, b = mech.randomise(np.zeros(N)), mech.randomise(np.ones(N))
    assert neighbour_distribution_test(a, b, epsilon=epsilon, delta=delta).violated


def _vector_samples(mech: GaussianMechanism, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return mech.randomise(np.zeros((N, shift.size))), mech.randomise(np.tile(shift, (N, 1)))


SHIFT = np.array([0.5, -0.5, 0.5, 0.5])  # ||shift||_2 = Delta_2 = 1


@pytest.mark.parametrize("broken", [False, True])
def test_vector_neighbours_projected_on_difference(broken: bool) -> None:
    epsilon, delta = 1.0, 1e-5
    mech = GaussianMechanism(epsilon=epsilon, delta=delta, sensitivity=1.0, random_state=42 + broken)
    if broken:
        mech.sensitivity = 0.5
    a, b = _vector_samples(mech, SHIFT)
    # The projection on f(D') - f(D) is the privacy-loss statistic of the Gaussian: tight.
    assert neighbour_distribution_test(a @ SHIFT, b @ SHIFT, epsilon=epsilon, delta=delta).violated is broken


def test_vector_neighbours_norm_statistic() -> None:
    # The norm of the output is a weaker (non-sufficient) statistic: post-processing,
    # so it must never show a violation at the claimed (epsilon, delta).
    epsilon, delta = 3.0, 1e-4
    mech = GaussianMechanism(epsilon=epsilon, delta=delta, sensitivity=1.0, random_state=44)
    a, b = _vector_samples(mech, SHIFT)
    norm_a, norm_b = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    result = neighbour_distribution_test(norm_a, norm_b, epsilon=epsilon, delta=delta)
    assert not result.violated
    assert result.epsilon_lower_bound < epsilon
