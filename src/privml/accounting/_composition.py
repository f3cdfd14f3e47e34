"""Composition theorems for (epsilon, delta)-DP and amplification by Poisson subsampling.

Pure functions of privacy parameters, each the statement of one theorem:

- :func:`basic_composition` (Dwork and Roth 2014, Thm 3.16),
- :func:`advanced_composition`, :func:`advanced_composition_heterogeneous`
  and :func:`advanced_composition_delta` (Dwork, Rothblum and Vadhan 2010,
  Thm III.3; Dwork and Roth 2014, Thm 3.20), with the inverse
  :func:`advanced_composition_per_step_epsilon`,
- :func:`optimal_composition_delta` and :func:`optimal_composition_epsilon`,
  the exact optimal composition of k (epsilon, delta)-DP mechanisms (Kairouz,
  Oh and Viswanath 2015, Thm 3.3), with the inverse
  :func:`optimal_composition_per_step_epsilon`,
- :func:`poisson_amplification` (Li, Qardaji and Su 2012, Thm 1; Balle,
  Barthe and Gaboardi 2018, Thm 8).

The composition theorems hold for *adaptive* composition and for any
neighbouring relation, provided every step is stated under the same one; the
result is stated under that relation too. They need no sensitivity: each step
is already (epsilon_i, delta_i)-DP. Poisson amplification is stated for
add/remove-one neighbours only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.special import betaln, logsumexp

from privml._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_positive,
    check_positive_delta,
    check_probability,
)
from privml.accounting._parameter_search import calibrate_parameter

#: Relative precision of the numerical inverses in this module.
_RTOL = 1e-10
_MAX_SEARCH = 300
#: Above this, e^epsilon is near the float64 overflow (e^709.8).
_LARGE_EPSILON = 700.0

#: Largest count for the exact optimal composition: it costs O(count) time and
#: memory per evaluation, and beyond this RDP or PLD accounting is the tool.
OPTIMAL_COMPOSITION_MAX_COUNT = 10**7


class EpsilonDelta(NamedTuple):
    """An (epsilon, delta) pair; unpacks like a tuple."""

    epsilon: float
    delta: float


# ---------------------------------------------------------------- validation
def _check_steps(
    epsilons: Sequence[float], deltas: Sequence[float], counts: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step parameters as float arrays (counts as float64 weights; default one each)."""
    eps = np.asarray(epsilons, dtype=np.float64)
    if eps.ndim != 1:
        raise ValueError(f"epsilons must be one-dimensional, got shape {eps.shape}")
    if not np.all(np.isfinite(eps) & (eps > 0)):
        raise ValueError("every entry of epsilons must be finite and > 0")
    dels = np.asarray(deltas, dtype=np.float64)
    if dels.shape != eps.shape:
        raise ValueError(f"deltas must have {eps.size} entries (one per epsilon), got shape {dels.shape}")
    # delta_i = 1 is vacuous but valid: a composed step can spend that much.
    if not np.all((dels >= 0) & (dels <= 1)):
        raise ValueError("every entry of deltas must be in [0, 1]")
    if counts is None:
        reps = np.ones_like(eps)
    else:
        reps = np.asarray([check_count(c, "counts") for c in counts], dtype=np.float64)
        if reps.shape != eps.shape:
            raise ValueError(f"counts must have {eps.size} entries (one per epsilon), got {reps.size}")
    return eps, dels, reps


def _weighted_sum(values: np.ndarray, counts: np.ndarray) -> float:
    return math.fsum((values * counts).tolist())


# ---------------------------------------------------------------------- basic
def basic_composition(
    epsilons: Sequence[float], deltas: Sequence[float], counts: Sequence[int] | None = None
) -> EpsilonDelta:
    """Basic composition: (sum epsilon_i, sum delta_i).

    The adaptive composition of mechanisms that are (epsilon_i, delta_i)-DP is
    (sum epsilon_i, sum delta_i)-DP (Dwork and Roth 2014, Thm 3.16; Dwork,
    Kenthapadi, McSherry, Mironov and Naor 2006). It holds under any
    neighbouring relation shared by all steps; no sensitivity is involved.

    Parameters
    ----------
    epsilons:
        Per-step epsilons, each finite and > 0.
    deltas:
        Per-step deltas in [0, 1], one per epsilon.
    counts:
        Optional number of repetitions of each step (integers >= 1); by
        default each step runs once.

    Returns
    -------
    EpsilonDelta
        The total. The delta may reach 1 or more, a vacuous guarantee.

    Examples
    --------
    >>> basic_composition([0.5, 0.25], [1e-6, 0.0], counts=[2, 4])
    EpsilonDelta(epsilon=2.0, delta=2e-06)
    """
    eps, dels, reps = _check_steps(epsilons, deltas, counts)
    return EpsilonDelta(_weighted_sum(eps, reps), _weighted_sum(dels, reps))


# ------------------------------------------------------------------- advanced
def _drv_sums(eps: np.ndarray, reps: np.ndarray) -> tuple[float, float]:
    """(sum eps_i^2, sum eps_i (e^eps_i - 1)): the variance proxy and the drift of the DRV bound.

    eps (e^eps - 1) bounds the expected privacy loss of an eps-DP step (Dwork
    and Roth 2014, Lemma 3.18); each loss lies in [-eps, eps], which gives
    Azuma's inequality its eps^2 terms.
    """
    # e^eps overflows past eps ~ 709; the drift is then +inf and the bound
    # vacuous, which the accountants resolve by falling back to basic composition.
    with np.errstate(over="ignore"):
        drift = eps * np.expm1(eps)
    return _weighted_sum(eps * eps, reps), _weighted_sum(drift, reps)


def _drv_epsilon(sum_squares: float, drift: float, delta_slack: float) -> float:
    """sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1)."""
    return math.sqrt(-2.0 * math.log(delta_slack) * sum_squares) + drift


def advanced_composition(epsilon: float, delta: float, count: int, delta_slack: float) -> EpsilonDelta:
    """Advanced composition of ``count`` (epsilon, delta)-DP mechanisms.

    The k-fold adaptive composition of (eps, delta)-DP mechanisms is
    (eps sqrt(2k ln(1/delta')) + k eps (e^eps - 1), k delta + delta')-DP for
    every delta' > 0 (Dwork, Rothblum and Vadhan 2010, Thm III.3; Dwork and
    Roth 2014, Thm 3.20). Any neighbouring relation shared by all steps; no
    sensitivity is involved.

    Parameters
    ----------
    epsilon, delta:
        Per-step guarantee: epsilon > 0, delta in [0, 1).
    count:
        Number of steps k >= 1.
    delta_slack:
        The extra failure probability delta' in (0, 1) traded for the smaller epsilon.

    Returns
    -------
    EpsilonDelta
        The total. It can exceed basic composition (k eps) when eps is large
        or k small; both bounds are valid, and the accountants take the smaller.

    Examples
    --------
    k = 10000 steps at eps = 0.001 with delta' = 1e-6: 0.001 sqrt(2e4 ln 1e6)
    + 10 (e^0.001 - 1) = 0.5257 + 0.0100, against 10 for basic composition.

    >>> round(advanced_composition(0.001, 0.0, 10_000, 1e-6).epsilon, 4)
    0.5357
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    count = check_count(count)
    return advanced_composition_heterogeneous([epsilon], [delta], delta_slack, counts=[count])


def advanced_composition_heterogeneous(
    epsilons: Sequence[float], deltas: Sequence[float], delta_slack: float, counts: Sequence[int] | None = None
) -> EpsilonDelta:
    """Advanced composition of mechanisms with different (epsilon_i, delta_i).

    The adaptive composition is
    (sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), sum delta_i + delta')-DP
    for every delta' > 0. This is the proof of Dwork, Rothblum and Vadhan 2010,
    Thm III.3 (Dwork and Roth 2014, Thm 3.20) with per-step bounds: Azuma's
    inequality for privacy losses bounded by eps_i with means at most
    eps_i (e^eps_i - 1). Kairouz, Oh and Viswanath 2015 (Thm 3.5) give a
    sharper heterogeneous bound. Any neighbouring relation shared by all steps;
    no sensitivity is involved.

    Parameters
    ----------
    epsilons, deltas:
        As in :func:`basic_composition`.
    delta_slack:
        delta' in (0, 1).
    counts:
        Optional number of repetitions of each step (default: one each).

    Returns
    -------
    EpsilonDelta
    """
    eps, dels, reps = _check_steps(epsilons, deltas, counts)
    delta_slack = check_positive_delta(delta_slack, "delta_slack")
    sum_squares, drift = _drv_sums(eps, reps)
    return EpsilonDelta(_drv_epsilon(sum_squares, drift, delta_slack), _weighted_sum(dels, reps) + delta_slack)


def advanced_composition_delta(
    epsilons: Sequence[float], deltas: Sequence[float], total_epsilon: float, counts: Sequence[int] | None = None
) -> float:
    """Smallest total delta at which the advanced composition bound certifies ``total_epsilon``.

    Solves the bound of :func:`advanced_composition_heterogeneous` (Dwork,
    Rothblum and Vadhan 2010, Thm III.3; Dwork and Roth 2014, Thm 3.20) for the
    slack: sqrt(2 ln(1/delta') S) + D <= eps' holds for
    delta' = exp(-(eps' - D)^2 / (2 S)) when eps' > D, with S = sum eps_i^2
    and D = sum eps_i (e^eps_i - 1). Any neighbouring relation shared by all steps.

    Returns
    -------
    float
        sum delta_i + delta', or 1 (vacuous) when eps' <= D.
    """
    eps, dels, reps = _check_steps(epsilons, deltas, counts)
    total_epsilon = check_positive(total_epsilon, "total_epsilon", allow_zero=True)
    sum_squares, drift = _drv_sums(eps, reps)
    if eps.size == 0:
        return 0.0
    if total_epsilon <= drift:
        return 1.0
    return min(1.0, _weighted_sum(dels, reps) + math.exp(-((total_epsilon - drift) ** 2) / (2.0 * sum_squares)))


def advanced_composition_per_step_epsilon(total_epsilon: float, count: int, delta_slack: float) -> float:
    """Largest per-step epsilon whose k-fold advanced composition is at most ``total_epsilon``.

    Inverts the epsilon of :func:`advanced_composition` (Dwork, Rothblum and
    Vadhan 2010, Thm III.3; Dwork and Roth 2014, Thm 3.20), which increases
    with the per-step epsilon, by bisection; the returned value is on the safe
    side (its composition is at most the target) and within a relative 1e-10
    of the exact inverse. The total delta is ``count * delta + delta_slack``
    whatever the per-step epsilon. Basic composition allows ``total_epsilon /
    count`` per step, which is larger when the total is large or ``count``
    small; either choice is valid.

    Parameters
    ----------
    total_epsilon:
        Target total epsilon (> 0).
    count:
        Number of steps k >= 1.
    delta_slack:
        delta' in (0, 1).
    """
    total_epsilon = check_epsilon(total_epsilon, "total_epsilon")
    count = check_count(count)
    delta_slack = check_positive_delta(delta_slack, "delta_slack")
    reps = np.array([float(count)])

    def total(epsilon: float) -> float:
        return _drv_epsilon(*_drv_sums(np.array([epsilon]), reps), delta_slack)

    # The square-root term alone reaches the target here, so the answer lies below.
    upper = total_epsilon / math.sqrt(-2.0 * math.log(delta_slack) * count)
    return calibrate_parameter(
        total, target=total_epsilon, increasing=True, upper=upper, tolerance=_RTOL, max_iterations=_MAX_SEARCH
    ).value


# -------------------------------------------------------------------- optimal
@functools.lru_cache(maxsize=2)
def _log_binomials(count: int) -> np.ndarray:
    """log C(k, l) for l = 0 .. ceil(k/2) - 1 (the only terms that can be active), read-only.

    ``betaln`` keeps full relative precision for large k where differences of
    ``gammaln`` values of size ~k log k lose digits.
    """
    ell = np.arange((count + 1) // 2, dtype=np.float64)
    out = -math.log(count + 1) - betaln(count - ell + 1, ell + 1)
    out.setflags(write=False)
    return out


class _RandomizedResponsePower:
    """The k-fold composition of eps-randomised response, the dominating pair of KOV15.

    Outcome l (number of "flipped" answers) has probability
    C(k, l) p^(k-l) (1-p)^l under one dataset, with p = e^eps / (1 + e^eps), and
    privacy loss (k - 2l) eps. Only outcomes with loss > 0 enter the hockey-stick
    divergence at any eps' >= 0, i.e. l < k/2.
    """

    def __init__(self, epsilon: float, count: int) -> None:
        ell = np.arange((count + 1) // 2, dtype=np.float64)
        log_p = -np.logaddexp(0.0, -epsilon)  # log(e^eps / (1 + e^eps))
        log_q = -np.logaddexp(0.0, epsilon)  # log(1 / (1 + e^eps))
        self.log_weights = _log_binomials(count) + (count - ell) * log_p + ell * log_q
        self.losses = (count - 2 * ell) * epsilon  # decreasing in l

    def log_delta(self, total_epsilon: float) -> float:
        """log of sum_l C(k,l) p^(k-l) (1-p)^l (1 - e^(eps' - (k-2l) eps))_+ ."""
        # Active outcomes form a prefix since losses decrease; strictly positive
        # excess loss keeps log(-expm1(.)) finite.
        active = int(np.searchsorted(-self.losses, -total_epsilon, side="left"))
        if active == 0:
            return -math.inf
        excess = total_epsilon - self.losses[:active]
        return float(logsumexp(self.log_weights[:active] + np.log(-np.expm1(excess))))


def _check_optimal_count(count: int) -> int:
    count = check_count(count)
    if count > OPTIMAL_COMPOSITION_MAX_COUNT:
        raise ValueError(
            f"count must be <= {OPTIMAL_COMPOSITION_MAX_COUNT} for the exact optimal composition "
            f"(O(count) per evaluation), got {count}; use advanced composition or an RDP/PLD accountant"
        )
    return count


def _total_delta(log_keep: float, log_delta_rr: float) -> float:
    """1 - (1 - delta)^k (1 - delta_RR), with log_keep = k log(1 - delta)."""
    delta_rr = min(1.0, math.exp(log_delta_rr))
    return -math.expm1(log_keep + math.log1p(-delta_rr)) if delta_rr < 1 else 1.0


def optimal_composition_delta(epsilon: float, delta: float, count: int, total_epsilon: float) -> float:
    """Exact optimal delta at ``total_epsilon`` of k adaptively composed (eps, delta)-DP mechanisms.

    Kairouz, Oh and Viswanath 2015 (Thm 3.3) show that every (eps, delta)-DP
    mechanism is dominated by one randomised-response-like mechanism, so the
    k-fold adaptive composition of (eps, delta)-DP mechanisms is exactly as
    private as k-fold randomised response: it is (eps', delta_k(eps'))-DP with

        delta_k(eps') = 1 - (1 - delta)^k (1 - sum_{l=0}^{k} C(k,l) p^(k-l) (1-p)^l
                        (1 - e^(eps' - (k - 2l) eps))_+),   p = e^eps / (1 + e^eps),

    and no smaller delta holds for all such mechanisms. At eps' = (k - 2i) eps
    this is KOV15's closed form 1 - (1 - delta)^k (1 - delta_i), delta_i =
    sum_{l<i} C(k,l) (e^((k-l) eps) - e^((k-2i+l) eps)) / (1 + e^eps)^k; between
    those points it is the hockey-stick divergence of the same composed pair,
    which bounds every mechanism it dominates and is attained by it, so it is
    tight there too. Any neighbouring relation shared by all steps (the
    theorem uses only the per-step (eps, delta) guarantee).

    Computed in log space (``betaln``, ``logsumexp``, ``expm1``) in O(count).

    Parameters
    ----------
    epsilon, delta:
        Per-step guarantee: epsilon > 0, delta in [0, 1).
    count:
        Number of steps k, 1 <= k <= :data:`OPTIMAL_COMPOSITION_MAX_COUNT`.
    total_epsilon:
        eps' >= 0 at which to evaluate.

    Examples
    --------
    One step is (eps, delta) itself:

    >>> optimal_composition_delta(1.0, 1e-6, 1, 1.0)
    1e-06
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    count = _check_optimal_count(count)
    total_epsilon = check_positive(total_epsilon, "total_epsilon", allow_zero=True)
    log_delta_rr = _RandomizedResponsePower(epsilon, count).log_delta(total_epsilon)
    return _total_delta(count * math.log1p(-delta), log_delta_rr)


def optimal_composition_epsilon(epsilon: float, delta: float, count: int, total_delta: float) -> float:
    """Smallest eps' with :func:`optimal_composition_delta` at most ``total_delta``.

    Kairouz, Oh and Viswanath 2015, Thm 3.3 (see :func:`optimal_composition_delta`).
    delta_k(eps') decreases from delta_k(0) to 1 - (1 - delta)^k at eps' = k eps,
    so eps' is found by bisection on (0, k eps], in log space, and returned on
    the safe side (delta_k(eps') <= ``total_delta``, up to the rounding of
    delta itself) within a relative 1e-10.

    Parameters
    ----------
    epsilon, delta, count:
        As in :func:`optimal_composition_delta`.
    total_delta:
        Target total delta in [0, 1).

    Returns
    -------
    float
        eps' in [0, k eps], or ``inf`` if ``total_delta < 1 - (1 - delta)^k``
        (the steps' own deltas already exceed the target).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    count = _check_optimal_count(count)
    total_delta = check_delta(total_delta, "total_delta")
    log_keep = count * math.log1p(-delta)
    # delta_k(eps') <= t  <=>  delta_RR(eps') <= 1 - (1 - t) / (1 - delta)^k =: t_RR.
    target_rr = -math.expm1(math.log1p(-total_delta) - log_keep)
    if target_rr < 0:
        return math.inf
    if target_rr == 0:
        return count * epsilon
    log_target = math.log(target_rr)
    rr = _RandomizedResponsePower(epsilon, count)
    if rr.log_delta(0.0) <= log_target:
        return 0.0
    return calibrate_parameter(
        rr.log_delta,
        target=log_target,
        increasing=False,
        upper=count * epsilon,
        tolerance=_RTOL,
        max_iterations=_MAX_SEARCH,
    ).value


def optimal_composition_per_step_epsilon(
    total_epsilon: float, count: int, total_delta: float, delta: float = 0.0
) -> float:
    """Largest per-step eps whose k-fold optimal composition is (total_epsilon, total_delta)-DP.

    Inverts :func:`optimal_composition_delta` (Kairouz, Oh and Viswanath 2015,
    Thm 3.3) in the per-step epsilon, in which it increases (a larger eps
    admits more mechanisms, and the bound is the worst case over them), by
    bisection; the returned value is on the safe side and within a relative
    1e-10. It is at least ``total_epsilon / count`` (basic composition).

    Parameters
    ----------
    total_epsilon:
        Target total epsilon (> 0).
    count:
        Number of steps k, 1 <= k <= :data:`OPTIMAL_COMPOSITION_MAX_COUNT`.
    total_delta:
        Target total delta in [0, 1).
    delta:
        Per-step delta in [0, 1).

    Raises
    ------
    ValueError
        if ``1 - (1 - delta)^count > total_delta``: the per-step deltas alone
        exceed the target, whatever the per-step epsilon.
    """
    total_epsilon = check_epsilon(total_epsilon, "total_epsilon")
    count = _check_optimal_count(count)
    total_delta = check_delta(total_delta, "total_delta")
    delta = check_delta(delta)
    floor = -math.expm1(count * math.log1p(-delta))
    if floor > total_delta:
        raise ValueError(
            f"total_delta={total_delta!r} is unreachable: {count} steps of delta={delta!r} "
            f"already spend 1 - (1 - delta)^count = {floor!r}"
        )

    def spent(epsilon: float) -> float:
        return optimal_composition_delta(epsilon, delta, count, total_epsilon)

    return calibrate_parameter(
        spent,
        target=total_delta,
        increasing=True,
        lower=total_epsilon / count,
        tolerance=_RTOL,
        max_iterations=_MAX_SEARCH,
    ).value


# -------------------------------------------------------------- amplification
def poisson_amplification(epsilon: float, delta: float, sample_rate: float) -> EpsilonDelta:
    """Privacy of an (eps, delta)-DP mechanism run on a Poisson subsample.

    If M is (eps, delta)-DP under add/remove-one neighbours, then M applied to a
    subsample that keeps each record independently with probability q is
    (log(1 + q (e^eps - 1)), q delta)-DP under add/remove-one neighbours (Li,
    Qardaji and Su 2012, Thm 1; Balle, Barthe and Gaboardi 2018, Thm 8, which
    also shows the epsilon is tight). Under replace-one the amplified bound is
    different; this function does not cover it.

    Parameters
    ----------
    epsilon, delta:
        Guarantee of the mechanism on the subsample: epsilon > 0, delta in
        [0, 1] (delta = 1, vacuous for the mechanism, still amplifies to q).
    sample_rate:
        q in (0, 1].

    Examples
    --------
    >>> round(poisson_amplification(1.0, 1e-5, 0.01).epsilon, 6)
    0.017037
    """
    epsilon = check_epsilon(epsilon)
    # The amplified privacy profile is at most q times the inner one, which is
    # at most 1: a vacuous inner delta = 1 still gives q.
    delta = 1.0 if delta == 1 and not isinstance(delta, bool) else check_delta(delta)
    sample_rate = check_probability(sample_rate, "sample_rate")
    if epsilon < _LARGE_EPSILON:
        amplified = math.log1p(sample_rate * math.expm1(epsilon))
    else:
        # e^eps would overflow: factor it out, log(q e^eps + 1 - q) = eps + log(q + (1 - q) e^-eps).
        amplified = epsilon + math.log(sample_rate + (1 - sample_rate) * math.exp(-epsilon))
    return EpsilonDelta(amplified, sample_rate * delta)
