"""The exact privacy curve of the Gaussian mechanism, and noise calibration.

This module is the one place the Gaussian privacy profile is written down.
Everything is expressed through ``mu = Delta_2 / sigma``, the sensitivity of
the protected function measured in units of the noise standard deviation.
Adding N(0, sigma^2 I) to a function of L2 sensitivity ``Delta_2`` (under any
neighbouring relation: the formulas only see the shift ``Delta_2`` between the
two output distributions) is (epsilon, delta)-DP if and only if

    delta >= delta_mu(epsilon) = Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu)

(Balle and Wang 2018, "Improving the Gaussian Mechanism for Differential
Privacy", Theorem 8). The same curve is the (epsilon, delta) dual of mu-GDP
(Dong, Roth and Su 2022, "Gaussian Differential Privacy", Corollary 1;
Corollary 2.13 of arXiv:1905.02383), so a Gaussian-DP accountant converts
with these functions too.

The curve is evaluated in log space: both terms underflow double precision
at large epsilon / mu, and their difference cancels catastrophically when
computed directly (see :func:`log_gaussian_delta` for how both are avoided).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import overload

import numpy as np
from scipy.special import erf, erfcx, ndtr

from privml._validation import check_epsilon, check_positive, check_positive_delta

__all__ = [
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "log_gaussian_delta",
]

# Bisection stops when the bracket is this narrow (relative): far below any
# sensible precision of epsilon or sigma, well above double rounding.
_REL_TOL = 1e-12
_SQRT2 = math.sqrt(2.0)
# log of the largest and smallest positive doubles: the range of math.exp.
_LOG_MAX = math.log(np.finfo(np.float64).max)
_LOG_MIN = math.log(np.finfo(np.float64).smallest_subnormal)
# Below this mu the closed form's erfcx difference cancels (relative error ~1e-16 z2 / mu, 4e-12 here and
# 1.9e-5 at mu = 3e-11): log_gaussian_delta switches to the integral form of _log_delta_small_mu.
_SMALL_MU = 1e-3
# Safety margin on log delta in the inverses: above the 1e-11 relative error of log_gaussian_delta (and the
# ~1e-12 of its small-mu form), so a returned calibration never exceeds its target through rounding.
_LOG_MARGIN = 1e-10
# Gauss-Legendre rule of _log_delta_small_mu: the integrand is entire and varies by a factor <= e^(eps/2)
# over the interval, so 24 nodes are exact to rounding for eps <= ~10 (beyond, delta underflows at mu < 1e-3).
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(24)


def _check_epsilon_array(epsilon: object) -> np.ndarray:
    """Epsilon of a privacy profile: finite or +inf, and >= 0 (0 is meaningful here)."""
    if isinstance(epsilon, bool):
        raise TypeError("epsilon must be a real number or an array of them, got bool")
    eps = np.asarray(epsilon, dtype=np.float64)
    if np.any(np.isnan(eps)):
        raise ValueError("epsilon must be a number, got NaN")
    if np.any(eps < 0):
        raise ValueError(f"epsilon must be >= 0, got {eps[eps < 0].ravel()[0]!r}")
    return eps


# A scalar epsilon gives a float; an array gives an array of its shape (a float when 0-d).
@overload
def log_gaussian_delta(epsilon: float, mu: float) -> float: ...
@overload
def log_gaussian_delta(epsilon: np.ndarray, mu: float) -> float | np.ndarray: ...
def log_gaussian_delta(epsilon: float | np.ndarray, mu: float) -> float | np.ndarray:
    """Natural log of :func:`gaussian_delta` (``-inf`` where delta is 0).

    Use this where delta itself underflows (mu small against epsilon), e.g. to
    bisect on the curve. Same parameters, assumptions and reference as
    :func:`gaussian_delta`.

    Notes
    -----
    With ``z1 = eps/mu - mu/2`` and ``z2 = eps/mu + mu/2`` the curve is
    ``Phi(-z1) - e^eps Phi(-z2)``. Writing ``Phi(-z) = erfcx(z/sqrt 2) e^(-z^2/2) / 2``
    and using the identity ``eps - z2^2/2 = -z1^2/2``, the exponential factors
    of the two terms cancel *exactly*:

    - ``z1 > 0`` (the tail, where delta is small):
      ``log delta = -z1^2/2 + log((erfcx(z1/sqrt 2) - erfcx(z2/sqrt 2)) / 2)``,
      a difference of two O(1/z) numbers instead of two huge logs;
    - ``z1 <= 0`` (delta >= ~0.1 unless mu is small): ``Phi(-z1) - Phi(-z2)`` is
      ``(erf(z2/sqrt 2) + erf(-z1/sqrt 2)) / 2``, a sum of positives, from
      which ``(e^eps - 1) Phi(-z2)`` is subtracted (``expm1``; for eps >= 1
      the two terms differ by a factor >= e and are subtracted directly).

    Against 60-digit mpmath on a grid of 1e-3 <= mu <= 100, 0 <= eps <= 1e4,
    delta > 1e-304, the relative error is below 1e-11 (a difference of two
    ``log_ndtr`` values, which cancels two logs of size eps^2 / (2 mu^2),
    measured 2e-9 on the same grid and is far worse once delta underflows).
    Below mu = 1e-3 the erfcx difference itself cancels (relative error
    ~ 1e-16 z2 / mu, 1.9e-5 at mu = 3e-11), so there the curve is the
    integral of its derivative in mu at fixed ``c = eps/mu`` (no cancellation,
    see :func:`_log_delta_small_mu`; relative error below 1e-12).
    """
    eps = _check_epsilon_array(epsilon)
    mu = check_positive(mu, "mu")
    if mu < _SMALL_MU:
        small = _log_delta_small_mu(eps, mu)
        return float(small) if small.ndim == 0 else small
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = eps / mu
        a1, a2 = (ratio - mu / 2.0) / _SQRT2, (ratio + mu / 2.0) / _SQRT2  # z1, z2 over sqrt 2
        tail = -a1 * a1 + np.log(0.5 * (erfcx(a1) - erfcx(a2)))
        small_eps = eps < 1.0
        body = np.where(
            small_eps,
            0.5 * (erf(a2) + erf(-a1)) - np.expm1(np.where(small_eps, eps, 0.0)) * ndtr(-_SQRT2 * a2),
            ndtr(-_SQRT2 * a1) - 0.5 * np.exp(-a1 * a1) * erfcx(a2),
        )
        # delta >= 0 exactly; a non-positive body is rounding, i.e. delta ~ 0.
        out = np.where(a1 > 0, tail, np.where(body > 0, np.log(np.where(body > 0, body, 1.0)), -np.inf))
    return float(out) if out.ndim == 0 else out


def _one_minus_c_mills(c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``1 - c R(c + s)`` for ``c, s >= 0``, with ``R(x) = Phi(-x) / phi(x)`` (Mills' ratio), without cancellation.

    Written as ``(1 - x R(x)) + s R(x)``, a sum of positives. ``1 - x R(x)``
    (~1/x^2) is taken from erfcx below x = 40 (relative error ~ 1e-16 x^2)
    and from its asymptotic series above (truncation error < 1e-12).
    """
    x = c + s
    mills = math.sqrt(math.pi / 2.0) * erfcx(x / _SQRT2)
    inv2 = 1.0 / np.maximum(x, 1.0) ** 2
    series = inv2 * (1.0 + inv2 * (-3.0 + inv2 * (15.0 + inv2 * (-105.0 + inv2 * 945.0))))
    return np.where(x < 40.0, 1.0 - x * mills, series) + s * mills


def _log_delta_small_mu(eps: np.ndarray, mu: float) -> np.ndarray:
    """``log_gaussian_delta`` for ``mu < _SMALL_MU``, from an integral with a positive integrand.

    With ``c = eps/mu`` and ``h = mu/2`` the curve is
    ``F(h) = Phi(h - c) - e^(2ch) Phi(-c - h)``, ``F(0) = 0``, and using
    ``e^(2cs) phi(c + s) = phi(c - s)``, ``F'(s) = 2 phi(c - s) (1 - c R(c + s))``,
    so ``delta = integral_0^h 2 phi(c - s) (1 - c R(c + s)) ds``, summed by
    Gauss-Legendre in log space (no underflow, no cancellation).
    """
    h = mu / 2.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = (eps / mu)[..., None]
        s = h * (1.0 + _NODES) / 2.0
        log_terms = (np.log(_WEIGHTS * h) - 0.5 * math.log(2.0 * math.pi) - 0.5 * (c - s) ** 2
                     + np.log(_one_minus_c_mills(c, s)))
        top = np.max(log_terms, axis=-1)
        finite = np.isfinite(top)
        safe_top = np.where(finite, top, 0.0)
        out = safe_top + np.log(np.sum(np.exp(log_terms - safe_top[..., None]), axis=-1))
    return np.where(finite, out, -np.inf)


# A scalar epsilon gives a float; an array gives an array of its shape (a float when 0-d).
@overload
def gaussian_delta(epsilon: float, mu: float) -> float: ...
@overload
def gaussian_delta(epsilon: np.ndarray, mu: float) -> float | np.ndarray: ...
def gaussian_delta(epsilon: float | np.ndarray, mu: float) -> float | np.ndarray:
    """Exact delta(epsilon) of the Gaussian mechanism with ``mu = Delta_2 / sigma``.

    Parameters
    ----------
    epsilon:
        One or more epsilon >= 0 (``inf`` gives 0); the result has its shape.
    mu:
        Sensitivity over noise standard deviation, > 0.

    Returns
    -------
    float or ndarray
        ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``: the smallest delta
        for which adding N(0, sigma^2 I) to a function of L2 sensitivity
        ``Delta_2`` is (epsilon, delta)-DP.

    Notes
    -----
    Neighbouring relation: whichever one ``Delta_2`` is measured under; the
    guarantee inherits it. Sensitivity: L2, ``Delta_2 = mu * sigma``.
    Reference: Balle and Wang (2018), Theorem 8 (the condition is necessary
    and sufficient); equal to the mu-GDP curve of Dong, Roth and Su (2022),
    Corollary 1. Evaluated as ``exp(log_gaussian_delta(epsilon, mu))``.

    Examples
    --------
    >>> round(gaussian_delta(1.0, 1 / 3.7306), 7)
    1e-05
    """
    log_delta = log_gaussian_delta(epsilon, mu)
    return float(np.exp(log_delta)) if np.ndim(log_delta) == 0 else np.exp(log_delta)


def _bisect(is_safe: Callable[[float], bool], safe: float, unsafe: float, *, atol: float, rtol: float) -> float:
    """Shrink the bracket [safe, unsafe] (either order) and return its safe end.

    ``is_safe`` must be monotone on the bracket. Stops when the bracket is
    narrower than ``atol + rtol * max(|safe|, |unsafe|)``. Returning the safe
    end (never the midpoint) keeps the answer on the private side of the
    exact curve, up to the curve's own rounding.
    """
    while abs(safe - unsafe) > atol + rtol * max(abs(safe), abs(unsafe)):
        mid = 0.5 * (safe + unsafe)
        if mid in (safe, unsafe):
            break
        if is_safe(mid):
            safe = mid
        else:
            unsafe = mid
    return safe


def gaussian_epsilon(delta: float, mu: float) -> float:
    """Smallest epsilon with ``gaussian_delta(epsilon, mu) <= delta``.

    Parameters
    ----------
    delta:
        Target delta in (0, 1).
    mu:
        Sensitivity over noise standard deviation, > 0.

    Returns
    -------
    float
        The epsilon at which the exact curve reaches ``delta`` (0 if
        ``delta >= gaussian_delta(0, mu)``), found by bisection to relative
        precision 1e-12 and rounded up (a relative margin of 1e-10 on delta
        covers the curve's rounding).

    Notes
    -----
    Neighbouring relation and L2 sensitivity as in :func:`gaussian_delta`
    (Balle and Wang 2018, Theorem 8); delta(epsilon) is strictly decreasing,
    so the root is unique.

    Examples
    --------
    >>> round(gaussian_epsilon(1e-5, 1 / 3.7306), 4)
    1.0
    """
    log_target = math.log(check_positive_delta(delta))
    mu = check_positive(mu, "mu")

    def is_safe(eps: float) -> bool:
        # The margin covers the curve's rounding: the answer never exceeds delta.
        return log_gaussian_delta(eps, mu) + _LOG_MARGIN <= log_target

    # At eps = 0 the curve is erf(mu / (2 sqrt 2)), exact to rounding: no margin, so a delta covering it gives 0.
    if log_gaussian_delta(0.0, mu) <= log_target:
        return 0.0
    # Terminates: delta(inf) = 0 < delta, so at worst hi overflows to inf.
    hi = 1.0
    while not is_safe(hi):
        hi *= 2.0
    return _bisect(is_safe, hi, 0.0, atol=0.0, rtol=_REL_TOL)


def _bracket(is_safe: Callable[[float], bool]) -> tuple[float, float]:
    """A (safe, unsafe) pair of log mu values, by steps doubling away from 0.

    ``is_safe`` is true for small log mu and false for large; the answer may
    lie anywhere from 1e-10 to 1e10, so the bracket grows geometrically.
    """
    x, step = 0.0, 1.0
    start_safe = is_safe(x)
    while True:
        y = x + step if start_safe else x - step
        if is_safe(y) != start_safe:
            return (x, y) if start_safe else (y, x)
        x, step = y, 2.0 * step


def gaussian_mu(epsilon: float, delta: float) -> float:
    """Largest ``mu = Delta_2 / sigma`` with ``gaussian_delta(epsilon, mu) <= delta``.

    Parameters
    ----------
    epsilon:
        Target epsilon, > 0.
    delta:
        Target delta in (0, 1).

    Returns
    -------
    float
        The largest mu meeting the target (bisection on log mu to relative
        precision 1e-12, rounded down, with the curve's rounding covered by a
        relative margin of 1e-10 on delta, so the exact delta of the answer
        never exceeds the target), so ``sigma = Delta_2 / mu`` is the
        smallest Gaussian noise that is (epsilon, delta)-DP.

    Notes
    -----
    Neighbouring relation and L2 sensitivity as in :func:`gaussian_delta`.
    This is the analytic Gaussian mechanism of Balle and Wang (2018,
    Algorithm 1), solved by bisection on the exact condition of their
    Theorem 8 instead of their case analysis; delta is increasing in mu, so
    the answer is unique.

    Examples
    --------
    >>> round(1 / gaussian_mu(1.0, 1e-5), 4)
    3.7306
    """
    epsilon = check_epsilon(epsilon)
    log_target = math.log(check_positive_delta(delta))

    def is_safe(log_mu: float) -> bool:
        # Outside exp's range the answer is known: mu = inf releases f(D)
        # (delta = 1), mu = 0 releases nothing (delta = 0).
        if log_mu > _LOG_MAX:
            return False
        if log_mu < _LOG_MIN:
            return True
        # The margin covers the curve's rounding: the calibration never exceeds delta.
        return log_gaussian_delta(epsilon, math.exp(log_mu)) + _LOG_MARGIN <= log_target

    safe, unsafe = _bracket(is_safe)
    # An absolute width on log mu is a relative width on mu.
    return math.exp(_bisect(is_safe, safe, unsafe, atol=_REL_TOL, rtol=0.0))


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The textbook Gaussian calibration ``sigma = Delta_2 sqrt(2 ln(1.25/delta)) / epsilon``.

    Parameters
    ----------
    epsilon:
        Target epsilon in (0, 1).
    delta:
        Target delta in (0, 1).
    sensitivity:
        L2 sensitivity ``Delta_2`` of the protected function, > 0.

    Returns
    -------
    float
        The noise standard deviation.

    Raises
    ------
    ValueError
        if ``epsilon >= 1``: the theorem does not cover it, and the formula is
        not private there in general. Use :func:`analytic_gaussian_sigma`.

    Notes
    -----
    Neighbouring relation: the one ``sensitivity`` is measured under.
    Reference: Dwork and Roth (2014), Theorem A.1 (stated for epsilon in
    (0, 1)). Always noisier than :func:`analytic_gaussian_sigma`; kept for
    comparison with the literature.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_positive_delta(delta)
    sensitivity = check_positive(sensitivity, "sensitivity")
    if epsilon >= 1:
        raise ValueError(
            f"the classic Gaussian calibration holds only for epsilon < 1 (Dwork & Roth Thm A.1), "
            f"got epsilon={epsilon!r}; use the analytic calibration"
        )
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma for which N(0, sigma^2 I) noise is (epsilon, delta)-DP.

    Parameters
    ----------
    epsilon:
        Target epsilon, > 0 (any size: the exact condition has no epsilon < 1 restriction).
    delta, sensitivity:
        As in :func:`classic_gaussian_sigma`.

    Returns
    -------
    float
        ``sensitivity / gaussian_mu(epsilon, delta)``.

    Notes
    -----
    Neighbouring relation: the one ``sensitivity`` is measured under.
    Reference: Balle and Wang (2018), Theorem 8 and Algorithm 1.

    Examples
    --------
    >>> round(analytic_gaussian_sigma(1.0, 1e-5, 1.0), 4)
    3.7306
    """
    sensitivity = check_positive(sensitivity, "sensitivity")
    return sensitivity / gaussian_mu(epsilon, delta)
