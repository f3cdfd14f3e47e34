"""What both private predictors share: the budget ledger and input checks before spending.

The order of every answer is fixed here: validate the query rows (finite,
right width), then charge ``len(X)`` answers to the ledger (all or nothing),
then compute. A refused or malformed request therefore releases nothing and
spends nothing, and a crash after the charge can only over-count.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from privml._random import check_random_state
from privml._validation import MAX_BUDGET, check_count, check_delta, check_epsilon, check_fitted, check_X, check_y
from privml.data._labels import fit_classes
from privml.exceptions import PrivacyLeakWarning
from privml.guarantee import PrivacyGuarantee
from privml.ledger import BudgetLedger, MemoryLedger, calibration_context
from privml.ledger._base import check_context
from privml.neighbouring import Neighbouring

__all__ = ["BudgetedPredictor", "check_ledger"]


def check_ledger(ledger: object, budget: int, context: dict[str, Any] | None = None) -> None:
    """Accept ``None`` or a :class:`BudgetLedger` whose budget is ``budget`` (and calibration ``context``).

    A ledger counting against another budget would make the stated guarantee
    (calibrated for ``budget`` answers) false, so a mismatch is refused; so is
    a ledger bound to another calibration (:func:`~privml.ledger.calibration_context`),
    once the predictor's is known (``context``).
    """
    if ledger is None:
        return
    if not isinstance(ledger, BudgetLedger):
        raise TypeError(f"ledger must be a privml.ledger.BudgetLedger or None, got {type(ledger).__name__}")
    if ledger.state().budget != budget:
        raise ValueError(
            f"the ledger's budget is {ledger.state().budget} answers but the model is calibrated for {budget}"
        )
    if context is not None:
        check_context(ledger, context)


class BudgetedPredictor(ClassifierMixin, BaseEstimator):
    """Base of the private predictors: a fitted model whose answers are counted.

    Subclasses set ``method``, define keyword-only ``__init__`` parameters
    including ``epsilon``, ``delta``, ``budget``, ``accountant``, ``ledger``
    and ``random_state``, validate them in ``_check_hyperparameters`` (the
    one hook, run first in ``fit`` and when a model file is read back), and
    call :meth:`_attach_ledger` when fitted.

    Fitted attributes shared by both: ``classes_``, ``n_features_in_``,
    ``ledger_``, ``privacy_`` (the total guarantee over ``budget`` answers)
    and ``fit_info_``.
    """

    method: str = "abstract"

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Every answer draws fresh noise (that is what makes B answers private), so two
        # calls on the same rows differ: checks that compare calls cannot apply.
        tags.non_deterministic = True
        return tags

    def ledger_context(self) -> dict[str, Any]:
        """What the budget protects: a ledger reopened for another calibration must not continue this count."""
        privacy = self.privacy_
        return calibration_context(self.method, privacy.epsilon, privacy.delta, privacy.accountant)

    def _check_refit(self) -> None:
        """Refuse to re-fit a predictor that has answered from its own in-memory budget.

        Its count lives in this object: re-fitting (on what may be the same
        data) would start a fresh count and let the answers exceed the stated
        guarantee. Called first in ``fit``, before anything is computed.
        """
        previous = getattr(self, "ledger_", None)
        if self.ledger is None and isinstance(previous, MemoryLedger) and previous.spent > 0:
            raise ValueError(
                f"this {type(self).__name__} has already released {previous.spent} answers from its in-memory "
                "budget; re-fitting would start a fresh budget on what may be the same data: create a new "
                "predictor for new data, or pass ledger=... to keep one persistent count"
            )

    def _attach_ledger(self, ledger: BudgetLedger | None) -> None:
        budget = check_count(self.budget, "budget", maximum=MAX_BUDGET)
        context = self.ledger_context()
        check_ledger(ledger, budget, context)
        if ledger is not None and not isinstance(ledger, MemoryLedger) and self.random_state is not None:
            # A persistent budget outlives the process; a seeded predictor restarted on it repeats its noise.
            warnings.warn(PrivacyLeakWarning(
                f"{type(self).__name__}(random_state={self.random_state!r}) with a persistent ledger: every process "
                "that reopens the budget with this seed draws the same noise, and differences of their answers "
                "cancel it; seed only in tests"), stacklevel=3)
        self.ledger_ = ledger if ledger is not None else MemoryLedger(budget, context=context)

    def use_ledger(self, ledger: BudgetLedger) -> None:
        """Charge every later answer to ``ledger``: a fitted predictor that has answered nothing yet.

        What a server does once a model file is loaded: the calibration (and so the context the ledger is
        bound to, :func:`~privml.ledger.calibration_context`) is known only then. The ledger must count
        against this budget and calibration (:func:`check_ledger`); answers already charged to the current
        ledger would be lost from the count, so they are refused.
        """
        self._check_fitted()
        if self.ledger_.spent > 0:
            raise ValueError(f"this {type(self).__name__} has already charged {self.ledger_.spent} answers to its "
                             "ledger: moving to another would drop them from the count")
        self.ledger = ledger
        self._attach_ledger(ledger)

    def _planned_guarantee(self) -> PrivacyGuarantee:
        """The total guarantee over ``budget`` answers, from the settings (for :mod:`privml.budget`)."""
        return PrivacyGuarantee(float(self.epsilon), float(self.delta), Neighbouring.REPLACE_ONE, "planned")

    def _check_privacy_settings(self) -> tuple[float, float, int]:
        """(epsilon, delta, answer budget), with the ledger and the seed's type checked: before any data is read."""
        epsilon = check_epsilon(self.epsilon)
        delta = check_delta(self.delta)
        budget = check_count(self.budget, "budget", maximum=MAX_BUDGET)
        check_ledger(self.ledger, budget)
        check_random_state(self.random_state)  # type check only: the generator is made at fit
        return epsilon, delta, budget

    def _fit_data(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(X, y, classes)`` of a fit; labels outside the public class set are refused here, before any training."""
        X = check_X(X, owner=type(self).__name__)
        y = check_y(y, X.shape[0])
        classes, _ = fit_classes(y, self.classes, owner=type(self).__name__, stacklevel=3)
        return X, y, classes

    def _check_fitted(self) -> None:
        check_fitted(self, "ledger_")

    def _check_rows(self, X: Any) -> np.ndarray:
        """Query rows as a finite float array of the fitted width (checked before any spending)."""
        self._check_fitted()
        return check_X(X, n_features=self.n_features_in_, owner=type(self).__name__)

    def _spend(self, X: Any, key: str | None) -> np.ndarray:
        """Validate ``X``, then charge one answer per row (BudgetExhausted: nothing charged)."""
        X = self._check_rows(X)
        self.ledger_.spend(X.shape[0], key=key)
        return X

    def remaining(self, key: str | None = None) -> int:
        """Answers left in the budget (or in ``key``'s quota)."""
        self._check_fitted()
        return self.ledger_.remaining(key)

    def _file_params(self) -> dict[str, Any]:
        """Constructor settings for a model file: the ledger lives outside the model and is not saved."""
        params = self.get_params(deep=False)
        params["ledger"] = None
        if params.get("classes") is not None:
            # Any iterable is a valid class set (range(10), an array); JSON needs a list.
            params["classes"] = [c.item() if hasattr(c, "item") else c for c in params["classes"]]
        return params
