"""BasicAccountant: sums of epsilons and deltas over pure/approximate-DP events."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privml.accounting._basic import BasicAccountant, event_epsilon_delta
from privml.accounting._composition import poisson_amplification
from privml.accounting._events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring

ADD_REMOVE = Neighbouring.ADD_REMOVE_ONE


def test_name_and_empty_ledger():
    acc = BasicAccountant()
    assert acc.name == "basic"
    assert acc.get_epsilon(0.0) == 0.0
    assert acc.get_delta(0.5) == 0.0


def test_sums_laplace_exponential_and_approximate_steps():
    acc = BasicAccountant()
    acc.compose(LaplaceEvent(4.0, neighbouring=ADD_REMOVE), count=2)  # 2 x 0.25
    acc.compose(EpsilonDeltaEvent(0.5, 1e-6, neighbouring=ADD_REMOVE))
    acc.compose(ExponentialEvent(0.125, neighbouring=ADD_REMOVE), count=4)  # 4 x 0.125
    assert acc.get_epsilon(1e-6) == pytest.approx(1.5, rel=1e-15)
    assert acc.get_epsilon(1e-5) == pytest.approx(1.5, rel=1e-15)
    assert acc.get_delta(1.5) == pytest.approx(1e-6, rel=1e-15)
    assert acc.guarantee(1e-6).neighbouring is ADD_REMOVE


def test_delta_below_spent_gives_infinite_epsilon_and_small_epsilon_gives_delta_one():
    acc = BasicAccountant().compose(EpsilonDeltaEvent(0.5, 1e-6), count=10)
    assert acc.get_epsilon(9.9e-6) == math.inf
    assert acc.get_epsilon(1e-5) == pytest.approx(5.0)
    assert acc.get_delta(4.999) == 1.0
    assert acc.get_delta(5.0) == pytest.approx(1e-5)


def test_float_sums_are_exactly_rounded():
    # fsum: ten steps of 0.1 make exactly 1.0, so a budget of (1.0, 0) is honoured.
    acc = BasicAccountant()
    for _ in range(10):
        acc.compose(EpsilonDeltaEvent(0.1))
    assert acc.get_epsilon(0.0) == 1.0
    assert acc.get_delta(1.0) == 0.0


def test_poisson_sampled_step_is_amplified():
    inner = LaplaceEvent(1.0)  # 1-DP under add/remove
    acc = BasicAccountant().compose(PoissonSampledEvent(0.01, inner), count=100)
    step = math.log1p(0.01 * math.expm1(1.0))
    assert acc.get_epsilon(0.0) == pytest.approx(100 * step, rel=1e-12)


def test_poisson_sampled_composition_and_nesting():
    inner = ComposedEvent((EpsilonDeltaEvent(0.2, 1e-6, neighbouring=ADD_REMOVE), LaplaceEvent(5.0)))
    # Sampling once, then running both steps on the sample: amplify their basic composition.
    assert event_epsilon_delta(PoissonSampledEvent(0.1, inner)) == pytest.approx(
        poisson_amplification(0.4, 1e-6, 0.1), rel=1e-14
    )
    # Nested Poisson sampling at q1 then q2 is sampling at q1 q2, and the formula agrees.
    nested = PoissonSampledEvent(0.5, PoissonSampledEvent(0.2, LaplaceEvent(1.0)))
    assert event_epsilon_delta(nested).epsilon == pytest.approx(poisson_amplification(1.0, 0.0, 0.1).epsilon, rel=1e-12)


def test_sampled_composition_spending_delta_above_one_is_capped_not_an_error():
    # Two (0.1, 0.6) steps spend delta 1.2 > 1, i.e. nothing; sampling at 0.5 still gives delta 0.5.
    event = PoissonSampledEvent(0.5, SelfComposedEvent(EpsilonDeltaEvent(0.1, 0.6, neighbouring=ADD_REMOVE), 2))
    acc = BasicAccountant()
    assert acc.supports(event)
    acc.compose(event)
    assert acc.get_epsilon(0.5) == pytest.approx(math.log1p(0.5 * math.expm1(0.2)))
    assert acc.get_epsilon(0.4) == math.inf
    assert event_epsilon_delta(SelfComposedEvent(EpsilonDeltaEvent(0.1, 0.6), 2)) == (0.2, 1.0)


def test_event_epsilon_delta_of_each_kind():
    assert event_epsilon_delta(LaplaceEvent(2.0)) == (0.5, 0.0)
    assert event_epsilon_delta(ExponentialEvent(0.3)) == (0.3, 0.0)
    assert event_epsilon_delta(EpsilonDeltaEvent(0.3, 1e-7)) == (0.3, 1e-7)
    assert event_epsilon_delta(SelfComposedEvent(LaplaceEvent(2.0), 3)) == (1.5, 0.0)
    assert event_epsilon_delta(ComposedEvent(())) == (0.0, 0.0)
    assert event_epsilon_delta(GaussianEvent(1.0)) is None
    assert event_epsilon_delta(PoissonSampledEvent(0.1, GaussianEvent(1.0))) is None
    assert event_epsilon_delta(ComposedEvent((LaplaceEvent(1.0), GaussianEvent(1.0)))) is None


@pytest.mark.parametrize(
    "event",
    [
        GaussianEvent(1.0),
        PoissonSampledEvent(0.01, GaussianEvent(1.0)),
        ComposedEvent((LaplaceEvent(1.0), GaussianEvent(1.0))),
        SelfComposedEvent(GaussianEvent(1.0), 5),
    ],
)
def test_gaussian_noise_is_not_supported(event):
    acc = BasicAccountant().compose(LaplaceEvent(1.0))
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)
    # A refused event leaves the ledger as it was.
    assert acc.get_epsilon(0.0) == 1.0
    assert len(acc.ledger.events) == 1


def test_neighbouring_relations_cannot_mix():
    acc = BasicAccountant().compose(EpsilonDeltaEvent(0.5))  # replace-one by default
    with pytest.raises(ValueError, match="neighbour"):
        acc.compose(LaplaceEvent(1.0))  # add/remove-one by default


def test_empty_composed_event_costs_nothing():
    acc = BasicAccountant().compose(ComposedEvent(()))
    assert acc.get_epsilon(0.0) == 0.0
    assert acc.get_delta(0.1) == 0.0


@given(
    steps=st.lists(
        st.tuples(st.floats(0.01, 2.0), st.sampled_from([0.0, 1e-8, 1e-6]), st.integers(1, 50)),
        min_size=1,
        max_size=8,
    )
)
@settings(max_examples=50, deadline=None)
def test_totals_are_sums_and_order_does_not_matter(steps):
    forward, backward = BasicAccountant(), BasicAccountant()
    for eps, delta, count in steps:
        forward.compose(EpsilonDeltaEvent(eps, delta), count=count)
    for eps, delta, count in reversed(steps):
        backward.compose(EpsilonDeltaEvent(eps, delta), count=count)
    total_eps = math.fsum(e * c for e, _, c in steps)
    total_delta = math.fsum(d * c for _, d, c in steps)
    assert forward.get_epsilon(min(0.999, total_delta * (1 + 1e-12))) == pytest.approx(total_eps, rel=1e-12)
    assert forward.get_epsilon(total_delta) == backward.get_epsilon(total_delta)
    assert forward.get_delta(total_eps * (1 + 1e-12)) == pytest.approx(total_delta, rel=1e-12, abs=0)
