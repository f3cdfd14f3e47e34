"""The f-DP one-run analysis (Mahloujifar, Melis and Chaudhuri 2024) against Steinke et al. and simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from privml.accounting._analytic_gaussian import gaussian_delta
from privml.audit._one_run import audit_from_scores, one_run_epsilon_lower_bound
from privml.audit._one_run_fdp import (
    accountant_profile,
    epsilon_delta_inverse,
    fdp_count_rejected,
    fdp_epsilon_lower_bound,
    gaussian_inverse,
    gdp_mu_lower_bound,
    profile_inverse,
)


def test_the_curves_of_perfect_privacy_are_the_identity():
    for y in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert gaussian_inverse(0.0)(y) == pytest.approx(y)
        assert epsilon_delta_inverse(0.0, 0.0)(y) == pytest.approx(y)


def test_the_epsilon_delta_curve_matches_its_definition():
    g = epsilon_delta_inverse(1.0, 0.01)
    for y in np.linspace(0.0, 1.0, 11):
        expected = max(0.0, (y - 0.01) * np.exp(-1.0), 1.0 - 0.01 - np.exp(1.0) * (1.0 - y))
        assert g(float(y)) == pytest.approx(expected)


def test_a_sampled_gaussian_profile_is_a_weaker_curve_than_the_gaussian():
    # The (eps, delta(eps)) pairs of mu-GDP on a grid: each is met, so their curve lies below mu-GDP's, and close.
    mu = 1.0
    grid = np.linspace(0.0, 6.0, 121)
    g = profile_inverse(grid, [gaussian_delta(float(e), mu) for e in grid])
    exact = gaussian_inverse(mu)
    for y in np.linspace(0.05, 0.95, 19):
        assert g(float(y)) <= exact(float(y)) + 1e-12
        assert g(float(y)) >= exact(float(y)) - 0.02


@pytest.mark.parametrize(("m", "r", "v"), [(1000, 100, 90), (1000, 1000, 700), (1000, 50, 50), (10000, 500, 450)])
def test_the_epsilon_delta_curve_reproduces_steinke_et_al(m, r, v):
    # Two analyses of one event by two papers, implemented independently: their (eps, delta) bounds agree.
    for delta in (0.0, 1e-5):
        ours = fdp_epsilon_lower_bound(m, r, v, delta=delta)
        theirs = one_run_epsilon_lower_bound(m, r, v, delta=delta)
        assert ours == pytest.approx(theirs, abs=0.05)


def test_rejection_is_monotone_along_the_gaussian_family():
    flags = [fdp_count_rejected(gaussian_inverse(mu), 1000, 100, 85, level=0.05) for mu in np.linspace(0, 2, 41)]
    first_kept = flags.index(False)
    assert all(flags[:first_kept]) and not any(flags[first_kept:])
    assert 0 < first_kept < 41


def _simulated_gaussian(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return mu * included + rng.standard_normal(m), included


def test_a_gaussian_mechanism_is_never_refuted_at_its_own_mu():
    # Soundness: 30 independent audits of exactly mu-GDP releases; the 95% bound must not pass mu.
    for seed in range(30):
        scores, included = _simulated_gaussian(1.0, 1000, seed)
        order = np.argsort(-scores)
        for r in (50, 100, 200):
            top, bottom = order[: r // 2], order[1000 - r // 2:]
            v = int(included[top].sum() + (~included[bottom]).sum())
            assert gdp_mu_lower_bound(1000, r, v, confidence=0.95) <= 1.0


def test_a_leaky_gaussian_is_refuted_against_a_smaller_claim():
    scores, included = _simulated_gaussian(3.0, 1000, 0)
    profile = accountant_profile(_GaussianAccountant(0.5), epsilon_max=8.0)
    audit = audit_from_scores(scores, included, delta=1e-5, claimed_epsilon=2.0, claimed_profile=profile)
    assert audit.claim_rejected and audit.exceeds_claim and audit.mu_lower > 1.0
    honest = audit_from_scores(*_simulated_gaussian(0.5, 1000, 1), delta=1e-5, claimed_epsilon=2.0,
                               claimed_profile=profile)
    assert honest.claim_rejected is False and not honest.exceeds_claim


class _GaussianAccountant:
    """delta(eps) of mu-GDP: what an accountant of one Gaussian release states."""

    def __init__(self, mu: float) -> None:
        self.mu = mu

    def get_delta(self, epsilon: float) -> float:
        return float(norm.cdf(-epsilon / self.mu + self.mu / 2) - np.exp(epsilon) * norm.cdf(-epsilon / self.mu
                                                                                               - self.mu / 2))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fdp_count_rejected(gaussian_inverse(1.0), 10, 5, 6, level=0.05), "correct <= guesses"),
        (lambda: fdp_count_rejected(gaussian_inverse(1.0), 10, 5, 4, level=1.5), "level"),
        (lambda: gaussian_inverse(-1.0), "mu"),
        (lambda: profile_inverse([0.0, 1.0], [0.1]), "one length"),
        (lambda: accountant_profile(_GaussianAccountant(1.0), epsilon_max=float("inf")), "epsilon_max"),
    ],
)
def test_refusals(call, message):
    with pytest.raises(ValueError, match=message):
        call()
