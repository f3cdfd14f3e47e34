"""AdvancedCompositionAccountant: the DRV and KOV theorems, each capped by basic composition."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privml.accounting._advanced import AdvancedCompositionAccountant
from privml.accounting._basic import BasicAccountant
from privml.accounting._composition import (
    OPTIMAL_COMPOSITION_MAX_COUNT,
    advanced_composition,
    advanced_composition_heterogeneous,
    optimal_composition_delta,
    optimal_composition_epsilon,
    poisson_amplification,
)
from privml.accounting._events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
)
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring

ADD_REMOVE = Neighbouring.ADD_REMOVE_ONE


def drv() -> AdvancedCompositionAccountant:
    return AdvancedCompositionAccountant(method="drv")


def kov() -> AdvancedCompositionAccountant:
    return AdvancedCompositionAccountant(method="kov")


def test_names_follow_the_method():
    assert AdvancedCompositionAccountant().name == "advanced"
    assert drv().name == "advanced"
    assert kov().name == "optimal"
    assert kov().compose(EpsilonDeltaEvent(0.1), count=3).guarantee(1e-6).accountant == "optimal"
    # The class attribute is untouched by an instance's method.
    assert AdvancedCompositionAccountant.name == "advanced"


def test_constructor_is_keyword_only_and_validated():
    with pytest.raises(TypeError):
        AdvancedCompositionAccountant("kov")  # type: ignore[misc]
    with pytest.raises(ValueError, match="method"):
        AdvancedCompositionAccountant(method="rdp")  # type: ignore[arg-type]


# ------------------------------------------------------------------------ DRV
def test_drv_uses_the_advanced_bound_for_many_small_steps():
    acc = drv().compose(EpsilonDeltaEvent(0.01, 1e-10), count=10_000)
    slack = 1e-5 - 10_000 * 1e-10
    expected = advanced_composition(0.01, 1e-10, 10_000, slack).epsilon
    assert acc.get_epsilon(1e-5) == pytest.approx(expected, rel=1e-12)
    basic = BasicAccountant().compose(EpsilonDeltaEvent(0.01, 1e-10), count=10_000).get_epsilon(1e-5)
    assert acc.get_epsilon(1e-5) < 0.1 * basic


def test_drv_never_reports_more_than_basic():
    # Few large steps: DRV's bound exceeds k eps, so basic composition is reported.
    acc = drv().compose(EpsilonDeltaEvent(1.0, 1e-7), count=3)
    assert advanced_composition(1.0, 1e-7, 3, 1e-5 - 3e-7).epsilon > 3.0
    assert acc.get_epsilon(1e-5) == pytest.approx(3.0)
    assert acc.get_delta(3.0) == pytest.approx(3e-7)


def test_drv_heterogeneous_steps():
    steps = [(0.05, 1e-8, 200), (0.02, 0.0, 1000), (0.1, 1e-9, 30)]
    acc = drv()
    for eps, delta, count in steps:
        acc.compose(EpsilonDeltaEvent(eps, delta), count=count)
    spent = 200 * 1e-8 + 30 * 1e-9
    expected = advanced_composition_heterogeneous(
        [e for e, _, _ in steps], [d for _, d, _ in steps], 1e-5 - spent, counts=[c for _, _, c in steps]
    ).epsilon
    assert acc.get_epsilon(1e-5) == pytest.approx(expected, rel=1e-12)


def test_drv_without_slack_falls_back_to_basic():
    acc = drv().compose(EpsilonDeltaEvent(0.01, 1e-7), count=100)
    spent = acc.get_delta(1e9)  # the steps' own deltas
    assert spent == pytest.approx(1e-5)
    assert acc.get_epsilon(spent) == pytest.approx(1.0)  # basic at exactly the spent delta
    assert acc.get_epsilon(spent * 0.99) == math.inf


def test_drv_accepts_amplified_and_pure_steps():
    acc = drv()
    acc.compose(PoissonSampledEvent(0.01, LaplaceEvent(0.5)), count=5000)
    acc.compose(ExponentialEvent(0.01, neighbouring=ADD_REMOVE), count=100)
    step = poisson_amplification(2.0, 0.0, 0.01).epsilon
    expected = advanced_composition_heterogeneous([step, 0.01], [0.0, 0.0], 1e-6, counts=[5000, 100]).epsilon
    assert acc.get_epsilon(1e-6) == pytest.approx(min(expected, 5000 * step + 1.0), rel=1e-12)


def test_drv_with_huge_epsilon_falls_back_to_basic_without_overflow():
    # e^800 overflows: the DRV bound is infinite, so basic composition is reported.
    acc = drv().compose(EpsilonDeltaEvent(800.0), count=2)
    assert acc.get_epsilon(1e-6) == 1600.0
    assert acc.get_delta(1600.0) == 0.0


# ------------------------------------------------------------------------ KOV
def test_kov_one_step_is_the_step():
    acc = kov().compose(EpsilonDeltaEvent(0.7, 1e-6))
    assert acc.get_epsilon(1e-6) == pytest.approx(0.7, rel=1e-9)
    assert acc.get_epsilon(1e-6) <= 0.7
    assert acc.get_delta(0.7) == pytest.approx(1e-6, rel=1e-9)


def test_kov_matches_the_optimal_composition_functions():
    acc = kov().compose(LaplaceEvent(10.0), count=500)  # 500 steps of 0.1-DP
    assert acc.get_epsilon(1e-6) == optimal_composition_epsilon(0.1, 0.0, 500, 1e-6)
    assert acc.get_delta(3.0) == optimal_composition_delta(0.1, 0.0, 500, 3.0)


def test_kov_treats_equal_guarantees_as_one_step():
    # Laplace(2) and an explicit (0.5, 0) step are the same (eps, delta) step.
    acc = kov().compose(LaplaceEvent(2.0), count=3)
    same = EpsilonDeltaEvent(0.5, 0.0, neighbouring=ADD_REMOVE)
    assert acc.supports(same)
    acc.compose(ComposedEvent((same, LaplaceEvent(2.0))))
    assert acc.get_delta(1.0) == optimal_composition_delta(0.5, 0.0, 5, 1.0)


def test_kov_refuses_heterogeneous_sequences():
    acc = kov().compose(EpsilonDeltaEvent(0.5, 1e-7), count=3)
    other = EpsilonDeltaEvent(0.25, 1e-7)
    assert not acc.supports(other)
    with pytest.raises(UnsupportedEventError):
        acc.compose(other)
    assert not kov().supports(ComposedEvent((EpsilonDeltaEvent(0.5), EpsilonDeltaEvent(0.25))))
    assert drv().supports(ComposedEvent((EpsilonDeltaEvent(0.5), EpsilonDeltaEvent(0.25))))
    # The refused event left the ledger alone.
    assert acc.get_epsilon(1e-5) == optimal_composition_epsilon(0.5, 1e-7, 3, 1e-5)


def test_kov_refuses_more_steps_than_it_can_afford():
    acc = kov().compose(EpsilonDeltaEvent(0.001), count=OPTIMAL_COMPOSITION_MAX_COUNT)
    assert not acc.supports(EpsilonDeltaEvent(0.001))
    with pytest.raises(UnsupportedEventError):
        kov().compose(EpsilonDeltaEvent(0.001), count=OPTIMAL_COMPOSITION_MAX_COUNT + 1)


@pytest.mark.parametrize("make", [drv, kov])
def test_gaussian_is_not_supported(make):
    acc = make()
    assert not acc.supports(GaussianEvent(1.0))
    with pytest.raises(UnsupportedEventError):
        acc.compose(PoissonSampledEvent(0.1, GaussianEvent(1.0)))


def test_ordering_optimal_le_advanced_le_basic_on_a_grid():
    for eps, delta, k, target in itertools.product([0.01, 0.1, 1.0], [0.0, 1e-8], [1, 10, 300], [1e-6, 1e-3]):
        step = EpsilonDeltaEvent(eps, delta)
        basic = BasicAccountant().compose(step, count=k).get_epsilon(target)
        advanced = drv().compose(step, count=k).get_epsilon(target)
        optimal = kov().compose(step, count=k).get_epsilon(target)
        assert optimal <= advanced * (1 + 1e-9)
        assert advanced <= basic


@given(
    eps=st.floats(0.005, 2.0),
    delta=st.sampled_from([0.0, 1e-9, 1e-7]),
    k=st.integers(1, 400),
    target=st.sampled_from([1e-6, 1e-4, 1e-2]),
    method=st.sampled_from(["drv", "kov"]),
)
@settings(max_examples=80, deadline=None)
def test_get_delta_inverts_get_epsilon(eps, delta, k, target, method):
    acc = AdvancedCompositionAccountant(method=method).compose(EpsilonDeltaEvent(eps, delta), count=k)
    total = acc.get_epsilon(target)
    # Nothing is certified when the steps' own deltas exceed the target:
    # k delta for DRV, 1 - (1 - delta)^k (smaller) for KOV.
    spent = k * delta if method == "drv" else -math.expm1(k * math.log1p(-delta))
    if spent > target:
        assert total == math.inf
        return
    assert math.isfinite(total)
    assert acc.get_delta(total) <= target * (1 + 1e-9)
    assert acc.get_epsilon(target) <= BasicAccountant().compose(EpsilonDeltaEvent(eps, delta), count=k).get_epsilon(
        target
    )


@given(k1=st.integers(1, 200), k2=st.integers(1, 200), method=st.sampled_from(["drv", "kov"]))
@settings(max_examples=40, deadline=None)
def test_more_steps_cost_more(k1, k2, method):
    lo, hi = sorted((k1, k2))
    step = EpsilonDeltaEvent(0.05, 1e-9)
    few = AdvancedCompositionAccountant(method=method).compose(step, count=lo).get_epsilon(1e-5)
    many = AdvancedCompositionAccountant(method=method).compose(step, count=hi).get_epsilon(1e-5)
    assert few <= many * (1 + 1e-9)
