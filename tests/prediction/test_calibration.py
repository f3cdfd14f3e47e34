"""Per-query calibration: hand-computed values, dp_accounting as an oracle, and the orderings."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.optimize import brentq

from privml.accounting._analytic_gaussian import gaussian_epsilon
from privml.accounting._zcdp import zcdp_to_epsilon
from privml.prediction._calibration import (
    calibrate_prediction_noise,
    calibrate_vote_epsilon,
    gaussian_noise_multiplier_advanced,
    gaussian_noise_multiplier_basic,
    gaussian_noise_multiplier_gdp,
    gaussian_noise_multipliers,
    laplace_noise_multiplier,
    vote_epsilon_advanced,
    vote_epsilon_basic,
    vote_epsilon_zcdp,
    vote_epsilons,
)

# Analytic Gaussian reference (SPEC): Delta = 1, (1, 1e-5) -> sigma = 3.7306.
SIGMA_1_1E5 = 3.7306


def drv_epsilon(epsilon_step: float, count: int, delta_slack: float) -> float:
    """Advanced composition (Dwork, Rothblum, Vadhan 2010, Thm III.3), written out independently."""
    return epsilon_step * math.sqrt(2 * count * math.log(1 / delta_slack)) + count * epsilon_step * math.expm1(
        epsilon_step
    )


# ------------------------------------------------------------------ hand-computed values
def test_laplace_multiplier_is_budget_over_epsilon():
    assert laplace_noise_multiplier(0.5, 40) == 80.0
    noise = calibrate_prediction_noise(0.5, 0.0, 40)
    assert (noise.accountant, noise.distribution, noise.noise_multiplier) == ("basic", "l2-laplace", 80.0)


def test_gdp_scales_with_the_square_root_of_the_budget():
    for budget in (1, 4, 100, 10_000):
        assert gaussian_noise_multiplier_gdp(1.0, 1e-5, budget) == pytest.approx(
            math.sqrt(budget) * SIGMA_1_1E5, rel=2e-5
        )


def test_one_query_basic_equals_gdp_equals_the_analytic_gaussian():
    assert gaussian_noise_multiplier_basic(1.0, 1e-5, 1) == pytest.approx(SIGMA_1_1E5, rel=2e-5)
    assert gaussian_noise_multiplier_basic(1.0, 1e-5, 1) == pytest.approx(
        gaussian_noise_multiplier_gdp(1.0, 1e-5, 1), rel=1e-10
    )


def test_advanced_split_meets_the_composition_bound_it_claims():
    for budget in (10, 1000):
        split = gaussian_noise_multiplier_advanced(1.0, 1e-5, budget)
        assert budget * split.delta_query + split.delta_slack == pytest.approx(1e-5, rel=1e-12)
        assert drv_epsilon(split.epsilon_query, budget, split.delta_slack) <= 1.0 + 1e-9
        # And tightly: a 1% larger per-query epsilon would break it.
        assert drv_epsilon(1.01 * split.epsilon_query, budget, split.delta_slack) > 1.0


def test_vote_epsilons_by_hand():
    assert vote_epsilon_basic(2.0, 8) == 0.25
    eps_q = vote_epsilon_advanced(1.0, 1e-5, 1000)
    assert drv_epsilon(eps_q, 1000, 1e-5) == pytest.approx(1.0, rel=1e-8)
    assert drv_epsilon(eps_q, 1000, 1e-5) <= 1.0
    cal = calibrate_vote_epsilon(1.0, 0.0, 10)
    assert (cal.accountant, cal.epsilon_query, cal.beta) == ("basic", 0.1, 0.05)


def test_zcdp_vote_epsilon_inverts_the_conversion():
    budget = 500
    eps_q = vote_epsilon_zcdp(1.0, 1e-5, budget)
    rho = budget * eps_q**2 / 8
    assert zcdp_to_epsilon(rho, 1e-5) <= 1.0
    assert zcdp_to_epsilon(rho * 1.001, 1e-5) > 1.0
    # The per-query epsilon shrinks exactly like 1/sqrt(B).
    assert vote_epsilon_zcdp(1.0, 1e-5, 4 * budget) == pytest.approx(eps_q / 2, rel=1e-12)


# ------------------------------------------------------------------ dp_accounting as an oracle
@pytest.mark.parametrize("budget", [1, 10, 100])
def test_gdp_calibration_against_dp_accounting_pld(budget):
    sigma = gaussian_noise_multiplier_gdp(1.0, 1e-5, budget)

    def pld_epsilon(noise_multiplier: float) -> float:
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier), budget)
        return acc.get_epsilon(1e-5)

    # PLD is a numerical upper bound, slightly pessimistic: it lands just above 1 at the exact sigma...
    assert pld_epsilon(sigma) == pytest.approx(1.0, abs=5e-3)
    # ...and a 3% smaller sigma is clearly over budget: the calibration is tight.
    assert pld_epsilon(0.97 * sigma) > 1.02


def test_basic_calibration_against_dp_accounting_analytic_gaussian():
    budget = 10
    sigma = gaussian_noise_multiplier_basic(1.0, 1e-5, budget)
    assert get_epsilon_gaussian(sigma, 1e-5 / budget) == pytest.approx(1.0 / budget, rel=1e-6)


def test_advanced_per_query_gaussian_against_dp_accounting():
    split = gaussian_noise_multiplier_advanced(1.0, 1e-5, 100)
    assert get_epsilon_gaussian(split.noise_multiplier, split.delta_query) == pytest.approx(
        split.epsilon_query, rel=1e-6
    )


@pytest.mark.parametrize("budget", [10, 1000])
def test_zcdp_vote_calibration_against_dp_accounting_rdp(budget):
    eps_q = vote_epsilon_zcdp(1.0, 1e-5, budget)
    orders = np.linspace(1.01, 200, 4000)
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders))
    acc.compose(dp_accounting.ZCDpEvent(eps_q**2 / 8), budget)
    rho, log_delta = budget * eps_q**2 / 8, math.log(1e-5)

    def cks(alpha):  # Canonne, Kamath and Steinke (2020), Cor. 13 at one order, written out
        return alpha * rho + np.log1p(-1 / alpha) - (log_delta + np.log(alpha)) / (alpha - 1)

    # Its exact minimum, found independently of privml's search: the derivative rho + (log delta + log alpha) /
    # (alpha - 1)^2 has one root above 1. The budget is met, and spent up to the bisection's 1e-9.
    best = cks(brentq(lambda a: rho * (a - 1) ** 2 + log_delta + math.log(a), 1 + 1e-12, 1e6, xtol=1e-14))
    assert best <= 1.0 and best == pytest.approx(1.0, rel=1e-8)
    # dp_accounting applies the same conversion on its finite order grid: that grid's minimum, so never below it.
    assert acc.get_epsilon(1e-5) == pytest.approx(float(np.min(cks(orders))), rel=1e-12)
    assert acc.get_epsilon(1e-5) >= best


# ------------------------------------------------------------------ orderings
@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-3), (1.0, 1e-9), (0.1, 1e-5), (8.0, 1e-5)])
def test_gdp_is_never_noisier_than_basic_or_advanced(epsilon, delta):
    for budget in (1, 2, 7, 30, 100, 1000, 100_000):
        sigmas = gaussian_noise_multipliers(epsilon, delta, budget)
        assert sigmas["gdp"] <= sigmas["basic"] * (1 + 1e-9)
        assert sigmas["gdp"] <= sigmas["advanced"] * (1 + 1e-9)
    noise = calibrate_prediction_noise(epsilon, delta, 100)
    assert noise.accountant == "gdp" and noise.noise_multiplier == noise.candidates["gdp"]


def test_advanced_beats_basic_only_for_large_budgets():
    small, large = gaussian_noise_multipliers(1.0, 1e-5, 2), gaussian_noise_multipliers(1.0, 1e-5, 10_000)
    assert small["basic"] < small["advanced"]
    assert large["advanced"] < large["basic"]


def test_gdp_total_is_exactly_the_target():
    # B answers at sigma_gdp compose to mu = sqrt(B) / sigma-GDP, whose epsilon at delta is the target.
    budget = 250
    sigma = gaussian_noise_multiplier_gdp(0.7, 1e-6, budget)
    assert gaussian_epsilon(1e-6, math.sqrt(budget) / sigma) == pytest.approx(0.7, rel=1e-9)


def test_auto_vote_accounting_takes_the_largest_per_query_epsilon():
    for budget in (1, 10, 10_000):
        candidates = vote_epsilons(1.0, 1e-5, budget)
        cal = calibrate_vote_epsilon(1.0, 1e-5, budget)
        assert cal.epsilon_query == max(candidates.values())
        assert cal.beta == cal.epsilon_query / 2
    assert calibrate_vote_epsilon(1.0, 1e-5, 1).accountant == "basic"  # one query: eps itself
    assert calibrate_vote_epsilon(1.0, 1e-5, 100).accountant == "zcdp"
    assert vote_epsilons(1.0, 1e-5, 10_000)["advanced"] > vote_epsilon_basic(1.0, 10_000)


def test_a_requested_accounting_is_used_even_when_not_the_best():
    noise = calibrate_prediction_noise(1.0, 1e-5, 100, accountant="basic")
    assert noise.accountant == "basic" and noise.noise_multiplier > noise.candidates["gdp"]
    assert calibrate_vote_epsilon(1.0, 1e-5, 100, accountant="advanced").accountant == "advanced"


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: calibrate_prediction_noise(0.0, 1e-5, 10), ValueError),
        (lambda: calibrate_prediction_noise(float("nan"), 1e-5, 10), ValueError),
        (lambda: calibrate_prediction_noise(1.0, 1.0, 10), ValueError),
        (lambda: calibrate_prediction_noise(1.0, 1e-5, 0), ValueError),
        (lambda: calibrate_prediction_noise(1.0, 1e-5, 2.5), TypeError),
        (lambda: calibrate_prediction_noise(1.0, 1e-5, 10, accountant="zcdp"), ValueError),
        (lambda: calibrate_prediction_noise(1.0, 0.0, 10, accountant="gdp"), ValueError),
        (lambda: calibrate_vote_epsilon(1.0, 0.0, 10, accountant="zcdp"), ValueError),
        (lambda: calibrate_vote_epsilon(1.0, 1e-5, 10, accountant="gdp"), ValueError),
        (lambda: vote_epsilon_zcdp(1.0, 0.0, 10), ValueError),
        (lambda: gaussian_noise_multiplier_basic(1.0, 0.0, 10), ValueError),
    ],
)
def test_bad_arguments_are_refused(call, error):
    with pytest.raises(error):
        call()
