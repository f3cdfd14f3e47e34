"""AboveThreshold (the sparse vector technique): report the first query whose
noisy answer clears a noisy threshold, then halt."""

from __future__ import annotations

import math

from privml._random import RandomState
from privml._validation import check_finite
from privml.accounting._events import DpEvent, EpsilonDeltaEvent
from privml.exceptions import PrivmlError
from privml.mechanisms._base import Mechanism
from privml.neighbouring import Neighbouring


class MechanismHalted(PrivmlError, RuntimeError):
    """A one-shot mechanism has already produced its answer; further queries are refused.

    Answering after the halt is not covered by the privacy guarantee, so
    nothing is computed and no noise is drawn.
    """


class AboveThreshold(Mechanism):
    """Answer a stream of queries with False until a noisy answer exceeds a noisy threshold.

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon:
        Privacy parameter of the whole run, > 0.
    threshold:
        The public threshold T (finite).
    sensitivity:
        Sensitivity ``Delta`` of every query: ``|f_i(D) - f_i(D')| <= Delta`` for
        neighbours, for each (possibly adaptively chosen) query f_i.
    delta:
        Must be 0 (pure epsilon-DP).
    neighbouring, random_state:
        As in :class:`~privml.mechanisms.Mechanism` (default replace-one; None: OS entropy).

    Notes
    -----
    Dwork and Roth (2014), Algorithm 1: at construction draw
    ``T_hat = T + Lap(2 Delta / epsilon)`` once; query i answers
    ``f_i(D) + Lap(4 Delta / epsilon) >= T_hat`` with fresh noise. The first
    True halts the mechanism: later calls raise :class:`MechanismHalted`.

    Privacy: the whole transcript (any number of False answers followed by at
    most one True) is epsilon-DP (Dwork and Roth 2014, Theorem 3.23). The cost
    does not grow with the number of queries because the threshold noise is
    shared. Redrawing it for every query makes each query pay for itself, and
    Lap(2 Delta / epsilon) query noise is only covered for 1.5 epsilon when the
    queries are not monotone (by the budget split of Lyu, Su and Li 2017, with
    epsilon_1 = epsilon / 2, epsilon_2 = epsilon); the tests check that both
    variants are caught. :attr:`event` is one (epsilon, 0) event for the
    entire run. Sampling is floating-point (see :mod:`privml.mechanisms`).

    Examples
    --------
    >>> at = AboveThreshold(epsilon=1.0, threshold=10.0, random_state=0)
    >>> at.query(-100.0), at.query(100.0), at.halted, at.n_queries
    (False, True, True, 2)
    """

    pure = True

    def __init__(
        self,
        *,
        epsilon: float,
        threshold: float,
        sensitivity: float = 1.0,
        delta: float = 0.0,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        super().__init__(epsilon=epsilon, delta=delta, sensitivity=sensitivity, neighbouring=neighbouring,
                         random_state=random_state)
        self.threshold = check_finite(threshold, "threshold")
        if not math.isfinite(self.query_scale):
            # A subnormal epsilon overflows the scales to inf: every answer would be noise, and the verdict meaningless.
            raise ValueError(f"epsilon={self.epsilon!r} is too small: the noise scale 4 Delta / epsilon overflows")
        # Drawn once: sharing this noise across queries is what makes the cost
        # independent of the number of queries.
        self._noisy_threshold = self.threshold + self._rng.laplace(0.0, self.threshold_scale)
        self._n_queries = 0
        self._halted = False

    @property
    def threshold_scale(self) -> float:
        """Scale of the threshold noise, ``2 Delta / epsilon``."""
        return 2.0 * self.sensitivity / self.epsilon

    @property
    def query_scale(self) -> float:
        """Scale of the noise on each query answer, ``4 Delta / epsilon``."""
        return 4.0 * self.sensitivity / self.epsilon

    @property
    def halted(self) -> bool:
        """Whether a query has come out above the threshold (no more queries allowed)."""
        return self._halted

    @property
    def n_queries(self) -> int:
        """Number of queries answered so far (the halting query included)."""
        return self._n_queries

    def query(self, value: float) -> bool:
        """Answer whether the noisy ``value`` is above the noisy threshold.

        Parameters
        ----------
        value:
            f_i(D), a finite number from a query of sensitivity ``Delta``.

        Returns
        -------
        bool
            True at most once; the mechanism halts after it.

        Raises
        ------
        MechanismHalted
            if a previous query returned True.
        """
        if self._halted:
            raise MechanismHalted(
                f"AboveThreshold already answered True at query {self._n_queries}; "
                "further queries are not covered by its privacy guarantee"
            )
        value = check_finite(value, "value")
        self._n_queries += 1
        above = value + self._rng.laplace(0.0, self.query_scale) >= self._noisy_threshold
        self._halted = bool(above)
        return self._halted

    def randomise(self, value: float) -> bool:
        """Alias of :meth:`query` (the :class:`Mechanism` interface)."""
        return self.query(value)

    @property
    def event(self) -> DpEvent:
        """``EpsilonDeltaEvent(epsilon, 0)`` for the whole run, however many queries."""
        return EpsilonDeltaEvent(self.epsilon, 0.0, self.neighbouring)

    def __repr__(self) -> str:
        return (
            f"{super().__repr__()[:-1]}, threshold={self.threshold!r}, "
            f"n_queries={self._n_queries}, halted={self._halted})"
        )
