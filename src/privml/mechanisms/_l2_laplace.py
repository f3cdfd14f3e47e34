"""The L2-Laplace ("multidimensional Laplace") mechanism: noise with density
proportional to exp(-epsilon ||z||_2 / Delta_2).

This is the noise of output perturbation and objective perturbation in
Chaudhuri, Monteleoni and Sarwate (2011, "CMS11"); :func:`sample_l2_laplace`
is the one sampler those modules and private prediction reuse.
"""

from __future__ import annotations

import numpy as np

from privml._random import RandomState, check_random_state
from privml._validation import check_count, check_positive
from privml.accounting._events import DpEvent, EpsilonDeltaEvent
from privml.mechanisms._base import Mechanism


def sample_l2_laplace(dim: int, scale: float, size: int, rng: RandomState) -> np.ndarray:
    """Draw ``size`` vectors in R^dim with density proportional to exp(-||z||_2 / scale).

    Parameters
    ----------
    dim:
        Dimension d >= 1.
    scale:
        ``b > 0``; for epsilon-DP with L2 sensitivity ``Delta_2`` use ``b = Delta_2 / epsilon``.
    size:
        Number of independent vectors, >= 1.
    rng:
        A numpy Generator (or anything :func:`privml._random.check_random_state` accepts).

    Returns
    -------
    ndarray of shape (size, dim)

    Notes
    -----
    In polar coordinates the density exp(-r / b) r^(d-1) dr du factorises, so
    the norm is Gamma(shape=d, scale=b) and the direction is uniform on the
    unit sphere, independently (the sampler described with CMS11,
    Algorithm 1). The direction is a normalised standard Gaussian vector,
    which is rotation invariant. For d = 1 this is Lap(b).
    Adding this noise with ``b = Delta_2 / epsilon`` is epsilon-DP for L2
    sensitivity ``Delta_2`` under whichever neighbouring relation
    ``Delta_2`` is measured (see :class:`L2LaplaceMechanism`).
    Floating-point sampling (numpy): see the caveat in :mod:`privml.mechanisms`.
    """
    dim = check_count(dim, "dim")
    scale = check_positive(scale, "scale")
    size = check_count(size, "size")
    gen = check_random_state(rng)
    radius = gen.gamma(shape=dim, scale=scale, size=size)
    direction = gen.standard_normal((size, dim))
    # A standard normal vector is exactly 0 with probability 0; no guard needed.
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return radius[:, None] * direction


class L2LaplaceMechanism(Mechanism):
    """Add one noise vector with density proportional to exp(-epsilon ||z||_2 / Delta_2).

    Parameters
    ----------
    sensitivity:
        L2 sensitivity ``Delta_2 = max ||f(D) - f(D')||_2`` over neighbours.
    epsilon, delta, neighbouring, random_state:
        As in :class:`~privml.mechanisms.Mechanism` (keyword-only; delta must be 0: pure epsilon-DP;
        default replace-one, as for the ERM methods of CMS11; None: OS entropy).

    Notes
    -----
    Privacy: epsilon-DP for neighbours whose values differ by at most
    ``Delta_2`` in L2 norm. At any output y the density ratio is
    ``exp(epsilon (||y - f(D')|| - ||y - f(D)||) / Delta_2)``, at most
    ``exp(epsilon ||f(D) - f(D')|| / Delta_2) <= e^epsilon`` by the triangle
    inequality; this is the argument of CMS11's output perturbation theorem
    (Theorem 6 of the JMLR version). Compared with per-coordinate Laplace it
    needs only the L2 sensitivity (sqrt(d) times smaller than L1 at worst),
    but its norm grows like d Delta_2 / epsilon.

    Examples
    --------
    >>> mech = L2LaplaceMechanism(epsilon=1.0, sensitivity=0.1, random_state=0)
    >>> mech.randomise([0.0, 0.0, 0.0]).shape
    (3,)
    """

    pure = True

    @property
    def scale(self) -> float:
        """``b = Delta_2 / epsilon``: the norm of the noise is Gamma(d, b), mean ``d b``."""
        return self.sensitivity / self.epsilon

    def _noise(self, dim: int, size: int) -> np.ndarray:
        """``size`` independent noise vectors of dimension ``dim``, shape (size, dim)."""
        return sample_l2_laplace(dim, self.scale, size, self._rng)

    def randomise(self, value: float | np.ndarray) -> float | np.ndarray:
        """Return ``value`` plus one L2-Laplace noise vector over all its entries (a float for a scalar).

        Parameters
        ----------
        value:
            f(D): a finite scalar or array. The whole array is one vector (a
            matrix is treated as its flattening, e.g. vec(W) of a multi-class
            model), and ``sensitivity`` bounds the change of that vector.
        """
        return self._release(value, self._vector_noise)

    def _vector_noise(self, arr: np.ndarray) -> np.ndarray:
        if arr.size == 0:
            raise ValueError("value must have at least one entry")
        return self._noise(arr.size, 1)[0].reshape(arr.shape)

    @property
    def event(self) -> DpEvent:
        """``EpsilonDeltaEvent(epsilon, 0)``: no tighter accountant applies to this noise."""
        return EpsilonDeltaEvent(self.epsilon, 0.0, self.neighbouring)
