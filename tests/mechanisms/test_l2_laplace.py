"""Tests for the L2-Laplace sampler and mechanism (CMS11's multidimensional Laplace)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special, stats

from privml.accounting._events import EpsilonDeltaEvent
from privml.audit import neighbour_distribution_test
from privml.mechanisms import L2LaplaceMechanism, sample_l2_laplace
from privml.neighbouring import Neighbouring

N = 200_000


# ----------------------------------------------------------------- the sampler
@pytest.mark.parametrize("dim", [1, 3, 10])
def test_norm_is_gamma_d_scale(dim: int) -> None:
    scale = 0.7
    z = sample_l2_laplace(dim, scale, N, np.random.default_rng(dim))
    assert z.shape == (N, dim)
    norms = np.linalg.norm(z, axis=1)
    assert stats.kstest(norms, stats.gamma(a=dim, scale=scale).cdf).pvalue > 1e-3
    # Power: the common slip of using shape d - 1 (or d + 1) is rejected.
    wrong = stats.gamma(a=dim + 1, scale=scale).cdf
    assert stats.kstest(norms, wrong).pvalue < 1e-10


def test_direction_is_uniform_on_sphere() -> None:
    dim = 4
    z = sample_l2_laplace(dim, 1.0, N, np.random.default_rng(5))
    u = z / np.linalg.norm(z, axis=1, keepdims=True)
    # For u uniform on S^(d-1), u_1^2 ~ Beta(1/2, (d-1)/2), for every axis and any rotation.
    rotation, _ = np.linalg.qr(np.random.default_rng(6).standard_normal((dim, dim)))
    for coords in (u[:, 0], u[:, 3], (u @ rotation)[:, 1]):
        assert stats.kstest(coords**2, stats.beta(0.5, (dim - 1) / 2).cdf).pvalue > 1e-3
    assert np.abs(u.mean(axis=0)).max() < 5 / np.sqrt(N)


def test_dimension_one_is_laplace() -> None:
    z = sample_l2_laplace(1, 2.0, N, np.random.default_rng(7))[:, 0]
    assert stats.kstest(z, stats.laplace(scale=2.0).cdf).pvalue > 1e-3


def test_density_is_proportional_to_exp_minus_norm_over_scale() -> None:
    # Independent check of the density claim: in d = 2 the probability of the
    # disc of radius r is int_0^r 2 pi s exp(-s/b) ds / (2 pi b^2) (normaliser 2 pi b^2).
    b, r = 0.5, 0.8
    z = sample_l2_laplace(2, b, N, np.random.default_rng(8))
    mass, _ = integrate.quad(lambda s: s * np.exp(-s / b) / b**2, 0, r)
    observed = np.mean(np.linalg.norm(z, axis=1) <= r)
    assert observed == pytest.approx(mass, abs=5 * np.sqrt(mass * (1 - mass) / N))
    assert mass == pytest.approx(special.gammainc(2, r / b), rel=1e-12)


def test_sampler_validation() -> None:
    rng = np.random.default_rng(0)
    for dim in (0, -1, 2.5):
        with pytest.raises((ValueError, TypeError)):
            sample_l2_laplace(dim, 1.0, 10, rng)  # type: ignore[arg-type]
    for scale in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            sample_l2_laplace(3, scale, 10, rng)
    with pytest.raises(ValueError):
        sample_l2_laplace(3, 1.0, 0, rng)


def test_sampler_accepts_seed_and_is_reproducible() -> None:
    np.testing.assert_array_equal(sample_l2_laplace(3, 1.0, 5, 11), sample_l2_laplace(3, 1.0, 5, 11))


# ----------------------------------------------------------------- the mechanism
@pytest.mark.parametrize("eps", [0.0, -2.0, float("nan")])
def test_rejects_bad_epsilon(eps: float) -> None:
    with pytest.raises(ValueError):
        L2LaplaceMechanism(epsilon=eps)


def test_rejects_nonzero_delta() -> None:
    with pytest.raises(ValueError, match="pure"):
        L2LaplaceMechanism(epsilon=1.0, delta=1e-6)


def test_rejects_bad_values() -> None:
    mech = L2LaplaceMechanism(epsilon=1.0, random_state=0)
    with pytest.raises(ValueError):
        mech.randomise([1.0, float("nan")])
    with pytest.raises(ValueError):
        mech.randomise(np.zeros(0))


def test_randomise_shapes_and_one_joint_noise_vector() -> None:
    mech = L2LaplaceMechanism(epsilon=2.0, sensitivity=0.2, random_state=3)
    assert mech.scale == pytest.approx(0.1)
    assert isinstance(mech.randomise(1.0), float)
    w = np.ones((4, 3))
    noisy = mech.randomise(w)
    assert noisy.shape == (4, 3)
    # randomise = value + one draw of dimension value.size from the same stream.
    replay = L2LaplaceMechanism(epsilon=2.0, sensitivity=0.2, random_state=3)
    replay.randomise(1.0)
    np.testing.assert_array_equal(noisy, w + replay._noise(12, 1)[0].reshape(4, 3))


def test_matrix_noise_norm_is_gamma_of_total_dimension() -> None:
    mech = L2LaplaceMechanism(epsilon=1.0, sensitivity=1.0, random_state=4)
    norms = np.array([np.linalg.norm(mech.randomise(np.zeros((2, 3)))) for _ in range(4000)])
    assert stats.kstest(norms, stats.gamma(a=6, scale=1.0).cdf).pvalue > 1e-3


def test_event_and_guarantee() -> None:
    mech = L2LaplaceMechanism(epsilon=0.3, sensitivity=2.0)
    assert mech.event == EpsilonDeltaEvent(0.3, 0.0, Neighbouring.REPLACE_ONE)
    assert mech.privacy.epsilon == 0.3 and mech.privacy.delta == 0.0


# ----------------------------------------------------------------- statistical privacy
def _l2_loss(out: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """||y - f(D')|| - ||y - f(D)||: the privacy loss (times Delta_2 / epsilon), rounded so
    that float rounding cannot act as a distinguisher."""
    return np.round(np.linalg.norm(out - shift, axis=1) - np.linalg.norm(out, axis=1), 9)


@pytest.mark.parametrize("broken", [False, True])
def test_neighbours_respect_epsilon_and_half_sensitivity_is_caught(broken: bool) -> None:
    epsilon, dim = 1.0, 3
    shift = np.array([1.0, 2.0, 2.0]) / 3  # ||f(D') - f(D)||_2 = Delta_2 = 1
    mech = L2LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, random_state=30 + broken)
    if broken:
        mech.sensitivity = 0.5  # noise calibrated to half the true sensitivity
    a = mech._noise(dim, N)  # M(D), f(D) = 0
    b = shift + mech._noise(dim, N)  # M(D')
    statistics = {
        "projection": (a @ shift, b @ shift),
        "norm": (np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)),
        "privacy loss": (_l2_loss(a, shift), _l2_loss(b, shift)),
    }
    for name, (sa, sb) in statistics.items():
        result = neighbour_distribution_test(sa, sb, epsilon=epsilon)
        assert result.violated is broken, name
