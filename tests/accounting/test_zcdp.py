"""Tests of the zCDP accountant (privml.accounting._zcdp).

Oracles: hand-computed rho, Bun and Steinke's closed-form conversion (which
ours must beat), a brute-force search over a dense order grid, dp_accounting
0.6's RdpAccountant fed a ZCDpEvent (test-only), and the exact Gaussian
curve (which no zCDP conversion may beat).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st

from privml.accounting._analytic_gaussian import gaussian_delta, gaussian_epsilon
from privml.accounting._events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)
from privml.accounting._rdp_conversion import rdp_to_epsilon
from privml.accounting._zcdp import (
    ZCDPAccountant,
    zcdp_exponential,
    zcdp_gaussian,
    zcdp_pure,
    zcdp_to_delta,
    zcdp_to_epsilon,
)
from privml.exceptions import UnsupportedEventError

DELTA = 1e-5
HYPOTHESIS = settings(max_examples=30, deadline=None, derandomize=True)


def _bun_steinke(rho: float, delta: float) -> float:
    """Bun and Steinke (2016), Proposition 1.3."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def test_rho_of_each_mechanism_by_hand():
    assert zcdp_gaussian(2.0) == 0.125
    assert zcdp_gaussian(0.5) == 2.0
    assert zcdp_pure(0.4) == pytest.approx(0.08)
    assert zcdp_exponential(0.4) == pytest.approx(0.02)


def test_composition_adds_rho():
    acc = ZCDPAccountant().compose(
        ComposedEvent(
            (
                SelfComposedEvent(GaussianEvent(2.0, neighbouring="replace-one"), 4),
                LaplaceEvent(2.0, neighbouring="replace-one"),
                ExponentialEvent(1.0),
                EpsilonDeltaEvent(0.2),
            )
        ),
        count=2,
    )
    # 2 * (4/8 + 0.5^2/2 + 1/8 + 0.2^2/2)
    assert acc.rho == pytest.approx(2 * (0.5 + 0.125 + 0.125 + 0.02))


@pytest.mark.parametrize("rho", [1e-6, 0.01, 0.5, 3.0, 200.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 0.05])
def test_conversion_is_the_optimum_over_orders(rho, delta):
    eps = zcdp_to_epsilon(rho, delta)
    orders = 1 + np.geomspace(1e-6, 1e8, 100_001)
    brute, _ = rdp_to_epsilon(orders, rho * orders, delta)
    assert eps <= brute * (1 + 1e-12)
    assert eps == pytest.approx(brute, rel=1e-7, abs=1e-12)
    assert eps <= _bun_steinke(rho, delta)


def test_conversion_by_hand():
    # rho = 0.5, delta = 1e-5: Bun-Steinke gives 5.2985; the optimised improved
    # conversion (Canonne, Kamath and Steinke 2020, Cor. 13) gives 4.72839.
    assert _bun_steinke(0.5, DELTA) == pytest.approx(5.2985, abs=1e-4)
    assert zcdp_to_epsilon(0.5, DELTA) == pytest.approx(4.72839, abs=1e-5)


def test_matches_dp_accounting_zcdp_event():
    orders = list(1 + np.geomspace(1e-3, 1e4, 20_000))
    for rho in (0.05, 0.5, 4.0):
        theirs = dp_rdp.RdpAccountant(orders=orders)
        theirs.compose(dp_accounting.ZCDpEvent(rho))
        ours = ZCDPAccountant().compose(EpsilonDeltaEvent(math.sqrt(2 * rho)))
        assert ours.rho == pytest.approx(rho)
        eps = ours.get_epsilon(DELTA)
        assert eps == pytest.approx(theirs.get_epsilon(DELTA), rel=1e-4)
        assert eps <= theirs.get_epsilon(DELTA) * (1 + 1e-12)
        assert ours.get_delta(eps) == pytest.approx(theirs.get_delta(eps), rel=1e-3)


@pytest.mark.parametrize("mu", [0.1, 1.0, 4.0])
def test_never_beats_the_exact_gaussian_curve(mu):
    acc = ZCDPAccountant().compose(GaussianEvent(1 / mu))
    assert acc.rho == pytest.approx(mu**2 / 2)
    for delta in (1e-10, 1e-5, 1e-2):
        assert acc.get_epsilon(delta) >= gaussian_epsilon(delta, mu)
    for eps in (0.1, 1.0, 5.0):
        assert acc.get_delta(eps) >= gaussian_delta(eps, mu)


@pytest.mark.parametrize("delta", [1e-9, 1e-5, 0.01])
def test_delta_inverts_epsilon(delta):
    eps = zcdp_to_epsilon(0.7, delta)
    assert zcdp_to_delta(0.7, eps) == pytest.approx(delta, rel=1e-6)


def test_edge_cases():
    assert zcdp_to_epsilon(0.0, DELTA) == 0.0
    assert zcdp_to_delta(0.0, 1.0) == 0.0
    # rho > 0 never implies pure DP.
    assert zcdp_to_epsilon(0.1, 0.0) == math.inf
    assert ZCDPAccountant().compose(GaussianEvent(3.0)).get_epsilon(0.0) == math.inf
    # KL <= rho bounds total variation: a tiny rho is (0, sqrt(1 - e^-rho))-DP
    # (at eps = 0 large orders do slightly better still, ~ sqrt(2 rho / e)).
    assert zcdp_to_epsilon(1e-12, 1e-5) == 0.0
    assert 0.8e-6 < zcdp_to_delta(1e-12, 0.0) <= 1e-6
    assert zcdp_to_delta(100.0, 0.0) == 1.0


@pytest.mark.parametrize(
    "event",
    [
        PoissonSampledEvent(0.01, GaussianEvent(1.0)),
        EpsilonDeltaEvent(1.0, 1e-6),
        ComposedEvent((GaussianEvent(1.0), PoissonSampledEvent(0.5, GaussianEvent(1.0)))),
    ],
)
def test_unsupported_events_are_refused(event):
    acc = ZCDPAccountant()
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)
    assert acc.rho == 0.0


def test_bad_arguments():
    with pytest.raises(ValueError):
        zcdp_to_epsilon(-1.0, DELTA)
    with pytest.raises(ValueError):
        zcdp_to_epsilon(1.0, 1.5)
    with pytest.raises(ValueError):
        zcdp_to_delta(1.0, -0.5)
    with pytest.raises(ValueError):
        zcdp_gaussian(0.0)
    with pytest.raises(TypeError):
        zcdp_pure("1")


@HYPOTHESIS
@given(st.floats(1e-6, 1e3), st.floats(1.001, 10.0), st.floats(1e-12, 0.1))
def test_epsilon_grows_with_rho_and_falls_with_delta(rho, factor, delta):
    eps = zcdp_to_epsilon(rho, delta)
    assert zcdp_to_epsilon(rho * factor, delta) >= eps
    assert zcdp_to_epsilon(rho, min(0.5, delta * factor)) <= eps
    assert eps <= _bun_steinke(rho, delta)
