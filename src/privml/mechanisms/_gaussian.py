"""The Gaussian mechanism: f(D) + N(0, sigma^2 I), sigma calibrated to (epsilon, delta)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from privml._random import RandomState
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma, classic_gaussian_sigma
from privml.accounting._events import DpEvent, GaussianEvent
from privml.mechanisms._base import Mechanism
from privml.mechanisms._noise import sample_noise
from privml.neighbouring import Neighbouring

Calibration = Literal["analytic", "classic"]
_CALIBRATIONS: dict[str, Callable[[float, float, float], float]] = {
    "analytic": analytic_gaussian_sigma,
    "classic": classic_gaussian_sigma,
}


class GaussianMechanism(Mechanism):
    """Add N(0, sigma^2) noise to every coordinate, sigma set from (epsilon, delta).

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon:
        Privacy parameter, > 0 (< 1 for ``calibration="classic"``).
    delta:
        Failure probability in (0, 1); required (the Gaussian is never pure DP).
    sensitivity:
        L2 sensitivity ``Delta_2 = max ||f(D) - f(D')||_2`` over neighbours.
    calibration:
        ``"analytic"`` (default): the smallest sigma meeting the exact
        condition of Balle and Wang (2018), Theorem 8, found by bisection
        (:func:`privml.accounting.analytic_gaussian_sigma`).
        ``"classic"``: ``sigma = Delta_2 sqrt(2 ln(1.25/delta)) / epsilon``
        (Dwork and Roth 2014, Theorem A.1), valid only for epsilon < 1 and
        refused otherwise; always noisier, kept for comparison.
    neighbouring, random_state:
        As in :class:`~privml.mechanisms.Mechanism` (default replace-one; None: OS entropy).

    Attributes
    ----------
    sigma:
        The noise standard deviation, ``noise_multiplier * sensitivity``.
    noise_multiplier:
        ``sigma / Delta_2`` (the inverse of GDP's mu), fixed at construction.

    Notes
    -----
    Privacy: (epsilon, delta)-DP for neighbours whose values differ by at
    most ``Delta_2`` in L2 norm; with the analytic calibration the pair is
    exactly on the privacy curve (Balle and Wang 2018, Theorem 8: the
    condition is necessary and sufficient). :attr:`event` records the noise
    multiplier, so RDP, GDP or PLD accountants compose repeated calls tightly.
    Sampling uses numpy's floating-point normal sampler (see
    :mod:`privml.mechanisms` for the Mironov 2012 caveat and the discrete
    Gaussian alternative).

    Examples
    --------
    >>> mech = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0, random_state=0)
    >>> round(mech.sigma, 4)
    3.7306
    >>> round(GaussianMechanism(epsilon=0.5, delta=1e-5, calibration="classic").sigma, 4)
    9.6896
    """

    pure = False

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float = 1.0,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        calibration: Calibration = "analytic",
        random_state: RandomState = None,
    ) -> None:
        super().__init__(epsilon=epsilon, delta=delta, sensitivity=sensitivity, neighbouring=neighbouring,
                         random_state=random_state)
        if calibration not in _CALIBRATIONS:
            raise ValueError(f"calibration must be 'analytic' or 'classic', got {calibration!r}")
        self.calibration = calibration
        # Both calibrations are linear in the sensitivity, so calibrate at 1.
        self.noise_multiplier: float = _CALIBRATIONS[calibration](self.epsilon, self.delta, 1.0)

    @property
    def sigma(self) -> float:
        """Noise standard deviation ``noise_multiplier * sensitivity``."""
        return self.noise_multiplier * self.sensitivity

    def randomise(self, value: float | np.ndarray) -> float | np.ndarray:
        """Return ``value`` plus independent N(0, sigma^2) noise on every entry (a float for a scalar).

        Parameters
        ----------
        value:
            f(D): a finite scalar or array; the whole array is one release whose
            L2 sensitivity is ``sensitivity``.
        """
        return self._release(value, lambda arr: sample_noise("gaussian", self.sigma, arr.shape, self._rng))

    @property
    def event(self) -> DpEvent:
        """``GaussianEvent(sigma / sensitivity)`` under this mechanism's relation."""
        return GaussianEvent(self.noise_multiplier, self.neighbouring)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, calibration={self.calibration!r}, sigma={self.sigma!r})"
