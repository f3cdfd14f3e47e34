"""Tests of the RDP curves, conversions and accountant (privml.accounting._rdp).

Oracles: published values (SPEC.md), Google dp_accounting 0.6 (test-only),
direct numerical integration of the Rényi divergence, closed forms at small
integer orders, and the exact Gaussian privacy curve (which no RDP
conversion may beat).
"""

from __future__ import annotations

import logging
import math
import time

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from privml.accounting._analytic_gaussian import gaussian_delta, gaussian_epsilon
from privml.accounting._dpsgd import dpsgd_event
from privml.accounting._events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)
from privml.accounting._rdp import RDPAccountant, _event_curve
from privml.accounting._rdp_conversion import (
    moments_accountant_delta,
    moments_accountant_epsilon,
    rdp_to_delta,
    rdp_to_epsilon,
)
from privml.accounting._rdp_curves import DEFAULT_ORDERS, rdp_exponential, rdp_gaussian, rdp_laplace, rdp_pure
from privml.accounting._rdp_poisson_gaussian import rdp_sampled_gaussian
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring

# dp_accounting logs a warning for every fractional order its series gives up on.
logging.getLogger("absl").setLevel(logging.ERROR)

DELTA = 1e-5
HYPOTHESIS = settings(max_examples=25, deadline=None, derandomize=True)


def _dp_accounting(noise: float, q: float, steps: int, orders=None) -> dp_rdp.RdpAccountant:
    acc = dp_rdp.RdpAccountant(orders=orders)
    step = dp_accounting.GaussianDpEvent(noise)
    if q < 1:
        step = dp_accounting.PoissonSampledDpEvent(q, step)
    acc.compose(dp_accounting.SelfComposedDpEvent(step, steps))
    return acc


def _renyi_by_quad(q: float, s: float, alpha: float) -> float:
    """D_alpha((1-q) N(0,s^2) + q N(1,s^2) || N(0,s^2)) by adaptive quadrature.

    Integrates A - 1 = E_{N(0, s^2)}[(1 + u)^alpha - 1 - alpha u] with
    u = q (L - 1), L the likelihood ratio: the integrand is >= 0, so there is
    no cancellation, and it is evaluated in log space where it is large.
    """
    z0 = s * s * math.log(1 / q - 1) + 0.5

    def integrand(z: float) -> float:
        x = (2 * z - 1) / (2 * s * s)
        log_ratio = float(np.logaddexp(math.log1p(-q), math.log(q) + x))
        log_pdf = stats.norm.logpdf(z, scale=s)
        if alpha * log_ratio > 30:
            return math.exp(log_pdf + alpha * log_ratio)
        return math.exp(log_pdf) * (math.expm1(alpha * log_ratio) - alpha * q * math.expm1(x))

    lo, hi = -12 * s, alpha + 12 * s + 1
    points = sorted({lo, 0.0, 0.5, 1.0, min(max(z0, lo), hi), alpha, hi})
    total = sum(
        integrate.quad(integrand, a, b, epsabs=0, epsrel=1e-13, limit=200)[0] for a, b in zip(points, points[1:])
    )
    return math.log1p(total) / (alpha - 1)


# ----------------------------------------------------------------------------- published values
@pytest.mark.parametrize(
    ("noise", "q", "steps", "expected"),
    [
        (1.1, 256 / 60000, 14040, 2.5944),  # Abadi et al. 2016 MNIST setting, SPEC.md
        (0.7, 0.01, 120, 3.2393),  # SPEC.md
    ],
)
def test_published_reference_values(noise, q, steps, expected):
    eps = RDPAccountant().compose(dpsgd_event(noise, q, steps)).get_epsilon(DELTA)
    assert eps == pytest.approx(expected, rel=1e-4)


def test_second_reference_value_is_the_exact_one():
    # SPEC.md's 3.2393 is dp_accounting's, whose fractional-order series sums
    # |binomial coefficients| and overstates the RDP at the optimal order 4.4
    # by 1.4e-4 (relative). The exact divergence, integrated numerically,
    # gives 3.23919: privml reproduces the exact one.
    acc = RDPAccountant().compose(dpsgd_event(0.7, 0.01, 120))
    eps, order = acc.get_epsilon_and_order(DELTA)
    assert order == 4.4
    exact_rdp = 120 * _renyi_by_quad(0.01, 0.7, 4.4)
    exact_eps, _ = rdp_to_epsilon([4.4], [exact_rdp], DELTA)
    assert eps == pytest.approx(exact_eps, rel=1e-9)
    assert eps == pytest.approx(3.23919, abs=1e-5)


def test_rdp_is_never_below_the_exact_pld_reference():
    # SPEC.md's PLD values are (near) exact; an RDP bound must lie above them.
    for (noise, q, steps), pld in [((1.1, 256 / 60000, 14040), 2.3796), ((0.7, 0.01, 120), 2.4612)]:
        assert RDPAccountant().compose(dpsgd_event(noise, q, steps)).get_epsilon(DELTA) > pld


# ----------------------------------------------------------------------------- dp_accounting oracle
def test_default_orders_are_dp_accountings():
    assert list(DEFAULT_ORDERS) == [float(a) for a in dp_rdp.DEFAULT_RDP_ORDERS]
    np.testing.assert_array_equal(RDPAccountant().orders, DEFAULT_ORDERS)


# Settings where the optimal order is not a small fractional one, so both
# libraries evaluate (nearly) the same divergence and must agree.
AGREEING_GRID = [
    (0.6, 0.001, 10, 1e-5),
    (0.6, 0.001, 1000, 1e-5),
    (0.6, 0.01, 10, 1e-5),
    (0.8, 0.001, 10, 1e-5),
    (0.8, 0.001, 1000, 1e-5),
    (0.8, 0.001, 20000, 1e-5),
    (0.8, 0.01, 10, 1e-5),
    (1.0, 0.001, 10, 1e-5),
    (1.0, 0.001, 20000, 1e-5),
    (1.0, 0.01, 10, 1e-6),
    (1.0, 0.01, 1000, 1e-5),
    (1.0, 0.05, 10, 1e-5),
    (1.1, 256 / 60000, 14040, 1e-5),
    (1.5, 0.001, 1000, 1e-8),
    (1.5, 0.01, 10, 1e-5),
    (1.5, 0.01, 1000, 1e-5),
    (1.5, 0.01, 20000, 1e-3),
    (1.5, 0.05, 10, 1e-5),
    (1.5, 0.2, 10, 1e-5),
    (2.5, 0.001, 20000, 1e-5),
    (2.5, 0.01, 1000, 1e-8),
    (2.5, 0.01, 20000, 1e-5),
    (2.5, 0.05, 1000, 1e-5),
    (2.5, 0.2, 10, 1e-5),
    (5.0, 0.001, 1000, 1e-5),
    (5.0, 0.01, 20000, 1e-5),
    (5.0, 0.05, 1000, 1e-6),
    (5.0, 0.2, 10, 1e-5),
    (0.9, 1.0, 50, 1e-5),  # unsampled: q = 1
]


@pytest.mark.parametrize(("noise", "q", "steps", "delta"), AGREEING_GRID)
def test_epsilon_and_delta_match_dp_accounting(noise, q, steps, delta):
    ours = RDPAccountant().compose(dpsgd_event(noise, q, steps))
    theirs = _dp_accounting(noise, q, steps)
    eps, their_eps = ours.get_epsilon(delta), theirs.get_epsilon(delta)
    assert eps == pytest.approx(their_eps, rel=1e-4)
    # privml's divergences are exact, dp_accounting's fractional ones upper bounds.
    assert eps <= their_eps * (1 + 1e-12)
    assert ours.get_delta(eps) == pytest.approx(theirs.get_delta(eps), rel=1e-4)


# Large-epsilon settings, where dp_accounting's optimum is a small fractional order.
DIVERGING_GRID = [(0.6, 0.2, 1000), (0.8, 0.05, 20000), (1.0, 0.05, 1000), (2.5, 0.2, 1000), (5.0, 0.2, 20000)]


@pytest.mark.parametrize(("noise", "q", "steps"), DIVERGING_GRID + [(1.0, 0.01, 1000)])
def test_integer_orders_match_dp_accounting_exactly(noise, q, steps):
    # On integer orders the two libraries evaluate the same finite binomial sum.
    orders = [2, 3, 4, 5, 8, 11, 16, 32, 64, 256]
    ours = RDPAccountant(orders=orders).compose(dpsgd_event(noise, q, steps))
    theirs = _dp_accounting(noise, q, steps, orders=orders)
    np.testing.assert_allclose(ours.rdp, theirs.rdp, rtol=1e-10)
    assert ours.get_epsilon(DELTA) == pytest.approx(theirs.get_epsilon(DELTA), rel=1e-10)
    assert ours.get_delta(3.0) == pytest.approx(theirs.get_delta(3.0), rel=1e-8)


@pytest.mark.parametrize(("noise", "q", "steps"), DIVERGING_GRID)
def test_tighter_than_dp_accounting_at_large_epsilon(noise, q, steps):
    eps = RDPAccountant().compose(dpsgd_event(noise, q, steps)).get_epsilon(DELTA)
    their_eps = _dp_accounting(noise, q, steps).get_epsilon(DELTA)
    assert eps < their_eps * (1 - 1e-3)


# ----------------------------------------------------------------------------- sampled Gaussian curve
@pytest.mark.parametrize(
    ("q", "s", "alpha"),
    [
        (0.01, 1.0, 2.5),
        (0.05, 0.7, 4.4),
        (0.2, 2.0, 1.5),
        (256 / 60000, 1.1, 8.1),
        (0.5, 0.5, 3.7),
        (0.1, 3.0, 10.5),
        (0.3, 5.0, 1.1),  # dp_accounting overstates this one tenfold
        (0.01, 0.3, 6.5),
        (0.9, 1.0, 2.2),
    ],
)
def test_fractional_orders_match_numerical_integration(q, s, alpha):
    assert rdp_sampled_gaussian(q, s, [alpha])[0] == pytest.approx(_renyi_by_quad(q, s, alpha), rel=1e-9)


@pytest.mark.parametrize(("q", "s"), [(1e-12, 1.0), (1e-6, 0.8), (1e-3, 50.0), (1e-2, 1e3), (0.3, 0.2)])
def test_small_integer_orders_match_closed_forms(q, s):
    # A_2 = 1 + q^2 (e^{1/s^2} - 1);  A_3 = 1 + 3 q^2 (1-q) (e^{1/s^2} - 1) + q^3 (e^{3/s^2} - 1).
    g1, g3 = math.expm1(1 / s**2), math.expm1(3 / s**2)
    expected = [
        math.log1p(q * q * g1),
        math.log1p(3 * q * q * (1 - q) * g1 + q**3 * g3) / 2,
    ]
    np.testing.assert_allclose(rdp_sampled_gaussian(q, s, [2, 3]), expected, rtol=1e-12)


@pytest.mark.parametrize("alpha", [1.5, 2.5, 7.3, 40.5])
def test_tiny_sampling_rate_leading_order_at_fractional_orders(alpha):
    # As q -> 0, A_alpha - 1 = C(alpha, 2) q^2 (e^{1/s^2} - 1) (1 + O(alpha q)) for every real alpha.
    q, s = 1e-10, 1.0
    leading = alpha * q * q * math.expm1(1 / s**2) / 2
    assert rdp_sampled_gaussian(q, s, [alpha])[0] == pytest.approx(leading, rel=1e-7)


def test_tiny_sampling_rate_keeps_relative_precision():
    # RDP ~ q^2 for small q: summing A_alpha directly would return log(1) = 0.
    orders = [1.5, 2.0, 4.5, 32.0]
    small, smaller = rdp_sampled_gaussian(1e-9, 1.0, orders), rdp_sampled_gaussian(1e-10, 1.0, orders)
    assert np.all(small > 0)
    np.testing.assert_allclose(small / smaller, 100.0, rtol=1e-6)


@pytest.mark.parametrize("s", [1.0, 0.7, 3.0])
def test_full_sampling_is_the_unsampled_gaussian(s):
    np.testing.assert_array_equal(rdp_sampled_gaussian(1.0, s), rdp_gaussian(s))
    a = RDPAccountant().compose(PoissonSampledEvent(1.0, GaussianEvent(s)), count=7)
    b = RDPAccountant().compose(GaussianEvent(s), count=7)
    np.testing.assert_array_equal(a.rdp, b.rdp)
    # ... and the sampled curve is continuous as q -> 1.
    np.testing.assert_allclose(rdp_sampled_gaussian(1 - 1e-9, s), rdp_gaussian(s), rtol=1e-6)


@pytest.mark.parametrize(("q", "s"), [(0.004, 1.1), (0.5, 0.5), (0.01, 10.0), (0.2, 0.1), (1e-7, 100.0)])
def test_curve_is_finite_and_nondecreasing_in_the_order(q, s):
    orders = sorted(DEFAULT_ORDERS + (2.05, 1.01))
    curve = rdp_sampled_gaussian(q, s, orders)
    assert np.all(np.isfinite(curve)) and np.all(curve >= 0)
    # D_alpha is non-decreasing in alpha (van Erven & Harremoës 2014, Thm 3).
    assert np.all(np.diff(curve) >= -1e-12 * curve[1:])
    # ... and never above the unsampled Gaussian's.
    assert np.all(curve <= rdp_gaussian(s, orders) * (1 + 1e-12))


@pytest.mark.parametrize(("q", "s"), [(1e-300, 1.0), (1e-12, 1e4), (0.5, 0.01), (1 - 1e-6, 0.5), (1e-3, 1e4)])
def test_extreme_parameters_stay_finite_and_ordered(q, s):
    orders = [1.5, 2.0, 10.5, 64.0, 1024.0, 1e4, 1e4 + 0.5]
    curve = rdp_sampled_gaussian(q, s, orders)
    assert np.all(np.isfinite(curve)) and np.all(curve >= 0)
    assert np.all(np.diff(curve) >= -1e-12 * curve[1:])
    assert np.all(curve <= rdp_gaussian(s, orders) * (1 + 1e-12))


def test_infinite_order():
    assert rdp_sampled_gaussian(0.01, 1.0, [math.inf])[0] == math.inf
    assert rdp_gaussian(1.0, [math.inf])[0] == math.inf


# ----------------------------------------------------------------------------- other curves
def test_gaussian_curve_by_hand():
    np.testing.assert_allclose(rdp_gaussian(2.0, [1.5, 2, 10]), [1.5 / 8, 2 / 8, 10 / 8])


def test_laplace_matches_dp_accounting_and_mironov_prop6():
    orders = np.array(DEFAULT_ORDERS)
    for b in (0.3, 1.0, 4.0):
        theirs = [dp_rdp._laplace_rdp(1 / b, a) for a in orders]
        np.testing.assert_allclose(rdp_laplace(b, orders), theirs, rtol=1e-12)
        # Mironov 2017 Prop. 6 written as in the paper, at moderate orders.
        a, eps = orders[orders < 20], 1 / b
        paper = np.log(a / (2 * a - 1) * np.exp((a - 1) * eps) + (a - 1) / (2 * a - 1) * np.exp(-a * eps)) / (a - 1)
        np.testing.assert_allclose(rdp_laplace(b, a), paper, rtol=1e-10)
    assert rdp_laplace(0.5, [math.inf])[0] == 2.0


def test_laplace_by_numerical_integration():
    b, alpha = 0.8, 3.3
    p = stats.laplace(loc=1.0, scale=b)
    q = stats.laplace(loc=0.0, scale=b)
    points = [-40.0, 0.0, 1.0, 40.0]
    total = sum(
        integrate.quad(lambda z: p.pdf(z) ** alpha * q.pdf(z) ** (1 - alpha), lo, hi, epsrel=1e-12)[0]
        for lo, hi in zip(points, points[1:])
    )
    assert rdp_laplace(b, [alpha])[0] == pytest.approx(math.log(total) / (alpha - 1), rel=1e-9)


def test_laplace_curve_is_superadditive_in_the_shift():
    # Justifies using the 1-D curve for a d-dimensional L1 shift (see rdp_laplace).
    orders = [1.5, 3.0, 20.0]
    for e1, e2 in [(0.1, 0.3), (1.0, 2.0), (0.01, 5.0)]:
        assert np.all(rdp_laplace(1 / e1, orders) + rdp_laplace(1 / e2, orders) <= rdp_laplace(1 / (e1 + e2), orders))


@pytest.mark.parametrize("eps", [1e-4, 0.1, 1.0, 3.0, 30.0])
def test_pure_curve_is_randomized_response(eps):
    orders = np.array([1.1, 1.5, 2.0, 7.5, 64.0, 1024.0])
    # Randomized response keeps the bit with p = e^eps / (1 + e^eps); logs taken stably.
    log_p, log_1mp = -math.log1p(math.exp(-eps)), -eps - math.log1p(math.exp(-eps))
    # D_alpha of (p, 1-p) against (1-p, p) (Mironov 2017, Prop. 5), summed in log space.
    rr = np.logaddexp(orders * log_p + (1 - orders) * log_1mp, orders * log_1mp + (1 - orders) * log_p) / (orders - 1)
    curve = rdp_pure(eps, orders)
    np.testing.assert_allclose(curve, rr, rtol=1e-9, atol=1e-15)
    assert np.all(curve <= np.minimum(eps, orders * eps**2 / 2) * (1 + 1e-12))
    assert rdp_pure(eps, [math.inf])[0] == eps


def test_pure_curve_bounds_random_pure_dp_pairs():
    # Any pair of distributions with |log(P/Q)| <= eps is covered by rdp_pure(eps).
    rng = np.random.default_rng(7)
    eps, orders = 0.7, np.array([1.3, 2.0, 5.0, 40.0])
    bound = rdp_pure(eps, orders)
    for _ in range(200):
        k = rng.integers(2, 8)
        q = rng.dirichlet(np.ones(k))
        p = q * np.exp(rng.uniform(-eps, eps, size=k))
        p /= p.sum()
        if np.max(np.abs(np.log(p / q))) > eps:
            continue
        divergence = np.log(np.sum(p**orders[:, None] * q ** (1 - orders[:, None]), axis=1)) / (orders - 1)
        assert np.all(divergence <= bound + 1e-12)


def test_laplace_is_below_the_pure_curve():
    orders = np.array(DEFAULT_ORDERS)
    assert np.all(rdp_laplace(2.0, orders) <= rdp_pure(0.5, orders) * (1 + 1e-12))


def test_exponential_curve():
    orders = np.array([1.5, 4.0, 100.0, math.inf])
    eps = 1.0
    expected = np.minimum(orders * eps**2 / 8, rdp_pure(eps, orders))
    np.testing.assert_array_equal(rdp_exponential(eps, orders), expected)
    assert rdp_exponential(eps, [4.0])[0] == pytest.approx(0.5)
    assert rdp_exponential(eps, [math.inf])[0] == eps


# ----------------------------------------------------------------------------- conversions
def test_conversion_by_hand():
    orders, rdp = [2.0, 4.0, 8.0], rdp_gaussian(2.0, [2.0, 4.0, 8.0])
    eps, order = rdp_to_epsilon(orders, rdp, 1e-5)
    assert order == 8.0
    assert eps == pytest.approx(1.0 + math.log(7 / 8) - (math.log(1e-5) + math.log(8)) / 7)
    classic, _ = moments_accountant_epsilon(orders, rdp, 1e-5)
    assert classic == pytest.approx(min(r + math.log(1e5) / (a - 1) for a, r in zip(orders, rdp)))
    delta, _ = moments_accountant_delta(orders, rdp, 3.0)
    assert delta == pytest.approx(min(math.exp((a - 1) * (r - 3.0)) for a, r in zip(orders, rdp)))


@HYPOTHESIS
@given(
    st.lists(st.floats(1.01, 500.0), min_size=1, max_size=8, unique=True),
    st.floats(0.0, 50.0),
    st.floats(1e-12, 0.5),
)
def test_classic_conversion_is_never_tighter(orders, scale, delta):
    rdp = scale * np.asarray(orders) ** 0.8
    improved, _ = rdp_to_epsilon(orders, rdp, delta)
    classic, _ = moments_accountant_epsilon(orders, rdp, delta)
    assert classic >= improved
    eps = improved + 0.5
    assert moments_accountant_delta(orders, rdp, eps)[0] >= rdp_to_delta(orders, rdp, eps)[0]


def test_classic_accountant_is_looser():
    event = dpsgd_event(1.1, 256 / 60000, 14040)
    improved = RDPAccountant().compose(event)
    classic = RDPAccountant(conversion="classic").compose(event)
    assert classic.conversion == "classic"
    assert classic.get_epsilon(DELTA) > improved.get_epsilon(DELTA) + 0.1
    assert classic.get_delta(2.5) > improved.get_delta(2.5)


def test_delta_round_trips_epsilon():
    orders = np.array(DEFAULT_ORDERS)
    rdp = 300 * rdp_sampled_gaussian(0.01, 0.9, orders)
    for delta in (1e-9, 1e-5, 1e-2):
        eps, order = rdp_to_epsilon(orders, rdp, delta)
        back, back_order = rdp_to_delta(orders, rdp, eps)
        assert back == pytest.approx(delta, rel=1e-9)
        assert back_order == order


@pytest.mark.parametrize("mu", [0.2, 1.0, 3.0])
def test_conversion_never_beats_the_exact_gaussian_curve(mu):
    # One Gaussian with noise multiplier 1/mu: the exact profile is known, an RDP
    # conversion can only be above it (a numerical error here would be a privacy bug).
    orders = np.concatenate([np.linspace(1.01, 20, 2000), np.geomspace(20, 1e4, 500)])
    rdp = rdp_gaussian(1 / mu, orders)
    for delta in (1e-10, 1e-5, 1e-2):
        assert rdp_to_epsilon(orders, rdp, delta)[0] >= gaussian_epsilon(delta, mu)
    for eps in (0.1, 1.0, 5.0):
        assert rdp_to_delta(orders, rdp, eps)[0] >= gaussian_delta(eps, mu)


def test_delta_zero_and_infinite_orders():
    orders = [2.0, 10.0, math.inf]
    assert rdp_to_epsilon(orders, [0.1, 0.5, 2.0], 0.0) == (2.0, math.inf)
    assert rdp_to_epsilon([2.0, 10.0], [0.1, 0.5], 0.0)[0] == math.inf
    assert rdp_to_epsilon([2.0, 10.0], [0.0, 0.0], 0.0)[0] == 0.0
    assert rdp_to_delta(orders, [0.1, 0.5, 2.0], 2.0) == (0.0, math.inf)
    # inf at some orders is ignored, at all orders gives no guarantee.
    assert rdp_to_epsilon([2.0, 5.0], [math.inf, 0.4], 1e-5)[1] == 5.0
    assert rdp_to_epsilon([2.0, 5.0], [math.inf, math.inf], 1e-5)[0] == math.inf
    assert rdp_to_delta([2.0, 5.0], [math.inf, math.inf], 1.0)[0] == 1.0


def test_total_variation_bound_gives_zero_epsilon():
    # r = 1e-12 bounds KL, hence TV <= sqrt(1 - e^-r) ~ 1e-6 <= delta.
    assert rdp_to_epsilon([2.0], [1e-12], 1e-5)[0] == 0.0
    assert rdp_to_delta([2.0], [1e-12], 0.0)[0] == pytest.approx(1e-6, rel=1e-5)


@pytest.mark.parametrize(
    ("orders", "rdp", "error"),
    [
        ([1.0, 2.0], [0.1, 0.2], ValueError),
        ([0.5], [0.1], ValueError),
        ([2.0, float("nan")], [0.1, 0.2], ValueError),
        ([], [], ValueError),
        ([2.0, 3.0], [0.1], ValueError),
        ([2.0], [-0.1], ValueError),
        ([2.0], [float("nan")], ValueError),
        ("23", [0.1], TypeError),
    ],
)
def test_conversion_rejects_bad_curves(orders, rdp, error):
    with pytest.raises(error):
        rdp_to_epsilon(orders, rdp, 1e-5)


def test_curves_reject_bad_arguments():
    with pytest.raises(ValueError):
        rdp_gaussian(0.0)
    with pytest.raises(ValueError):
        rdp_sampled_gaussian(0.0, 1.0)
    with pytest.raises(ValueError):
        rdp_sampled_gaussian(1.5, 1.0)
    with pytest.raises(TypeError):
        rdp_laplace("1")
    with pytest.raises(ValueError):
        rdp_pure(-1.0)
    with pytest.raises(ValueError):
        rdp_exponential(1.0, [1.0])
    with pytest.raises(ValueError):
        rdp_to_epsilon([2.0], [0.1], 1.0)
    with pytest.raises(ValueError):
        rdp_to_delta([2.0], [0.1], -1.0)


# ----------------------------------------------------------------------------- accountant
def test_dpsgd_accounting_is_one_curve_times_count():
    event = SelfComposedEvent(PoissonSampledEvent(256 / 60000, GaussianEvent(1.1)), 14040)
    _event_curve.cache_clear()
    start = time.perf_counter()
    acc = RDPAccountant().compose(event)
    assert time.perf_counter() - start < 0.5
    np.testing.assert_allclose(acc.rdp, 14040 * rdp_sampled_gaussian(256 / 60000, 1.1), rtol=1e-12)
    # The curve is cached: a second accountant reuses it.
    hits = _event_curve.cache_info().hits
    RDPAccountant().compose(event)
    assert _event_curve.cache_info().hits == hits + 1


def test_mixed_events_add_their_curves():
    orders = [1.5, 2.0, 8.0, 32.0]
    events = ComposedEvent(
        (
            GaussianEvent(2.0, neighbouring="replace-one"),
            SelfComposedEvent(LaplaceEvent(3.0, neighbouring="replace-one"), 2),
            ExponentialEvent(0.5),
            EpsilonDeltaEvent(0.25),
        )
    )
    acc = RDPAccountant(orders=orders).compose(events, count=3)
    expected = 3 * (
        rdp_gaussian(2.0, orders) + 2 * rdp_laplace(3.0, orders) + rdp_exponential(0.5, orders) + rdp_pure(0.25, orders)
    )
    np.testing.assert_allclose(acc.rdp, expected, rtol=1e-12)
    assert acc.neighbouring is Neighbouring.REPLACE_ONE
    np.testing.assert_array_equal(acc.orders, orders)


def test_pure_events_at_delta_zero_compose_basically():
    acc = RDPAccountant().compose(LaplaceEvent(2.0), count=4)
    acc.compose(EpsilonDeltaEvent(0.3, neighbouring="add/remove-one"))
    assert acc.get_epsilon(0.0) == pytest.approx(2.3)
    assert acc.get_delta(2.3) == 0.0
    # With delta > 0 the RDP conversion may do better, never worse.
    assert acc.get_epsilon(1e-5) <= 2.3
    assert RDPAccountant().compose(GaussianEvent(1.0)).get_epsilon(0.0) == math.inf


def test_explicit_infinite_order_is_not_duplicated():
    acc = RDPAccountant(orders=[2.0, math.inf]).compose(LaplaceEvent(1.0))
    np.testing.assert_allclose(acc.rdp, rdp_laplace(1.0, [2.0, math.inf]))
    assert acc.get_epsilon_and_order(0.0) == (1.0, math.inf)


@pytest.mark.parametrize(
    "event",
    [
        EpsilonDeltaEvent(1.0, 1e-6),
        PoissonSampledEvent(0.1, LaplaceEvent(1.0)),
        PoissonSampledEvent(0.1, SelfComposedEvent(GaussianEvent(1.0), 2)),
        ComposedEvent((GaussianEvent(1.0), EpsilonDeltaEvent(1.0, 1e-6, neighbouring="add/remove-one"))),
    ],
)
def test_unsupported_events_are_refused(event):
    acc = RDPAccountant()
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)


def test_constructor_validation():
    with pytest.raises(ValueError, match="conversion"):
        RDPAccountant(conversion="optimal")
    with pytest.raises(ValueError):
        RDPAccountant(orders=[0.5, 2.0])
    with pytest.raises(TypeError):
        RDPAccountant([2.0, 3.0])  # keyword-only


def test_empty_accountant():
    acc = RDPAccountant()
    assert acc.get_epsilon_and_order(DELTA) == (0.0, math.inf)
    assert np.all(acc.rdp == 0)


# ----------------------------------------------------------------------------- properties
@HYPOTHESIS
@given(st.floats(0.5, 5.0), st.floats(1e-4, 0.5), st.integers(1, 20000), st.floats(1.01, 1.5))
def test_epsilon_decreases_with_noise(noise, q, steps, factor):
    eps = RDPAccountant().compose(dpsgd_event(noise, q, steps)).get_epsilon(DELTA)
    noisier = RDPAccountant().compose(dpsgd_event(noise * factor, q, steps)).get_epsilon(DELTA)
    assert noisier <= eps * (1 + 1e-12)


@HYPOTHESIS
@given(st.floats(0.5, 5.0), st.floats(1e-4, 0.5), st.integers(1, 20000), st.floats(1.01, 1.9))
def test_epsilon_increases_with_sampling_rate(noise, q, steps, factor):
    eps = RDPAccountant().compose(dpsgd_event(noise, q, steps)).get_epsilon(DELTA)
    denser = RDPAccountant().compose(dpsgd_event(noise, min(1.0, q * factor), steps)).get_epsilon(DELTA)
    assert denser >= eps * (1 - 1e-12)


@HYPOTHESIS
@given(st.floats(0.5, 5.0), st.floats(1e-4, 0.5), st.integers(1, 20000), st.integers(1, 5000))
def test_epsilon_increases_with_steps(noise, q, steps, more):
    eps = RDPAccountant().compose(dpsgd_event(noise, q, steps)).get_epsilon(DELTA)
    longer = RDPAccountant().compose(dpsgd_event(noise, q, steps + more)).get_epsilon(DELTA)
    assert longer >= eps * (1 - 1e-12)
