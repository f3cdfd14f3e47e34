"""One stated budget over many fits: cross-validation and grid search over private estimators.

Every fit of a private estimator is a release of its training data. A
scikit-learn ``GridSearchCV`` over a private estimator fits it once per
candidate and fold, and each fit spends its epsilon again: five folds of an
epsilon = 1 model spend 5 (basic composition) on the records the folds share,
and nothing says so. A :class:`BudgetAccountant` makes that spending explicit
and bounded (opt-in, the Python API; as diffprivlib's ``BudgetAccountant``):

>>> from privml.budget import BudgetAccountant
>>> from privml.linear import OutputPerturbationClassifier
>>> from privml.data import load_dataset
>>> data = load_dataset("breast_cancer", random_state=0)
>>> with BudgetAccountant(epsilon=2.0) as budget:
...     for eps in (0.5, 1.0):
...         _ = OutputPerturbationClassifier(epsilon=eps, classes=[0, 1], random_state=0).fit(
...             data.X_train, data.y_train)
>>> budget.spent.epsilon, len(budget.charges)
(1.5, 2)

While a budget is active (``with budget:``), every fit of a privml
estimator charges the guarantee it is planned to give, from its settings
alone (never from the data), *before* any noise is drawn; a fit that would
exceed what is left raises :class:`~privml.exceptions.BudgetExhausted` and
spends nothing. After the fit its ``privacy_`` is checked to lie within the
charge. A fit that fails after the charge keeps it (its noise may have been
drawn). A non-private fit is refused while a budget is active.

Composition: basic (Dwork and Roth 2014, Theorem 3.16: epsilons and deltas
add up), which holds for any mechanisms run adaptively in sequence on the
same data; it is loose for many fits of one Gaussian mechanism, where an
accountant of :mod:`privml.accounting` over their events is tighter.

Like for like: the budget is stated under one neighbouring relation
(replace-one by default, that of most of privml's methods). An add/remove-one
charge is converted to replace-one by group privacy, (eps, delta) ->
(2 eps, (1 + e^eps) delta) (:func:`~privml.accounting._group.replace_one_from_add_remove`);
a replace-one charge cannot be converted to add/remove-one, so a budget
under add/remove-one refuses it.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from privml._validation import check_delta, check_epsilon
from privml.accounting._group import replace_one_from_add_remove
from privml.exceptions import BudgetExhausted
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

__all__ = ["BudgetAccountant", "Charge", "active_budget", "charged_fit"]

_ACTIVE: contextvars.ContextVar[BudgetAccountant | None] = contextvars.ContextVar("privml_budget", default=None)

#: Slack when checking a fit's guarantee against its charge: a calibrated epsilon may exceed its target by rounding.
_RELATIVE_SLACK = 1e-9


@dataclass(frozen=True)
class Charge:
    """One fit's charge: who, and the (epsilon, delta) under the budget's relation (after any conversion)."""

    what: str
    epsilon: float
    delta: float
    stated: PrivacyGuarantee  # the guarantee as the estimator plans it, before conversion


class BudgetAccountant:
    """A total (epsilon, delta) that the fits made while it is active may spend, composed by basic composition.

    Parameters
    ----------
    epsilon, delta:
        The total budget.
    neighbouring:
        The relation the budget is stated under (default replace-one).
    """

    def __init__(self, *, epsilon: float, delta: float = 0.0, neighbouring: str = "replace-one") -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.neighbouring = Neighbouring.parse(neighbouring)
        self.charges: list[Charge] = []
        self._tokens: list[contextvars.Token] = []

    # ------------------------------------------------------------ state
    @property
    def spent(self) -> PrivacyGuarantee:
        """The composed guarantee of every charge so far (basic composition)."""
        epsilon = math.fsum(c.epsilon for c in self.charges)
        delta = min(1.0, math.fsum(c.delta for c in self.charges))
        return PrivacyGuarantee(epsilon, delta, self.neighbouring, "basic")

    @property
    def remaining(self) -> tuple[float, float]:
        """(epsilon, delta) left."""
        spent = self.spent
        return max(0.0, self.epsilon - spent.epsilon), max(0.0, self.delta - spent.delta)

    def __repr__(self) -> str:
        spent = self.spent
        return (f"BudgetAccountant(epsilon={self.epsilon:g}, delta={self.delta:g}, neighbouring="
                f"'{self.neighbouring.value}'; spent {spent.epsilon:.4g}, {spent.delta:.3g} in {len(self.charges)})")

    # ------------------------------------------------------------ spending
    def charge(self, guarantee: PrivacyGuarantee, *, what: str = "a release") -> Charge:
        """Charge ``guarantee`` (converted to the budget's relation), or raise :class:`BudgetExhausted` unchanged."""
        epsilon, delta = self._converted(guarantee, what)
        spent = self.spent
        new_epsilon, new_delta = spent.epsilon + epsilon, spent.delta + delta
        if new_epsilon > self.epsilon * (1 + _RELATIVE_SLACK) or new_delta > self.delta * (1 + _RELATIVE_SLACK):
            raise BudgetExhausted(
                f"{what} would spend ({epsilon:.4g}, {delta:.3g}) under {self.neighbouring.value}, and only "
                f"({max(0.0, self.epsilon - spent.epsilon):.4g}, {max(0.0, self.delta - spent.delta):.3g}) of the "
                f"budget ({self.epsilon:g}, {self.delta:g}) is left; nothing was spent"
            )
        charge = Charge(what, epsilon, delta, guarantee)
        self.charges.append(charge)
        return charge

    def _converted(self, guarantee: PrivacyGuarantee, what: str) -> tuple[float, float]:
        if not math.isfinite(guarantee.epsilon):
            raise ValueError(f"{what} is not private (epsilon = inf): it cannot be charged to a budget")
        if guarantee.neighbouring is self.neighbouring:
            return guarantee.epsilon, guarantee.delta
        if self.neighbouring is Neighbouring.REPLACE_ONE:
            return replace_one_from_add_remove(guarantee.epsilon, guarantee.delta)
        raise ValueError(
            f"{what} is private under replace-one neighbours, which bounds nothing under this budget's add/remove-one; "
            "state the budget under replace-one (add/remove-one charges are converted by group privacy)"
        )

    # ------------------------------------------------------------ the active budget
    def __enter__(self) -> BudgetAccountant:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._tokens.pop())


def active_budget() -> BudgetAccountant | None:
    """The budget of the innermost ``with BudgetAccountant(...)`` block of this context, if any."""
    return _ACTIVE.get()


@contextmanager
def charged_fit(estimator: Any, plan: Callable[[], PrivacyGuarantee | None]) -> Iterator[None]:
    """Around the private part of a fit: charge ``plan()`` to the active budget first, check ``privacy_`` after.

    ``plan()`` is the guarantee the estimator's settings give, computed
    without the records (from public inputs such as n; ``None``: a
    non-private fit, refused under a budget). Without an active budget this
    does nothing and ``plan`` is not called.
    """
    budget = active_budget()
    if budget is None:
        yield
        return
    what = f"fitting {type(estimator).__name__}"
    planned = plan()
    if planned is None:
        raise ValueError(f"{what} is not private, and a BudgetAccountant is active: fit it outside the budget")
    charge = budget.charge(planned, what=what)
    # The charge covers everything inside (a predictor's non-private model, subsample-and-aggregate's teachers):
    # fits within it are not releases of their own, and are neither charged again nor refused.
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
    got = getattr(estimator, "privacy_", None)
    if isinstance(got, PrivacyGuarantee) and got.neighbouring is planned.neighbouring and (
        got.epsilon > planned.epsilon * (1 + _RELATIVE_SLACK) + 1e-12 or got.delta > planned.delta + 1e-15
    ):
        # A plan that understates the fit would make the budget's total wrong: refuse loudly (a bug in privml).
        raise RuntimeError(f"{what}: its guarantee {got} exceeds the {charge.stated} it was charged")
