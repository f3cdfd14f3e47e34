"""InteractiveAboveThreshold: publish models one at a time, privately check each,
stop at the first that passes, and charge only for what was published.

Ligett, Neel, Roth, Waggoner and Wu (2017), Algorithm 2 of Neel's slides,
``IAT(D, eps, W, Delta, M)``: draw ``W_hat = W + Lap(2 Delta / eps)`` once; for
``t = 1, ..., T`` take the next query ``f_t`` from the algorithm ``M`` (here:
publish the next model and let ``f_t`` be its accuracy); if ``f_t(D) +
Lap(4 Delta / eps) >= W_hat`` output ``(t, f_t)`` and halt; else continue;
after ``T`` failures output ``(T, bottom)``. The threshold and query noise are
those of Dwork and Roth (2014), Algorithm 1, reused from
:class:`privml.mechanisms.AboveThreshold`.

Theorem (ex-post AboveThreshold, the slides' theorem under Algorithm 2): if
publishing ``f_1, ..., f_t`` is ``eps_t``-DP then stopping at ``t`` has ex-post
privacy loss at most ``eps + eps_t``: conditionally on the published queries
the halting pattern is eps-DP (Dwork and Roth 2014, Theorem 3.23, whose proof
bounds the probability of halting at each ``t`` pointwise; the all-bottom
outcome of a finite stream costs at most eps/2, by shifting the threshold noise
by ``Delta``), and the two factors multiply. :class:`~privml.selection.ExPostCost`
extends this to ``(eps_t, delta)`` prefixes.

Neighbouring relation: the one every query's sensitivity ``Delta`` and the
release costs are stated under (replace-one for privml's ERM). A query may
depend on everything published so far, but its sensitivity must hold for every
fixed value of the published models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from privml._random import RandomState
from privml._validation import check_epsilon, check_finite, check_positive
from privml.mechanisms import AboveThreshold, MechanismHalted
from privml.neighbouring import Neighbouring
from privml.selection._ex_post import ExPostCost

__all__ = ["IATOutcome", "IATStep", "InteractiveAboveThreshold", "Release"]


@dataclass(frozen=True, eq=False)
class Release:
    """One model offered to the search, with the cost of publishing it and all before it.

    Attributes
    ----------
    candidate : Any
        What is published (e.g. a weight vector).
    prefix_epsilon, prefix_delta : float
        Privacy cost of publishing this candidate together with every earlier
        one: ``eps_t`` for a noise-reduction chain, the running sum for
        independent releases.
    """

    candidate: Any
    prefix_epsilon: float
    prefix_delta: float = 0.0


@dataclass(frozen=True)
class IATStep:
    """One published model and the private check's verdict.

    Attributes
    ----------
    index : int
        0-based position in the search.
    prefix_epsilon, prefix_delta : float
        Cost of publishing models ``0..index``.
    passed : bool
        The AboveThreshold bit: the only data-dependent output of the check.
    nonprivate_value : float
        ``f_t(D)`` itself, **not private**: kept for experiments and plots on
        data you own; publishing it is not covered by any guarantee here.
    """

    index: int
    prefix_epsilon: float
    prefix_delta: float
    passed: bool
    nonprivate_value: float


@dataclass(frozen=True, eq=False)
class IATOutcome:
    """Result of :meth:`InteractiveAboveThreshold.run`.

    Attributes
    ----------
    steps : tuple of IATStep
        One per published model, in order.
    released : tuple
        The published candidates (``steps[i]`` checked ``released[i]``).
    stopped_at : int or None
        Index of the model that passed, None if none did (all were published).
    cost : ExPostCost
        ``eps_AT`` plus the cost of the published prefix.
    """

    steps: tuple[IATStep, ...]
    released: tuple[Any, ...]
    stopped_at: int | None
    cost: ExPostCost


class InteractiveAboveThreshold:
    """The ex-post AboveThreshold of Ligett et al. (2017): check published models until one passes.

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon : float
        ``eps_AT``, the budget of all the checks together, > 0.
    threshold : float
        The public threshold ``W`` (finite).
    sensitivity : float
        ``Delta``: ``|f_t(D) - f_t(D')| <= Delta`` for neighbours and every
        fixed published model (1/n_val for an accuracy on n_val records).
    neighbouring : Neighbouring or str, default replace-one
    random_state : None, int or numpy Generator

    Notes
    -----
    Privacy: stopping at ``t`` is ``(eps_AT + eps_t, delta_t)``-ex-post DP
    under ``neighbouring``, where ``(eps_t, delta_t)`` is the release's
    ``prefix`` cost (module docstring; slides' Algorithm 2 theorem; Dwork and
    Roth 2014, Theorem 3.23). The instance is one-shot: a second :meth:`run`
    would reuse the threshold noise outside the guarantee and is refused.

    Examples
    --------
    >>> iat = InteractiveAboveThreshold(epsilon=100.0, threshold=0.5, sensitivity=0.01, random_state=0)
    >>> releases = [Release(v, prefix_epsilon=e) for v, e in [(0.1, 0.2), (0.9, 0.4), (0.95, 0.8)]]
    >>> outcome = iat.run(releases, query=lambda v: v)
    >>> outcome.stopped_at, len(outcome.released), round(outcome.cost.epsilon, 6)
    (1, 2, 100.4)
    """

    def __init__(
        self,
        *,
        epsilon: float,
        threshold: float,
        sensitivity: float,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.threshold = check_finite(threshold, "threshold")
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.neighbouring = Neighbouring.parse(neighbouring)
        self.random_state = random_state
        self._used = False

    def run(self, releases: Iterable[Release], query: Callable[[Any], float]) -> IATOutcome:
        """Publish releases in order, checking each privately; stop at the first pass.

        Parameters
        ----------
        releases : iterable of Release
            Produced lazily if it is a generator: nothing after the passing
            model is drawn, let alone published.
        query : callable
            ``candidate -> f_t(D)`` (a finite number of sensitivity ``Delta``).

        Returns
        -------
        IATOutcome

        Raises
        ------
        MechanismHalted
            On a second call.
        ValueError
            If ``releases`` is empty, a prefix cost decreases, or a query is not finite.
        """
        if self._used:
            raise MechanismHalted("this InteractiveAboveThreshold has already run; create a new one")
        self._used = True
        # The threshold noise is drawn here, once, shared by every check.
        above = AboveThreshold(
            epsilon=self.epsilon,
            threshold=self.threshold,
            sensitivity=self.sensitivity,
            neighbouring=self.neighbouring,
            random_state=self.random_state,
        )
        steps: list[IATStep] = []
        released: list[Any] = []
        previous = (0.0, 0.0)
        for index, release in enumerate(releases):
            cost = (check_epsilon(release.prefix_epsilon, "prefix_epsilon"), float(release.prefix_delta))
            if cost[0] < previous[0] or cost[1] < previous[1] or math.isnan(cost[1]):
                raise ValueError(f"release {index}: prefix costs must not decrease, got {cost} after {previous}")
            previous = cost
            value = check_finite(query(release.candidate), "query value")
            passed = above.query(value)
            released.append(release.candidate)
            steps.append(IATStep(index, cost[0], cost[1], passed, value))
            if passed:
                break
        if not steps:
            raise ValueError("releases is empty: nothing to search")
        last = steps[-1]
        outcome_cost = ExPostCost(
            at_epsilon=self.epsilon,
            release_epsilon=last.prefix_epsilon,
            release_delta=last.prefix_delta,
            n_released=len(steps),
            passed=last.passed,
            neighbouring=self.neighbouring,
        )
        return IATOutcome(tuple(steps), tuple(released), last.index if last.passed else None, outcome_cost)
