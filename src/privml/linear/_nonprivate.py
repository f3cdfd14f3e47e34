"""Non-private regularised logistic regression: the baseline of the private methods.

It solves the same objective as the private estimators,
``J(w) = (lambda/2)||w||^2 + (1/n) sum_i loss(w; x_i, y_i)``, with the same
solver (:func:`~privml.linear._solvers.minimise_objective`), the same
unit-ball projection and the same public class set, so that the accuracy
gap to :class:`~privml.linear.OutputPerturbationClassifier`
and :class:`~privml.linear.ObjectivePerturbationClassifier`
is the cost of privacy and nothing else.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from privml._params import keep_params
from privml.guarantee import PrivacyGuarantee
from privml.linear._base import PrivateLinearClassifier, make_loss
from privml.linear._solvers import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    check_l2_setting,
    check_solver_settings,
    solve_nonprivate,
)
from privml.losses import RegularisedObjective
from privml.neighbouring import Neighbouring

__all__ = ["NonPrivateClassifier"]


class NonPrivateClassifier(PrivateLinearClassifier):
    """L2-regularised logistic (binary) or multinomial logistic regression, without privacy.

    Parameters
    ----------
    l2 : "auto" or float, default "auto"
        ``lambda > 0``. ``"auto"`` is ``1 / n``, scikit-learn's default
        ``LogisticRegression(C=1.0)`` in this parametrisation
        (``C sum_i loss + ||w||^2 / 2`` divided by ``C n``).
    loss : {"logistic", "huber", "multinomial"}, default "logistic"
        Binary logistic or Huber hinge for two classes; more classes always
        use the multinomial logistic loss.
    huber_width : float, default 0.5
        ``h`` of the Huber hinge loss.
    classes : sequence, optional
        The public class set; inferred from ``y`` with a
        :class:`~privml.exceptions.PrivacyLeakWarning` if omitted (kept for
        interface parity with the private estimators).
    tol : float, default 1e-10
        Gradient-norm tolerance of the solver.
    max_iter : int, default 1000
        Cap on the fast solver (L-BFGS/Newton); if it stops short, the certified
        accelerated-gradient phase finishes (:func:`~privml.linear._solvers.minimise_objective`):
        a fit never fails on the data.

    Attributes
    ----------
    privacy_ : PrivacyGuarantee
        ``epsilon = inf``, ``delta = 0``, accountant ``"none"``: no privacy.
        The relation is nominally replace-one, the one every private
        estimator here is compared under.
    fit_info_ : dict
        ``n_train``, ``l2``, ``l2_rule``.
    nonprivate_diagnostics_ : dict
        ``grad_norm``, ``iterations``, ``objective`` of the solve (never saved).

    Notes
    -----
    Privacy: none. The estimator takes no ``epsilon`` or ``delta``, so it
    cannot be mistaken for a private one, and its ``privacy_`` says
    ``epsilon = inf``. It is deterministic: there is no ``random_state``.

    Examples
    --------
    >>> from privml.data import load_dataset
    >>> data = load_dataset("breast_cancer", bias=True, random_state=0)
    >>> model = NonPrivateClassifier(classes=[0, 1]).fit(data.X_train, data.y_train)
    >>> model.privacy_.epsilon, bool(model.score(data.X_test, data.y_test) > 0.8)
    (inf, True)
    """

    method = "nonprivate"
    # n_train and lambda are public (prediction sensitivity 2L/(n lambda) needs them); the
    # solver's gradient norm, iteration count and objective value are not.
    released_info = frozenset({"n_train", "l2", "l2_rule"})
    # base.fit asks for a generator; this estimator is deterministic and never uses it.
    random_state = None

    def __init__(
        self,
        *,
        l2: float | Literal["auto"] = "auto",
        loss: str = "logistic",
        huber_width: float = 0.5,
        classes: Any = None,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
    ) -> None:
        keep_params(self, locals())

    def _check_hyperparameters(self) -> tuple[float, float]:
        # No privacy parameters; validate the solver settings first instead.
        check_l2_setting(self.l2)
        check_solver_settings(self.tol, self.max_iter)
        return math.inf, 0.0

    def _planned_guarantee(self, n: int) -> None:
        """None: not private (a fit under a :class:`~privml.budget.BudgetAccountant` is refused)."""
        return None

    def _fit_private(
        self, X: np.ndarray, y: np.ndarray, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, PrivacyGuarantee, dict]:
        loss = make_loss(n_classes, self.loss, huber_width=self.huber_width)
        given = check_l2_setting(self.l2)
        tol, max_iter = check_solver_settings(self.tol, self.max_iter)
        n = X.shape[0]
        l2 = 1.0 / n if given is None else given
        result = solve_nonprivate(RegularisedObjective(loss, X, y, l2), tol=tol, max_iter=max_iter)
        guarantee = PrivacyGuarantee(math.inf, 0.0, Neighbouring.REPLACE_ONE, accountant="none")
        info = {
            # n is public under replace-one, and prediction sensitivity (2L/(n lambda)) needs it.
            "n_train": n,
            "l2": l2,
            "l2_rule": "auto: 1/n" if given is None else "given",
            "grad_norm": result.grad_norm,
            "iterations": result.iterations,
            "objective": result.value,
        }
        return result.weights, guarantee, info
