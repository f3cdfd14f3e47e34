"""Huber hinge loss of width ``h`` (CMS11 Sec. 3.4.2): a smoothed SVM hinge.

With the margin ``z = y w.x``::

    phi(z) = 0                        if z > 1 + h
             (1 + h - z)^2 / (4 h)    if |1 - z| <= h
             1 - z                    if z < 1 - h

The hinge ``max(0, 1 - z)`` has no second derivative at 1, which objective
perturbation needs; replacing the kink by a parabola on ``[1 - h, 1 + h]``
keeps ``phi'`` continuous and bounds ``phi''`` by ``1 / (2 h)``. ``phi''`` jumps
at the two knots ``1 +- h``; this module returns the interior value ``1/(2h)``
there (the middle branch is closed). CMS11 Sec. 3.4.2 applies objective
perturbation to this loss with ``c = 1/(2h)`` despite the two knots.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import check_positive
from privml.losses._base import FloatArray
from privml.losses._margin import MarginLoss


class HuberHingeLoss(MarginLoss):
    """Huber hinge loss of width ``h`` for labels in {-1, +1}.

    Parameters
    ----------
    h : float, default 0.5
        Half-width of the quadratic piece, > 0. Smaller ``h`` is closer to the
        hinge but raises the smoothness constant ``1/(2h)``, which objective
        perturbation pays for in privacy; 0.5 makes it 1, the squared loss's.

    Examples
    --------
    >>> loss = HuberHingeLoss(h=0.5)
    >>> [float(v) for v in loss.margin_value([2.0, 1.0, 0.0])]
    [0.0, 0.125, 1.0]
    >>> loss.smoothness
    1.0
    """

    def __init__(self, h: float = 0.5) -> None:
        self.h = check_positive(h, "h")

    def margin_value(self, z: ArrayLike) -> FloatArray:
        """``phi(z)`` via ``t = 1 + h - z`` clipped to ``[0, 2h]``, so no branch squares a huge ``t``."""
        t = 1.0 + self.h - np.asarray(z, dtype=np.float64)
        quadratic_part = np.clip(t, 0.0, 2.0 * self.h)
        # Past the left knot the parabola (value h at t = 2h) continues as the line t - h.
        return quadratic_part**2 / (4.0 * self.h) + np.maximum(t - 2.0 * self.h, 0.0)

    def margin_derivative(self, z: ArrayLike) -> FloatArray:
        """``phi'(z) = -clip((1 + h - z) / (2h), 0, 1)``: continuous, in [-1, 0]."""
        t = 1.0 + self.h - np.asarray(z, dtype=np.float64)
        return -np.clip(t / (2.0 * self.h), 0.0, 1.0)

    def margin_second_derivative(self, z: ArrayLike) -> FloatArray:
        """``1/(2h)`` on ``|1 - z| <= h`` (knots included), 0 elsewhere."""
        z_arr = np.asarray(z, dtype=np.float64)
        return np.where(np.abs(1.0 - z_arr) <= self.h, 1.0 / (2.0 * self.h), 0.0)

    @property
    def lipschitz(self) -> float:
        """1.0. Derivation: ``|phi'(z)| = clip((1 + h - z)/(2h), 0, 1) <= 1``, so the
        gradient ``phi'(z) y x`` has norm ``<= ||x|| <= 1``; attained for
        ``z <= 1 - h`` and ``||x|| = 1`` (CMS11 Sec. 3.4.2).
        """
        return 1.0

    @property
    def smoothness(self) -> float:
        """``1 / (2h)``. Derivation: ``phi''`` is ``1/(2h)`` on the quadratic piece and
        0 on the linear and flat pieces, so the Hessian ``phi''(z) x x^T`` has
        operator norm ``<= ||x||^2 / (2h) <= 1/(2h)``, attained for
        ``|1 - z| <= h`` and ``||x|| = 1`` (CMS11 Sec. 3.4.2, ``c = 1/(2h)``).
        """
        return 1.0 / (2.0 * self.h)

    def __repr__(self) -> str:
        return f"HuberHingeLoss(h={self.h!r})"
