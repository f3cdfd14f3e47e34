"""RDP curve of the Poisson-sampled Gaussian mechanism (the DP-SGD step), under add/remove-one neighbours.

Mironov, Talwar and Zhang 2019 ("Rényi Differential Privacy of the Sampled
Gaussian Mechanism"), Section 3: the RDP at order alpha is
log(A_alpha) / (alpha - 1); Section 3.3 gives A_alpha as a binomial sum at
integer orders and as two series at fractional orders. Both are evaluated
here in log space as log(A_alpha - 1), without the cancellation that summing
A_alpha itself suffers at small sampling rates, and a truncated fractional
series stays an upper bound. The replace-one curves are in
:mod:`privml.accounting._rdp_replace_one`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import betainc, erfcx, log_ndtr

from privml._validation import check_positive, check_probability
from privml.accounting._rdp_curves import DEFAULT_ORDERS, _check_orders, rdp_gaussian

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

