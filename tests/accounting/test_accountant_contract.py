"""One contract every accountant honours, checked for all of them at once."""

from __future__ import annotations

import math

import pytest

from privml.accounting import (
    ACCOUNTANTS,
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    make_accountant,
)
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring

# A supported event for each accountant, and one it must refuse.
SUPPORTED = {
    "basic": EpsilonDeltaEvent(0.5, 1e-7, neighbouring="add/remove-one"),
    "advanced": EpsilonDeltaEvent(0.5, 1e-7, neighbouring="add/remove-one"),
    "optimal": EpsilonDeltaEvent(0.5, 1e-7, neighbouring="add/remove-one"),
    "rdp": PoissonSampledEvent(0.01, GaussianEvent(1.0)),
    "zcdp": GaussianEvent(2.0),
    "gdp": GaussianEvent(2.0),
    "pld": PoissonSampledEvent(0.01, GaussianEvent(1.0)),
}
UNSUPPORTED = {
    "basic": GaussianEvent(1.0),
    "advanced": GaussianEvent(1.0),
    "optimal": GaussianEvent(1.0),
    "rdp": EpsilonDeltaEvent(1.0, 1e-6, neighbouring="add/remove-one"),
    "zcdp": PoissonSampledEvent(0.01, GaussianEvent(1.0)),
    "gdp": PoissonSampledEvent(0.01, GaussianEvent(1.0)),
    # fixed-size sampling under replace-one has no symmetric dominating pair here (RDP only)
    "pld": SampledWithoutReplacementEvent(10, 1000, GaussianEvent(1.0)),
}
DELTA = 1e-5


def test_every_accountant_is_covered():
    assert set(SUPPORTED) == set(ACCOUNTANTS)


@pytest.fixture(params=sorted(SUPPORTED))
def name(request):
    return request.param


def test_empty_ledger_spends_nothing(name):
    acc = make_accountant(name)
    assert acc.get_epsilon(DELTA) == 0.0
    assert acc.get_delta(1.0) == 0.0
    assert acc.ledger.events == ()


def test_compose_returns_self_and_records(name):
    acc = make_accountant(name)
    event = SUPPORTED[name]
    assert acc.supports(event)
    assert acc.compose(event, count=3) is acc
    assert acc.ledger.events == (SelfComposedEvent(event, 3),)
    assert acc.neighbouring is event.neighbouring


def test_count_equals_repeated_compose(name):
    event = SUPPORTED[name]
    once = make_accountant(name).compose(event, count=4).get_epsilon(DELTA)
    repeated = make_accountant(name)
    for _ in range(4):
        repeated.compose(event)
    assert repeated.get_epsilon(DELTA) == pytest.approx(once, rel=1e-6)


def test_more_composition_costs_more(name):
    event = SUPPORTED[name]
    few = make_accountant(name).compose(event, count=2).get_epsilon(DELTA)
    many = make_accountant(name).compose(event, count=20).get_epsilon(DELTA)
    assert 0 < few < many


def test_epsilon_falls_as_delta_grows(name):
    acc = make_accountant(name).compose(SUPPORTED[name], count=10)
    eps = [acc.get_epsilon(d) for d in (1e-9, 1e-7, 1e-5, 1e-3)]
    assert all(a >= b for a, b in zip(eps, eps[1:]))


def test_get_delta_inverts_get_epsilon(name):
    acc = make_accountant(name).compose(SUPPORTED[name], count=10)
    eps = acc.get_epsilon(DELTA)
    assert math.isfinite(eps)
    # The certified delta at the certified epsilon is no larger than asked for
    # (up to the accountant's numerical tolerance).
    assert acc.get_delta(eps * (1 + 1e-6)) <= DELTA * (1 + 1e-3)
    # ...and a noticeably smaller epsilon needs a larger delta.
    assert acc.get_delta(eps * 0.9) > DELTA


def test_unsupported_event_is_refused(name):
    event = UNSUPPORTED[name]
    if event is None:
        return
    acc = make_accountant(name)
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)
    assert acc.ledger.events == ()


def test_mixing_neighbouring_relations_is_refused(name):
    acc = make_accountant(name).compose(SUPPORTED[name])
    other = Neighbouring.REPLACE_ONE if acc.neighbouring is Neighbouring.ADD_REMOVE_ONE else Neighbouring.ADD_REMOVE_ONE
    foreign = {
        "basic": EpsilonDeltaEvent(0.5, 1e-7, neighbouring=other),
        "advanced": EpsilonDeltaEvent(0.5, 1e-7, neighbouring=other),
        "optimal": EpsilonDeltaEvent(0.5, 1e-7, neighbouring=other),
        "rdp": GaussianEvent(1.0, neighbouring=other),
        "zcdp": GaussianEvent(1.0, neighbouring=other),
        "gdp": GaussianEvent(1.0, neighbouring=other),
        "pld": GaussianEvent(1.0, neighbouring=other),
    }[name]
    with pytest.raises(ValueError, match="neighbour"):
        acc.compose(foreign)


@pytest.mark.parametrize("delta", [-0.1, 1.0, float("nan")])
def test_bad_delta_is_rejected(name, delta):
    acc = make_accountant(name).compose(SUPPORTED[name])
    with pytest.raises(ValueError):
        acc.get_epsilon(delta)


def test_bad_count_is_rejected(name):
    with pytest.raises(ValueError):
        make_accountant(name).compose(SUPPORTED[name], count=0)


def test_guarantee_names_accountant_and_relation(name):
    acc = make_accountant(name).compose(SUPPORTED[name], count=5)
    g = acc.guarantee(DELTA)
    assert g.accountant == name
    assert g.neighbouring is SUPPORTED[name].neighbouring
    assert g.epsilon == acc.get_epsilon(DELTA)


def test_composed_event_equals_sequence(name):
    event = SUPPORTED[name]
    a = make_accountant(name).compose(ComposedEvent((event, event)))
    b = make_accountant(name).compose(event).compose(event)
    assert a.get_epsilon(DELTA) == pytest.approx(b.get_epsilon(DELTA), rel=1e-6)


def test_laplace_is_pure_where_supported():
    # Laplace with noise multiplier 2 is 0.5-DP: basic composition of 4 is exactly 2.
    acc = make_accountant("basic").compose(LaplaceEvent(2.0), count=4)
    assert acc.get_epsilon(0.0) == pytest.approx(2.0)


def test_an_empty_composition_constrains_no_relation():
    # It releases nothing: neither a ComposedEvent nor an accountant holds it to add/remove-one.
    from privml.accounting import RDPAccountant
    from privml.accounting._events import ComposedEvent, GaussianEvent

    replace = GaussianEvent(1.0, neighbouring="replace-one")
    assert ComposedEvent((ComposedEvent(()), replace)).neighbouring.value == "replace-one"
    accountant = RDPAccountant().compose(ComposedEvent(())).compose(replace)
    assert accountant.guarantee(1e-5).neighbouring.value == "replace-one"
