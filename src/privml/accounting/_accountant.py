"""The one interface every privacy accountant implements.

An accountant keeps a ledger of composed events and answers two questions:
``get_epsilon(delta)`` and ``get_delta(epsilon)``. Subclasses implement
``supports`` (a pure check, no side effects) and ``_compose`` (update internal
state for an event already known to be supported), plus the two queries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from privml._validation import check_count, check_delta, check_epsilon
from privml.accounting._events import ComposedEvent, DpEvent, SelfComposedEvent, is_empty
from privml.exceptions import UnsupportedEventError
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring


class PrivacyAccountant(ABC):
    """Abstract accountant: ``compose`` events, then ask for epsilon or delta."""

    #: short name reported in :class:`PrivacyGuarantee.accountant` (a class default; an instance
    #: may set its own, e.g. after the method or inner accountant it was made with)
    name: str = "abstract"

    def __init__(self) -> None:
        self._events: list[DpEvent] = []
        self._neighbouring: Neighbouring | None = None

    # ----------------------------------------------------------------- ledger
    @property
    def ledger(self) -> ComposedEvent:
        """Everything composed so far, as one event."""
        return ComposedEvent(tuple(self._events))

    @property
    def neighbouring(self) -> Neighbouring | None:
        """The relation of the composed events (None before the first compose)."""
        return self._neighbouring

    @abstractmethod
    def supports(self, event: DpEvent) -> bool:
        """Whether this accountant can account for ``event`` (no side effects)."""

    @abstractmethod
    def _compose(self, event: DpEvent, count: int) -> None:
        """Add ``count`` runs of a supported ``event`` to the internal state."""

    def compose(self, event: DpEvent, count: int = 1) -> PrivacyAccountant:
        """Record ``count`` adaptive runs of ``event``; return ``self`` for chaining.

        Raises
        ------
        UnsupportedEventError
            if this accountant cannot account for the event.
        ValueError
            if the event's neighbouring relation differs from earlier events.
        """
        count = check_count(count, "count")
        if not isinstance(event, DpEvent):
            raise TypeError(f"event must be a DpEvent, got {type(event).__name__}")
        if not self.supports(event):
            raise UnsupportedEventError(f"{type(self).__name__} does not support {event!r}")
        if is_empty(event):  # nothing released: nothing to account, and no relation to hold the ledger to
            return self
        relation = event.neighbouring
        if self._neighbouring is not None and relation is not self._neighbouring:
            raise ValueError(
                f"accountant holds events under {self._neighbouring.value} neighbours; "
                f"cannot compose an event under {relation.value}"
            )
        self._compose(event, count)
        self._neighbouring = relation
        self._events.append(event if count == 1 else SelfComposedEvent(event, count))
        return self

    @abstractmethod
    def _get_epsilon(self, delta: float) -> float: ...

    @abstractmethod
    def _get_delta(self, epsilon: float) -> float: ...

    def get_epsilon(self, delta: float) -> float:
        """Smallest epsilon this accountant can certify at ``delta`` (0 if nothing composed)."""
        delta = check_delta(delta)
        if not self._events:
            return 0.0
        return float(self._get_epsilon(delta))

    def get_delta(self, epsilon: float) -> float:
        """Smallest delta this accountant can certify at ``epsilon`` (0 if nothing composed)."""
        epsilon = check_epsilon(epsilon, allow_inf=False) if epsilon != 0 else 0.0
        if not self._events:
            return 0.0
        return float(min(1.0, max(0.0, self._get_delta(epsilon))))

    def guarantee(self, delta: float) -> PrivacyGuarantee:
        """The (epsilon, delta) guarantee at ``delta`` with relation and accountant name."""
        return PrivacyGuarantee(
            epsilon=self.get_epsilon(delta),
            delta=check_delta(delta),
            neighbouring=self._neighbouring or Neighbouring.ADD_REMOVE_ONE,
            accountant=self.name,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(events={len(self._events)})"


def flatten(event: DpEvent, count: int = 1) -> list[tuple[DpEvent, int]]:
    """Expand Composed/SelfComposed events into (base event, count) pairs.

    Base events are anything else (Gaussian, Laplace, PoissonSampled, ...).
    Accountants that compose additively (RDP, zCDP, GDP, basic) use this.
    """
    if isinstance(event, SelfComposedEvent):
        return flatten(event.event, count * event.count)
    if isinstance(event, ComposedEvent):
        out: list[tuple[DpEvent, int]] = []
        for e in event.events:
            out.extend(flatten(e, count))
        return out
    return [(event, count)]
