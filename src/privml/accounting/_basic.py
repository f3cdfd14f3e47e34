"""Basic composition accountant: add up the epsilons and the deltas.

The loosest accountant and the easiest to trust: the adaptive composition of
(epsilon_i, delta_i)-DP steps is (sum epsilon_i, sum delta_i)-DP (Dwork and
Roth 2014, Thm 3.16). It accounts for events whose privacy is known as an
(epsilon, delta) pair; Gaussian noise is not pure DP and is left to the RDP,
zCDP, GDP and PLD accountants.
"""

from __future__ import annotations

import math

from privml.accounting._accountant import PrivacyAccountant, flatten
from privml.accounting._composition import EpsilonDelta, basic_composition, poisson_amplification
from privml.accounting._events import DpEvent, EpsilonDeltaEvent, PoissonSampledEvent, pure_epsilon
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring


def event_epsilon_delta(event: DpEvent) -> EpsilonDelta | None:
    """The (epsilon, delta)-DP guarantee of one event, or None if it has none in closed form.

    - :class:`~privml.accounting.EpsilonDeltaEvent`: its own (epsilon, delta).
    - :class:`~privml.accounting.LaplaceEvent` with noise multiplier b:
      (1/b, 0) for L1 sensitivity measured under the event's relation (Dwork,
      McSherry, Nissim and Smith 2006; Dwork and Roth 2014, Thm 3.6).
    - :class:`~privml.accounting.ExponentialEvent`: (epsilon, 0)
      (McSherry and Talwar 2007; Dwork and Roth 2014, Thm 3.10).
    - :class:`~privml.accounting.PoissonSampledEvent` of an event with
      such a guarantee (Self/Composed events inside are composed basically):
      amplified by :func:`~privml.accounting._composition.poisson_amplification`
      (add/remove-one; Balle, Barthe and Gaboardi 2018, Thm 8). Under
      replace-one there is no such closed form here: None.
    - Self/Composed events: basic composition of their parts.

    Anything else (Gaussian noise in particular) gives None.
    """
    base = pure_epsilon(event)
    if base is not None:
        return EpsilonDelta(base, 0.0)
    if isinstance(event, EpsilonDeltaEvent):
        return EpsilonDelta(event.epsilon, event.delta)
    if isinstance(event, PoissonSampledEvent):
        if event.neighbouring is not Neighbouring.ADD_REMOVE_ONE:
            return None  # the amplification theorem is an add/remove-one statement
        inner = event_epsilon_delta(event.event)
        if inner is None:
            return None
        if inner.epsilon == 0:
            return EpsilonDelta(0.0, event.sampling_probability * inner.delta)
        return poisson_amplification(inner.epsilon, inner.delta, event.sampling_probability)
    parts = flatten(event)
    if len(parts) == 1 and parts[0][0] is event:
        return None  # a base event of a kind without an (epsilon, delta) form
    steps: dict[EpsilonDelta, int] = {}
    for part, count in parts:
        guarantee = event_epsilon_delta(part)
        if guarantee is None:
            return None
        _tally(steps, guarantee, count)
    total = _compose_steps(steps)
    # A delta above 1 says no more than delta = 1; capping keeps the guarantee a valid step.
    return EpsilonDelta(total.epsilon, min(total.delta, 1.0))


def _tally(steps: dict[EpsilonDelta, int], guarantee: EpsilonDelta, count: int) -> None:
    """Add ``count`` steps of ``guarantee``; (0, 0) steps cost nothing and are dropped."""
    if guarantee != (0.0, 0.0):
        steps[guarantee] = steps.get(guarantee, 0) + count


def _compose_steps(steps: dict[EpsilonDelta, int]) -> EpsilonDelta:
    """Basic composition of ``count`` steps of each guarantee (the delta may exceed 1)."""
    if not steps:
        return EpsilonDelta(0.0, 0.0)
    guarantees, counts = zip(*steps.items())
    return basic_composition([g.epsilon for g in guarantees], [g.delta for g in guarantees], counts=counts)


class BasicAccountant(PrivacyAccountant):
    """Accountant by basic composition: (sum epsilon_i, sum delta_i).

    Theorem: Dwork and Roth 2014, Thm 3.16 (adaptive composition). Neighbouring
    relation: whichever the composed events state (all the same; the base
    class enforces it). Sensitivity: each event's guarantee is for the
    sensitivity its noise multiplier is stated against (see
    :func:`event_epsilon_delta` for the per-event guarantees).

    Supported events: EpsilonDeltaEvent, LaplaceEvent, ExponentialEvent,
    PoissonSampledEvent of a supported event (amplified, add/remove-one), and
    Self/Composed events of supported events. GaussianEvent is not pure DP and
    is refused (``supports`` returns False).

    ``get_epsilon(delta)`` is ``sum epsilon_i`` when ``delta >= sum delta_i``
    and ``inf`` otherwise; ``get_delta(epsilon)`` is ``sum delta_i`` when
    ``epsilon >= sum epsilon_i`` and 1 otherwise.

    Examples
    --------
    >>> from privml.accounting._events import LaplaceEvent
    >>> BasicAccountant().compose(LaplaceEvent(2.0), count=4).get_epsilon(0.0)
    2.0
    """

    name = "basic"

    def __init__(self) -> None:
        super().__init__()
        # Distinct per-step guarantees -> how many steps had each; merging keeps
        # the state small for long runs and lets the optimal-composition
        # subclass see at a glance whether the steps are homogeneous.
        self._steps: dict[EpsilonDelta, int] = {}

    def supports(self, event: DpEvent) -> bool:
        return all(event_epsilon_delta(e) is not None for e, _ in flatten(event))

    def _compose(self, event: DpEvent, count: int) -> None:
        for base, times in flatten(event, count):
            guarantee = event_epsilon_delta(base)
            if guarantee is None:
                raise UnsupportedEventError(f"{type(self).__name__} does not support {base!r}")
            _tally(self._steps, guarantee, times)

    def _totals(self) -> EpsilonDelta:
        return _compose_steps(self._steps)

    def _get_epsilon(self, delta: float) -> float:
        epsilon, spent = self._totals()
        return epsilon if delta >= spent else math.inf

    def _get_delta(self, epsilon: float) -> float:
        total, spent = self._totals()
        return spent if epsilon >= total else 1.0
