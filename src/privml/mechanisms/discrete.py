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
independent draws are made but not the distribution.

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
import secrets
from abc import abstractmethod
from fractions import Fraction
from typing import Final

import numpy as np
from scipy.special import logsumexp

from privml._random import RandomState, check_random_state
from privml._validation import check_count, check_delta, check_epsilon, check_finite_array, check_positive
from privml.accounting.events import DpEvent, EpsilonDeltaEvent
from privml.mechanisms.base import Mechanism
from privml.neighbouring import Neighbouring

__all__ = [
    "DiscreteGaussianMechanism",
    "DiscreteLaplaceMechanism",
    "calibrate_discrete_gaussian",
    "discrete_gaussian_delta",
    "sample_bernoulli_exp",
    "sample_discrete_gaussian",
    "sample_discrete_laplace",
]

#: int64 arrays are used while every intermediate value stays below this bound
#: (leaving headroom for one addition); larger values switch to Python ints.
_INT64_SAFE: Final = 2**62
_WORD_SPAN: Final = 2**64
#: epsilon (and sigma^2) are made rational with denominators at most this.
_MAX_DENOMINATOR: Final = 10**6
#: the delta sum runs until the Gaussian weights fall below exp(-_LOG_TAIL) of
#: the peak; what is beyond is bounded by a geometric series, never dropped.
_LOG_TAIL: Final = 60.0
#: relative slack added to computed deltas to absorb floating-point rounding
#: (the sums themselves are accurate to about 1e-13 relative).
_FLOAT_MARGIN: Final = 1e-9
_CHUNK: Final = 1 << 20
_HALF: Final = Fraction(1, 2)

Size = None | int | tuple[int, ...]
RngLike = RandomState  # None means the OS cryptographic generator here


# --------------------------------------------------------------------------
# Uniform integers
# --------------------------------------------------------------------------


class _WordSource:
    """Uniform 64-bit words, and exactly uniform integers below a bound.

    With ``generator=None`` the words come from the OS CSPRNG; otherwise from
    the numpy generator (reproducible, not for deployment).
    """

    def __init__(self, generator: np.random.Generator | None) -> None:
        self._generator = generator

    @property
    def cryptographic(self) -> bool:
        return self._generator is None

    def words(self, count: int) -> np.ndarray:
        if self._generator is None:
            return np.frombuffer(secrets.token_bytes(8 * count), dtype=np.uint64)
        return self._generator.integers(0, _WORD_SPAN - 1, size=count, dtype=np.uint64, endpoint=True)

    def below(self, high: int, count: int) -> np.ndarray:
        """``count`` independent integers uniform on {0, ..., high - 1}.

        Rejection: keep a word w only if w < 2^64 - (2^64 mod high), a multiple
        of ``high``, so that w mod high is exactly uniform (no modulo bias).
        """
        if high <= _INT64_SAFE:
            cutoff = np.uint64(_WORD_SPAN - _WORD_SPAN % high - 1)
            modulus = np.uint64(high)
            parts, need = [], count
            while need > 0:
                w = self.words(need)
                w = w[w <= cutoff]
                parts.append((w % modulus).astype(np.int64))
                need -= w.size
            return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        # Big bound: draw 64 bits more than it needs so that rejections are rare.
        n_words = high.bit_length() // 64 + 2
        span = 1 << (64 * n_words)
        cutoff_int = span - span % high
        out = np.empty(count, dtype=object)
        for i in range(count):
            while True:
                r = int.from_bytes(self.words(n_words).tobytes(), "little")
                if r < cutoff_int:
                    out[i] = r % high
                    break
        return out


def _as_source(rng: RngLike | _WordSource) -> _WordSource:
    if isinstance(rng, _WordSource):
        return rng
    if rng is None:
        return _WordSource(None)
    return _WordSource(check_random_state(rng))


# --------------------------------------------------------------------------
# Integer-array helpers
# --------------------------------------------------------------------------


def _widen(arr: np.ndarray, bound: int) -> np.ndarray:
    """``arr`` as int64 if ``bound`` (a bound on every intermediate) fits, else Python ints."""
    if bound < _INT64_SAFE:
        return arr.astype(np.int64, copy=False)
    return arr.astype(object)


def _narrow(arr: np.ndarray) -> np.ndarray:
    """Return int64 when every value fits, else keep the object array."""
    if arr.dtype == object and (arr.size == 0 or max(abs(int(v)) for v in arr.flat) < _INT64_SAFE):
        return arr.astype(np.int64)
    return arr


def _concat(pieces: list[np.ndarray]) -> np.ndarray:
    if any(p.dtype == object for p in pieces):
        return _narrow(np.concatenate([p.astype(object) for p in pieces]))
    return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)


def _max_abs(arr: np.ndarray) -> int:
    return int(np.max(np.abs(arr))) if arr.size else 0


# --------------------------------------------------------------------------
# CKS20 Algorithms 1-3 (vectorised; every element follows the paper's steps)
# --------------------------------------------------------------------------


def _bernoulli(num: np.ndarray, den: int, src: _WordSource) -> np.ndarray:
    """Bernoulli(num / den) per element, 0 <= num <= den."""
    if den == 1:  # num is 0 or 1: nothing to draw
        return num >= 1
    return src.below(den, num.size) < num


def _bernoulli_exp_unit(num: np.ndarray, den: int, src: _WordSource) -> np.ndarray:
    """Bernoulli(exp(-gamma)) for gamma = num / den in [0, 1] (CKS20 Alg. 1, first branch).

    K = 1, 2, ... while Bernoulli(gamma / K) succeeds; output 1 iff the K at
    which it first fails is odd. P[K odd] = sum_k (-gamma)^k / k! = exp(-gamma).
    """
    result = np.empty(num.size, dtype=bool)
    active = np.arange(num.size)
    k = 1
    while active.size:
        a = _bernoulli(num[active], den, src)
        if k > 1:
            # Bernoulli(gamma / k) as Bernoulli(gamma) AND Bernoulli(1 / k): the
            # denominator den * k is never formed, so int64 suffices longer.
            hit = np.flatnonzero(a)
            a[hit] = src.below(k, hit.size) == 0
        result[active[~a]] = k % 2 == 1
        active = active[a]
        k += 1
    return result


def _bernoulli_exp(num: np.ndarray, den: int, src: _WordSource) -> np.ndarray:
    """Bernoulli(exp(-gamma)) for gamma = num / den >= 0 (CKS20 Alg. 1).

    exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma))): floor(gamma)
    Bernoulli(exp(-1)) trials, stopping at the first failure, then one trial
    for the fractional part.
    """
    whole = num // den
    frac = num - whole * den
    alive = np.ones(num.size, dtype=bool)
    idx = np.flatnonzero(whole > 0)
    remaining = whole[idx]
    while idx.size:
        ok = _bernoulli_exp_unit(np.ones(idx.size, dtype=np.int64), 1, src)
        alive[idx[~ok]] = False
        idx, remaining = idx[ok], remaining[ok] - 1
        more = remaining > 0
        idx, remaining = idx[more], remaining[more]
    live = np.flatnonzero(alive)
    alive[live] = _bernoulli_exp_unit(frac[live], den, src)
    return alive


def _geometric_exp_one(count: int, src: _WordSource) -> np.ndarray:
    """Number of successes before the first failure of Bernoulli(exp(-1)) trials."""
    v = np.zeros(count, dtype=np.int64)
    active = np.arange(count)
    while active.size:
        ok = _bernoulli_exp_unit(np.ones(active.size, dtype=np.int64), 1, src)
        active = active[ok]
        v[active] += 1
    return v


def _discrete_laplace(t: int, s: int, count: int, src: _WordSource) -> np.ndarray:
    """``count`` samples of DLap(t / s), P[y] prop. to exp(-|y| s / t) (CKS20 Alg. 2).

    X = U + t V with U uniform on {0..t-1} accepted w.p. exp(-U/t) and V
    geometric(1 - exp(-1)) is geometric(1 - exp(-1/t)); Y = floor(X / s) is
    geometric(1 - exp(-s/t)); a random sign, rejecting "-0", makes it two-sided.
    """
    pieces: list[np.ndarray] = []
    need = count
    while need > 0:
        u = src.below(t, need)
        u = u[_bernoulli_exp(u, t, src)]
        v = _geometric_exp_one(u.size, src)
        bound = t * (_max_abs(v) + 1)
        x = _widen(u, bound) + t * _widen(v, bound)
        y = x // s
        negative = src.below(2, y.size) == 1
        keep = ~(negative & (y == 0))
        z = np.where(negative, -y, y)[keep]
        pieces.append(z)
        need -= z.size
    return _concat(pieces)


def _discrete_gaussian(p: int, q: int, count: int, src: _WordSource) -> np.ndarray:
    """``count`` samples of N_Z(0, sigma^2), sigma^2 = p / q (CKS20 Alg. 3).

    Propose Y ~ DLap(t) with t = floor(sigma) + 1 and accept with probability
    exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)), written over the integers as
    exp(-(|Y| q t - p)^2 / (2 p q t^2)).
    """
    t = math.isqrt(p // q) + 1  # floor(sqrt(p/q)) = isqrt(floor(p/q)), exactly
    den = 2 * p * q * t * t
    pieces: list[np.ndarray] = []
    need = count
    while need > 0:
        y = _discrete_laplace(t, 1, need, src)
        bound = max(den, (_max_abs(y) * q * t + p) ** 2)
        g = np.abs(_widen(y, bound)) * (q * t) - p
        accept = _bernoulli_exp(g * g, den, src)
        pieces.append(y[accept])
        need -= int(np.count_nonzero(accept))
    return _concat(pieces)


# --------------------------------------------------------------------------
# Public samplers
# --------------------------------------------------------------------------


def _check_rational(value: object, name: str, *, allow_zero: bool) -> Fraction:
    """An int or Fraction (floats refused: they hide their exact value)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Rational):
        raise TypeError(
            f"{name} must be an int or fractions.Fraction, got {type(value).__name__} {value!r}; "
            f"for a float x use Fraction(x) or Fraction(x).limit_denominator(n)"
        )
    out = Fraction(value)
    if out < 0 or (out == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {out}")
    return out


def _check_size(size: Size) -> tuple[int, ...] | None:
    if size is None:
        return None
    dims = (size,) if isinstance(size, (int, numbers.Integral, np.integer)) else tuple(size)
    return tuple(check_count(d, "size", minimum=0) for d in dims)


def _shape_output(flat: np.ndarray, shape: tuple[int, ...] | None) -> int | np.ndarray:
    """One Python int (``shape`` None) or the integer samples in ``shape``."""
    return int(flat[0]) if shape is None else flat.reshape(shape)


def sample_bernoulli_exp(
    gamma: Fraction | int, size: Size = None, *, rng: RngLike = None
) -> bool | np.ndarray:
    """Exact Bernoulli(exp(-gamma)) samples for a rational gamma >= 0.

    CKS20, Algorithm 1 (Canonne, Kamath and Steinke 2020): only uniform
    integers and rational comparisons, so P[True] is exactly exp(-gamma).
    It is a building block and carries no privacy guarantee by itself.

    Parameters
    ----------
    gamma:
        An int or :class:`fractions.Fraction`, >= 0 (any size, including > 1).
    size:
        None for one ``bool``; an int or shape for a boolean array.
    rng:
        None (OS cryptographic generator; use this in deployment), or an int /
        SeedSequence / numpy Generator for a reproducible stream.

    Examples
    --------
    >>> from fractions import Fraction
    >>> sample_bernoulli_exp(Fraction(0), rng=0)
    True
    """
    g = _check_rational(gamma, "gamma", allow_zero=True)
    shape = _check_size(size)
    count = 1 if shape is None else math.prod(shape)
    num = _widen(np.full(count, g.numerator, dtype=object), max(g.numerator, g.denominator))
    flat = _bernoulli_exp(num, g.denominator, _as_source(rng))  # dtype bool
    return bool(flat[0]) if shape is None else flat.reshape(shape)


def sample_discrete_laplace(
    scale: Fraction | int, size: Size = None, *, rng: RngLike = None
) -> int | np.ndarray:
    """Exact samples of the discrete Laplace distribution DLap(scale).

    ``P[Y = y] = tanh(1 / (2 scale)) exp(-|y| / scale)`` for y in Z, sampled by
    Algorithm 2 of CKS20 (Canonne, Kamath and Steinke 2020). Adding it to an integer
    query of L1 sensitivity Delta is (Delta / scale)-DP under whichever
    neighbouring relation Delta is stated for: the log-ratio of the pmf at y
    and y + k is at most ``|k| / scale`` (the geometric mechanism of Ghosh,
    Roughgarden and Sundararajan 2009).

    Parameters
    ----------
    scale:
        An int or :class:`fractions.Fraction` > 0.
    size:
        None for one Python int; an int or shape for an array (int64, or
        object dtype holding Python ints if a value does not fit in int64).
    rng:
        None (OS cryptographic generator; use this in deployment), or an int /
        SeedSequence / numpy Generator for a reproducible stream.

    Examples
    --------
    >>> from fractions import Fraction
    >>> sample_discrete_laplace(Fraction(3, 2), size=4, rng=1).shape
    (4,)
    """
    b = _check_rational(scale, "scale", allow_zero=False)
    shape = _check_size(size)
    count = 1 if shape is None else math.prod(shape)
    flat = _discrete_laplace(b.numerator, b.denominator, count, _as_source(rng))
    return _shape_output(flat, shape)


def sample_discrete_gaussian(
    sigma2: Fraction | int, size: Size = None, *, rng: RngLike = None
) -> int | np.ndarray:
    """Exact samples of the discrete Gaussian N_Z(0, sigma2).

    P[Y = y] = exp(-y^2 / (2 sigma2)) / sum_{z in Z} exp(-z^2 / (2 sigma2)) for y
    in Z (CKS20, Definition 1; sampled by their Algorithm 3). Its variance is
    slightly below ``sigma2`` (shown in CKS20). For the privacy of adding
    it to an integer query see :func:`discrete_gaussian_delta`.

    Parameters
    ----------
    sigma2:
        The scale parameter sigma^2, an int or :class:`fractions.Fraction` > 0.
    size:
        None for one Python int; an int or shape for an array (int64, or
        object dtype holding Python ints if a value does not fit in int64).
    rng:
        None (OS cryptographic generator; use this in deployment), or an int /
        SeedSequence / numpy Generator for a reproducible stream.

    Examples
    --------
    >>> from fractions import Fraction
    >>> int(sample_discrete_gaussian(Fraction(9, 4), size=3, rng=2).size)
    3
    """
    s2 = _check_rational(sigma2, "sigma2", allow_zero=False)
    shape = _check_size(size)
    count = 1 if shape is None else math.prod(shape)
    flat = _discrete_gaussian(s2.numerator, s2.denominator, count, _as_source(rng))
    return _shape_output(flat, shape)


# --------------------------------------------------------------------------
# Exact privacy of the discrete Gaussian (CKS20 Theorem 7)
# --------------------------------------------------------------------------


def _log_normaliser_lower(sigma2: float) -> float:
    """log of a lower bound on Z = sum_{y in Z} exp(-y^2 / (2 sigma2)).

    Poisson summation gives Z = sqrt(2 pi sigma2) (1 + 2 sum_{k>=1}
    exp(-2 pi^2 sigma2 k^2)) >= sqrt(2 pi sigma2), tight to 1e-34 for
    sigma >= 2; below that the (also lower) truncated sum is the better bound.
    """
    bound = 0.5 * math.log(2 * math.pi * sigma2)
    if sigma2 >= 4:
        return bound
    y = np.arange(1, math.ceil(math.sqrt(2 * _LOG_TAIL * sigma2)) + 2, dtype=np.float64)
    truncated = float(np.logaddexp(0.0, math.log(2) + logsumexp(-y * y / (2 * sigma2))))
    return max(bound, truncated)


def _log_excess_upper(epsilon: float, sigma2: float, sensitivity: int) -> float:
    """log of an upper bound on sum_y max(0, w(y) - e^eps w(y + Delta)), w(y) = exp(-y^2/(2 sigma2)).

    Terms are positive exactly for y > a = eps sigma2 / Delta - Delta / 2, and
    w(y) - e^eps w(y + Delta) = w(y) (-expm1(eps - (2 y Delta + Delta^2) / (2 sigma2))),
    so the sum has no cancellation. Past the summed range every term is at
    most w(y), and sum_{y >= m} w(y) <= w(m) / (1 - exp(-m / sigma2)) for m > 0
    (ratio of consecutive weights below exp(-m / sigma2)).
    """
    a = epsilon * sigma2 / sensitivity - sensitivity / 2
    start = math.floor(a)  # one term at or below the threshold; it is clipped to 0
    stop = max(start, 0) + math.ceil(math.sqrt(2 * _LOG_TAIL * sigma2)) + 1
    logs = []
    for lo in range(start, stop + 1, _CHUNK):
        y = np.arange(lo, min(lo + _CHUNK, stop + 1), dtype=np.float64)
        exponent = epsilon - (2 * y * sensitivity + sensitivity * sensitivity) / (2 * sigma2)
        with np.errstate(divide="ignore"):
            log_terms = -y * y / (2 * sigma2) + np.log(-np.expm1(np.minimum(exponent, 0.0)))
        logs.append(logsumexp(log_terms))
    m = stop + 1
    log_tail = -m * m / (2 * sigma2) - math.log(-math.expm1(-m / sigma2))
    return float(logsumexp(logs + [log_tail]))


def discrete_gaussian_delta(epsilon: float, sigma2: float | Fraction, sensitivity: int = 1) -> float:
    """Smallest delta for which adding N_Z(0, sigma2) is (epsilon, delta)-DP (an upper bound on it).

    CKS20 Theorem 7: for an integer-valued query with ``|f(D) - f(D')| <= Delta``
    (under the neighbouring relation Delta is stated for),

        delta = P[Y > eps sigma2/Delta - Delta/2] - e^eps P[Y > eps sigma2/Delta + Delta/2],

    Y ~ N_Z(0, sigma2), and no smaller delta works. It is evaluated as the
    single positive sum ``sum_y max(0, p(y) - e^eps p(y + Delta))`` in log
    space, over every y with weight above exp(-60) of the peak, plus a
    geometric-series bound on the rest, divided by a lower bound on the
    normaliser; a 1e-9 relative margin absorbs floating-point rounding. The
    result is therefore never below the true delta.

    Neighbours whose integer query values differ by less than Delta are
    covered too: N_Z(k, sigma2) has a monotone likelihood ratio in y, so the
    optimal distinguishing sets are half-lines, whose probabilities move
    monotonically with the shift k, and the hockey-stick divergence is
    non-decreasing in k.

    Parameters
    ----------
    epsilon:
        > 0.
    sigma2:
        The discrete Gaussian's sigma^2, > 0 (a float or Fraction).
    sensitivity:
        Positive integer Delta.

    Examples
    --------
    >>> round(discrete_gaussian_delta(1.0, 4, 1), 4)
    0.0072
    """
    eps = check_epsilon(epsilon)
    s2 = check_positive(float(sigma2) if isinstance(sigma2, Fraction) else sigma2, "sigma2")
    delta_ = check_count(sensitivity, "sensitivity")
    log_delta = _log_excess_upper(eps, s2, delta_) - _log_normaliser_lower(s2)
    return min(1.0, math.exp(log_delta) * (1 + _FLOAT_MARGIN))


def _rational_above(x: Fraction, max_denominator: int) -> Fraction:
    """A rational >= x with denominator <= max_denominator (and within 1/max_denominator of x)."""
    r = x.limit_denominator(max_denominator)
    return r if r >= x else Fraction(math.ceil(x * max_denominator), max_denominator)


def _rational_below(x: Fraction, max_denominator: int) -> Fraction:
    """A rational in (0, x] with denominator <= max_denominator when one is that close, else x itself.

    ``limit_denominator`` returns the *closest* such rational, which can lie
    above x; for epsilon that would shrink the noise, so round down instead.
    """
    r = x.limit_denominator(max_denominator)
    if r > x:
        r = Fraction(math.floor(x * max_denominator), max_denominator)
    return r if r > 0 else x


def calibrate_discrete_gaussian(epsilon: float, delta: float, sensitivity: int = 1) -> Fraction:
    """Rational sigma^2 (rounded up) for which N_Z(0, sigma^2) is (epsilon, delta)-DP.

    Bisection on :func:`discrete_gaussian_delta` (the exact CKS20 Theorem 7
    sum) to relative precision 1e-10, then rounded *up* to a rational with a
    denominator small enough to keep the sampler on int64 arithmetic, and
    checked again: the returned value always satisfies
    ``discrete_gaussian_delta(epsilon, sigma2, sensitivity) <= delta``.
    Neighbouring relation and sensitivity are as in
    :func:`discrete_gaussian_delta` (integer query, ``|f(D) - f(D')| <= Delta``).

    Examples
    --------
    >>> s2 = calibrate_discrete_gaussian(1.0, 1e-5)
    >>> round(float(s2) ** 0.5, 2)
    3.74
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    if d == 0:
        raise ValueError("delta must be > 0 here (the discrete Gaussian is not pure DP), got 0")
    k = check_count(sensitivity, "sensitivity")

    def ok(s2: float) -> bool:
        return discrete_gaussian_delta(eps, s2, k) <= d

    hi = float(k * k) * max(1.0, 2 * math.log(1.25 / d)) / eps**2
    while not ok(hi):
        hi *= 2
    lo = hi / 2
    while ok(lo) and lo > 1e-12:
        hi, lo = lo, lo / 2
    while hi / lo - 1 > 1e-10:
        mid = math.sqrt(lo * hi)
        hi, lo = (mid, lo) if ok(mid) else (hi, mid)
    # Denominator budget: keeps 2 p q t^2 of Algorithm 3 near 2^41 (int64) while
    # the rounding adds at most ~2^-20 relative to sigma^2.
    max_den = max(1, (1 << 20) // max(1, math.ceil(hi)))
    sigma2 = _rational_above(Fraction(hi), max_den)
    while not ok(float(sigma2)):  # guards the float conversion; rarely, if ever, runs
        sigma2 = _rational_above(sigma2 * Fraction(1_000_001, 1_000_000), max_den)
    return sigma2


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
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            sensitivity=sensitivity,
            neighbouring=neighbouring,
            random_state=random_state,
        )
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
        super().__init__(
            epsilon=epsilon,
            delta=0.0,
            sensitivity=sensitivity,
            granularity=granularity,
            neighbouring=neighbouring,
            random_state=random_state,
        )
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
    numerically with a rigorous tail bound (:func:`discrete_gaussian_delta`),
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
    neighbouring:
        Relation under which ``sensitivity`` holds (default replace-one).
    random_state:
        None (OS cryptographic randomness; the only choice for deployment), or
        an int / SeedSequence / Generator for reproducible tests.

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
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            sensitivity=sensitivity,
            granularity=granularity,
            neighbouring=neighbouring,
            random_state=random_state,
        )
        self.sigma2: Fraction = calibrate_discrete_gaussian(self.epsilon, self.delta, self._grid_steps())

    def _noise(self, count: int, dimension: int) -> np.ndarray:
        return _discrete_gaussian(self.sigma2.numerator, self.sigma2.denominator, count, self._source)

    @property
    def event(self) -> DpEvent:
        """The calibrated (epsilon, delta) guarantee; a GaussianEvent would claim the continuous PLD."""
        return EpsilonDeltaEvent(self.epsilon, self.delta, self.neighbouring)
