"""Exact privacy of the discrete Gaussian: its delta(epsilon) and the calibration of sigma^2 (CKS20, Theorem 7).

The discrete Gaussian N_Z(0, sigma^2) added to an integer query of
sensitivity Delta is (epsilon, delta)-DP with the delta of Canonne, Kamath and
Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020),
Theorem 7. :func:`discrete_gaussian_delta` evaluates that sum as an upper
bound (its tail bounded, never dropped); :func:`calibrate_discrete_gaussian`
finds the rational sigma^2 that meets a target delta, rounded up.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

import numpy as np
from scipy.special import logsumexp

from privml._validation import check_count, check_delta, check_epsilon, check_positive

#: the delta sum runs until the Gaussian weights fall below exp(-_LOG_TAIL) of
#: the peak; what is beyond is bounded by a geometric series, never dropped.
_LOG_TAIL: Final = 60.0
#: relative slack added to computed deltas to absorb floating-point rounding
#: (the sums themselves are accurate to about 1e-13 relative).
_FLOAT_MARGIN: Final = 1e-9
_CHUNK: Final = 1 << 20


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
