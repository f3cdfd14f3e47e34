"""FFT composition of discrete privacy loss distributions on a Chernoff window.

The composed losses are summed by one cyclic FFT convolution (Koskela, Jälkö
and Honkela 2020, "Computing tight differential privacy guarantees using FFT",
AISTATS, Section 3) over a window [lo, lo + M) chosen with Chernoff bounds,
P(S >= x) <= exp(sum_i T_i K_i(lambda) - lambda x), from each step's discrete
cumulant generating function K_i. Mass outside the window wraps around: from
below it lands at a higher loss (pessimistic); from above it would land lower,
so the Chernoff bound on it is added to the mass at +inf. An empirical
allowance for the FFT's round-off is also added to the mass at +inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from privml.accounting._pld_discretisation import _DiscretePLD

# Chernoff orders lambda (per unit of loss) searched when choosing the FFT
# window: wide enough for composed loss variances from ~1e-8 to ~1e8.
_LOG_LAMBDA_RANGE = (math.log(1e-4), math.log(1e5))
# Golden-section steps: the bracket of log(lambda) shrinks to 20.7 * 0.618^14,
# i.e. lambda within 2% of the best order (the bound is valid for any order).
_GOLDEN_STEPS = 14
# Exponentials and spectra are floored or flushed at e^-600 / 1e-100: far below
# anything that reaches delta, and clear of subnormal numbers (see _LogMgf).
_EXP_FLOOR = 600.0
_SPECTRUM_FLUSH = 1e-100


# -------------------------------------------------------------- composition
@dataclass(frozen=True)
class _Window:
    """Grid indices [lo, hi] the composed PLD is computed on, and its exact support."""

    lo: int
    hi: int
    support_hi: int
    upper_order: float
    upper_log_mgf: float

    def log_upper_tail(self, x: float) -> float:
        """log of a Chernoff bound on the composed finite P-mass at losses >= x."""
        return min(0.0, self.upper_log_mgf - self.upper_order * x)

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True, eq=False)
class _LogMgf:
    """K(lambda) = sum_i T_i log sum_l p_il e^(lambda l) over the finite parts, exactly.

    Evaluated as an upper bound within a relative 1e-260: relative exponents
    below -_EXP_FLOOR are raised to it, which keeps Chernoff bounds valid and
    the sums out of subnormal numbers (whose arithmetic is ~100x slower).
    """

    parts: tuple[tuple[np.ndarray, np.ndarray, int], ...]  # (losses, masses > 0, count)

    @classmethod
    def of(cls, terms: Sequence[tuple[_DiscretePLD, int]]) -> _LogMgf:
        parts = []
        for pld, count in terms:
            keep = pld.probs > 0
            parts.append((pld.losses[keep], pld.probs[keep], count))
        return cls(tuple(parts))

    def __call__(self, lam: float) -> float:
        total = 0.0
        for losses, probs, count in self.parts:
            top = lam * float(losses[-1] if lam > 0 else losses[0])  # the largest exponent
            scaled = np.exp(np.maximum(lam * losses - top, -_EXP_FLOOR))
            # np.sum, not np.dot: a BLAS call costs milliseconds of thread start-up here
            total += count * (math.log(float(np.sum(probs * scaled))) + top)
        return total


def _golden_minimum(f: Callable[[float], float], low: float, high: float) -> tuple[float, float]:
    """(argmin, min) of a unimodal f on [low, high] by golden-section search.

    _GOLDEN_STEPS steps shrink the bracket by 0.618^steps; any point is a valid
    Chernoff order, so the search only needs to land near the optimum.
    """
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    left, right = high - ratio * (high - low), low + ratio * (high - low)
    f_left, f_right = f(left), f(right)
    for _ in range(_GOLDEN_STEPS):
        if f_left <= f_right:
            high, right, f_right = right, left, f_left
            left = high - ratio * (high - low)
            f_left = f(left)
        else:
            low, left, f_left = left, right, f_right
            right = low + ratio * (high - low)
            f_right = f(right)
    return (left, f_left) if f_left <= f_right else (right, f_right)


def _chernoff_edge(log_mgf: _LogMgf, log_tail: float, sign: float) -> tuple[float, float, float]:
    """Best Chernoff edge x of the composed losses, with its order lambda and K(sign lambda).

    sign = +1: the smallest x = min_lambda (K(lambda) - log_tail) / lambda, so that
    P(S >= x) <= exp(K(lambda) - lambda x) <= tail. sign = -1: the largest x with
    P(S <= x) <= tail, using K(-lambda). (K(lambda) - c) / lambda is
    quasi-convex in lambda (its derivative's numerator lambda K' - K + c is
    non-decreasing because K is convex), so a golden-section search in log
    lambda finds its minimum.
    """

    def edge(log_lam: float) -> float:
        lam = math.exp(log_lam)
        return (log_mgf(sign * lam) - log_tail) / lam

    log_lam, best = _golden_minimum(edge, *_LOG_LAMBDA_RANGE)
    lam = math.exp(log_lam)
    return sign * best, lam, log_mgf(sign * lam)


def _window(terms: Sequence[tuple[_DiscretePLD, int]], tail: float) -> _Window:
    """Chernoff window [lo, hi] of the sum of ``count`` draws from each PLD.

    At most ``tail`` of the composed finite P-mass lies above hi and at most
    ``tail`` below lo. The upper order and its K are kept to bound, later, the
    mass beyond the (larger) FFT window.
    """
    h = terms[0][0].h
    support_lo = sum(c * p.offset for p, c in terms)
    support_hi = sum(c * (p.offset + p.probs.size - 1) for p, c in terms)
    if len(terms) == 1 and terms[0][1] == 1:
        return _Window(support_lo, support_hi, support_hi, 0.0, 0.0)
    log_mgf = _LogMgf.of(terms)
    log_tail = math.log(tail)
    high, order, log_mgf_at_order = _chernoff_edge(log_mgf, log_tail, 1.0)
    low, _, _ = _chernoff_edge(log_mgf, log_tail, -1.0)
    hi = min(support_hi, math.ceil(high / h)) if math.isfinite(high) else support_hi
    lo = max(support_lo, math.floor(low / h)) if math.isfinite(low) else support_lo
    return _Window(min(lo, hi), hi, support_hi, order, log_mgf_at_order)


def _fold(pld: _DiscretePLD, size: int) -> np.ndarray:
    """The PLD's masses at slots (grid index mod size): cyclic, exact."""
    start = pld.offset % size
    rows = -(-(start + pld.probs.size) // size)
    buffer = np.zeros(rows * size)
    buffer[start : start + pld.probs.size] = pld.probs
    return buffer.reshape(rows, size).sum(axis=0)


def _power(x: np.ndarray, count: int) -> np.ndarray:
    """x ** count by repeated squaring (faster than complex exp/log for a spectrum).

    Coefficients whose count-th power is below 1e-100 are zeroed first: no
    intermediate power is then subnormal (|x|^k >= |x|^count for k <= count),
    and for long compositions only a few low frequencies survive, so the
    powers cost almost nothing.
    """
    with np.errstate(divide="ignore"):
        alive = count * np.log(np.abs(x)) >= math.log(_SPECTRUM_FLUSH)
    base = x[alive]
    powered: np.ndarray | None = None
    while True:
        if count & 1:
            powered = base if powered is None else powered * base
        count >>= 1
        if not count:
            break
        base = base * base
    out = np.zeros_like(x)
    out[alive] = powered
    return out


def next_fast_len(target: int) -> int:
    """The smallest 5-smooth number (2^a 3^b 5^c) at least ``target``: a fast real FFT size.

    ``scipy.fft.next_fast_len(target, real=True)``'s choice, without importing scipy.fft (about 40 ms of
    ``privml account``'s start-up, issue 30); numpy's FFT, the same pocketfft algorithm, is loaded with numpy.
    """
    if target <= 1:
        return 1
    best = 1 << (target - 1).bit_length()  # the power of two at or above
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            quotient = -(-target // p35)  # ceil(target / p35): the power of two must reach it
            candidate = p35 * (1 << (quotient - 1).bit_length())
            best = min(best, candidate)
            p35 *= 3
        p5 *= 5
    return best


def _convolve(terms: Sequence[tuple[_DiscretePLD, int]], window: _Window) -> _DiscretePLD:
    """PLD of the sum of ``count`` independent draws from each term, on the window.

    The +inf masses compose as 1 - prod (1 - p_inf)^T; the finite parts by one
    cyclic FFT convolution of size M >= window size (Koskela et al. 2020).
    """
    if len(terms) == 1 and terms[0][1] == 1:
        return terms[0][0]
    h = terms[0][0].h
    log_finite = sum(c * math.log1p(-p.inf_mass) if p.inf_mass < 1 else -math.inf for p, c in terms)
    inf_mass = -math.expm1(log_finite)
    size = next_fast_len(window.size)
    spectrum = np.ones(size // 2 + 1, dtype=np.complex128)
    for pld, count in terms:
        spectrum *= _power(np.fft.rfft(_fold(pld, size)), count)
        # Fourier coefficients below 1e-100 move no output by more than 1e-100;
        # flushing them keeps the products out of slow subnormal arithmetic.
        spectrum[np.abs(spectrum) < _SPECTRUM_FLUSH] = 0.0
    cyclic = np.fft.irfft(spectrum, n=size)
    # Round-off: X^T carries T times the relative error of X, spread evenly
    # over the slots. The smallest slot (true value ~0 at the window's edges)
    # shows that noise level; charge it for every slot to +inf so that noise
    # pushing masses down cannot make delta optimistic. Observed: 1e-15 to
    # 1e-12 in total, a few times the shortfall it covers.
    inf_mass += size * abs(float(np.min(cyclic)))
    probs = np.maximum(np.roll(cyclic, -(window.lo % size)), 0.0)
    if window.lo + size <= window.support_hi:
        # mass at index >= lo + size wrapped round to lower losses: charge it to +inf
        inf_mass = min(1.0, inf_mass + math.exp(window.log_upper_tail((window.lo + size) * h)))
    bounded = all(math.isfinite(p.max_loss) for p, _ in terms)
    return _DiscretePLD(window.lo, probs, inf_mass, h, window.support_hi * h if bounded else math.inf)
