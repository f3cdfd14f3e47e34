"""The Laplace mechanism: f(D) + Lap(Delta_1 / epsilon) per coordinate."""

from __future__ import annotations

import numpy as np

from privml.accounting._events import DpEvent, LaplaceEvent
from privml.mechanisms._base import Mechanism
from privml.mechanisms._noise import sample_noise


class LaplaceMechanism(Mechanism):
    """Add independent Laplace noise of scale ``sensitivity / epsilon`` to each coordinate.

    Parameters
    ----------
    sensitivity:
        L1 sensitivity ``Delta_1 = max ||f(D) - f(D')||_1`` over neighbours.
    epsilon, delta, neighbouring, random_state:
        As in :class:`~privml.mechanisms.Mechanism` (keyword-only; default replace-one; None: OS
        entropy). The mechanism is pure epsilon-DP: delta is accepted only so that a wrong value fails loudly.

    Notes
    -----
    Privacy: epsilon-DP for neighbouring D, D' whose values differ by at most
    ``Delta_1`` in L1 norm (Dwork, McSherry, Nissim and Smith 2006; Dwork and
    Roth 2014, Theorem 3.6): the density ratio at any output is
    ``exp(epsilon ||f(D) - f(D')||_1 / Delta_1) <= e^epsilon``.
    Sampling uses numpy's floating-point Laplace sampler, which is vulnerable
    in principle to Mironov's (2012) least-significant-bit attack; use
    :class:`privml.mechanisms.DiscreteLaplaceMechanism` where that matters.

    Examples
    --------
    >>> mech = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, random_state=0)
    >>> mech.scale
    1.0
    >>> mech.randomise([3.0, 4.0]).shape
    (2,)
    """

    pure = True

    @property
    def scale(self) -> float:
        """Laplace scale ``b = Delta_1 / epsilon`` (standard deviation ``sqrt(2) b``)."""
        return self.sensitivity / self.epsilon

    def randomise(self, value: float | np.ndarray) -> float | np.ndarray:
        """Return ``value`` plus independent Lap(Delta_1 / epsilon) noise on every entry (a float for a scalar).

        Parameters
        ----------
        value:
            f(D): a finite scalar or array (any shape); every entry gets its own noise.
            An array of n entries is one release whose L1 sensitivity is
            ``sensitivity``, not n releases.
        """
        return self._release(value, lambda arr: sample_noise("laplace", self.scale, arr.shape, self._rng))

    @property
    def event(self) -> DpEvent:
        """``LaplaceEvent(1 / epsilon)``: noise scale in units of the L1 sensitivity."""
        return LaplaceEvent(1.0 / self.epsilon, self.neighbouring)
