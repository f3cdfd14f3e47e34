"""Immutable descriptions of what a private computation did.

An *event* says which mechanism ran, with which noise, under which
neighbouring relation; an *accountant* turns a sequence of events into an
(epsilon, delta) guarantee. Keeping the two apart lets one description be
accounted for by any accountant (basic, RDP, PLD, ...) and compared.

Noise is always stated relative to sensitivity (a *noise multiplier*):
``GaussianEvent(s)`` is N(0, (s * Delta_2)^2) added to a function of L2
sensitivity Delta_2; ``LaplaceEvent(b)`` is Lap(b * Delta_1) per coordinate for
L1 sensitivity Delta_1. Sensitivity is measured under the event's neighbouring
relation (a clipped sum has sensitivity C under add/remove and 2C under
replace-one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from privml._validation import check_count, check_delta, check_epsilon, check_positive, check_probability
from privml.neighbouring import Neighbouring

ADD_REMOVE = Neighbouring.ADD_REMOVE_ONE
REPLACE_ONE = Neighbouring.REPLACE_ONE


class DpEvent:
    """Base class of privacy events. Every event exposes ``neighbouring``."""

    neighbouring: Neighbouring


def _relation(value: Neighbouring | str) -> Neighbouring:
    return Neighbouring.parse(value)


@dataclass(frozen=True)
class GaussianEvent(DpEvent):
    """Gaussian mechanism with noise std = ``noise_multiplier`` x L2 sensitivity."""

    noise_multiplier: float
    neighbouring: Neighbouring = ADD_REMOVE

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_positive(self.noise_multiplier, "noise_multiplier"))
        object.__setattr__(self, "neighbouring", _relation(self.neighbouring))


@dataclass(frozen=True)
class LaplaceEvent(DpEvent):
    """Laplace mechanism with scale = ``noise_multiplier`` x L1 sensitivity.

    It is (1 / noise_multiplier)-DP (Dwork, McSherry, Nissim, Smith 2006).
    """

    noise_multiplier: float
    neighbouring: Neighbouring = ADD_REMOVE

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_positive(self.noise_multiplier, "noise_multiplier"))
        object.__setattr__(self, "neighbouring", _relation(self.neighbouring))

    @property
    def epsilon(self) -> float:
        return 1.0 / self.noise_multiplier


@dataclass(frozen=True)
class EpsilonDeltaEvent(DpEvent):
    """Any mechanism known only to be (epsilon, delta)-DP."""

    epsilon: float
    delta: float = 0.0
    neighbouring: Neighbouring = REPLACE_ONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", check_delta(self.delta))
        object.__setattr__(self, "neighbouring", _relation(self.neighbouring))


@dataclass(frozen=True)
class ExponentialEvent(DpEvent):
    """Exponential mechanism run at ``epsilon`` (McSherry and Talwar 2007).

    It is epsilon-DP and, having bounded range, epsilon^2/8-zCDP
    (Cesar and Rogers 2021, Lemma 3.2).
    """

    epsilon: float
    neighbouring: Neighbouring = REPLACE_ONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "neighbouring", _relation(self.neighbouring))


@dataclass(frozen=True)
class PoissonSampledEvent(DpEvent):
    """``event`` run on a Poisson subsample: each record kept independently with
    probability ``sampling_probability``.

    The inner event's noise is stated against the bound on *one record's
    contribution* (its add/remove-one sensitivity, e.g. the clip norm C of a
    clipped sum), so the inner event is always under add/remove-one. The
    outer ``neighbouring`` is the relation the amplified guarantee is for:

    - ``add/remove-one`` (default): one record added or removed (zero-out
      view with n public); amplification of Mironov, Talwar and Zhang 2019 and
      Zhu, Dong and Wang 2022, Theorem 11.
    - ``replace-one``: one record replaced by another. The sum then moves by
      up to twice the contribution bound, and only when the replaced record is
      sampled; accountants that support it use the dominating pair derived in
      :mod:`privml.accounting._pld` (Gaussian inner events only). Accountants
      without a replace-one analysis refuse the event: none of them falls back
      to the add/remove amplification silently.
    """

    sampling_probability: float
    event: DpEvent
    neighbouring: Neighbouring = ADD_REMOVE

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "sampling_probability", check_probability(self.sampling_probability, "sampling_probability")
        )
        _check_inner_event(self.event, "a Poisson-sampled event")
        object.__setattr__(self, "neighbouring", _relation(self.neighbouring))


def _check_inner_event(event: object, outer: str) -> None:
    """The inner event of a subsampled one: a DpEvent whose noise is stated against one record's contribution."""
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a DpEvent, got {type(event).__name__}")
    if event.neighbouring is not ADD_REMOVE:
        raise ValueError(
            f"the inner event of {outer} states its noise against one record's contribution "
            f"(add/remove-one); it is under {event.neighbouring.value}"
        )


@dataclass(frozen=True)
class SampledWithoutReplacementEvent(DpEvent):
    """``event`` run on ``sample_size`` records drawn uniformly without replacement from ``population``.

    The fixed-size sampler of DP-SGD: every step uses a batch of exactly
    b = ``sample_size`` distinct records out of n = ``population`` (both
    public). As for :class:`PoissonSampledEvent`, the inner event's noise is
    stated against one record's contribution (add/remove-one sensitivity, the
    clip norm C), so a replaced record moves the batch sum by up to 2C.

    The relation is always ``replace-one`` (same n): the subsampling analysis
    is that of Wang, Balle and Kasiviswanathan 2019 (Theorem 9), which is
    stated for replace-one neighbours; under add/remove the batch size or n
    would change and the analysis does not apply.
    """

    sample_size: int
    population: int
    event: DpEvent

    def __post_init__(self) -> None:
        object.__setattr__(self, "population", check_count(self.population, "population"))
        object.__setattr__(
            self, "sample_size", check_count(self.sample_size, "sample_size", maximum=self.population)
        )
        _check_inner_event(self.event, "a sampled event")

    @property
    def sampling_ratio(self) -> float:
        """gamma = b / n, the probability that a given record is in the batch."""
        return self.sample_size / self.population

    @property
    def neighbouring(self) -> Neighbouring:  # type: ignore[override]
        return REPLACE_ONE


@dataclass(frozen=True)
class SelfComposedEvent(DpEvent):
    """``event`` run ``count`` times (adaptively)."""

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, DpEvent):
            raise TypeError(f"event must be a DpEvent, got {type(self.event).__name__}")
        object.__setattr__(self, "count", check_count(self.count, "count"))

    @property
    def neighbouring(self) -> Neighbouring:  # type: ignore[override]
        return self.event.neighbouring


@dataclass(frozen=True)
class ComposedEvent(DpEvent):
    """Several events run in sequence (adaptively). All must share one relation."""

    events: tuple[DpEvent, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for e in events:
            if not isinstance(e, DpEvent):
                raise TypeError(f"events must be DpEvents, got {type(e).__name__}")
        # An empty composition releases nothing and holds under every relation: it constrains none.
        relations = {e.neighbouring for e in events if not is_empty(e)}
        if len(relations) > 1:
            raise ValueError(
                "cannot compose events stated under different neighbouring relations: "
                + ", ".join(sorted(r.value for r in relations))
            )
        object.__setattr__(self, "events", events)

    @property
    def neighbouring(self) -> Neighbouring:  # type: ignore[override]
        stated = [e for e in self.events if not is_empty(e)]
        return stated[0].neighbouring if stated else ADD_REMOVE


def is_empty(event: DpEvent) -> bool:
    """Whether ``event`` composes no mechanism at all (nested empty compositions): it releases nothing."""
    if isinstance(event, ComposedEvent):
        return all(is_empty(e) for e in event.events)
    if isinstance(event, SelfComposedEvent):
        return is_empty(event.event)
    return False


def add_remove_twin(event: DpEvent) -> DpEvent | None:
    """The same mechanism stated under add/remove-one, or None if it has no such statement here.

    A Poisson-sampled event states its noise against one record's
    contribution whatever the relation of its guarantee, so its twin is the
    same event under add/remove-one; Self/Composed events map part by part.
    Anything else (an unsampled event whose sensitivity was measured under
    replace-one, a fixed-size sampled event) has no twin. Used by group
    privacy (:class:`~privml.accounting.GroupPrivacyAccountant`).
    """
    if isinstance(event, PoissonSampledEvent):
        return PoissonSampledEvent(event.sampling_probability, event.event, neighbouring=ADD_REMOVE)
    if isinstance(event, SelfComposedEvent):
        inner = add_remove_twin(event.event)
        return None if inner is None else SelfComposedEvent(inner, event.count)
    if isinstance(event, ComposedEvent):
        parts = [add_remove_twin(e) for e in event.events]
        return None if any(p is None for p in parts) else ComposedEvent(tuple(parts))  # type: ignore[arg-type]
    return None


def pure_epsilon(event: DpEvent) -> float | None:
    """Epsilon of a pure-DP base event (Laplace, exponential, (eps, 0)), else None."""
    if isinstance(event, LaplaceEvent):
        return event.epsilon
    if isinstance(event, ExponentialEvent):
        return event.epsilon
    if isinstance(event, EpsilonDeltaEvent) and event.delta == 0:
        return event.epsilon
    return None


def is_finite_number(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
