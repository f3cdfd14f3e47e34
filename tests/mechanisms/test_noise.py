"""sample_noise: the one additive-noise sampler (shapes, draw order, refusals)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privml.mechanisms import GaussianMechanism, LaplaceMechanism, sample_l2_laplace, sample_noise


def test_per_coordinate_noise_is_numpys_draw_for_the_same_seed() -> None:
    # Callers that used to call numpy directly keep their numbers for a fixed seed.
    np.testing.assert_array_equal(sample_noise("gaussian", 1.5, (4, 3), 7),
                                  np.random.default_rng(7).normal(0.0, 1.5, size=(4, 3)))
    np.testing.assert_array_equal(sample_noise("laplace", 0.2, 5, 7),
                                  np.random.default_rng(7).laplace(0.0, 0.2, size=5))
    np.testing.assert_array_equal(sample_noise("l2-laplace", 0.3, (2, 3), 7),
                                  sample_l2_laplace(6, 0.3, 1, np.random.default_rng(7))[0].reshape(2, 3))


def test_size_gives_independent_releases_of_the_shape() -> None:
    rows = sample_noise("l2-laplace", 0.3, (3,), 1, size=5)
    np.testing.assert_array_equal(rows, sample_l2_laplace(3, 0.3, 5, np.random.default_rng(1)))
    assert sample_noise("gaussian", 1.0, (), 1, size=4).shape == (4,)
    assert sample_noise("l2-laplace", 1.0, (), 1, size=4).shape == (4,)


def test_a_scale_per_block_broadcasts_like_scaling_standard_normals() -> None:
    sigma = np.array([[0.5], [2.0]])
    drawn = sample_noise("gaussian", sigma, (2, 3), 3)
    np.testing.assert_array_equal(drawn, np.random.default_rng(3).standard_normal((2, 3)) * sigma)
    assert not sample_noise("gaussian", np.array([0.0, 1.0]), (5, 2), 3)[:, 0].any()  # a block of sensitivity 0
    many = sample_noise("gaussian", np.array([0.1, 10.0]), (20_000, 2), 4)
    np.testing.assert_allclose(many.std(axis=0), [0.1, 10.0], rtol=0.03)


def test_l2_laplace_norm_is_gamma_d_b() -> None:
    d, b = 4, 0.7
    norms = np.linalg.norm(sample_noise("l2-laplace", b, (d,), 5, size=4000), axis=1)
    assert stats.kstest(norms, stats.gamma(a=d, scale=b).cdf).pvalue > 1e-3


def test_mechanisms_draw_through_it() -> None:
    g = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=2.0, random_state=9)
    np.testing.assert_array_equal(g.randomise(np.zeros(3)), sample_noise("gaussian", g.sigma, (3,), 9))
    lap = LaplaceMechanism(epsilon=0.5, sensitivity=1.0, random_state=9)
    np.testing.assert_array_equal(lap.randomise(np.zeros(3)), sample_noise("laplace", lap.scale, (3,), 9))


@pytest.mark.parametrize(("distribution", "scale", "message"), [
    ("cauchy", 1.0, "distribution must be one of"),
    ("gaussian", 0.0, "scale must be > 0"),
    ("laplace", -1.0, "scale must be > 0"),
    ("gaussian", float("inf"), "scale must be finite"),
    ("gaussian", np.array([1.0, -1.0]), "scale must be finite, >= 0"),
    ("laplace", np.array([0.0, 0.0]), "> 0 somewhere"),
    ("l2-laplace", np.array([1.0, 2.0]), "scale"),
])
def test_bad_settings_are_refused(distribution, scale, message) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        sample_noise(distribution, scale, (2,), 0)
