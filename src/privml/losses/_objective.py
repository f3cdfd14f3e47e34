"""The regularised ERM objective, ready for scipy's optimisers.

Every ERM method minimises (CMS11, Eq. 1; vdMH20, Eq. 1)
``J(w) = (lambda/2) ||w||^2 + (1/n) sum_i loss(w; x_i, y_i)``.
Objective perturbation (CMS11 Alg. 2; KST12; vdMH20 Alg. 4) minimises
``J(w) + (1/n) b.w + (Delta/2) ||w||^2`` instead, so both extra terms are
optional here. The data are validated once, at construction, so the many
evaluations an optimiser makes cost only the arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import check_finite_array, check_positive
from privml.losses._base import FloatArray, Loss


class RegularisedObjective:
    """``J(w) = (l2/2)||w||^2 + mean loss + (1/n) linear.w + (extra_l2/2)||w||^2``.

    Every method takes and returns *flat* parameter vectors of length
    :attr:`n_parameters` (a ``(d, k)`` matrix is flattened row-major), as
    :func:`scipy.optimize.minimize` expects; a ``(d, k)`` array is accepted too.

    Parameters
    ----------
    loss : Loss
        The per-example loss.
    X : array_like, shape (n, d)
        Features; finite. Constants such as :attr:`smoothness` assume ``||x_i|| <= 1``.
    y : array_like, shape (n,)
        Labels the loss accepts.
    l2 : float
        Regularisation strength ``lambda >= 0``.
    linear : array_like, optional
        The vector ``b`` of objective perturbation, NOT pre-divided by ``n``:
        the objective gains ``(1/n) b.w`` (CMS11 Alg. 2). Default zero.
    extra_l2 : float, default 0
        The extra quadratic ``Delta >= 0`` of objective perturbation.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.optimize import minimize
    >>> from privml.losses import LogisticLoss
    >>> X = np.array([[0.6, 0.8], [-0.8, 0.6], [0.0, -1.0]])
    >>> objective = RegularisedObjective(LogisticLoss(), X, np.array([1, -1, -1]), l2=0.1)
    >>> result = minimize(objective.value_and_grad, np.zeros(2), jac=True, method="L-BFGS-B",
    ...                   options={"gtol": 1e-12})
    >>> bool(np.linalg.norm(objective.gradient(result.x)) < 1e-8)
    True
    """

    def __init__(
        self,
        loss: Loss,
        X: ArrayLike,
        y: ArrayLike,
        l2: float,
        *,
        linear: ArrayLike | None = None,
        extra_l2: float = 0.0,
    ) -> None:
        if not isinstance(loss, Loss):
            raise TypeError(f"loss must be a privml.losses.Loss, got {type(loss).__name__}")
        self.loss = loss
        self.X, self.y = loss.check_data(X, y)
        self.l2 = check_positive(l2, "l2", allow_zero=True)
        self.extra_l2 = check_positive(extra_l2, "extra_l2", allow_zero=True)
        self.n_samples, n_features = self.X.shape
        self.parameter_shape = loss.parameter_shape(n_features)
        self.n_parameters = math.prod(self.parameter_shape)
        if linear is None:
            self.linear: FloatArray = np.zeros(self.n_parameters)
        else:
            self.linear = self._flat(linear, "linear")

    @property
    def strong_convexity(self) -> float:
        """``l2 + extra_l2``: the loss is convex, so J is at least this strongly convex."""
        return self.l2 + self.extra_l2

    @property
    def smoothness(self) -> float:
        """``loss.smoothness + l2 + extra_l2``: a bound on J's Hessian norm when ``||x_i|| <= 1``.

        The mean of per-example Hessians bounded by c is bounded by c; the
        quadratic terms add their coefficients; the linear term adds nothing.
        """
        return self.loss.smoothness + self.l2 + self.extra_l2

    def _flat(self, w: ArrayLike, name: str) -> FloatArray:
        arr = check_finite_array(w, name)
        if arr.shape not in {(self.n_parameters,), self.parameter_shape}:
            raise ValueError(
                f"{name} must have {self.n_parameters} entries, shape ({self.n_parameters},) "
                f"or {self.parameter_shape}, got shape {arr.shape}"
            )
        return arr.reshape(-1)

    def value(self, w: ArrayLike) -> float:
        """``J(w)``."""
        flat = self._flat(w, "w")
        scores = self.X @ flat.reshape(self.parameter_shape)
        loss_value = float(np.mean(self.loss._values(scores, self.y)))
        linear_value = float(self.linear @ flat) / self.n_samples
        return 0.5 * (self.l2 + self.extra_l2) * float(flat @ flat) + loss_value + linear_value

    def gradient(self, w: ArrayLike) -> FloatArray:
        """``grad J(w)``, flat."""
        return self.value_and_grad(w)[1]

    def value_and_grad(self, w: ArrayLike) -> tuple[float, FloatArray]:
        """``(J(w), grad J(w))`` from one pass over the data (``minimize(..., jac=True)``)."""
        flat = self._flat(w, "w")
        loss_value, loss_grad = self.loss._value_and_grad(flat.reshape(self.parameter_shape), self.X, self.y)
        total_l2 = self.l2 + self.extra_l2
        value = 0.5 * total_l2 * float(flat @ flat) + loss_value + float(self.linear @ flat) / self.n_samples
        grad = total_l2 * flat + loss_grad.reshape(-1) + self.linear / self.n_samples
        return value, grad

    def hessian_vector_product(self, w: ArrayLike, v: ArrayLike) -> FloatArray:
        """``Hess J(w) v``, flat (scipy's ``hessp(x, p)``); the linear term has no curvature."""
        flat_w = self._flat(w, "w")
        flat_v = self._flat(v, "v")
        product = self.loss._hessian_vector_product(
            flat_w.reshape(self.parameter_shape), self.X, self.y, flat_v.reshape(self.parameter_shape)
        )
        return product.reshape(-1) + (self.l2 + self.extra_l2) * flat_v

    def hessian(self, w: ArrayLike) -> FloatArray:
        """Dense ``Hess J(w)``, ``(n_parameters, n_parameters)``."""
        flat = self._flat(w, "w")
        matrix = self.loss._hessian(flat.reshape(self.parameter_shape), self.X, self.y)
        matrix[np.diag_indices_from(matrix)] += self.l2 + self.extra_l2
        return matrix

    def __repr__(self) -> str:
        return (
            f"RegularisedObjective({self.loss!r}, n_samples={self.n_samples}, l2={self.l2!r}, "
            f"extra_l2={self.extra_l2!r}, linear={'zero' if not self.linear.any() else 'given'})"
        )
