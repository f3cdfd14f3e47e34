"""What an Accuracy First search published and what it cost: its steps and its result.

Accuracy First (Ligett, Neel, Roth, Waggoner and Wu 2017, "Accuracy First:
Selecting a Differential Privacy Level for Accuracy-Constrained ERM") publishes
models at increasing privacy levels until a private check passes; its cost is
known only ex post. :class:`SelectionResult` records every published model,
the ex-post guarantee and the trace of the search, one :class:`SelectionStep`
per published model; the search itself is in
:mod:`privml.selection._accuracy_first`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privml.guarantee import PrivacyGuarantee
from privml.release import reveal_nonprivate
from privml.selection._ex_post import ExPostCost


@dataclass(frozen=True)
class SelectionStep:
    """One published model of the search.

    Attributes
    ----------
    step : int
        0-based position.
    epsilon : float
        The level of this model (its own noise).
    ex_post_epsilon, ex_post_delta : float
        What the search would have cost had it stopped here: ``eps_AT`` plus the prefix cost.
    passed : bool
        The private check's verdict.
    nonprivate_value : float
        The check's exact value (validation accuracy, or minus the excess
        risk): **not private**, for experiments and plots on your own data.
    """

    step: int
    epsilon: float
    ex_post_epsilon: float
    ex_post_delta: float
    passed: bool
    nonprivate_value: float


@dataclass(frozen=True, eq=False)
class SelectionResult:
    """What an Accuracy First search published, and what it cost.

    Attributes
    ----------
    weights : ndarray
        The selected model (the last published one; it passed iff ``met_target``).
    released : tuple of ndarray
        Every published model, in order (all covered by ``guarantee``).
    stopped_at : int or None
        Index of the model that passed; None if none did.
    guarantee : PrivacyGuarantee
        Ex-post ``(eps_AT + prefix eps, prefix delta)``, accountant ``"ex-post"``.
    cost : ExPostCost
        The same, itemised.
    search, noise, metric : str
        ``"noise-reduction"``/``"doubling"``; ``"laplace"``/``"gaussian"``/``"l2-laplace"``;
        ``"error"``/``"excess_risk"``.
    target, threshold, query_sensitivity, at_epsilon : float
        The target, AboveThreshold's threshold ``W`` on the check's scale, the
        check's sensitivity and budget.
    grid : tuple of float
        Every level the search could have reached.
    steps : tuple of SelectionStep
        The trace, one entry per published model.
    """

    weights: np.ndarray
    released: tuple[np.ndarray, ...]
    stopped_at: int | None
    guarantee: PrivacyGuarantee
    cost: ExPostCost
    search: str
    noise: str
    metric: str
    target: float
    threshold: float
    query_sensitivity: float
    at_epsilon: float
    grid: tuple[float, ...]
    steps: tuple[SelectionStep, ...]

    @property
    def met_target(self) -> bool:
        """Whether a model passed the private check."""
        return self.stopped_at is not None

    def trace(self, *, include_nonprivate: bool = False) -> list[dict[str, Any]]:
        """The steps as JSON-ready dictionaries: what the search published, and nothing else.

        ``include_nonprivate=True`` adds each step's exact validation score
        (``nonprivate_value``), which the guarantee does **not** cover; it
        warns with :class:`~privml.exceptions.PrivacyLeakWarning`
        (:func:`privml.release.reveal_nonprivate`).
        """
        steps = [
            {
                "step": s.step,
                "epsilon": s.epsilon,
                "ex_post_epsilon": s.ex_post_epsilon,
                "ex_post_delta": s.ex_post_delta,
                "passed": s.passed,
            }
            for s in self.steps
        ]
        if include_nonprivate:
            values = reveal_nonprivate({"nonprivate_value": [s.nonprivate_value for s in self.steps]},
                                       what="the exact validation score of every step")
            for row, value in zip(steps, values["nonprivate_value"]):
                row["nonprivate_value"] = value
        return steps
