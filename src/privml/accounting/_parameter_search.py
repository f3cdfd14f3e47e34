"""The bracket-and-bisect search behind every calibration in privml.

Every calibration in privml (the noise multiplier of DP-SGD, of prediction
sensitivity, of DP coordinate descent; the per-step epsilon of a composition
theorem) is the same problem: a scalar parameter ``x`` moves a privacy cost
``objective(x)`` monotonically, and we want the best ``x`` whose cost is at
most a target. :func:`calibrate_parameter` solves it once:

1. *Bracket*: from the hints (or 1), double or halve until one point meets the
   target (*feasible*) and one does not.
2. *Bisect*: halve the bracket until its width is at most ``tolerance`` times
   the feasible end.
3. Return the *feasible* end, never the midpoint or the infeasible end, so the
   reported parameter always satisfies the target exactly as the accountant
   certifies it; the infeasible end is within ``tolerance`` of it, so the
   answer is also near-optimal.

The search makes no privacy claim of its own; the noise calibrations built on
it are in :mod:`privml.accounting._calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from privml._validation import check_count, check_finite, check_positive


@dataclass(frozen=True)
class ParameterCalibration:
    """Outcome of :func:`calibrate_parameter`.

    Attributes
    ----------
    value:
        The calibrated parameter: the feasible end of the final bracket (an
        ``int`` when the search was over integers).
    objective:
        ``objective(value)``, which is at most the target.
    iterations:
        How many times the objective was evaluated (bracketing and bisection).
    """

    value: float
    objective: float
    iterations: int


# ------------------------------------------------------------------ the search
class _Bracket:
    """The monotone search state: the best feasible and infeasible points seen.

    ``feasible_high`` says on which side the feasible set lies: for a decreasing
    objective (more noise, less epsilon) every x above the threshold is
    feasible; for an increasing one every x below it is.
    """

    def __init__(
        self,
        objective: Callable[[float], float],
        target: float,
        *,
        feasible_high: bool,
        integer: bool,
        max_iterations: int,
    ) -> None:
        self._objective = objective
        self._target = target
        self.feasible_high = feasible_high
        self.integer = integer
        self._max_iterations = max_iterations
        self.values: dict[float, float] = {}
        self.good: float | None = None
        self.bad: float | None = None

    def evaluate(self, x: float) -> None:
        if x in self.values:
            return
        if len(self.values) >= self._max_iterations:
            raise self._exhausted()
        value = float(self._objective(int(x) if self.integer else x))
        if math.isnan(value):
            raise ValueError(f"the objective returned NaN at {x!r}")
        self.values[x] = value
        if value <= self._target:
            # Keep the feasible point closest to the threshold.
            if self.good is None or (x < self.good if self.feasible_high else x > self.good):
                self.good = x
        elif self.bad is None or (x > self.bad if self.feasible_high else x < self.bad):
            self.bad = x
        if self.good is not None and self.bad is not None and (self.good < self.bad) == self.feasible_high:
            raise ValueError(
                f"the objective is not monotone: {self.values[self.good]!r} at {self.good!r} "
                f"meets the target {self._target!r} but {self.values[self.bad]!r} at {self.bad!r} does not"
            )

    def _exhausted(self) -> Exception:
        if self.good is None:
            best = min(self.values.items(), key=lambda kv: kv[1])
            return ValueError(
                f"target {self._target!r} is unreachable: after {len(self.values)} evaluations the "
                f"smallest value found is {best[1]!r} (at {best[0]!r})"
            )
        if self.bad is None:
            return ValueError(
                f"the target {self._target!r} does not constrain the parameter: every value tried, "
                f"as far as {self.good!r}, meets it"
            )
        return RuntimeError(
            f"no convergence within max_iterations={self._max_iterations}: the bracket is still "
            f"[{min(self.good, self.bad)!r}, {max(self.good, self.bad)!r}]; {self.good!r} meets the target"
        )

    def toward_feasible(self, x: float) -> float:
        return 2 * x if self.feasible_high else self._halve(x)

    def toward_infeasible(self, x: float) -> float:
        return self._halve(x) if self.feasible_high else 2 * x

    def _halve(self, x: float) -> float:
        return x // 2 if self.integer else x / 2


def _bracket_and_bisect(
    objective: Callable[[float], float],
    target: float,
    *,
    increasing: bool,
    lower: float | None,
    upper: float | None,
    tolerance: float,
    max_iterations: int,
    integer: bool,
) -> ParameterCalibration:
    """Bracket then bisect; see :func:`calibrate_parameter` (arguments already validated)."""
    state = _Bracket(objective, target, feasible_high=not increasing, integer=integer, max_iterations=max_iterations)
    for hint in (upper, lower):
        if hint is not None:
            state.evaluate(hint)
    if not state.values:
        state.evaluate(1)

    # The domain is x > 0 (x >= 1 for integers); halving can step out of it.
    smallest = 1 if integer else math.ulp(0.0)
    while state.good is None:
        assert state.bad is not None  # points were evaluated and none was feasible, so one is infeasible
        x = state.toward_feasible(state.bad)
        if x < smallest:
            raise ValueError(f"target {target!r} is unreachable: even {state.bad!r} gives {state.values[state.bad]!r}")
        state.evaluate(x)
    while state.bad is None:
        x = state.toward_infeasible(state.good)
        if x < smallest:
            if integer:
                break  # every integer down to 1 is feasible: 1 is the answer
            raise ValueError(f"the target {target!r} does not constrain the parameter: even {state.good!r} meets it")
        state.evaluate(x)

    aim_feasible = True
    previous_sides: list[bool] = []
    while state.bad is not None:
        gap = abs(state.good - state.bad)
        if gap <= (1 if integer else tolerance * abs(state.good)):
            break
        middle = (state.good + state.bad) // 2 if integer else (state.good + state.bad) / 2
        if not integer and previous_sides[-2:] != [True, True] and previous_sides[-2:] != [False, False]:
            # Safeguarded interpolation (converges in a few evaluations on smooth
            # privacy curves); two steps landing on the same side fall back to
            # bisection, so the bracket always shrinks.
            middle = _interpolate(state, target, tolerance, aim_feasible) or middle
        if middle in (state.good, state.bad):  # adjacent floats: nothing left to split
            break
        was_good = state.good
        state.evaluate(middle)
        landed_feasible = state.good != was_good
        previous_sides.append(landed_feasible)
        aim_feasible = not landed_feasible

    value = int(state.good) if integer else float(state.good)
    return ParameterCalibration(value=value, objective=state.values[state.good], iterations=len(state.values))


def _interpolate(state: _Bracket, target: float, tolerance: float, aim_feasible: bool) -> float | None:
    """Next point by log-log interpolation between the bracket ends, nudged by a
    quarter of the tolerance toward the side we want to land on next (so a
    feasible and an infeasible point close in on the threshold from both sides).
    ``None`` when interpolation is not possible (infinite or non-positive values)."""
    assert state.good is not None and state.bad is not None  # called inside the bracket: both ends known
    good, bad = float(state.good), float(state.bad)
    f_good, f_bad = state.values[state.good], state.values[state.bad]
    if not (0 < f_good < math.inf and 0 < f_bad < math.inf and f_good != f_bad and target > 0):
        return None
    t = (math.log(target) - math.log(f_good)) / (math.log(f_bad) - math.log(f_good))
    x = math.exp(math.log(good) + t * (math.log(bad) - math.log(good)))
    toward = good if aim_feasible else bad
    x += math.copysign(0.25 * tolerance * x, toward - x)
    low, high = min(good, bad), max(good, bad)
    margin = 1e-3 * (high - low)
    if not low + margin < x < high - margin:
        return None
    return x


def _check_hints(
    lower: float | None, upper: float | None, *, integer: bool
) -> tuple[float | None, float | None]:
    def check(hint: float | None, name: str) -> float | None:
        if hint is None:
            return None
        return float(check_count(hint, name)) if integer else check_positive(hint, name)

    lower, upper = check(lower, "lower"), check(upper, "upper")
    if lower is not None and upper is not None and not lower < upper:
        raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
    return lower, upper


def _check_tolerance(tolerance: float) -> float:
    tolerance = check_positive(tolerance, "tolerance")
    if tolerance >= 1:
        raise ValueError(f"tolerance is relative and must be < 1, got {tolerance!r}")
    return tolerance


def calibrate_parameter(
    objective: Callable[[float], float],
    *,
    target: float,
    increasing: bool,
    lower: float | None = None,
    upper: float | None = None,
    tolerance: float = 1e-3,
    max_iterations: int = 100,
    integer: bool = False,
) -> ParameterCalibration:
    """Best positive parameter whose monotone ``objective`` is at most ``target``.

    This is the bracket-and-bisect core shared by every calibration in privml;
    it makes no privacy claim of its own. Its guarantee is that the returned
    ``value`` satisfies ``objective(value) <= target`` *as evaluated*, so when
    the objective is a certified privacy cost the returned parameter is
    certified too. Correctness of the search needs the objective to be
    monotone; a violation seen during the search raises ``ValueError``.

    Parameters
    ----------
    objective:
        Monotone map from the parameter (a float > 0, or an int >= 1 with
        ``integer=True``) to a cost; ``inf`` counts as "over target".
    target:
        The largest admissible cost.
    increasing:
        True if the cost grows with the parameter (a per-step epsilon, a number
        of steps): the *largest* feasible value is sought. False if it falls
        (a noise multiplier): the *smallest* feasible value is sought.
    lower, upper:
        Optional starting bracket. Hints are checked, not trusted: a wrong hint
        is widened by doubling or halving. Without hints the search starts at 1.
    tolerance:
        Relative width at which bisection stops: the returned value is within
        ``tolerance * value`` of the threshold (ignored for integers, which are
        searched exactly).
    max_iterations:
        Maximum number of objective evaluations, bracketing included.
    integer:
        Search over the integers >= 1 instead of the positive reals.

    Returns
    -------
    ParameterCalibration
        ``value`` (the feasible end of the final bracket), ``objective(value)``
        and the number of evaluations.

    Raises
    ------
    ValueError
        for bad arguments, for an unreachable target (no feasible value found
        within ``max_iterations`` evaluations, or none exists in the domain),
        for a target met everywhere (it does not constrain the parameter), and
        for a non-monotone objective.
    RuntimeError
        if the bracket has not shrunk to ``tolerance`` within ``max_iterations``;
        the message names the feasible end reached.

    Examples
    --------
    The largest integer k with k * 0.1 <= 1:

    >>> calibrate_parameter(lambda k: 0.1 * k, target=1.0, increasing=True, integer=True).value
    10
    """
    # long-function: most of its length is the numpy-style docstring (parameters, guarantee, references); the code is
    # argument checks and one call to the shared search.
    if not callable(objective):
        raise TypeError(f"objective must be callable, got {type(objective).__name__}")
    target = check_finite(target, "target")
    if not isinstance(increasing, bool) or not isinstance(integer, bool):
        raise TypeError("increasing and integer must be booleans")
    lower, upper = _check_hints(lower, upper, integer=integer)
    return _bracket_and_bisect(
        objective,
        target,
        increasing=increasing,
        lower=lower,
        upper=upper,
        tolerance=_check_tolerance(tolerance),
        max_iterations=check_count(max_iterations, "max_iterations", minimum=2),
        integer=integer,
    )
