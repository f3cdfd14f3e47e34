"""The threshold test of an audit and the Clopper-Pearson lower bound on epsilon it proves.

An (epsilon, delta)-DP mechanism makes every test of "was the canary in?"
weak: a test with false-positive rate FPR and false-negative rate FNR
satisfies eps >= log((1 - delta - FNR) / FPR) and
eps >= log((1 - delta - FPR) / FNR) (Kairouz, Oh and Viswanath 2015,
Theorem 2.1; used for auditing by Jagielski, Ullman and Oprea 2020).
:func:`epsilon_lower_bound` chooses the threshold and direction of the test
on one part of the trials and replaces FPR and FNR, on the other part, by
one-sided Clopper-Pearson upper confidence bounds, so the result is a
statistically valid lower bound on epsilon (see
:mod:`privml.audit._epsilon_lower_bound` for the argument on multiple testing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privml._validation import check_delta
from privml.audit._neighbour_test import _clopper_pearson


@dataclass(frozen=True)
class EpsilonLowerBound:
    """A Clopper-Pearson lower bound on epsilon from one threshold test.

    Attributes
    ----------
    epsilon : float
        The bound (0 when the test certifies nothing).
    confidence : float
        Probability, over the bounding trials, that the bound is valid.
    delta : float
        The delta the bound is stated at.
    threshold : float
        The test says "canary in" when ``score >= threshold`` (``direction ==
        "greater"``) or ``score <= threshold`` (``"less"``).
    direction : str
    fpr, fnr : float
        Observed rates of the test on the bounding half.
    fpr_upper, fnr_upper : float
        Their one-sided Clopper-Pearson upper bounds.
    n_select, n_bound : int
        Trials per world used to choose the threshold and to bound.
    """

    epsilon: float
    confidence: float
    delta: float
    threshold: float
    direction: str
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    n_select: int
    n_bound: int


def epsilon_from_rates(fpr: Any, fnr: Any, delta: float) -> np.ndarray:
    """``max(log((1 - delta - FNR)/FPR), log((1 - delta - FPR)/FNR), 0)``, elementwise.

    The epsilon that a test with these error rates proves for a mechanism
    that is (epsilon, delta)-DP (Kairouz, Oh and Viswanath 2015, Thm 2.1).
    Pass point estimates for an estimate, upper confidence bounds for a
    lower confidence bound.
    """
    fpr = np.asarray(fpr, dtype=np.float64)
    fnr = np.asarray(fnr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((1 - delta - fnr > 0) & (fpr > 0), np.log((1 - delta - fnr) / fpr), 0.0)
        b = np.where((1 - delta - fpr > 0) & (fnr > 0), np.log((1 - delta - fpr) / fnr), 0.0)
    # A zero rate with a zero upper bound cannot happen with Clopper-Pearson (hi > 0 always).
    return np.maximum(np.maximum(a, b), 0.0)


def _test_counts(out: np.ndarray, inn: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False positives (out >= t) and false negatives (in < t) for each threshold t."""
    out_sorted, in_sorted = np.sort(out), np.sort(inn)
    fp = out.size - np.searchsorted(out_sorted, thresholds, side="left")
    fn = np.searchsorted(in_sorted, thresholds, side="left")
    return fp, fn


def _bounded_epsilon(fp: np.ndarray, n_out: int, fn: np.ndarray, n_in: int, delta: float, alpha: float):
    _, fpr_hi = _clopper_pearson(fp, n_out, alpha)
    _, fnr_hi = _clopper_pearson(fn, n_in, alpha)
    return epsilon_from_rates(fpr_hi, fnr_hi, delta), fpr_hi, fnr_hi


def epsilon_lower_bound(
    scores_out: Any,
    scores_in: Any,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    select_fraction: float = 0.5,
    select_confidence: float = 0.9995,
) -> EpsilonLowerBound:
    """Lower-bound epsilon from test statistics of runs without and with the canary.

    Parameters
    ----------
    scores_out, scores_in : array-like
        One statistic per trial, on D (canary out) and on D' (canary in), in
        trial order; trials must be independent and identically distributed
        within each world. Higher should mean "canary in", but the direction
        is chosen from the data.
    delta : float
        The claimed delta.
    confidence : float, default 0.95
        Joint confidence of the two Clopper-Pearson upper bounds.
    select_fraction : float, default 0.5
        Share of each world's trials (the first ones) used only to choose the
        threshold and direction; the bound comes from the rest.
    select_confidence : float, default 0.9995
        Confidence of the Clopper-Pearson bound that ranks thresholds on the
        selection half. Stricter than ``confidence`` on purpose: the best
        threshold on a sample tends to be one supported by a few lucky
        trials, which then does worse on the bounding half (winner's curse);
        a stricter ranking favours thresholds backed by more trials. It
        affects power only, never validity.

    Returns
    -------
    EpsilonLowerBound

    Notes
    -----
    Valid for any mechanism and any neighbouring relation: the bound is on
    the epsilon of the (D, D') pair that produced the scores. The threshold is
    the one maximising a stricter Clopper-Pearson bound (``select_confidence``)
    on the selection half (thresholds at every observed score, both
    directions); see the module notes for why it is not chosen on the
    bounding half.

    Examples
    --------
    Perfect separation in 50 bounding trials per world certifies about 2.57:

    >>> round(epsilon_lower_bound([0.0] * 100, [1.0] * 100).epsilon, 2)
    2.57
    """
    # long-function: a long numpy-style docstring (parameters, guarantee, references) and code that is argument
    # checks, then one select-then-bound sequence over the two test directions.
    delta = check_delta(delta)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if not 0 < select_fraction < 1:
        raise ValueError(f"select_fraction must be in (0, 1), got {select_fraction!r}")
    out = np.asarray(scores_out, dtype=np.float64).ravel()
    inn = np.asarray(scores_in, dtype=np.float64).ravel()
    if np.isnan(out).any() or np.isnan(inn).any():
        raise ValueError("scores contain NaN")
    k_out, k_in = int(round(select_fraction * out.size)), int(round(select_fraction * inn.size))
    if min(k_out, k_in, out.size - k_out, inn.size - k_in) < 1:
        raise ValueError(f"need at least one selection and one bounding trial per world, got {out.size} and {inn.size}")
    if not 0 < select_confidence < 1:
        raise ValueError(f"select_confidence must be in (0, 1), got {select_confidence!r}")
    alpha = 1.0 - confidence

    candidates = []  # (direction, thresholds, CP-ranked eps, smoothed point eps)
    for direction, sign in (("greater", 1.0), ("less", -1.0)):
        sel_out, sel_in = sign * out[:k_out], sign * inn[:k_in]
        thresholds = np.unique(np.concatenate([sel_out, sel_in, [np.inf]]))
        fp, fn = _test_counts(sel_out, sel_in, thresholds)
        ranked, _, _ = _bounded_epsilon(fp, k_out, fn, k_in, delta, 1.0 - select_confidence)
        smoothed = epsilon_from_rates((fp + 0.5) / (k_out + 1), (fn + 0.5) / (k_in + 1), delta)
        candidates.append((direction, thresholds, ranked, smoothed))
    # Too few selection trials to certify anything: rank by a smoothed point estimate instead.
    use_ranked = any(np.any(c[2] > 0) for c in candidates)
    best = (-1.0, math.inf, "greater")
    for direction, thresholds, ranked, smoothed in candidates:
        scores = ranked if use_ranked else smoothed
        i = int(np.argmax(scores))
        if scores[i] > best[0]:
            best = (float(scores[i]), float(thresholds[i]), direction)
    _, threshold, direction = best
    sign = 1.0 if direction == "greater" else -1.0
    bound_out, bound_in = sign * out[k_out:], sign * inn[k_in:]
    fp, fn = _test_counts(bound_out, bound_in, np.asarray([threshold]))
    eps, fpr_hi, fnr_hi = _bounded_epsilon(fp, bound_out.size, fn, bound_in.size, delta, alpha)
    return EpsilonLowerBound(
        epsilon=float(eps[0]),
        confidence=confidence,
        delta=delta,
        threshold=sign * threshold,
        direction=direction,
        fpr=float(fp[0] / bound_out.size),
        fnr=float(fn[0] / bound_in.size),
        fpr_upper=float(fpr_hi[0]),
        fnr_upper=float(fnr_hi[0]),
        n_select=k_out,
        n_bound=int(bound_out.size),
    )
