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

    Amplification by Poisson subsampling is analysed under add/remove-one
    neighbours (Mironov, Talwar, Zhang 2019; Zhu and Wang 2019), so the inner
    event must be stated under add/remove-one and so is the result.
    """

    sampling_probability: float
    event: DpEvent

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "sampling_probability", check_probability(self.sampling_probability, "sampling_probability")
        )
        if not isinstance(self.event, DpEvent):
            raise TypeError(f"event must be a DpEvent, got {type(self.event).__name__}")
        if self.event.neighbouring is not ADD_REMOVE:
            raise ValueError(
                "Poisson subsampling amplification is stated for add/remove-one neighbours; "
                f"the inner event is under {self.event.neighbouring.value}"
            )

    @property
    def neighbouring(self) -> Neighbouring:  # type: ignore[override]
        return ADD_REMOVE


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
        relations = {e.neighbouring for e in events}
        if len(relations) > 1:
            raise ValueError(
                "cannot compose events stated under different neighbouring relations: "
                + ", ".join(sorted(r.value for r in relations))
            )
        object.__setattr__(self, "events", events)

    @property
    def neighbouring(self) -> Neighbouring:  # type: ignore[override]
        return self.events[0].neighbouring if self.events else ADD_REMOVE


def dpsgd_event(noise_multiplier: float, sample_rate: float, steps: int) -> DpEvent:
    """The event of DP-SGD: ``steps`` Poisson-sampled Gaussian steps (add/remove-one)."""
    step: DpEvent = GaussianEvent(noise_multiplier)
    if sample_rate < 1:
        step = PoissonSampledEvent(sample_rate, step)
    else:
        check_probability(sample_rate, "sample_rate")
    return SelfComposedEvent(step, steps)


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
