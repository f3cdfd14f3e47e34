"""Black-box statistical test that a mechanism respects (epsilon, delta) on a
pair of neighbouring inputs.

Given samples of M(D) and M(D') for fixed neighbours D, D', (epsilon, delta)-DP
requires, for every output set S,

    P[M(D) in S] <= e^epsilon P[M(D') in S] + delta      (and symmetrically).

We test a fixed family of sets (histogram bins, and every upper and lower tail
built from them) with Clopper-Pearson intervals, Bonferroni-corrected over the
family, so a reported violation is significant at ``1 - confidence`` overall.
The same intervals give an empirical lower bound on epsilon (as in
Jagielski et al. 2020, for a single pair of neighbours): a correct mechanism
never shows a violation except with probability ``1 - confidence``, and a
broken one (say, half the sensitivity) shows one with enough samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from privml._validation import check_delta, check_epsilon


@dataclass(frozen=True)
class NeighbourTestResult:
    """Outcome of :func:`neighbour_distribution_test`.

    Attributes
    ----------
    violated: some tested set breaks the (epsilon, delta) inequality with
        significance ``1 - confidence`` (after Bonferroni correction).
    epsilon_lower_bound: the largest epsilon the data certify at this delta
        (0 when no set certifies any loss).
    worst_set: human-readable description of the set achieving the bound.
    n_sets: how many sets were tested.
    """

    violated: bool
    epsilon_lower_bound: float
    worst_set: str
    n_sets: int


def _clopper_pearson(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided (1 - alpha) Clopper-Pearson interval for k successes out of n."""
    k = np.asarray(k, dtype=np.float64)
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def _set_counts(a: np.ndarray, b: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Counts of a and b in each tested set, with labels."""
    pooled = np.concatenate([a, b])
    values = np.unique(pooled)
    if values.size <= bins:
        # Categorical outputs: one set per value, plus tails over the sorted values.
        idx_a = np.searchsorted(values, a)
        idx_b = np.searchsorted(values, b)
        labels_bin = [f"== {v:g}" for v in values]
        edges_label = [f"{v:g}" for v in values]
    else:
        edges = np.unique(np.quantile(pooled, np.linspace(0, 1, bins + 1)[1:-1]))
        idx_a = np.searchsorted(edges, a, side="right")
        idx_b = np.searchsorted(edges, b, side="right")
        full = np.concatenate([[-np.inf], edges, [np.inf]])
        labels_bin = [f"[{full[i]:.4g}, {full[i + 1]:.4g})" for i in range(edges.size + 1)]
        edges_label = [f"{e:.4g}" for e in full[:-1]]
    m = len(labels_bin)
    ca = np.bincount(idx_a, minlength=m)
    cb = np.bincount(idx_b, minlength=m)
    # Upper tails {bin >= i} and lower tails {bin < i}, i = 1..m-1.
    up_a, up_b = np.cumsum(ca[::-1])[::-1][1:], np.cumsum(cb[::-1])[::-1][1:]
    lo_a, lo_b = np.cumsum(ca)[:-1], np.cumsum(cb)[:-1]
    counts_a = np.concatenate([ca, up_a, lo_a])
    counts_b = np.concatenate([cb, up_b, lo_b])
    labels = (
        labels_bin
        + [f">= {edges_label[i]}" for i in range(1, m)]
        + [f"< {edges_label[i]}" for i in range(1, m)]
    )
    return counts_a, counts_b, labels


def neighbour_distribution_test(
    outputs_a: np.ndarray,
    outputs_b: np.ndarray,
    *,
    epsilon: float,
    delta: float = 0.0,
    bins: int = 40,
    confidence: float = 0.999,
) -> NeighbourTestResult:
    """Test P[M(D) in S] <= e^eps P[M(D') in S] + delta over a family of sets S.

    Parameters
    ----------
    outputs_a, outputs_b:
        1-D samples of a scalar statistic of M(D) and M(D') (project vector
        outputs first, e.g. onto the direction f(D') - f(D)). Equal sizes.
    epsilon, delta:
        The claimed guarantee.
    bins:
        Number of quantile bins (outputs with at most ``bins`` distinct values
        are treated as categorical).
    confidence:
        Overall confidence of a reported violation.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    a = np.asarray(outputs_a, dtype=np.float64).ravel()
    b = np.asarray(outputs_b, dtype=np.float64).ravel()
    if a.size != b.size or a.size == 0:
        raise ValueError(f"need two non-empty samples of equal size, got {a.size} and {b.size}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    n = a.size
    counts_a, counts_b, labels = _set_counts(a, b, bins)
    n_tests = 2 * counts_a.size  # both directions
    alpha = (1 - confidence) / n_tests
    lo_a, hi_a = _clopper_pearson(counts_a, n, alpha)
    lo_b, hi_b = _clopper_pearson(counts_b, n, alpha)

    best, where, violated = 0.0, "none", False
    for lo_x, hi_y, direction in ((lo_a, hi_b, "D vs D'"), (lo_b, hi_a, "D' vs D")):
        if np.any(lo_x > math.exp(epsilon) * hi_y + delta):
            violated = True
        with np.errstate(divide="ignore", invalid="ignore"):
            eps_lb = np.where((lo_x > delta) & (hi_y > 0), np.log((lo_x - delta) / hi_y), 0.0)
        i = int(np.argmax(eps_lb))
        if eps_lb[i] > best:
            best, where = float(eps_lb[i]), f"{labels[i]} ({direction})"
    return NeighbourTestResult(violated=violated, epsilon_lower_bound=best, worst_set=where, n_sets=n_tests)
