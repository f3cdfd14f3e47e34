"""Binary classification losses that depend on the margin ``z = y w.x``.

With labels ``y in {-1, +1}`` (CMS11, Sec. 2) a margin loss is
``loss(w; x, y) = phi(y w.x)`` for a convex scalar function ``phi``. Its
gradient is ``phi'(z) y x`` and its Hessian ``phi''(z) x x^T`` (``y^2 = 1``),
so every constant follows from bounds on ``phi'`` and ``phi''`` alone:

* Lipschitz:  ``||grad|| = |phi'(z)| ||x|| <= sup |phi'|`` for ``||x|| <= 1``;
* smoothness: ``||Hessian|| = phi''(z) ||x||^2 <= sup phi''``;
* rank:       ``x x^T`` has rank 1 (the structure CMS11's objective-perturbation proof uses).

Subclasses supply ``phi``, ``phi'`` and ``phi''`` as :meth:`margin_value`,
:meth:`margin_derivative` and :meth:`margin_second_derivative`.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
from numpy.typing import ArrayLike

from privml.losses._base import FloatArray, Loss, check_feature_bounds


class MarginLoss(Loss):
    """A binary loss ``phi(y w.x)`` with labels in {-1, +1} and ``w`` of shape ``(d,)``."""

    @abstractmethod
    def margin_value(self, z: ArrayLike) -> FloatArray:
        """``phi(z)``, elementwise."""

    @abstractmethod
    def margin_derivative(self, z: ArrayLike) -> FloatArray:
        """``phi'(z)``, elementwise."""

    @abstractmethod
    def margin_second_derivative(self, z: ArrayLike) -> FloatArray:
        """``phi''(z)``, elementwise."""

    @property
    def hessian_rank(self) -> int:
        """1: the per-example Hessian ``phi''(z) x x^T`` is a multiple of a rank-one matrix."""
        return 1

    def coordinate_smoothness(self, feature_bounds: ArrayLike) -> FloatArray:
        """``M_j = c * b_j ** 2`` with ``c`` = :attr:`smoothness` (logistic ``b_j^2/4``, Huber ``b_j^2/(2h)``).

        Derivation: the mean loss ``f`` has
        ``d^2 f / d w_j^2 = (1/n) sum_i phi''(z_i) x_ij^2 <= c b_j^2``
        because ``0 <= phi'' <= c`` and ``|x_ij| <= b_j``. Tight: every record at
        ``x_ij = b_j`` with a margin where ``phi'' = c`` attains it.
        """
        return self.smoothness * check_feature_bounds(feature_bounds) ** 2

    def coordinate_lipschitz(self, feature_bounds: ArrayLike) -> FloatArray:
        """``L * b_j`` with ``L`` = :attr:`lipschitz`: ``|phi'(z) y x_j| <= sup|phi'| b_j``."""
        return self.lipschitz * check_feature_bounds(feature_bounds)

    def check_labels(self, y: ArrayLike) -> FloatArray:
        """Return ``y`` as float64 after checking every label is -1 or +1.

        Labels in {0, 1} are refused with the conversion to use, rather than
        silently remapped: a 0 label would make the margin ``y w.x`` zero.
        """
        arr = np.asarray(y)
        if arr.ndim != 1:
            raise ValueError(f"y must be a 1-D array of labels, got shape {arr.shape}")
        if arr.dtype.kind == "b":
            raise ValueError("y must hold the labels -1 and +1, got booleans: use np.where(y, 1, -1)")
        if arr.dtype.kind not in "iuf":
            raise ValueError(f"y must hold the numeric labels -1 and +1, got dtype {arr.dtype}")
        if np.all((arr == 1) | (arr == -1)):
            return arr.astype(np.float64)
        found = np.unique(arr[np.isfinite(arr)]) if arr.dtype.kind == "f" else np.unique(arr)
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise ValueError("y contains NaN or infinite labels; binary labels must be -1 or +1")
        if np.all(np.isin(found, (0, 1))):
            raise ValueError(
                "binary labels must be -1 or +1, got labels in {0, 1}: convert them with y = 2 * y - 1"
            )
        shown = ", ".join(repr(v.item()) for v in found[:5]) + (", ..." if found.size > 5 else "")
        raise ValueError(f"binary labels must be -1 or +1, got the values {{{shown}}}")

    def _values(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        return self.margin_value(y * scores)

    def _score_gradients(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        return y * self.margin_derivative(y * scores)

    def _score_hessians(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        # d^2/ds^2 phi(y s) = y^2 phi''(y s) = phi''(y s) since y^2 = 1.
        return self.margin_second_derivative(y * scores)

    def _score_hessian_vector(self, scores: FloatArray, y: np.ndarray, directions: FloatArray) -> FloatArray:
        return self._score_hessians(scores, y) * directions
