"""The accuracy checks of Accuracy First, and the sensitivity of each.

Both are stated for **replace-one** neighbours (same sizes, one record
replaced) and records with ``||x|| <= 1``; a check's value is what
:class:`~privml.selection.InteractiveAboveThreshold`
compares with its threshold (higher is better).

* Classification accuracy on a validation set of ``n_val`` records, disjoint
  from the training records by a public split: for a fixed model, replacing
  one validation record changes the accuracy by at most ``1 / n_val``
  (:func:`error_rate_sensitivity`); replacing a training record does not
  change it at all (the model is fixed).
* Minus the excess empirical risk ``J(w) - min J`` on the training set
  (Ligett et al. 2017's target), ``J(w) = (lambda/2)||w||^2 + (1/n) sum
  loss``. Both terms move with the data. Every minimiser lies in the ball of
  radius ``R`` (:func:`minimiser_radius`), and the check is evaluated at the
  published model projected onto that ball (:func:`project_to_ball`, a
  post-processing that never moves a point farther from the minimiser). For
  ``||w|| <= R`` one record's loss changes by at most ``2 L R`` when the record
  is replaced (``loss(w; z) - loss(0; z)`` is at most ``L ||w||`` in absolute
  value, and ``loss(0; z)`` is the same for every record of a linear model);
  so ``J(w)`` moves by ``2 L R / n`` and so does ``min J`` (compare each
  dataset's minimiser on the other), giving sensitivity ``4 L R / n``, plus
  ``tol^2 / (2 lambda)`` since the query subtracts the solver's value, not
  ``min J`` itself (:func:`excess_risk_sensitivity`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import check_count, check_finite, check_finite_array, check_positive
from privml.losses import Loss, MarginLoss, RegularisedObjective

__all__ = [
    "accuracy_query",
    "error_rate_sensitivity",
    "excess_risk_query",
    "excess_risk_sensitivity",
    "loss_at_zero",
    "minimiser_radius",
    "project_to_ball",
]

Query = Callable[[np.ndarray], float]


def error_rate_sensitivity(n_val: int) -> float:
    """Sensitivity ``1 / n_val`` of an error rate (or accuracy) over ``n_val`` records, replace-one."""
    return 1.0 / check_count(n_val, "n_val")


def loss_at_zero(loss: Loss) -> float:
    """``loss(0; x, y)``: the same for every record, since all scores of ``w = 0`` are 0."""
    label = 1 if isinstance(loss, MarginLoss) else 0
    zero = np.zeros(loss.parameter_shape(1))
    return float(loss.per_example_values(zero, np.zeros((1, 1)), np.array([label]))[0])


def minimiser_radius(loss: Loss, l2: float) -> float:
    """A radius ``R`` with ``||argmin J|| <= R`` for **every** dataset (rows ``||x|| <= 1``).

    ``R = min(L / lambda, sqrt(2 loss(0) / lambda))``: stationarity gives
    ``lambda w* = -(1/n) sum grad loss``, of norm at most ``L``; and
    ``(lambda/2)||w*||^2 <= J(w*) <= J(0) = loss(0)`` for a non-negative loss.
    """
    l2 = check_positive(l2, "l2")
    return min(loss.lipschitz / l2, math.sqrt(2.0 * loss_at_zero(loss) / l2))


def excess_risk_sensitivity(lipschitz: float, n: int, radius: float, *, grad_tol: float = 0.0,
                            l2: float | None = None) -> float:
    """Sensitivity ``4 L R / n + tol^2 / (2 lambda)`` of ``J(proj_R(w)) - J(w_hat)`` under replace-one.

    ``4 L R / n`` is that of ``J(proj_R(w)) - min J`` (module docstring). The
    query subtracts the solver's value ``J(w_hat)`` instead of ``min J``; with
    ``||grad J(w_hat)|| <= tol`` and lambda-strong convexity, ``0 <= J(w_hat)
    - min J <= tol^2 / (2 lambda)``, which the sensitivity adds (a review: it
    was left out, as :func:`~privml.linear._sensitivity.erm_sensitivity` does not
    leave out its own ``2 tol / lambda``).
    """
    lipschitz = check_positive(lipschitz, "lipschitz")
    n = check_count(n, "n")
    radius = check_positive(radius, "radius")
    grad_tol = check_positive(grad_tol, "grad_tol", allow_zero=True)
    slack = 0.0
    if grad_tol:
        if l2 is None:
            raise ValueError("grad_tol needs l2, the strong convexity it is divided by")
        slack = grad_tol**2 / (2.0 * check_positive(l2, "l2"))
    return 4.0 * lipschitz * radius / n + slack


def project_to_ball(w: ArrayLike, radius: float) -> np.ndarray:
    """``w * min(1, R / ||w||)`` (Frobenius norm for a matrix): a data-independent post-processing."""
    arr = check_finite_array(w, "w")
    norm = float(np.linalg.norm(arr))
    return arr * (radius / norm) if norm > radius else arr.copy()


def accuracy_query(X_val: ArrayLike, y_val: ArrayLike) -> Query:
    """``w -> accuracy of w on (X_val, y_val)``, sensitivity :func:`error_rate_sensitivity`.

    ``y_val`` in the loss's encoding: {-1, +1} for a ``(d,)`` model (score
    > 0 predicts +1, as :class:`~privml.linear.PrivateLinearClassifier`),
    {0..k-1} for a ``(d, k)`` model (arg-max score).
    """
    X = check_finite_array(X_val, "X_val", ndim=2)
    y = np.asarray(y_val)
    if y.shape != (X.shape[0],) or X.shape[0] == 0:
        raise ValueError(f"y_val must have shape ({X.shape[0]},) with at least one record, got {y.shape}")

    def accuracy(w: np.ndarray) -> float:
        scores = X @ w
        predicted = np.where(scores > 0, 1, -1) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return float(np.mean(predicted == y))

    return accuracy


def excess_risk_query(objective: RegularisedObjective, optimum: float, radius: float) -> Query:
    """``w -> -(J(proj_R(w)) - optimum)``, sensitivity :func:`excess_risk_sensitivity`.

    ``optimum`` is the solver's value ``J(w_hat)`` on the same data, within ``tol^2 / (2 lambda)`` of ``min J``
    (which :func:`excess_risk_sensitivity` adds), ``radius``
    the :func:`minimiser_radius`; the model the check scores, and hence the
    one to publish, is ``project_to_ball(w, radius)``.
    """
    optimum = check_finite(optimum, "optimum")
    radius = check_positive(radius, "radius")

    def negative_excess_risk(w: np.ndarray) -> float:
        return -(objective.value(project_to_ball(w, radius)) - optimum)

    return negative_excess_risk
