"""RDP curves of the subsampled Gaussian under replace-one neighbours.

Both curves are for DP-SGD's step: a sum of per-example gradients, each
clipped to L2 norm C, plus N(0, s^2 C^2 I), on a random batch. Noise is in
units of C, one record's contribution bound; a *replaced* record moves the
sum by up to 2C, and only when it is in the batch.

- :func:`rdp_poisson_gaussian_replace_one`: Poisson sampling at rate q. The
  Rényi divergence of the dominating pair
  P = (1-q) N(0, s^2) + q N(1, s^2), Q = (1-q) N(0, s^2) + q N(-1, s^2)
  (derived and justified in :class:`privml.accounting._pld._ReplaceOnePoissonGaussianPair`),
  computed by quadrature. A dominating pair bounds every f-divergence of the
  mechanism, Rényi divergences included: an f-divergence is a non-negative
  mixture of hockey-stick divergences H_gamma over gamma >= 0 (Liese and
  Vajda 2006, "On divergences and informations in statistics and information
  theory", Theorem 11), each of which the pair dominates.
- :func:`rdp_sampled_without_replacement_gaussian`: a batch of exactly b of
  the n records, drawn without replacement. The bound of Wang, Balle and
  Kasiviswanathan 2019 ("Subsampled Rényi differential privacy and analytical
  moments accountant", AISTATS), Theorem 9, with the refinement for
  mechanisms whose RDP is attained by one pair of neighbours (their
  Definition 26, which the Gaussian meets) of Theorem 27 in the arXiv
  version (1808.00087); this is what Google's dp_accounting implements for
  ``SampledWithoutReplacementDpEvent`` under ``REPLACE_ONE``.

Both curves are also capped by the unsampled replace-one Gaussian,
alpha * 4 / (2 s^2): Rényi divergence is jointly quasi-convex (van Erven and
Harremoës 2014, Theorem 13), and each mixture component pair differs by a
shift of at most 2C.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln, log_ndtr, logsumexp

from privml._validation import check_count, check_positive, check_probability

__all__ = [
    "rdp_poisson_gaussian_replace_one",
    "rdp_sampled_without_replacement_gaussian",
]

# Quadrature: trapezoid steps as fractions of s^2 and s (see _poisson_log_excess).
_STEP_OF_S2 = 0.2
_STEP_OF_S = 0.3
# Half-widths of the integration window in noise standard deviations.
_WINDOW_SDS = 40.0
# Beyond this many quadrature points an order falls back to the unsampled bound (valid, looser).
_MAX_POINTS = 1 << 21
# Relative allowance added to the quadrature of A - 1 (its error is ~1e-16, see _poisson_log_excess).
_QUADRATURE_SLACK = 1e-9
# WBK19's refined terms use Pearson-Vajda moments up to this order; above it, Theorem 9's term alone.
_MAX_MOMENT_ORDER = 256


def _unsampled(s: float, alphas: np.ndarray) -> np.ndarray:
    """alpha * 2 / s^2: the Gaussian whose sensitivity is 2 (noise s, contribution bound 1), inf at inf."""
    return np.where(np.isfinite(alphas), 2.0 * alphas / (s * s), np.inf)


def _check(orders: Sequence[float]) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0 or np.any(np.isnan(arr)) or np.any(arr <= 1):
        raise ValueError(
            f"orders must be a non-empty sequence of Rényi orders > 1, got {orders!r}"
        )
    return arr


# --------------------------------------------------------------------- Poisson
def _expm1_minus_x(y: np.ndarray) -> np.ndarray:
    """e^y - 1 - y to full relative precision (a Taylor series below |y| = 0.1)."""
    out = np.expm1(y) - y
    small = np.abs(y) < 0.1
    if small.any():
        ys = y[small]
        term = ys * ys / 2.0
        total = term.copy()
        for k in range(3, 15):
            term = term * ys / k
            total += term
        out[small] = total
    return out


def _log_h(alpha: float, loss: np.ndarray) -> np.ndarray:
    """log h(e^L) with h(t) = t^alpha - 1 - alpha (t - 1) >= 0, without cancellation or overflow."""
    a_l = alpha * loss
    big = a_l > 30.0
    direct = np.where(big, 0.0, loss)
    with np.errstate(divide="ignore"):
        h = _expm1_minus_x(alpha * direct) - alpha * _expm1_minus_x(direct)
        log_direct = np.log(np.maximum(h, 0.0))
    # Large alpha L: h = e^(alpha L) (1 - e^(-alpha L) (1 - alpha) - alpha e^(-(alpha - 1) L)).
    lb = np.where(big, loss, 1.0)
    rest = np.exp(-alpha * lb) * (1.0 - alpha) + alpha * np.exp(-(alpha - 1.0) * lb)
    log_big = alpha * lb + np.log1p(-np.minimum(rest, 1.0 - 1e-16))
    return np.where(big, log_big, log_direct)


def _poisson_pair_logs(
    q: float, s: float, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(L(x), log Q(x)) for P = (1-q) N(0,s^2) + q N(1,s^2), Q = (1-q) N(0,s^2) + q N(-1,s^2)."""
    log_r = (
        math.log(q) - math.log1p(-q) - 0.5 / (s * s)
    )  # q phi_{+-1} / ((1-q) phi_0) = r e^(+-x/s^2)
    u = x / (s * s)
    au = np.abs(u)
    small = au < 30.0
    us = np.where(small, au, 0.0)
    r = math.exp(log_r)
    near = np.log1p(2.0 * r * np.sinh(us) / (1.0 + r * np.exp(-us)))
    far = np.logaddexp(0.0, log_r + au) - np.log1p(np.exp(log_r - au))
    loss = np.sign(u) * np.where(small, near, far)
    log_q = (
        -0.5 * (x / s) ** 2
        - math.log(s * math.sqrt(2.0 * math.pi))
        + math.log1p(-q)
        + np.logaddexp(0.0, log_r - u)
    )
    return loss, log_q


def _poisson_log_excess(q: float, s: float, alphas: np.ndarray) -> np.ndarray:
    """log(A_alpha - 1), A_alpha = E_Q[(P/Q)^alpha], for finite orders; NaN where the grid would be too large.

    A - 1 = integral of Q(x) h(P(x)/Q(x)) dx, h(t) = t^alpha - 1 - alpha (t - 1)
    (the alpha (t - 1) term integrates to 0): a non-negative integrand, so no
    cancellation. It is analytic in a strip |Im x| < pi s^2 (the nearest
    zeros of the mixtures) and Gaussian in its tails, so the trapezoid rule
    on the real line converges geometrically (Trefethen and Weideman 2014,
    "The exponentially convergent trapezoidal rule", SIAM Review, Theorem 5.1):
    with steps <= 0.2 s^2 and <= 0.3 s the error is below e^-36 relative.
    Outside the window [-1 - 40 s, 2 alpha + 1 + 40 s] the integrand is
    bounded analytically (below: Q-mass times alpha - 1; above: L' <= 2/s^2
    makes log phi_0 + alpha L decrease at rate >= (x - 2 alpha)/s^2) and
    that bound is added, as is a relative allowance of 1e-9.
    """
    step = min(_STEP_OF_S2 * s * s, _STEP_OF_S * s)
    low = -1.0 - _WINDOW_SDS * s
    finite = alphas[np.isfinite(alphas)]
    top = 2.0 * float(finite.max()) + 1.0 + _WINDOW_SDS * s
    count = min(math.ceil((top - low) / step) + 1, _MAX_POINTS)
    x = low + step * np.arange(count)
    loss, log_q = _poisson_pair_logs(q, s, x)
    out = np.full(alphas.shape, np.nan)
    for i, alpha in enumerate(alphas):
        if not math.isfinite(alpha):
            continue
        high = 2.0 * alpha + 1.0 + _WINDOW_SDS * s
        n = math.ceil((high - low) / step) + 1
        if n > count or n >= _MAX_POINTS:
            continue  # too fine a grid: the caller uses the unsampled bound
        body = logsumexp(log_q[:n] + _log_h(alpha, loss[:n])) + math.log(step)
        # above the window: e^(log phi_0 + alpha L) * s sqrt(pi/2); below: (alpha - 1) Q(x < low)
        edge = x[n - 1]
        upper = (
            -0.5 * (edge / s) ** 2
            - math.log(s * math.sqrt(2.0 * math.pi))
            + alpha * float(_poisson_pair_logs(q, s, np.array([edge]))[0][0])
            + math.log(s * math.sqrt(math.pi / 2.0))
        )
        lower = math.log(alpha - 1.0) + float(log_ndtr((low + 1.0) / s))
        out[i] = float(
            np.logaddexp.reduce([body + math.log1p(_QUADRATURE_SLACK), upper, lower])
        )
    return out


def rdp_poisson_gaussian_replace_one(
    q: float, noise_multiplier: float, orders: Sequence[float]
) -> np.ndarray:
    """RDP curve of the Poisson-sampled Gaussian (the DP-SGD step) under replace-one neighbours.

    Parameters
    ----------
    q:
        Poisson sampling rate in (0, 1].
    noise_multiplier:
        s: the noise std over one record's contribution bound C (the clip norm).
    orders:
        Rényi orders > 1 (``inf`` gives ``inf``).

    Returns
    -------
    ndarray
        D_alpha(P || Q) of the dominating pair
        P = (1-q) N(0, s^2) + q N(1, s^2), Q = (1-q) N(0, s^2) + q N(-1, s^2),
        capped by the unsampled bound 2 alpha / s^2.

    Notes
    -----
    Neighbouring relation: replace-one (same n; one record replaced by any
    other). Sensitivity: each clipped gradient has norm <= C, so the batch sum
    moves by <= 2C, and only when the replaced record is sampled. Theorems:
    the pair dominates the mechanism's hockey-stick divergences for every
    gamma >= 0 (proof in :class:`privml.accounting._pld._ReplaceOnePoissonGaussianPair`,
    from Balle, Barthe and Gaboardi 2018, Theorem 2, and Zhu, Dong and Wang
    2022, Definition 7); hence its Rényi divergences bound the mechanism's
    (Liese and Vajda 2006, Theorem 11, integral representation of
    f-divergences); P and Q are mirror images, so both orders of the pair
    give the same value. RDP composes by addition (Mironov 2017,
    Proposition 1). A_alpha - 1 is computed by the trapezoid rule (see
    :func:`_poisson_log_excess`), to a relative error far below 1e-9,
    which is added. Orders whose window would need more than 2^21 points
    (only orders ~1e5 times s^-2, far beyond any useful one) use the cap.

    Examples
    --------
    >>> import numpy as np
    >>> bool(np.isclose(rdp_poisson_gaussian_replace_one(1.0, 2.0, [4.0])[0], 2.0))
    True
    """
    q = check_probability(q, "sampling_probability")
    s = check_positive(noise_multiplier, "noise_multiplier")
    alphas = _check(orders)
    cap = _unsampled(s, alphas)
    if q == 1.0:
        return cap
    log_am1 = _poisson_log_excess(q, s, alphas)
    with np.errstate(invalid="ignore"):
        curve = np.logaddexp(0.0, log_am1) / (alphas - 1.0)
    curve = np.where(np.isnan(curve), np.inf, curve)
    return np.minimum(curve, cap)


# ------------------------------------------------------------- without replacement
def _log_pearson_vajda_moments(mu: float, max_order: int) -> np.ndarray:
    """log E[(e^(mu z - mu^2/2) - 1)^k], z ~ N(0, 1), for even k = 2, 4, ..., max_order (index k // 2 - 1).

    The k-th Pearson-Vajda moment of the Gaussian pair N(mu, 1) vs N(0, 1) at
    even k (non-negative). Summing the binomial expansion would cancel
    catastrophically for small mu; the integrand is entire and Gaussian in its
    tails, so the trapezoid rule with step 0.2 over [-40, k mu + 40] is exact
    to double precision (Trefethen and Weideman 2014, Theorem 5.1).
    """
    ks = np.arange(2, max_order + 1, 2, dtype=np.float64)
    top = float(ks[-1]) * mu + 40.0
    step = 0.2
    z = np.arange(-40.0, top + step, step)
    y = mu * z - 0.5 * mu * mu
    big = y > 30.0
    with np.errstate(divide="ignore"):
        log_abs = np.where(
            big,
            y + np.log1p(-np.exp(-np.where(big, y, 30.0))),
            np.log(np.abs(np.expm1(np.minimum(y, 30.0)))),
        )
    log_phi = -0.5 * z * z - 0.5 * math.log(2.0 * math.pi)
    out = np.empty(ks.size)
    for i, k in enumerate(ks):
        out[i] = logsumexp(log_phi + k * log_abs) + math.log(step)
    return out


def _log_binom(n: np.ndarray | float, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def _wor_log_a(gamma: float, s: float, max_int: int) -> np.ndarray:
    """log A_m, m = 0..max_int, of WBK19's bound (A_0 = A_1 = 1: log A = 0).

    A_m = 1 + sum_{j=2}^m gamma^j C(m, j) B_j with
    B_j = min(4 sqrt(M_{2 floor(j/2)} M_{2 ceil(j/2)}), 2 e^((j-1) eps(j))),
    eps(a) = 2 a / s^2 the base RDP (sensitivity 2C) and M_k the Pearson-Vajda
    moments of its pair; above order 256 only the second term is used.
    """
    mu = 2.0 / s
    j = np.arange(2, max_int + 1, dtype=np.float64)
    eps = 2.0 * j / (s * s)
    log_b = math.log(2.0) + (j - 1.0) * eps
    refined = j <= _MAX_MOMENT_ORDER
    if refined.any():
        top = int(min(max_int, _MAX_MOMENT_ORDER))
        moments = _log_pearson_vajda_moments(mu, 2 * ((top + 1) // 2))
        jr = j[refined].astype(np.int64)
        lo = moments[(2 * (jr // 2)) // 2 - 1]
        hi = moments[(2 * ((jr + 1) // 2)) // 2 - 1]
        log_b[refined] = np.minimum(log_b[refined], math.log(4.0) + 0.5 * (lo + hi))
    out = np.zeros(max_int + 1)
    log_gamma = math.log(gamma)
    for m in range(2, max_int + 1):
        jj = j[: m - 1]
        terms = jj * log_gamma + _log_binom(float(m), jj) + log_b[: m - 1]
        out[m] = float(np.logaddexp(0.0, logsumexp(terms)))
    return out


def rdp_sampled_without_replacement_gaussian(
    sample_size: int, population: int, noise_multiplier: float, orders: Sequence[float]
) -> np.ndarray:
    """RDP curve of the Gaussian on a batch of b records drawn without replacement from n (replace-one).

    Parameters
    ----------
    sample_size, population:
        b and n (1 <= b <= n); gamma = b / n.
    noise_multiplier, orders:
        As in :func:`rdp_poisson_gaussian_replace_one`.

    Returns
    -------
    ndarray
        For integer alpha, log(A_alpha) / (alpha - 1) with
        A_alpha = 1 + sum_{j=2}^alpha gamma^j C(alpha, j) B_j,
        B_j = min(4 sqrt(M_{2 floor(j/2)} M_{2 ceil(j/2)}), 2 e^((j-1) eps(j)))
        (B_2 = min(4 (e^eps(2) - 1), 2 e^eps(2))), eps(a) = 2 a / s^2, M_k
        the k-th Pearson-Vajda moment of N(2/s, 1) vs N(0, 1). Fractional
        orders interpolate the cumulant generating function (alpha - 1) eps(alpha)
        linearly between the neighbouring integers (it is convex in alpha;
        WBK19 Corollary 10), with (alpha - 1) eps = 0 at alpha = 1. Capped by the
        unsampled bound 2 alpha / s^2.

    Notes
    -----
    Neighbouring relation: replace-one (same n and b). Sensitivity: the
    batch sum of clipped gradients moves by <= 2C when the replaced record is
    in the batch, so the base mechanism is the Gaussian with RDP
    eps(alpha) = alpha (2C)^2 / (2 s^2 C^2) = 2 alpha / s^2 (Mironov 2017,
    Proposition 7). Theorem: Wang, Balle and Kasiviswanathan 2019, Theorem 9
    (the general bound: the j = 2 term and the 2 e^((j-1) eps(j)) terms) and
    the refinement with Pearson-Vajda moments for mechanisms tight on one
    pair of neighbours (Definition 26 and Theorem 27 of arXiv 1808.00087,
    the Gaussian qualifies); the Pearson-Vajda term is used up to order 256
    as in dp_accounting's ``_compute_rdp_sample_wor_gaussian``. The bound is
    valid but not tight: its leading term is about four times the exact
    chi^2 divergence of the worst pair (Birrell et al. 2024).

    Examples
    --------
    >>> import numpy as np
    >>> bool(np.isclose(rdp_sampled_without_replacement_gaussian(10, 10, 2.0, [3.0])[0], 1.5))
    True
    """
    n = check_count(population, "population")
    b = check_count(sample_size, "sample_size", maximum=n)
    s = check_positive(noise_multiplier, "noise_multiplier")
    alphas = _check(orders)
    cap = _unsampled(s, alphas)
    if b == n:
        return cap
    gamma = b / n
    finite = np.isfinite(alphas)
    if not finite.any():
        return cap
    max_int = math.ceil(float(alphas[finite].max()))
    max_int = max(max_int, 2)
    log_a = _wor_log_a(gamma, s, max_int)
    a = np.where(finite, alphas, 2.0)
    lo = np.floor(a).astype(np.int64)
    hi = np.ceil(a).astype(np.int64)
    t = a - lo
    cgf = (1.0 - t) * log_a[lo] + t * log_a[hi]
    curve = np.where(finite, cgf / (a - 1.0), np.inf)
    return np.minimum(curve, cap)
