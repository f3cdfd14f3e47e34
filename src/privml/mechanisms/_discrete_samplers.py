"""Exact samplers of the discrete Laplace and discrete Gaussian distributions (CKS20, Algorithms 1-3).

The samplers are Algorithms 1-3 of Canonne, Kamath and Steinke, "The Discrete
Gaussian for Differential Privacy" (NeurIPS 2020; "CKS20"): Bernoulli(exp(-gamma))
(Algorithm 1), the discrete Laplace (Algorithm 2) and the discrete Gaussian
(Algorithm 3). Every step uses integer or :class:`fractions.Fraction`
arithmetic and uniform integers drawn by exact rejection from uniform 64-bit
words, so the output distribution is exactly the stated one; no
floating-point number touches a sample. The steps are vectorised with numpy
integer arrays (Python integers in object arrays when a value would not fit
in int64), which changes the order in which independent draws are made but
not the distribution.

``rng=None`` (the default) reads the operating system's cryptographically
secure generator (:func:`secrets.token_bytes`); a seed or a
:class:`numpy.random.Generator` gives a reproducible, *predictable* stream,
for tests and experiments only. The mechanisms that use these samplers are in
:mod:`privml.mechanisms._discrete`.
"""

from __future__ import annotations

import math
import numbers
import secrets
from fractions import Fraction
from typing import Final

import numpy as np

from privml._random import RandomState, check_random_state
from privml._validation import check_count

#: int64 arrays are used while every intermediate value stays below this bound
#: (leaving headroom for one addition); larger values switch to Python ints.
_INT64_SAFE: Final = 2**62
_WORD_SPAN: Final = 2**64

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
        As in :func:`sample_bernoulli_exp`.

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
    it to an integer query see :func:`~privml.mechanisms._discrete_gaussian_privacy.discrete_gaussian_delta`.

    Parameters
    ----------
    sigma2:
        The scale parameter sigma^2, an int or :class:`fractions.Fraction` > 0.
    size, rng:
        As in :func:`sample_discrete_laplace`.

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
