"""Accountants by the advanced (DRV) and the optimal (KOV) composition theorems.

Both account for the same events as :class:`~privml.accounting.BasicAccountant`
(steps with a known (epsilon, delta) guarantee) and differ in the theorem
used to add them up:

- ``method="drv"`` (name ``"advanced"``): the heterogeneous advanced
  composition bound (Dwork, Rothblum and Vadhan 2010, Thm III.3; Dwork and
  Roth 2014, Thm 3.20), for any sequence of steps;
- ``method="kov"`` (name ``"optimal"``): the exact optimal composition of k
  identical (epsilon, delta) steps (Kairouz, Oh and Viswanath 2015, Thm 3.3),
  for homogeneous sequences only.

Both answers are capped by basic composition: each theorem and basic
composition give valid guarantees for the same steps, so the smaller of the two
is valid too, and the accountant never reports more than basic would.
"""

from __future__ import annotations

import math
from typing import Literal

from privml.accounting._accountant import flatten
from privml.accounting._basic import BasicAccountant, event_epsilon_delta
from privml.accounting._composition import (
    OPTIMAL_COMPOSITION_MAX_COUNT,
    EpsilonDelta,
    advanced_composition_delta,
    advanced_composition_heterogeneous,
    optimal_composition_delta,
    optimal_composition_epsilon,
)
from privml.accounting._events import DpEvent
from privml.exceptions import UnsupportedEventError

Method = Literal["drv", "kov"]
_NAMES: dict[str, str] = {"drv": "advanced", "kov": "optimal"}


class AdvancedCompositionAccountant(BasicAccountant):
    """Accountant by advanced (``"drv"``) or optimal (``"kov"``) composition, capped by basic.

    Theorems:

    - ``"drv"``: steps (eps_i, delta_i) compose to
      (sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), sum delta_i + delta')
      for any delta' > 0 (Dwork, Rothblum and Vadhan 2010, Thm III.3, with
      per-step bounds; Dwork and Roth 2014, Thm 3.20). At a requested delta the
      whole slack delta' = delta - sum delta_i is used, which minimises the bound.
    - ``"kov"``: k steps of one (eps, delta) compose exactly as k-fold
      randomised response (Kairouz, Oh and Viswanath 2015, Thm 3.3); see
      :func:`~privml.accounting._composition.optimal_composition_delta`. It
      supports only homogeneous sequences: ``supports`` returns False for an
      event whose steps differ from each other or from what is already
      composed, and for more than
      :data:`~privml.accounting._composition.OPTIMAL_COMPOSITION_MAX_COUNT` steps.

    Both report ``min(theorem, basic composition)``: basic composition is
    valid for the same steps, so the minimum is a valid guarantee, and this
    accountant never reports more than :class:`BasicAccountant` would.

    Neighbouring relation: whichever the composed events state (one for all;
    the theorems only use each step's (epsilon, delta) guarantee under it).
    Sensitivity: as stated by each event (see
    :func:`~privml.accounting._basic.event_epsilon_delta`). Supported events:
    those of :class:`BasicAccountant`.

    Parameters
    ----------
    method:
        ``"drv"`` (default) or ``"kov"``.

    Examples
    --------
    >>> from privml.accounting._events import EpsilonDeltaEvent
    >>> step = EpsilonDeltaEvent(0.01)
    >>> acc = AdvancedCompositionAccountant().compose(step, count=10_000)
    >>> round(acc.get_epsilon(1e-6), 2), acc.name
    (6.26, 'advanced')
    """

    name = "advanced"

    def __init__(self, *, method: Method = "drv") -> None:
        if method not in _NAMES:
            raise ValueError(f"method must be one of {', '.join(map(repr, _NAMES))}, got {method!r}")
        super().__init__()
        self.method = method
        # The reported name follows the theorem, so guarantees say which one was used.
        self.name = _NAMES[method]

    def supports(self, event: DpEvent) -> bool:
        if not super().supports(event):
            return False
        if self.method == "drv":
            return True
        parts = flatten(event)
        steps = {event_epsilon_delta(e) for e, _ in parts} | set(self._steps)
        steps.discard(EpsilonDelta(0.0, 0.0))
        total = sum(self._steps.values()) + sum(c for _, c in parts)
        return len(steps) <= 1 and total <= OPTIMAL_COMPOSITION_MAX_COUNT

    def _compose(self, event: DpEvent, count: int) -> None:
        if self.method == "kov" and sum(self._steps.values()) + count * sum(c for _, c in flatten(event)) > (
            OPTIMAL_COMPOSITION_MAX_COUNT
        ):
            # supports() saw the event once; ``count`` repetitions may push it over.
            raise UnsupportedEventError(
                f"optimal composition is limited to {OPTIMAL_COMPOSITION_MAX_COUNT} steps; "
                "use the advanced, RDP or PLD accountant"
            )
        super()._compose(event, count)

    # ------------------------------------------------------------- queries
    def _grouped(self) -> tuple[list[float], list[float], list[int]]:
        """Distinct per-step (epsilon, delta) and how many steps had each."""
        return (
            [step.epsilon for step in self._steps],
            [step.delta for step in self._steps],
            list(self._steps.values()),
        )

    def _theorem_epsilon(self, delta: float) -> float:
        if self.method == "kov":
            ((step, count),) = self._steps.items()
            return optimal_composition_epsilon(step.epsilon, step.delta, count, delta)
        # All the slack left after the steps' own deltas goes to delta', which
        # minimises the DRV bound.
        slack = delta - self._totals().delta
        if slack <= 0:
            return math.inf
        epsilons, deltas, counts = self._grouped()
        return advanced_composition_heterogeneous(epsilons, deltas, slack, counts=counts).epsilon

    def _theorem_delta(self, epsilon: float) -> float:
        if self.method == "kov":
            ((step, count),) = self._steps.items()
            return optimal_composition_delta(step.epsilon, step.delta, count, epsilon)
        epsilons, deltas, counts = self._grouped()
        return advanced_composition_delta(epsilons, deltas, epsilon, counts=counts)

    def _get_epsilon(self, delta: float) -> float:
        if not self._steps:
            return 0.0
        return min(self._theorem_epsilon(delta), super()._get_epsilon(delta))

    def _get_delta(self, epsilon: float) -> float:
        if not self._steps:
            return 0.0
        return min(self._theorem_delta(epsilon), super()._get_delta(epsilon))
