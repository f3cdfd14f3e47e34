"""The doubling baseline's releases and the a-priori epsilon of the worst-case bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.linear._sensitivity import erm_sensitivity
from privml.linear._solvers import minimise_objective
from privml.losses import LogisticLoss, RegularisedObjective
from privml.selection._doubling import doubling_grid, independent_releases
from privml.selection._utility_bound import apriori_epsilon_excess_risk

from ._data import blobs


def test_doubling_grid() -> None:
    assert doubling_grid(0.1, 1.0) == (0.1, 0.2, 0.4, 0.8)
    assert doubling_grid(0.25, 1.0) == (0.25, 0.5, 1.0)
    assert doubling_grid(1.0, 1.0) == (1.0,)
    with pytest.raises(ValueError):
        doubling_grid(1.0, 0.5)


def test_independent_releases_are_lazy_independent_and_calibrated() -> None:
    d, sens = 20_000, 0.3
    rng = np.random.default_rng(0)
    gen = independent_releases(np.zeros(d), epsilons=[0.5, 1.0, 2.0], sensitivity=sens, delta=1e-6, rng=rng)
    first = next(gen)
    state = rng.bit_generator.state
    second = next(gen)
    assert rng.bit_generator.state != state  # the second model is drawn only when asked for
    assert (first.prefix_epsilon, second.prefix_epsilon) == (0.5, 1.5)
    assert second.prefix_delta == 2e-6
    for release, eps in [(first, 0.5), (second, 1.0)]:
        sigma = analytic_gaussian_sigma(eps, 1e-6, sens)
        assert stats.kstest(release.candidate, "norm", args=(0, sigma)).pvalue > 1e-3
    assert abs(np.corrcoef(first.candidate, second.candidate)[0, 1]) < 4 / math.sqrt(d)


def test_pure_doubling_uses_l2_laplace() -> None:
    d, sens, eps = 400, 0.3, 2.0
    rng = np.random.default_rng(1)
    norms = [
        np.linalg.norm(next(independent_releases(np.zeros(d), epsilons=[eps], sensitivity=sens, delta=0.0, rng=rng)).candidate)
        for _ in range(2000)
    ]
    # ||noise|| ~ Gamma(d, Delta_2 / eps) exactly (CMS11's sampler).
    assert stats.kstest(norms, "gamma", args=(d, 0, sens / eps)).pvalue > 1e-3


def test_chain_noise_doubling_uses_the_chains_per_coordinate_laplace() -> None:
    d, sens, eps = 50, 0.3, 2.0
    rng = np.random.default_rng(2)
    gen = independent_releases(np.zeros(d), epsilons=[eps, 2 * eps], sensitivity=sens, delta=0.0, rng=rng,
                               noise="chain")
    first, second = next(gen), next(gen)
    # Each coordinate ~ Lap(sqrt(d) Delta_2 / eps): the L1 calibration of laplace_noise_reduction.
    assert stats.kstest(first.candidate, "laplace", args=(0, math.sqrt(d) * sens / eps)).pvalue > 1e-3
    assert stats.kstest(second.candidate, "laplace", args=(0, math.sqrt(d) * sens / (2 * eps))).pvalue > 1e-3
    assert (first.prefix_epsilon, second.prefix_epsilon) == pytest.approx((eps, 3 * eps))
    # With delta > 0 both settings are the same analytic Gaussian.
    a = next(independent_releases(np.zeros(d), epsilons=[eps], sensitivity=sens, delta=1e-6,
                                  rng=np.random.default_rng(3), noise="chain")).candidate
    b = next(independent_releases(np.zeros(d), epsilons=[eps], sensitivity=sens, delta=1e-6,
                                  rng=np.random.default_rng(3))).candidate
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="noise must be one of"):
        next(independent_releases(np.zeros(d), epsilons=[eps], sensitivity=sens, delta=0.0, rng=rng, noise="x"))


def test_apriori_epsilon_inverts_the_bound() -> None:
    alpha, dim, sens, smooth, delta, beta = 0.01, 30, 0.02, 0.26, 1e-6, 0.1
    eps = apriori_epsilon_excess_risk(alpha, dim=dim, sensitivity=sens, smoothness=smooth, delta=delta, beta=beta)
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    assert smooth / 2 * sigma**2 * stats.chi2.ppf(1 - beta, dim) == pytest.approx(alpha, rel=1e-6)
    pure = apriori_epsilon_excess_risk(alpha, dim=dim, sensitivity=sens, smoothness=smooth, beta=beta)
    assert pure == pytest.approx(sens * stats.gamma.ppf(1 - beta, dim) / math.sqrt(2 * alpha / smooth))
    stricter = apriori_epsilon_excess_risk(alpha / 4, dim=dim, sensitivity=sens, smoothness=smooth, delta=delta)
    assert stricter > eps


def test_apriori_epsilon_delivers_the_target_on_real_data() -> None:
    X, y = blobs(n=500, d=5)
    y = 2 * y - 1
    l2, alpha, beta, delta = 0.05, 0.02, 0.1, 1e-6
    objective = RegularisedObjective(LogisticLoss(), X, y, l2)
    best = minimise_objective(objective)
    sens = erm_sensitivity(1.0, 500, l2)
    eps = apriori_epsilon_excess_risk(alpha, dim=5, sensitivity=sens, smoothness=objective.smoothness, delta=delta, beta=beta)
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    rng = np.random.default_rng(0)
    excess = [objective.value(best.weights + rng.normal(0, sigma, 5)) - best.value for _ in range(500)]
    assert np.mean(np.array(excess) <= alpha) >= 1 - beta


@pytest.mark.parametrize(
    "kwargs", [{"alpha": 0.0}, {"dim": 0}, {"sensitivity": -1.0}, {"smoothness": 0.0}, {"beta": 1.0}, {"delta": 1.0}]
)
def test_apriori_validation(kwargs: dict) -> None:
    args = {"alpha": 0.1, "dim": 3, "sensitivity": 1.0, "smoothness": 1.0, **kwargs}
    alpha = args.pop("alpha")
    with pytest.raises(ValueError):
        apriori_epsilon_excess_risk(alpha, **args)
