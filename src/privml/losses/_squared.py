"""Squared loss ``(w.x - y)^2 / 2`` for linear regression.

Its gradient ``(w.x - y) x`` grows without bound in ``w`` and ``y``, so it has
no Lipschitz constant: a private method may use it only with per-example
clipping (DP-SGD, DP-CD), never with output or objective perturbation, whose
sensitivity analysis needs a finite Lipschitz constant (CMS11, Thm 6 and 9; vdMH20, Thm 1).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import check_finite_array
from privml.losses._base import FloatArray, Loss, check_feature_bounds


class SquaredLoss(Loss):
    """Squared loss ``(w.x - y)^2 / 2`` with real targets ``y`` and ``w`` of shape ``(d,)``.

    Examples
    --------
    >>> import numpy as np
    >>> loss = SquaredLoss()
    >>> loss.value(np.array([1.0, 0.0]), np.array([[0.6, 0.8]]), np.array([0.0]))
    0.18
    >>> loss.lipschitz
    inf
    """

    def check_labels(self, y: ArrayLike) -> FloatArray:
        """Return the regression targets as a finite 1-D float64 array."""
        return check_finite_array(y, "y", ndim=1)

    @property
    def lipschitz(self) -> float:
        """``math.inf``: the gradient ``(w.x - y) x`` is unbounded, e.g. ``t x`` at
        ``w = t x / ||x||^2``, ``y = 0``, for any ``t``. Clip per-example gradients
        (DP-SGD, DP-CD) before relying on any sensitivity.
        """
        return math.inf

    @property
    def smoothness(self) -> float:
        """1.0. Derivation: the Hessian is ``x x^T`` whatever ``w``, with operator norm
        ``||x||^2 <= 1`` (Mangold et al. 2022, Sec. 2), attained for ``||x|| = 1``.
        """
        return 1.0

    @property
    def hessian_rank(self) -> int:
        """1: the per-example Hessian ``x x^T`` has rank one."""
        return 1

    def coordinate_smoothness(self, feature_bounds: ArrayLike) -> FloatArray:
        """``M_j = b_j ** 2``. Derivation: ``d^2 f / d w_j^2 = (1/n) sum_i x_ij^2 <= b_j^2``,
        with equality when every record has ``|x_ij| = b_j``.
        """
        return check_feature_bounds(feature_bounds) ** 2

    def coordinate_lipschitz(self, feature_bounds: ArrayLike) -> FloatArray:
        """All ``inf``: ``|(w.x - y) x_j|`` is unbounded for any ``x_j != 0``."""
        return np.full(check_feature_bounds(feature_bounds).shape, math.inf)

    def _values(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        return 0.5 * (scores - y) ** 2

    def _score_gradients(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        return scores - y

    def _score_hessians(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        return np.ones_like(scores)

    def _score_hessian_vector(self, scores: FloatArray, y: np.ndarray, directions: FloatArray) -> FloatArray:
        return directions
