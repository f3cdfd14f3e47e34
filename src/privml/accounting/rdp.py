"""Rényi differential privacy: per-mechanism curves, conversions, and the RDP accountant.

A mechanism M is (alpha, r)-RDP when D_alpha(M(D) || M(D')) <= r for every
ordered pair of neighbouring datasets (Mironov 2017, "Rényi Differential
Privacy", Definition 4). Its *RDP curve* is r as a function of the order
alpha > 1; curves of adaptively composed mechanisms add order by order
(Mironov 2017, Proposition 1), and a curve is turned into an (epsilon, delta)
guarantee by a conversion (:func:`rdp_to_epsilon`, :func:`rdp_to_delta`).

Conventions used by every function here:

- Noise is a *noise multiplier*: the noise scale divided by the sensitivity,
  which is measured under the neighbouring relation the guarantee is stated
  for (see :mod:`privml.accounting.events`). A curve holds for whichever
  relation the sensitivity was measured under, except the sampled
  Gaussians, whose noise is stated against one record's contribution and
  whose relation is the sampled event's (:func:`rdp_sampled_gaussian` is
  add/remove-one; the replace-one curves are in
  :mod:`privml.accounting.rdp_replace_one`).
- ``orders`` are Rényi orders alpha > 1; ``inf`` is allowed and means the
  max-divergence (the alpha -> inf limit of D_alpha), i.e. a pure epsilon-DP
  bound.
- Curves are numpy arrays of the same length as ``orders``; ``inf`` marks an
  order at which the mechanism has no finite guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.special import betainc, erfcx, log_ndtr

from privml._validation import check_delta, check_epsilon, check_positive, check_probability
from privml.accounting.accountant import PrivacyAccountant, flatten
from privml.accounting.events import (
    DpEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SampledWithoutReplacementEvent,
)
from privml.accounting.rdp_replace_one import rdp_poisson_gaussian_replace_one, rdp_sampled_without_replacement_gaussian
from privml.neighbouring import Neighbouring

__all__ = [
    "DEFAULT_ORDERS",
    "RDPAccountant",
    "moments_accountant_delta",
    "moments_accountant_epsilon",
    "rdp_exponential",
    "rdp_gaussian",
    "rdp_laplace",
    "rdp_pure",
    "rdp_sampled_gaussian",
    "rdp_to_delta",
    "rdp_to_epsilon",
]

#: The order grid of Google dp_accounting 0.6 ``RdpAccountant`` (1.1 to 10.9 in
#: steps of 0.1, the integers 11 to 63, and 128 to 1024), so that the two
#: accountants report the same epsilon for the same events.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)

Conversion = Literal["improved", "classic"]

# Truncation of the fractional-order series: stop once the first omitted term is
# below e^-25 (~1e-11) of A_alpha - 1. The cap only costs tightness, never
# validity (the truncated sum is an upper bound, see _log_a_minus_one_frac);
# it is reached only at orders near 1 with q near 1/2, where the tail decays
# polynomially, and leaves a relative excess of at most ~2e-8 in A - 1 there
# (measured at q = 1/2, s = 20, alpha = 1.01), ~1e-11 elsewhere.
_SERIES_LOG_TOL = 25.0
_SERIES_MIN_TERMS = 64
_SERIES_MAX_TERMS = 1 << 13
# Integer orders are summed a block of rows at a time, at most this many terms per block.
_INT_BLOCK = 1 << 20


# --------------------------------------------------------------------------- validation
def _check_orders(orders: object, name: str = "orders") -> np.ndarray:
    """Orders as a read-only 1-D float array; each must be > 1 (``inf`` allowed)."""
    if isinstance(orders, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of real numbers, got {type(orders).__name__}")
    try:
        arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a sequence of real numbers, got {orders!r}") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} must not contain NaN")
    if np.any(arr <= 1):
        raise ValueError(f"Rényi {name} must all be > 1, got {float(arr[arr <= 1][0])!r}")
    arr = arr.copy()
    arr.setflags(write=False)
    return arr


def _check_curve(orders: object, rdp: object) -> tuple[np.ndarray, np.ndarray]:
    """Validated (orders, rdp) pair: same length, rdp >= 0 (``inf`` allowed)."""
    alphas = _check_orders(orders)
    try:
        values = np.atleast_1d(np.asarray(rdp, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"rdp must be a sequence of real numbers, got {rdp!r}") from exc
    if values.shape != alphas.shape:
        raise ValueError(f"rdp must have one value per order: {values.shape} values for {alphas.shape} orders")
    if np.any(np.isnan(values)):
        raise ValueError("rdp must not contain NaN")
    if np.any(values < 0):
        raise ValueError(f"rdp values are divergences and must be >= 0, got {float(values[values < 0][0])!r}")
    return alphas, values


# --------------------------------------------------------------------------- curves
def rdp_gaussian(noise_multiplier: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS) -> np.ndarray:
    """RDP curve of the Gaussian mechanism: ``alpha / (2 s^2)``.

    Parameters
    ----------
    noise_multiplier:
        ``s = sigma / Delta_2``: noise standard deviation over L2 sensitivity, > 0.
    orders:
        Rényi orders > 1 (``inf`` gives ``inf``).

    Returns
    -------
    ndarray
        The RDP at each order.

    Notes
    -----
    Neighbouring relation: the one ``Delta_2`` is measured under.
    Sensitivity: L2, ``Delta_2``. Reference: Mironov (2017), Proposition 7
    (exact: D_alpha(N(Delta, sigma^2) || N(0, sigma^2)) = alpha Delta^2 / (2 sigma^2)).

    Examples
    --------
    >>> rdp_gaussian(2.0, [2, 8]).tolist()
    [0.25, 1.0]
    """
    s = check_positive(noise_multiplier, "noise_multiplier")
    alphas = _check_orders(orders)
    return alphas / (2.0 * s * s)


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x - 1) for x > 0, accurate for tiny x (expm1) and huge x (no overflow)."""
    return x + np.log(-np.expm1(-x))


def _signed_logsumexp(log_terms: np.ndarray, signs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log|sum_k signs_k e^{log_terms_k}| and its sign, along the last axis.

    A lean replacement for ``scipy.special.logsumexp(..., return_sign=True)``,
    whose per-call overhead dominated the accountant's run time.
    """
    peak = np.max(log_terms, axis=-1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    total = np.sum(signs * np.exp(log_terms - peak), axis=-1)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(total)) + peak[..., 0], np.sign(total)


def _log_a_minus_one_int(q: float, s: float, alphas: np.ndarray) -> np.ndarray:
    """log(A_alpha - 1) of the sampled Gaussian at integer orders alpha >= 2, 0 < q < 1.

    MTZ19 Sec. 3.3 writes A_alpha = E_{k ~ Bin(alpha, q)} exp((k^2 - k) / (2 s^2)).
    The k = 0 and k = 1 terms have exponent 0 and the binomial weights sum to
    one, so A_alpha - 1 = sum_{k >= 2} P(k) expm1((k^2 - k) / (2 s^2)): all
    terms positive, no cancellation, so A - 1 keeps full relative precision
    even when it is 1e-20 (tiny q), where summing A directly returns exactly 1.
    Orders are processed together, a few rows of at most ~1M terms at a time.
    """
    out = np.empty(alphas.shape)
    by_size = np.argsort(alphas)
    start = 0
    while start < alphas.size:
        stop = start + 1
        while stop < alphas.size and (stop + 1 - start) * alphas[by_size[stop]] <= _INT_BLOCK:
            stop += 1
        rows = by_size[start:stop]
        a = alphas[rows, None]
        k = np.arange(1.0, alphas[rows].max() + 1.0)
        # log C(alpha, k) from the ratio C(alpha, k) / C(alpha, k-1) = (alpha - k + 1) / k.
        log_binom = np.cumsum(np.log(np.maximum(a - k + 1.0, 1.0)) - np.log(k), axis=1)
        kk = k[1:]
        log_gain = _log_expm1(kk * (kk - 1.0) / (2.0 * s * s))
        log_terms = log_binom[:, 1:] + kk * math.log(q) + (a - kk) * math.log1p(-q) + log_gain
        log_terms = np.where(kk <= a, log_terms, -np.inf)
        out[rows] = _signed_logsumexp(log_terms, np.ones_like(log_terms))[0]
        start = stop
    return out


def _log_region_terms(k: np.ndarray, w: np.ndarray, q: float, s: float, z0: float) -> np.ndarray:
    """log[(q / (1 - q))^k e^{(k^2 - k) / (2 s^2)} Phi(w)] for the series of MTZ19 Sec. 3.3.

    ``Phi(w)`` is the mass of N(k, s^2) on one side of ``z0``. Where w >= 0 the
    terms are evaluated as written (Phi(w) is near 1). Where w < 0 the
    exponent and the Gaussian tail nearly cancel; with
    (k^2 - k)/(2 s^2) + k log(q/(1-q)) = ((k - z0)^2 - z0^2) / (2 s^2) and
    Phi(w) = erfcx(-w / sqrt 2) e^{-w^2/2} / 2 the pair collapses to
    -z0^2 / (2 s^2) + log(erfcx(-w / sqrt 2) / 2), free of cancellation.
    """
    logit_q = math.log(q) - math.log1p(-q)
    out = np.empty(w.shape)
    near = w >= 0
    kn = k[near]
    out[near] = kn * (kn - 1.0) / (2.0 * s * s) + kn * logit_q + log_ndtr(w[near])
    far = ~near
    out[far] = -z0 * z0 / (2.0 * s * s) + np.log(0.5 * erfcx(-w[far] / math.sqrt(2.0)))
    return out


def _log_beta_bracket(q: float, m: np.ndarray) -> np.ndarray:
    """log(1 - (1-q)^m (1 + m q)) = log I_q(2, m), for m > 0.

    Below m q = 1e-8 the two-term expansion m(m+1) q^2 / 2 (1 - 2(m-1) q / 3)
    is exact to double precision and, kept in log space, survives q^2 underflow.
    """
    out = np.empty(m.shape)
    tiny = m * q < 1e-8
    out[tiny] = np.log(m[tiny] * (m[tiny] + 1.0) / 2.0) + 2.0 * math.log(q) + np.log1p(-2.0 * (m[tiny] - 1.0) * q / 3.0)
    out[~tiny] = np.log(betainc(2.0, m[~tiny], q))
    return out


def _log_a_minus_one_frac(q: float, s: float, alphas: np.ndarray) -> np.ndarray:
    """log(A_alpha - 1) of the sampled Gaussian at fractional orders alpha > 1, 0 < q < 1.

    MTZ19 Sec. 3.3: split the integral defining A_alpha at
    z0 = s^2 log(1/q - 1) + 1/2, where q mu_1 = (1 - q) mu_0, and expand
    ((1 - q) + q mu_1/mu_0)^alpha binomially in the smaller of the two terms
    on each side. Term i of the two series is

        T1_i = C(alpha, i) (1-q)^(alpha-i) q^i       e^{(i^2 - i)/(2 s^2)} Phi((z0 - i) / s)
        T2_i = C(alpha, i) (1-q)^i q^(alpha-i)  e^{(j^2 - j)/(2 s^2)} Phi((j - z0) / s),  j = alpha - i.

    The generalised binomial C(alpha, i) changes sign at every i > alpha; we
    keep the sign (the exact value), where summing |C| would overstate A.
    Every |T_i| decreases for i >= alpha (|C| does, and the rest is a
    Gaussian integral whose log-derivative is -(x + phi(x)/Phi(x))/s < 0), so
    by Leibniz's rule each series, cut right after a positive term, is an
    upper bound on its limit: the truncation can cost tightness, never
    privacy. ``T1_0 + T1_1 - 1`` is folded into closed form (see body) so
    that A - 1 keeps its relative precision at small q. All orders are
    summed together; orders whose first omitted term is not yet below
    e^-25 of A - 1 are redone with twice the terms, up to a cap.

    Returns NaN where rounding leaves no positive A - 1 (the caller falls
    back to a neighbouring integer order).
    """
    # long-function: one numerical series (MTZ19 Sec. 3.3) evaluated for all orders at once, with its truncation and
    # retry loop; its steps share many intermediate arrays and splitting would hide the precision argument in the
    # docstring.
    log_q, log_1mq = math.log(q), math.log1p(-q)
    z0 = s * s * (log_1mq - log_q) + 0.5
    floors = np.floor(alphas)
    # T1_0 + T1_1 - 1 = -[1 - (1-q)^(alpha-1) (1 + (alpha-1) q)]
    #                   - (1-q)^alpha Phi(-z0/s) - alpha q (1-q)^(alpha-1) Phi((1 - z0)/s),
    # each of the three >= 0. The bracket is the regularised incomplete beta
    # I_q(2, alpha - 1) (differentiate it in q), which betainc returns to full
    # relative precision; written as above it cancels from O(q) down to O(q^2).
    log_bracket = _log_beta_bracket(q, alphas - 1.0)
    corrections = np.stack(
        [
            log_bracket,
            alphas * log_1mq + log_ndtr(-z0 / s),
            np.log(alphas) + log_q + (alphas - 1.0) * log_1mq + log_ndtr((1.0 - z0) / s),
        ],
        axis=1,
    )
    # Both |T1_i| and |T2_i| peak by i ~ alpha/2 (|C(alpha, i)| does, the rest decreases),
    # inside the first block; sums are kept linear relative to that peak, one per order.
    result = np.full(alphas.shape, np.nan)
    pending = np.arange(alphas.size)
    floors_int = floors.astype(np.int64)
    peak = np.zeros(alphas.size)
    committed = np.zeros(alphas.size)
    last_log_binom = np.zeros(alphas.size)
    n_done, n_terms = 0, max(_SERIES_MIN_TERMS, 2 * int(floors.max()) + 8)
    while pending.size:
        a = alphas[pending, None]
        i_int = np.arange(n_done, n_terms)
        i = i_int.astype(np.float64)
        j = a - i
        # log|C(alpha, i)| by the ratio C(alpha, i+1) / C(alpha, i) = (alpha - i) / (i + 1),
        # carried across blocks: far cheaper than gammaln at negative arguments.
        prev = np.maximum(i - 1.0, 0.0)
        step = np.where(i > 0, np.log(np.abs(a - prev)) - np.log1p(prev), 0.0)
        log_binom = last_log_binom[pending, None] + np.cumsum(step, axis=1)
        last_log_binom[pending] = log_binom[:, -1]
        base = log_binom + a * log_1mq
        # The first series' Gaussian factor depends on i only: one row serves every order.
        log_t1 = base + _log_region_terms(i, (z0 - i) / s, q, s, z0)
        log_t2 = base + _log_region_terms(j, (j - z0) / s, q, s, z0)
        if n_done == 0:
            log_t1[:, :2] = -np.inf  # replaced by the closed-form corrections
            peak[:] = np.max(np.concatenate([log_t1, log_t2, corrections], axis=1), axis=1)
            peak[~np.isfinite(peak)] = 0.0
            committed[:] = -np.sum(np.exp(corrections - peak[:, None]), axis=1)
        # C(alpha, i) > 0 up to i = floor(alpha) + 1, then alternates.
        past = i_int - floors_int[pending, None] - 1
        sign = np.where((past > 0) & (past & 1 == 1), -1.0, 1.0)
        ref = peak[pending, None]
        running = committed[pending, None] + np.cumsum(sign * (np.exp(log_t1 - ref) + np.exp(log_t2 - ref)), axis=1)
        # Per order: cut after the last positive term (i - floor - 1 even) that has a computed successor.
        cut = n_terms - 2 - ((n_terms - 3 - floors_int[pending]) & 1)
        rows, local = np.arange(pending.size), cut - n_done
        partial = running[rows, local]
        with np.errstate(divide="ignore"):
            log_am1 = peak[pending] + np.log(np.abs(partial))
        first_omitted = np.maximum(log_t1[rows, local + 1], log_t2[rows, local + 1])
        scale = np.where(partial > 0, log_am1, 0.0)
        done = (first_omitted <= scale - _SERIES_LOG_TOL) | (n_terms >= _SERIES_MAX_TERMS)
        ok = done & (partial > 0) & np.isfinite(log_am1)
        result[pending[ok]] = log_am1[ok]
        committed[pending] = running[:, -1]
        pending = pending[~done]
        n_done, n_terms = n_terms, 2 * n_terms
    return result


def _sampled_gaussian_curve(q: float, s: float, alphas: np.ndarray) -> np.ndarray:
    """RDP of the Poisson-sampled Gaussian at validated orders (0 < q < 1)."""
    out = np.empty(alphas.shape)
    # The privacy loss of a Gaussian is unbounded, so is its max-divergence.
    out[np.isinf(alphas)] = np.inf
    finite = np.isfinite(alphas)
    is_int = finite & (alphas == np.floor(np.where(finite, alphas, 0.0)))
    frac = finite & ~is_int
    log_am1 = np.full(alphas.shape, np.nan)
    log_am1[is_int] = _log_a_minus_one_int(q, s, alphas[is_int])
    if frac.any():
        log_am1[frac] = _log_a_minus_one_frac(q, s, alphas[frac])
    good = finite & ~np.isnan(log_am1)
    out[good] = np.logaddexp(0.0, log_am1[good]) / (alphas[good] - 1.0)
    fallback = np.flatnonzero(frac & ~good)
    if fallback.size:
        # D_alpha is non-decreasing in alpha (van Erven & Harremoës 2014, Thm 3).
        ceil = np.ceil(alphas[fallback])
        out[fallback] = np.logaddexp(0.0, _log_a_minus_one_int(q, s, ceil)) / (ceil - 1.0)
    return out


def rdp_sampled_gaussian(
    q: float, noise_multiplier: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS
) -> np.ndarray:
    """RDP curve of the Poisson-sampled Gaussian mechanism (the DP-SGD step).

    Each record is kept independently with probability ``q``; a function of
    L2 sensitivity ``Delta_2`` of the sample is released with
    N(0, (s Delta_2)^2) noise.

    Parameters
    ----------
    q:
        Sampling probability in (0, 1]; ``q = 1`` is the unsampled Gaussian.
    noise_multiplier:
        ``s = sigma / Delta_2`` > 0.
    orders:
        Rényi orders > 1. Integer orders use the binomial sum, fractional
        orders the two-series expansion; ``inf`` gives ``inf``.

    Returns
    -------
    ndarray
        ``log(A_alpha) / (alpha - 1)`` at each order.

    Notes
    -----
    Neighbouring relation: add/remove-one (amplification by Poisson sampling
    is an add/remove statement). Sensitivity: L2 ``Delta_2`` under
    add/remove-one (a clipped sum: the clip norm). Reference: Mironov, Talwar
    and Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
    Mechanism": Sec. 3 (the RDP is log(A_alpha)/(alpha - 1), the direction
    D(mixture || N(0, s^2)) dominating) and Sec. 3.3 (the integer-order
    binomial sum and the fractional-order series). Both are evaluated in log
    space as log(A_alpha - 1), without the cancellation that summing A_alpha
    itself suffers at small q: the relative error stays near 1e-15 (1 + s^2)
    for q down to 1e-300, s from 1e-2 to 1e4 and orders to 1e4 (checked
    against quadrature and closed forms). Fractional orders keep the sign of
    the generalised binomial coefficients, i.e. the exact divergence;
    dp_accounting 0.6 sums their absolute values, a valid but larger bound
    (tenfold at alpha = 1.1, q = 0.3, s = 5), which shows in its epsilon when
    the optimal order is a small fractional one (large-epsilon regimes).

    Examples
    --------
    >>> float(rdp_sampled_gaussian(1.0, 2.0, [8])[0])
    1.0
    >>> round(float(rdp_sampled_gaussian(0.01, 1.0, [2])[0]), 8)
    0.00017181
    """
    q = check_probability(q, "sampling_probability")
    s = check_positive(noise_multiplier, "noise_multiplier")
    alphas = _check_orders(orders)
    if q == 1.0:
        return rdp_gaussian(s, alphas)
    return _sampled_gaussian_curve(q, s, alphas)


def rdp_laplace(noise_multiplier: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS) -> np.ndarray:
    """RDP curve of the Laplace mechanism, exact.

    Parameters
    ----------
    noise_multiplier:
        ``b = scale / Delta_1`` > 0; the mechanism is epsilon = 1/b pure DP.
    orders:
        Rényi orders > 1 (``inf`` gives ``1/b``).

    Returns
    -------
    ndarray
        ``eps + log1p((alpha-1)/(2 alpha-1) expm1(-(2 alpha-1) eps)) / (alpha-1)``,
        an algebraic rearrangement of Mironov (2017), Proposition 6,
        ``log(alpha/(2 alpha-1) e^{(alpha-1) eps} + (alpha-1)/(2 alpha-1) e^{-alpha eps}) / (alpha-1)``
        that never overflows.

    Notes
    -----
    Neighbouring relation: the one ``Delta_1`` is measured under.
    Sensitivity: L1 ``Delta_1``. Proposition 6 is stated for one coordinate;
    it covers d coordinates with L1 sensitivity Delta_1 because the curve is
    convex in the shift and 0 at 0, hence superadditive: spreading the L1
    shift over coordinates never beats putting it on one.

    Examples
    --------
    >>> round(float(rdp_laplace(1.0, [float("inf")])[0]), 12)
    1.0
    """
    b = check_positive(noise_multiplier, "noise_multiplier")
    alphas = _check_orders(orders)
    eps = 1.0 / b
    finite = np.isfinite(alphas)
    a = np.where(finite, alphas, 2.0)
    inner = np.log1p((a - 1.0) / (2.0 * a - 1.0) * np.expm1(-(2.0 * a - 1.0) * eps)) / (a - 1.0)
    return np.where(finite, eps + inner, eps)


def _log_cosh(x: np.ndarray) -> np.ndarray:
    """log cosh(x): log1p(2 sinh^2(x/2)) keeps small x exact; the tail form avoids overflow."""
    ax = np.abs(x)
    small = ax < 20.0
    with np.errstate(over="ignore"):
        return np.where(
            small,
            np.log1p(2.0 * np.sinh(np.where(small, ax, 0.0) / 2.0) ** 2),
            ax - math.log(2.0) + np.log1p(np.exp(-2.0 * ax)),
        )


def rdp_pure(epsilon: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS) -> np.ndarray:
    """Tightest RDP curve implied by pure epsilon-DP alone.

    Parameters
    ----------
    epsilon:
        The pure DP parameter, > 0.
    orders:
        Rényi orders > 1 (``inf`` gives ``epsilon``).

    Returns
    -------
    ndarray
        ``log(cosh((alpha - 1/2) eps) / cosh(eps/2)) / (alpha - 1)``, which is
        the RDP of binary randomized response with flip probability
        1/(1 + e^eps) (Mironov 2017, Proposition 5).

    Notes
    -----
    Neighbouring relation: whichever the epsilon-DP guarantee holds for.
    Sensitivity: none (a property of the output distributions only).

    Why randomized response is the worst case: for an epsilon-DP pair (P, Q)
    the likelihood ratio L = dP/dQ lies in [e^-eps, e^eps] with E_Q[L] = 1,
    and L^alpha is convex, so E_Q[L^alpha] is largest when L puts all its
    mass on the two endpoints, i.e. for randomized response. The curve is
    therefore attained and cannot be improved. It lies below both bounds
    usually quoted, ``eps`` (D_alpha is non-decreasing in alpha with limit the
    max-divergence; van Erven & Harremoës 2014, Thm 3) and ``alpha eps^2 / 2``
    (Bun & Steinke 2016, Proposition 3.3); the same curve appears in
    Steinke's note "Tight RDP & zCDP bounds from pure DP" (differentialprivacy.org)
    as log((sinh(alpha eps) - sinh((alpha-1) eps)) / sinh(eps)) / (alpha - 1).

    Examples
    --------
    >>> bool(rdp_pure(1.0, [2.0])[0] < min(1.0, 2.0 * 1.0**2 / 2))
    True
    """
    eps = check_epsilon(epsilon)
    alphas = _check_orders(orders)
    finite = np.isfinite(alphas)
    a = np.where(finite, alphas, 2.0)
    curve = (_log_cosh((a - 0.5) * eps) - _log_cosh(np.full_like(a, eps / 2.0))) / (a - 1.0)
    # The exact curve never exceeds eps; clip what rounding might add.
    return np.where(finite, np.minimum(curve, eps), eps)


def rdp_exponential(epsilon: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS) -> np.ndarray:
    """RDP curve of the exponential mechanism run at ``epsilon``.

    Parameters
    ----------
    epsilon:
        The mechanism's privacy parameter (selection probability
        proportional to exp(eps u / (2 Delta_u))), > 0.
    orders:
        Rényi orders > 1 (``inf`` gives ``epsilon``).

    Returns
    -------
    ndarray
        ``min(alpha eps^2 / 8, rdp_pure(eps))`` at each order.

    Notes
    -----
    Neighbouring relation: the one the utility sensitivity ``Delta_u`` is
    measured under (replace-one by default in privml). Sensitivity: the
    utility's, ``Delta_u``. References: the mechanism is eps-DP (McSherry
    and Talwar 2007, Theorem 6), hence :func:`rdp_pure`; it is eps-bounded
    range and so eps^2/8-zCDP (Cesar and Rogers 2021, "Bounding,
    Concentrating, and Truncating", Lemma 3.2), i.e. (alpha, alpha eps^2/8)-RDP
    for every alpha (Bun and Steinke 2016, Definition 1.1).
    """
    eps = check_epsilon(epsilon)
    alphas = _check_orders(orders)
    return np.minimum(alphas * (eps * eps / 8.0), rdp_pure(eps, alphas))


# --------------------------------------------------------------------------- conversions
def _improved_epsilons(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """Per-order epsilon of the improved conversion (inputs already validated).

    eps(alpha) = r + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)
    (Canonne, Kamath and Steinke 2020, Proposition 12; Balle et al. 2020,
    Theorem 21). At alpha = inf the curve value is a pure-DP epsilon (valid
    for every delta). Where delta >= sqrt(1 - e^-r), epsilon is 0: r >= KL
    (van Erven & Harremoës 2014, Thm 3) and total variation is at most
    sqrt(1 - e^-KL) (Bretagnolle and Huber 1979), and (0, delta)-DP is TV <= delta.
    """
    finite = np.isfinite(orders)
    a = np.where(finite, orders, 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_delta = math.log(delta) if delta > 0 else -math.inf
        eps = rdp + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
        eps = np.where(finite, eps, rdp)
        tv_zero = delta * delta >= -np.expm1(-rdp)
    eps = np.where(tv_zero, 0.0, eps)
    return np.maximum(eps, 0.0)


def _improved_log_deltas(orders: np.ndarray, rdp: np.ndarray, epsilon: float) -> np.ndarray:
    """Per-order log delta of the improved conversion (inputs already validated).

    log delta(alpha) = (alpha-1)(r - eps + log(1 - 1/alpha)) - log alpha, the
    inverse of :func:`_improved_epsilons` at each order (same references);
    at alpha = inf, delta is 0 when r <= eps and 1 otherwise; and delta is
    never above the total-variation bound sqrt(1 - e^-r).
    """
    finite = np.isfinite(orders)
    a = np.where(finite, orders, 2.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_delta = (a - 1.0) * (rdp - epsilon + np.log1p(-1.0 / a)) - np.log(a)
        log_delta = np.where(finite, log_delta, np.where(rdp <= epsilon, -np.inf, 0.0))
        log_tv = 0.5 * np.log(-np.expm1(-rdp))
    return np.minimum(np.minimum(log_delta, log_tv), 0.0)


def _classic_epsilons(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """Per-order epsilon ``r + log(1/delta)/(alpha-1)`` (Mironov 2017, Proposition 3)."""
    finite = np.isfinite(orders)
    a = np.where(finite, orders, 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_delta = math.log(delta) if delta > 0 else -math.inf
        eps = rdp - log_delta / (a - 1.0)
    return np.where(finite, eps, rdp)


def _classic_log_deltas(orders: np.ndarray, rdp: np.ndarray, epsilon: float) -> np.ndarray:
    """Per-order log delta ``(alpha-1)(r - eps)`` (Mironov 2017, Proposition 3), capped at 0."""
    finite = np.isfinite(orders)
    a = np.where(finite, orders, 2.0)
    with np.errstate(invalid="ignore", over="ignore"):
        log_delta = (a - 1.0) * (rdp - epsilon)
        log_delta = np.where(finite, log_delta, np.where(rdp <= epsilon, -np.inf, 0.0))
    return np.minimum(log_delta, 0.0)


def _best(orders: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    index = int(np.argmin(values))
    return float(values[index]), float(orders[index])


def rdp_to_epsilon(orders: Sequence[float], rdp: Sequence[float], delta: float) -> tuple[float, float]:
    """Smallest epsilon an RDP curve certifies at ``delta`` (improved conversion).

    Parameters
    ----------
    orders:
        Rényi orders > 1 (``inf`` allowed: its value is a pure-DP epsilon).
    rdp:
        The curve at those orders, >= 0 (``inf`` allowed).
    delta:
        Target delta in [0, 1). With ``delta = 0`` only an ``inf`` order (or
        an all-zero curve) gives a finite answer: a finite-order RDP bound
        never implies pure DP.

    Returns
    -------
    (epsilon, order)
        ``min_alpha r(alpha) + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)``,
        floored at 0, and the minimising order.

    Notes
    -----
    Neighbouring relation: that of the curve. References: Canonne, Kamath and
    Steinke (2020), Proposition 12; Balle, Barthe, Gaboardi, Hsu and Sato
    (2020), Theorem 21. Also uses the total-variation bound described in
    :func:`rdp_to_delta`. Never larger than :func:`moments_accountant_epsilon`.

    Examples
    --------
    >>> eps, order = rdp_to_epsilon([2.0, 4.0, 8.0], rdp_gaussian(2.0, [2.0, 4.0, 8.0]), 1e-5)
    >>> round(eps, 4), order
    (2.2141, 8.0)
    """
    alphas, values = _check_curve(orders, rdp)
    return _best(alphas, _improved_epsilons(alphas, values, check_delta(delta)))


def rdp_to_delta(orders: Sequence[float], rdp: Sequence[float], epsilon: float) -> tuple[float, float]:
    """Smallest delta an RDP curve certifies at ``epsilon`` (improved conversion).

    Parameters
    ----------
    orders, rdp:
        The curve, as in :func:`rdp_to_epsilon`.
    epsilon:
        Target epsilon >= 0.

    Returns
    -------
    (delta, order)
        ``min_alpha exp((alpha-1)(r - eps + log(1 - 1/alpha))) / alpha`` capped
        at 1, and the minimising order.

    Notes
    -----
    The inverse of :func:`rdp_to_epsilon` order by order (Canonne, Kamath
    and Steinke 2020, Proposition 12; Balle et al. 2020, Theorem 21). Each
    order also offers delta <= sqrt(1 - e^-r): the curve bounds KL (van
    Erven & Harremoës 2014, Thm 3), KL bounds total variation (Bretagnolle
    and Huber 1979), and total variation is the delta of (0, delta)-DP, hence
    of (eps, delta)-DP for every eps >= 0.
    """
    alphas, values = _check_curve(orders, rdp)
    log_deltas = _improved_log_deltas(alphas, values, _check_target_epsilon(epsilon))
    log_delta, order = _best(alphas, log_deltas)
    return math.exp(log_delta), order


def moments_accountant_epsilon(
    orders: Sequence[float], rdp: Sequence[float], delta: float
) -> tuple[float, float]:
    """Epsilon by the classic moments-accountant conversion (kept for comparison).

    Parameters
    ----------
    orders, rdp:
        The curve, as in :func:`rdp_to_epsilon`.
    delta:
        Target delta in [0, 1).

    Returns
    -------
    (epsilon, order)
        ``min_alpha r(alpha) + log(1/delta)/(alpha - 1)`` and the minimising order.

    Notes
    -----
    Mironov (2017), Proposition 3; with alpha = lambda + 1 it is the tail
    bound of the moments accountant of Abadi et al. (2016), Theorem 2.
    Always at least :func:`rdp_to_epsilon`.
    """
    alphas, values = _check_curve(orders, rdp)
    return _best(alphas, _classic_epsilons(alphas, values, check_delta(delta)))


def moments_accountant_delta(
    orders: Sequence[float], rdp: Sequence[float], epsilon: float
) -> tuple[float, float]:
    """Delta by the classic moments-accountant conversion (kept for comparison).

    Returns
    -------
    (delta, order)
        ``min_alpha exp((alpha - 1)(r(alpha) - eps))`` capped at 1, and the minimising order.

    Notes
    -----
    Mironov (2017), Proposition 3; Abadi et al. (2016), Theorem 2. Always at
    least :func:`rdp_to_delta`.
    """
    alphas, values = _check_curve(orders, rdp)
    log_delta, order = _best(alphas, _classic_log_deltas(alphas, values, _check_target_epsilon(epsilon)))
    return math.exp(log_delta), order


def _check_target_epsilon(epsilon: object) -> float:
    """Epsilon >= 0 and finite (0 is a meaningful target for a delta query)."""
    return 0.0 if not isinstance(epsilon, bool) and epsilon == 0 else check_epsilon(epsilon)


# --------------------------------------------------------------------------- accountant
def _supported_base(event: DpEvent) -> bool:
    if isinstance(event, (GaussianEvent, LaplaceEvent, ExponentialEvent)):
        return True
    if isinstance(event, EpsilonDeltaEvent):
        return event.delta == 0
    if isinstance(event, (PoissonSampledEvent, SampledWithoutReplacementEvent)):
        return isinstance(event.event, GaussianEvent)
    return False


@lru_cache(maxsize=1024)
def _event_curve(event: DpEvent, orders: tuple[float, ...]) -> np.ndarray:
    """The RDP curve of one supported base event, cached (events are frozen and hashable)."""
    if isinstance(event, GaussianEvent):
        curve = rdp_gaussian(event.noise_multiplier, orders)
    elif isinstance(event, PoissonSampledEvent):
        inner = event.event
        assert isinstance(inner, GaussianEvent)
        if event.neighbouring is Neighbouring.REPLACE_ONE:
            curve = rdp_poisson_gaussian_replace_one(event.sampling_probability, inner.noise_multiplier, orders)
        else:
            curve = rdp_sampled_gaussian(event.sampling_probability, inner.noise_multiplier, orders)
    elif isinstance(event, SampledWithoutReplacementEvent):
        inner = event.event
        assert isinstance(inner, GaussianEvent)
        curve = rdp_sampled_without_replacement_gaussian(
            event.sample_size, event.population, inner.noise_multiplier, orders
        )
    elif isinstance(event, LaplaceEvent):
        curve = rdp_laplace(event.noise_multiplier, orders)
    elif isinstance(event, ExponentialEvent):
        curve = rdp_exponential(event.epsilon, orders)
    else:
        assert isinstance(event, EpsilonDeltaEvent) and event.delta == 0
        curve = rdp_pure(event.epsilon, orders)
    curve.setflags(write=False)
    return curve


class RDPAccountant(PrivacyAccountant):
    """Privacy accountant that adds RDP curves and converts the total to (epsilon, delta).

    Parameters
    ----------
    orders:
        Rényi orders > 1 at which curves are tracked; defaults to
        :data:`DEFAULT_ORDERS`, the grid of dp_accounting 0.6. The order
        alpha = inf is always tracked as well (its value is the sum of the
        pure-DP epsilons, ``inf`` once any Gaussian is composed).
    conversion:
        ``"improved"`` (Canonne, Kamath and Steinke 2020, Proposition 12;
        Balle et al. 2020, Theorem 21; the default) or ``"classic"``
        (Mironov 2017, Proposition 3 / the moments accountant of Abadi et
        al. 2016), kept for comparison.

    Notes
    -----
    Supported events and the curve each contributes:

    - ``GaussianEvent``: :func:`rdp_gaussian` (Mironov 2017, Prop. 7);
    - ``PoissonSampledEvent`` of a ``GaussianEvent``: :func:`rdp_sampled_gaussian`
      (Mironov, Talwar and Zhang 2019) under add/remove-one; under
      replace-one, :func:`~privml.accounting.rdp_replace_one.rdp_poisson_gaussian_replace_one`
      (the Rényi divergence of the replace-one dominating pair);
    - ``SampledWithoutReplacementEvent`` of a ``GaussianEvent`` (replace-one):
      :func:`~privml.accounting.rdp_replace_one.rdp_sampled_without_replacement_gaussian`
      (Wang, Balle and Kasiviswanathan 2019, Theorem 9 and its Gaussian refinement);
    - ``LaplaceEvent``: :func:`rdp_laplace` (Mironov 2017, Prop. 6);
    - ``ExponentialEvent``: :func:`rdp_exponential` (Cesar and Rogers 2021);
    - ``EpsilonDeltaEvent`` with ``delta == 0``: :func:`rdp_pure`;
    - ``SelfComposedEvent`` / ``ComposedEvent`` of the above: curves add
      (Mironov 2017, Proposition 1), ``count`` copies as one multiplication.

    Approximate-DP events (delta > 0) and Poisson sampling of anything but a
    Gaussian are refused with :class:`~privml.exceptions.UnsupportedEventError`.
    Every event's sensitivity is measured under the ledger's single
    neighbouring relation. Curves are cached per event, so 14040 DP-SGD steps
    cost one curve evaluation.

    With ``delta = 0``, :meth:`get_epsilon` returns the alpha = inf value:
    the basic-composition epsilon when only pure-DP events were composed, and
    ``inf`` otherwise (finite-order RDP never implies pure DP).

    Examples
    --------
    >>> from privml.accounting.events import dpsgd_event
    >>> acc = RDPAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14040))
    >>> round(acc.get_epsilon(1e-5), 4)
    2.5944
    """

    name = "rdp"

    def __init__(
        self, *, orders: Sequence[float] = DEFAULT_ORDERS, conversion: Conversion = "improved"
    ) -> None:
        super().__init__()
        if conversion not in ("improved", "classic"):
            raise ValueError(f"conversion must be 'improved' or 'classic', got {conversion!r}")
        self._conversion: Conversion = conversion
        self._orders = _check_orders(orders)
        grid = self._orders if np.isinf(self._orders).any() else np.append(self._orders, np.inf)
        self._grid: tuple[float, ...] = tuple(float(a) for a in grid)
        self._grid_array = np.array(self._grid)
        self._curve = np.zeros(len(self._grid))

    @property
    def orders(self) -> np.ndarray:
        """The Rényi orders requested at construction."""
        return self._orders

    @property
    def conversion(self) -> Conversion:
        """``"improved"`` or ``"classic"``."""
        return self._conversion

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP curve at :attr:`orders` (a copy)."""
        index = [self._grid.index(float(a)) for a in self._orders]
        return self._curve[index].copy()

    def supports(self, event: DpEvent) -> bool:
        """Gaussian, sampled Gaussian (Poisson or fixed-size), Laplace, exponential and pure (eps, 0) events."""
        return all(_supported_base(base) for base, _ in flatten(event))

    def _compose(self, event: DpEvent, count: int) -> None:
        for base, n in flatten(event, count):
            self._curve = self._curve + n * _event_curve(base, self._grid)

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """Epsilon at ``delta`` and the order that attains it (``(0.0, inf)`` before any event)."""
        delta = check_delta(delta)
        if not self._events:
            return 0.0, math.inf
        per_order = _improved_epsilons if self._conversion == "improved" else _classic_epsilons
        return _best(self._grid_array, per_order(self._grid_array, self._curve, delta))

    def _get_epsilon(self, delta: float) -> float:
        return self.get_epsilon_and_order(delta)[0]

    def _get_delta(self, epsilon: float) -> float:
        per_order = _improved_log_deltas if self._conversion == "improved" else _classic_log_deltas
        log_delta, _ = _best(self._grid_array, per_order(self._grid_array, self._curve, epsilon))
        return math.exp(log_delta)

    def __repr__(self) -> str:
        return f"RDPAccountant(orders={len(self._orders)}, conversion={self._conversion!r}, events={len(self._events)})"
