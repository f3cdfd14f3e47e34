"""Closed-form RDP curves of the Gaussian, Laplace, pure-DP and exponential mechanisms.

A mechanism M is (alpha, r)-RDP when D_alpha(M(D) || M(D')) <= r for every
ordered pair of neighbouring datasets (Mironov 2017, "Rényi Differential
Privacy", Definition 4). The curves here are exact or the tightest implied:
the Gaussian (Mironov 2017, Proposition 7), the Laplace mechanism (ibid.,
Proposition 6), pure epsilon-DP alone, and the exponential mechanism (Cesar
and Rogers 2021). Noise is a noise multiplier (scale over sensitivity), and
``orders`` are Rényi orders alpha > 1 (``inf`` allowed, the max-divergence);
:data:`DEFAULT_ORDERS` is the grid every curve is evaluated on by default.
The Poisson-sampled Gaussian is in :mod:`privml.accounting._rdp_poisson_gaussian`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privml._validation import check_epsilon, check_positive

#: The order grid of Google dp_accounting 0.6 ``RdpAccountant`` (1.1 to 10.9 in
#: steps of 0.1, the integers 11 to 63, and 128 to 1024), so that the two
#: accountants report the same epsilon for the same events.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)


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

