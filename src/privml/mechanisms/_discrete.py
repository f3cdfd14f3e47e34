"""Exact (hardened) samplers: discrete Laplace and discrete Gaussian noise.

When to use this module
-----------------------
The fast mechanisms in :mod:`privml.mechanisms` draw floating-point Laplace and
Gaussian noise with numpy. That is adequate for training models whose outputs
are themselves messy floating-point objects, but a released *number* can leak
through the low-order bits of a floating-point sample: Mironov (2012,
"On significance of the least significant bits for differential privacy")
recovers the noiseless value from naive Laplace samples. Use the mechanisms here
when a count, a scalar or a short vector is released to an untrusted party and
the release must carry its guarantee exactly as proved:

- :class:`DiscreteLaplaceMechanism`: pure epsilon-DP for integer queries of
  integer L1 sensitivity (the geometric mechanism).
- :class:`DiscreteGaussianMechanism`: (epsilon, delta)-DP, calibrated on the
  exact delta(epsilon) of the discrete Gaussian (CKS20, Theorem 7).

Both add noise to integers, so real-valued queries are first rounded to a
public grid ``granularity * Z`` (a data-independent map applied to the query;
its effect on the sensitivity is accounted for, see the classes).

The samplers are Algorithms 1-3 of Canonne, Kamath and Steinke, "The Discrete
Gaussian for Differential Privacy" (NeurIPS 2020; "CKS20"). Every step uses
integer or :class:`fractions.Fraction` arithmetic and uniform integers drawn by
exact rejection from uniform 64-bit words, so the output distribution is
exactly the stated one; no floating-point number touches a sample. The steps
are vectorised with numpy integer arrays (Python integers in object arrays
when a value would not fit in int64), which changes the order in which
independent draws are made but not the distribution. They live in
:mod:`privml.mechanisms._discrete_samplers`, the discrete Gaussian's exact
delta and its calibration in :mod:`privml.mechanisms._discrete_gaussian_privacy`;
this module holds the mechanisms.

Randomness
----------
``rng=None`` / ``random_state=None`` (the default) reads the operating
system's cryptographically secure generator (:func:`secrets.token_bytes`).
**Only this default is meant for deployment.** An int, a
:class:`numpy.random.SeedSequence` or a :class:`numpy.random.Generator` gives
a reproducible, *predictable* stream for tests and experiments: anyone who
knows the seed can subtract the noise.
"""

from __future__ import annotations

import math
import numbers
from abc import abstractmethod
from fractions import Fraction
from typing import Final

import numpy as np

from privml._random import RandomState
from privml._validation import check_count, check_finite_array, check_positive
from privml.accounting._events import DpEvent, EpsilonDeltaEvent
from privml.mechanisms._base import Mechanism
from privml.mechanisms._discrete_gaussian_privacy import (
    _rational_below,
    calibrate_discrete_gaussian,
)
from privml.mechanisms._discrete_samplers import (
    _INT64_SAFE,
    _discrete_gaussian,
    _discrete_laplace,
    _max_abs,
    _narrow,
    _widen,
    _WordSource,
)
from privml.neighbouring import Neighbouring

__all__ = [
    "DiscreteGaussianMechanism",
    "DiscreteLaplaceMechanism",
]

#: epsilon (and sigma^2) are made rational with denominators at most this.
_MAX_DENOMINATOR: Final = 10**6
_HALF: Final = Fraction(1, 2)


# --------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------


def _check_granularity(granularity: object) -> Fraction | None:
    if granularity is None:
        return None
    return Fraction(check_positive(granularity, "granularity"))


def _as_integers(value: object) -> np.ndarray:
    """An integer query value as an int64 (or Python-int object) array; never rounds."""
    arr = np.asarray(value)
    if arr.dtype == bool:
        raise TypeError("value must be integer-valued, got booleans")
    if arr.dtype.kind in "iu":
        if arr.size == 0 or (int(arr.min()) > -_INT64_SAFE and int(arr.max()) < _INT64_SAFE):
            return arr.astype(np.int64)
        return arr.astype(object)
    if arr.dtype.kind == "O":
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr.flat):
            raise TypeError("value must be integer-valued; pass granularity=... to round a real-valued query")
        return _narrow(arr)
    flt = check_finite_array(arr, "value")
    if not np.all(flt == np.floor(flt)):
        raise ValueError("value must be integer-valued; pass granularity=... to round a real-valued query")
    return _narrow(np.array([int(v) for v in flt.flat], dtype=object).reshape(flt.shape))


def _round_to_grid(value: object, granularity: Fraction) -> np.ndarray:
    """Exact nearest grid index floor(x / g + 1/2) of each float x (ties go up).

    The map is monotone, so two values at distance r are at most ceil(r / g)
    grid steps apart; done in Fractions so that float division cannot add a step.
    """
    x = check_finite_array(value, "value")
    idx = [math.floor(Fraction(v) / granularity + _HALF) for v in x.ravel().tolist()]
    return _narrow(np.array(idx, dtype=object)).reshape(x.shape)


def _add_noise(k: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Exact integer sum (falls back to Python ints where int64 could overflow)."""
    bound = _max_abs(k) + _max_abs(noise)
    return _narrow(_widen(k, bound) + _widen(noise, bound))


def _source_for(random_state: RandomState, rng: np.random.Generator) -> _WordSource:
    """CSPRNG for ``None``; otherwise the mechanism's (reproducible) generator."""
    return _WordSource(None if random_state is None else rng)


class _DiscreteMechanism(Mechanism):
    """Shared plumbing: integer or grid-rounded inputs, integer noise, exact outputs."""

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float,
        granularity: float | None,
        neighbouring: Neighbouring | str,
        random_state: RandomState,
    ) -> None:
        super().__init__(epsilon=epsilon, delta=delta, sensitivity=sensitivity, neighbouring=neighbouring,
                         random_state=random_state)
        self.granularity = granularity
        self._grid = _check_granularity(granularity)
        # Outputs are shown on the decimal grid the user wrote (0.01, not its binary
        # neighbour): a fixed map of the released integer, so post-processing.
        self._display_grid = None if self._grid is None else Fraction(str(float(self._grid)))
        if self._grid is None:
            self.sensitivity = check_count(sensitivity, "sensitivity")
        self._source = _source_for(random_state, self._rng)

    def _grid_steps(self, extra: int = 0) -> int:
        """Sensitivity in grid units: ceil(Delta / g) (+ ``extra``), or the integer Delta."""
        if self._grid is None:
            return int(self.sensitivity)
        return math.ceil(Fraction(self.sensitivity) / self._grid) + extra

    @abstractmethod
    def _noise(self, count: int, dimension: int) -> np.ndarray:
        """``count`` i.i.d. integer noise values for a ``dimension``-coordinate release."""

    def randomise(self, value):  # noqa: ANN001, ANN201 - scalar or array in, same shape out
        """Return f(D) + noise, with f(D) = ``value`` (not modified in place).

        Without ``granularity``: ``value`` must be integer-valued; returns a
        Python int for a scalar, else an int64 (or Python-int object) array.
        With ``granularity`` g: each value is rounded to the nearest multiple
        of g, noise is added in grid units, and the result is returned as
        floats on the grid g Z (the multiplication is post-processing).
        """
        k = _as_integers(value) if self._grid is None else _round_to_grid(value, self._grid)
        shape = np.shape(k)
        flat = np.ravel(k)
        noisy = _add_noise(flat, self._noise(flat.size, max(1, flat.size)))
        if self._grid is not None:
            out = np.array([float(v * self._display_grid) for v in noisy.tolist()], dtype=np.float64)
            return float(out[0]) if shape == () else out.reshape(shape)
        return int(noisy[0]) if shape == () else noisy.reshape(shape)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, granularity={self.granularity!r})"


class DiscreteLaplaceMechanism(_DiscreteMechanism):
    """epsilon-DP release of an integer (or grid-rounded) query with exact discrete Laplace noise.

    Releases f(D) + Y, Y ~ DLap(t) i.i.d. per coordinate, t = Delta_1 / epsilon,
    sampled exactly (CKS20, Algorithm 2) from the OS cryptographic generator
    by default. This is the geometric mechanism of Ghosh, Roughgarden and
    Sundararajan (2009): for integer vectors with ||f(D) - f(D')||_1 <= Delta_1
    the pmf ratio at any output is at most exp(||f(D) - f(D')||_1 / t) <= e^epsilon
    (triangle inequality on ``|y - f(D)| / t`` per coordinate), so it is pure
    epsilon-DP under the ``neighbouring`` relation that Delta_1 is stated for.

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon:
        Privacy parameter, > 0. It is made rational *downwards*
        (denominator <= 10^6 when that loses nothing), so the noise scale
        ``noise_scale`` is never smaller than Delta_1 / epsilon.
    sensitivity:
        L1 sensitivity Delta_1. Without ``granularity``: a positive integer,
        the bound on ``sum_j |f_j(D) - f_j(D')|`` of an integer-valued query.
        With ``granularity``: a real bound, in the query's own units.
    granularity:
        None (integer queries) or g > 0: values are rounded to the nearest
        multiple of g before noise is added. The rounding is a fixed,
        data-independent map applied to the query, but it can move two close
        values one grid step apart per coordinate, so the sensitivity used is
        ceil(Delta_1 / g) + d - 1 grid steps for a d-coordinate value
        (sum_j ceil(r_j) < sum_j r_j + d). Outputs lie on g Z.
    neighbouring:
        Relation under which ``sensitivity`` holds (default replace-one).
    random_state:
        None (OS cryptographic randomness; the only choice for deployment), or
        an int / SeedSequence / Generator for reproducible tests.

    Notes
    -----
    ``event`` is ``EpsilonDeltaEvent(epsilon, 0)``, not ``LaplaceEvent``: with
    sensitivity 1 the discrete Laplace's privacy loss takes only the values
    +-epsilon (it is randomised response in disguise), so its RDP and privacy
    loss distribution are *worse* than the continuous Laplace of the same
    epsilon, and a ``LaplaceEvent`` would let an RDP or PLD accountant
    under-report the composed loss. Generic pure-DP accounting is exact for it.

    Examples
    --------
    >>> mech = DiscreteLaplaceMechanism(epsilon=1.0, sensitivity=1, random_state=0)
    >>> isinstance(mech.randomise(42), int)
    True
    """

    pure = True

    def __init__(
        self,
        *,
        epsilon: float,
        sensitivity: float = 1,
        granularity: float | None = None,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        super().__init__(epsilon=epsilon, delta=0.0, sensitivity=sensitivity, granularity=granularity,
                         neighbouring=neighbouring, random_state=random_state)
        self._epsilon_q = _rational_below(Fraction(self.epsilon), _MAX_DENOMINATOR)

    def noise_scale(self, dimension: int = 1) -> Fraction:
        """The DLap scale t in grid units for a ``dimension``-coordinate value (>= steps / epsilon)."""
        d = check_count(dimension, "dimension")
        return Fraction(self._grid_steps(extra=d - 1)) / self._epsilon_q

    def _noise(self, count: int, dimension: int) -> np.ndarray:
        t = self.noise_scale(dimension)
        return _discrete_laplace(t.numerator, t.denominator, count, self._source)

    @property
    def event(self) -> DpEvent:
        """Pure epsilon-DP event (see Notes on why not a LaplaceEvent)."""
        return EpsilonDeltaEvent(self.epsilon, 0.0, self.neighbouring)


class DiscreteGaussianMechanism(_DiscreteMechanism):
    """(epsilon, delta)-DP release of an integer (or grid-rounded) query with exact discrete Gaussian noise.

    Releases f(D) + Y, Y ~ N_Z(0, sigma2) i.i.d. per coordinate, sampled
    exactly (CKS20, Algorithm 3). ``sigma2`` is the smallest rational (up to
    a 1e-10 bisection tolerance and upward rounding of about 2^-20 relative)
    for which the *exact* delta(epsilon) of CKS20 Theorem 7, summed
    numerically with a rigorous tail bound
    (:func:`~privml.mechanisms._discrete_gaussian_privacy.discrete_gaussian_delta`),
    is at most ``delta``; it is not the continuous Gaussian's sigma reused.

    Sensitivity assumption: for a scalar integer query, ``|f(D) - f(D')| <= Delta``
    under ``neighbouring``. For an array, neighbouring inputs may differ in
    **one coordinate** only, by at most Delta (e.g. a histogram under
    add/remove-one): the other coordinates' noise is then identically
    distributed and the scalar theorem applies unchanged. Changes spread over
    several coordinates are not covered by this calibration; release the
    coordinates separately and compose their events.

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon, delta:
        Target guarantee; delta must be in (0, 1).
    sensitivity:
        Without ``granularity``: positive integer Delta. With ``granularity``
        g: a real bound in the query's units, used as ceil(Delta / g) grid
        steps (exact, since only one coordinate moves and nearest-grid
        rounding is monotone).
    granularity:
        None (integer queries) or g > 0; values are rounded to the nearest
        multiple of g, a data-independent map of the query. Outputs lie on g Z.
    neighbouring, random_state:
        As for :class:`DiscreteLaplaceMechanism` (OS cryptographic randomness by default).

    Attributes
    ----------
    sigma2:
        The calibrated sigma^2 as a :class:`fractions.Fraction`, in grid units.

    Examples
    --------
    >>> mech = DiscreteGaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1, random_state=0)
    >>> round(float(mech.sigma2) ** 0.5, 2)
    3.74
    """

    pure = False

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float = 1,
        granularity: float | None = None,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        super().__init__(epsilon=epsilon, delta=delta, sensitivity=sensitivity, granularity=granularity,
                         neighbouring=neighbouring, random_state=random_state)
        self.sigma2: Fraction = calibrate_discrete_gaussian(self.epsilon, self.delta, self._grid_steps())

    def _noise(self, count: int, dimension: int) -> np.ndarray:
        return _discrete_gaussian(self.sigma2.numerator, self.sigma2.denominator, count, self._source)

    @property
    def event(self) -> DpEvent:
        """The calibrated (epsilon, delta) guarantee; a GaussianEvent would claim the continuous PLD."""
        return EpsilonDeltaEvent(self.epsilon, self.delta, self.neighbouring)
