"""From an RDP curve to (epsilon, delta): the improved and the classic conversions.

An (alpha, r)-RDP mechanism is (epsilon, delta)-DP with
epsilon = r + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)
(Canonne, Kamath and Steinke 2020, Proposition 12; Balle, Barthe, Gaboardi,
Hsu and Sato 2020, Theorem 21), minimised over the orders; each order also
offers the total-variation bound delta <= sqrt(1 - e^-r) (van Erven and
Harremoës 2014, Theorem 3; Bretagnolle and Huber 1979). The classic
moments-accountant conversion epsilon = r + log(1/delta)/(alpha-1) (Mironov
2017, Proposition 3; Abadi et al. 2016, Theorem 2) is kept for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privml._validation import check_delta, check_epsilon
from privml.accounting._rdp_curves import _check_orders


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
    >>> from privml.accounting._rdp_curves import rdp_gaussian
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

