"""The exponential mechanism: select a candidate with probability proportional to
exp(epsilon u / (2 Delta_u)), by the Gumbel-max trick."""

from __future__ import annotations

import numpy as np
from scipy.special import log_softmax

from privml._random import RandomState
from privml._validation import check_count, check_finite_array
from privml.accounting._events import DpEvent, ExponentialEvent
from privml.mechanisms._base import Mechanism
from privml.neighbouring import Neighbouring


class ExponentialMechanism(Mechanism):
    """Pick index r of a utility vector with P(r) proportional to exp(epsilon u_r / (2 Delta_u)).

    Parameters
    ----------
    sensitivity:
        Sensitivity of the utility, ``Delta_u = max_r |u_r(D) - u_r(D')|``
        over neighbours (an L-infinity bound on the utility vector).
    monotonic:
        Set True only if, for every pair of neighbours, the utilities of all
        candidates move in the same direction (all u_r(D') >= u_r(D), or all
        <=), e.g. counts under add/remove-one. The mechanism then uses
        exp(epsilon u_r / Delta_u), twice as sharp at the same epsilon.
    epsilon, delta, neighbouring, random_state:
        As in :class:`~privml.mechanisms.Mechanism` (keyword-only; delta must be 0: pure epsilon-DP;
        default replace-one; None: OS entropy).

    Notes
    -----
    Privacy: epsilon-DP (McSherry and Talwar 2007, Theorem 6; Dwork and Roth
    2014, Theorem 3.10): the factor exp(epsilon (u_r - u'_r) / (2 Delta_u))
    and the ratio of normalisers each lie in [e^(-epsilon/2), e^(epsilon/2)].
    For monotone utilities both factors of exp(epsilon (u_r - u'_r) / Delta_u)
    Z'/Z lie in [1, e^epsilon] and [e^-epsilon, 1] (or the reverse), so the
    ratio is again within e^(+-epsilon) (McSherry and Talwar 2007).
    In both cases the log-ratio of output probabilities varies over an
    interval of width epsilon (epsilon-bounded range, Durfee and Rogers 2019),
    hence the mechanism is also epsilon^2/8-zCDP (Cesar and Rogers 2021,
    Lemma 3.2), four times better than the epsilon^2/2 implied by pure DP;
    :attr:`zcdp_rho` reports it and :attr:`event` lets accountants use it.

    Sampling is the Gumbel-max trick: argmax_r (log-weight_r + G_r) with G_r
    i.i.d. standard Gumbel has exactly the softmax law, never forms the
    (overflowing) weights, and is floating-point sampling (see
    :mod:`privml.mechanisms`).

    Examples
    --------
    >>> mech = ExponentialMechanism(epsilon=2.0, sensitivity=1.0, random_state=0)
    >>> mech.probabilities([0.0, 0.0]).tolist()
    [0.5, 0.5]
    >>> mech.select([0.0, 100.0])
    1
    """

    pure = True

    def __init__(
        self,
        *,
        epsilon: float,
        sensitivity: float = 1.0,
        monotonic: bool = False,
        delta: float = 0.0,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        super().__init__(epsilon=epsilon, delta=delta, sensitivity=sensitivity, neighbouring=neighbouring,
                         random_state=random_state)
        if not isinstance(monotonic, (bool, np.bool_)):
            raise TypeError(f"monotonic must be a bool, got {type(monotonic).__name__}")
        self.monotonic = bool(monotonic)

    @property
    def temperature(self) -> float:
        """The factor c in P(r) proportional to exp(c u_r): epsilon / (2 Delta_u), or epsilon / Delta_u if monotonic."""
        return self.epsilon / (self.sensitivity if self.monotonic else 2.0 * self.sensitivity)

    @property
    def zcdp_rho(self) -> float:
        """epsilon^2 / 8: the zCDP parameter of one selection (Cesar and Rogers 2021, Lemma 3.2)."""
        return self.epsilon**2 / 8.0

    def _log_weights(self, utilities: object) -> np.ndarray:
        u = check_finite_array(utilities, "utilities", ndim=1)
        if u.size == 0:
            raise ValueError("utilities must contain at least one candidate")
        return self.temperature * u

    def probabilities(self, utilities: np.ndarray | list[float]) -> np.ndarray:
        """The selection probabilities, softmax(c u), computed in log space.

        Parameters
        ----------
        utilities:
            1-D finite utilities u_r(D), one per candidate.

        Returns
        -------
        ndarray
            Probabilities summing to 1, same length as ``utilities``. Computing
            them releases nothing only if the utilities are public; they are
            meant for analysis and tests.
        """
        return np.exp(log_softmax(self._log_weights(utilities)))

    def _sample(self, utilities: object, size: int) -> np.ndarray:
        """``size`` independent selections on the same utilities (Gumbel-max)."""
        log_w = self._log_weights(utilities)
        size = check_count(size, "size")
        gumbel = self._rng.gumbel(size=(size, log_w.size))
        return np.argmax(log_w + gumbel, axis=1)

    def select(self, utilities: np.ndarray | list[float]) -> int:
        """Return the selected candidate index.

        Parameters
        ----------
        utilities:
            1-D finite utilities u_r(D) of sensitivity ``Delta_u``; higher is better.

        Returns
        -------
        int
            Index r, drawn with probability ``probabilities(utilities)[r]``.
        """
        return int(self._sample(utilities, 1)[0])

    def select_rows(self, utilities: np.ndarray) -> np.ndarray:
        """One independent selection per row of ``utilities`` (shape ``(m, candidates)``), vectorised.

        Draws exactly what ``[select(row) for row in utilities]`` draws, in the
        same order (one Gumbel variate per candidate, row after row), so the
        selections are identical for the same generator state; only faster.

        Returns
        -------
        ndarray of int64, shape (m,)
        """
        u = check_finite_array(utilities, "utilities", ndim=2)
        if u.shape[1] == 0:
            raise ValueError("utilities must contain at least one candidate")
        if u.shape[0] == 0:
            return np.empty(0, dtype=np.int64)
        gumbel = self._rng.gumbel(size=u.shape)
        return np.argmax(self.temperature * u + gumbel, axis=1).astype(np.int64)

    def randomise(self, value: np.ndarray | list[float]) -> int:
        """Alias of :meth:`select` (the :class:`Mechanism` interface)."""
        return self.select(value)

    @property
    def event(self) -> DpEvent:
        """``ExponentialEvent(epsilon)``: epsilon-DP and epsilon^2/8-zCDP."""
        return ExponentialEvent(self.epsilon, self.neighbouring)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, monotonic={self.monotonic!r})"
