"""Tests of the Gaussian-DP accountant (privml.accounting._gdp).

Oracles: the analytic Gaussian curve (Balle and Wang 2018), dp_accounting
0.6's exact Gaussian privacy loss (test-only), the published calibration
sigma = 3.7306 for (1, 1e-5), and the RDP / zCDP accountants, which are
upper bounds and so can never report less.
"""

from __future__ import annotations

import math

import pytest
from dp_accounting.pld import privacy_loss_mechanism
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
from privml.accounting._gdp import GaussianDPAccountant
from privml.accounting._rdp import RDPAccountant
from privml.accounting._zcdp import ZCDPAccountant
from privml.exceptions import UnsupportedEventError

DELTA = 1e-5


@pytest.mark.parametrize("s", [0.5, 1.0, 3.7306, 20.0])
def test_one_event_is_the_analytic_gaussian(s):
    acc = GaussianDPAccountant().compose(GaussianEvent(s))
    assert acc.mu == pytest.approx(1 / s, rel=1e-15)
    for delta in (1e-10, DELTA, 0.1):
        assert acc.get_epsilon(delta) == gaussian_epsilon(delta, 1 / s)
    for eps in (0.0, 0.3, 2.0):
        assert acc.get_delta(eps) == pytest.approx(gaussian_delta(eps, 1 / s), rel=1e-12)


def test_published_calibration():
    # Analytic Gaussian, sensitivity 1: (1, 1e-5) needs sigma = 3.7306 (SPEC.md).
    assert GaussianDPAccountant().compose(GaussianEvent(3.7306)).get_epsilon(DELTA) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(("s", "k"), [(1.0, 4), (2.0, 100), (10.0, 10_000), (0.8, 3)])
def test_k_events_equal_one_event_of_s_over_root_k(s, k):
    composed = GaussianDPAccountant().compose(GaussianEvent(s), count=k)
    single = GaussianDPAccountant().compose(GaussianEvent(s / math.sqrt(k)))
    assert composed.mu == pytest.approx(single.mu, rel=1e-13)
    assert composed.get_epsilon(DELTA) == pytest.approx(single.get_epsilon(DELTA), rel=1e-10)
    assert composed.get_delta(1.0) == pytest.approx(single.get_delta(1.0), rel=1e-10)


def test_mu_by_hand():
    acc = GaussianDPAccountant().compose(
        ComposedEvent((GaussianEvent(1.0), SelfComposedEvent(GaussianEvent(2.0), 4), GaussianEvent(4.0))), count=2
    )
    # 2 * (1 + 4/4 + 1/16)
    assert acc.mu == pytest.approx(math.sqrt(2 * (1 + 1 + 1 / 16)))
    assert GaussianDPAccountant().compose(GaussianEvent(3.0), count=9).mu == pytest.approx(1.0)


@pytest.mark.parametrize(("s", "k"), [(1.0, 1), (4.0, 16), (25.0, 400), (0.7, 2)])
def test_matches_dp_accounting_exact_gaussian_loss(s, k):
    acc = GaussianDPAccountant().compose(GaussianEvent(s), count=k)
    # k Gaussians of std s on sensitivity 1 = one of std s / sqrt(k) (dp_accounting evaluates it exactly).
    exact = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=s / math.sqrt(k), sensitivity=1.0)
    for eps in (0.1, 1.0, 3.0):
        assert acc.get_delta(eps) == pytest.approx(exact.get_delta_for_epsilon(eps), rel=1e-9)


@pytest.mark.parametrize(("s", "k"), [(1.0, 10), (5.0, 1000), (0.9, 1)])
def test_exact_accountant_is_below_the_bounds(s, k):
    event = SelfComposedEvent(GaussianEvent(s), k)
    gdp = GaussianDPAccountant().compose(event).get_epsilon(DELTA)
    assert gdp <= RDPAccountant().compose(event).get_epsilon(DELTA)
    assert gdp <= ZCDPAccountant().compose(event).get_epsilon(DELTA)


def test_delta_zero_is_infinite_epsilon():
    assert GaussianDPAccountant().compose(GaussianEvent(1.0)).get_epsilon(0.0) == math.inf


@pytest.mark.parametrize(
    "event",
    [
        PoissonSampledEvent(0.01, GaussianEvent(1.0)),
        LaplaceEvent(1.0),
        ExponentialEvent(1.0),
        EpsilonDeltaEvent(1.0),
        ComposedEvent((GaussianEvent(1.0), LaplaceEvent(1.0))),
    ],
)
def test_unsupported_events_are_refused(event):
    acc = GaussianDPAccountant()
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)
    assert acc.mu == 0.0


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.floats(0.3, 50.0), st.integers(1, 10_000), st.integers(1, 1000))
def test_more_composition_costs_more(s, k, more):
    eps = GaussianDPAccountant().compose(GaussianEvent(s), count=k).get_epsilon(DELTA)
    assert GaussianDPAccountant().compose(GaussianEvent(s), count=k + more).get_epsilon(DELTA) >= eps
