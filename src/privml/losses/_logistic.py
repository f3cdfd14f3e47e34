"""Binary logistic loss ``log(1 + exp(-y w.x))`` (CMS11 Sec. 3.4.1).

Computed on the margin ``z = y w.x`` with ``logaddexp`` and ``expit`` so that
no margin overflows: ``log(1 + e^-z)`` is ``logaddexp(0, -z)``, exact to
rounding for ``|z|`` up to the float64 range, where the naive formula returns
``inf`` from ``z = -710`` on.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from privml.losses._base import FloatArray
from privml.losses._margin import MarginLoss


class LogisticLoss(MarginLoss):
    """Logistic loss for labels in {-1, +1}: ``phi(z) = log(1 + e^{-z})``, ``z = y w.x``.

    Examples
    --------
    >>> import numpy as np
    >>> loss = LogisticLoss()
    >>> round(loss.value(np.zeros(2), np.array([[0.6, 0.8]]), np.array([1])), 6)  # log 2
    0.693147
    >>> loss.lipschitz, loss.smoothness
    (1.0, 0.25)
    """

    def margin_value(self, z: ArrayLike) -> FloatArray:
        """``log(1 + e^{-z})`` as ``logaddexp(0, -z)``."""
        return np.logaddexp(0.0, -np.asarray(z, dtype=np.float64))

    def margin_derivative(self, z: ArrayLike) -> FloatArray:
        """``phi'(z) = -1 / (1 + e^{z}) = -expit(-z)``, in (-1, 0)."""
        return -expit(-np.asarray(z, dtype=np.float64))

    def margin_second_derivative(self, z: ArrayLike) -> FloatArray:
        """``phi''(z) = expit(z) expit(-z)``, in (0, 1/4]."""
        z_arr = np.asarray(z, dtype=np.float64)
        return expit(z_arr) * expit(-z_arr)

    @property
    def lipschitz(self) -> float:
        """1.0. Derivation: ``|phi'(z)| = 1 / (1 + e^z) < 1``, so the per-example
        gradient ``phi'(z) y x`` has norm ``< ||x|| <= 1`` (CMS11 Sec. 3.4.1).
        The supremum 1 is approached as ``z -> -inf`` (a confidently wrong example).
        """
        return 1.0

    @property
    def smoothness(self) -> float:
        """0.25. Derivation: ``phi''(z) = s (1 - s)`` with ``s = expit(z) in (0, 1)``,
        at most 1/4 (AM-GM), with equality exactly at ``z = 0``. The Hessian
        ``phi''(z) x x^T`` has operator norm ``phi''(z) ||x||^2 <= 1/4``
        (CMS11 Sec. 3.4.1, ``c = 1/4``).
        """
        return 0.25
