"""Empirical lower bounds on epsilon: train with and without a canary, test, bound.

An (epsilon, delta)-DP mechanism M makes every test of "was the canary in the
training set?" weak: for any rejection region S and neighbours D, D',

    P[M(D') in S] <= e^eps P[M(D) in S] + delta,

so a test with false-positive rate FPR (S on D) and false-negative rate FNR
(not S on D') satisfies

    eps >= log((1 - delta - FNR) / FPR)   and   eps >= log((1 - delta - FPR) / FNR)

(Kairouz, Oh and Viswanath 2015, Thm 2.1; used for auditing by Jagielski,
Ullman and Oprea 2020, and Nasr et al. 2021). Running the mechanism many
times on D and D' and replacing FPR and FNR by Clopper-Pearson upper
confidence bounds turns an observed separation into a statistically valid
lower bound on the epsilon the mechanism actually has: an implementation
whose bound exceeds its claimed epsilon is broken (with the stated
confidence), and one whose bound stays below is *not* proven correct: the
audit only looks at one canary and one test statistic.

Multiple testing. Taking the best of many thresholds on the same trials
would report the luckiest of many tests, and its nominal confidence would be
void. Here the threshold (and the direction of the test) is chosen on the
first half of the trials of each world, and the bound is computed on the
other half at that single threshold: one test, so the Clopper-Pearson
intervals keep their coverage. The two one-sided upper bounds (FPR, FNR) are
each taken at level ``(1 - confidence) / 2``, so they hold together with
probability at least ``confidence`` (union bound), and both epsilon terms
derive from that one pair. Jagielski et al. (2020) take the max over thresholds: the
maximisation is kept, but done on the selection half only, because
maximising over the thresholds of the trials that are then bounded would
void the Clopper-Pearson coverage (the alternative, a Bonferroni correction
over every threshold, loses more power at the trial counts used here).

Neighbours follow the estimator's own guarantee (:mod:`privml.audit.canaries`):
replace-one for ERM methods and DP-CD, zero-out/add-remove for DP-SGD.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from scipy.special import logsumexp
from sklearn.base import clone

from privml._progress import progress_bar
from privml._random import RandomState
from privml._validation import check_count, check_delta
from privml.audit.canaries import Canary, make_canary, neighbouring_pair
from privml.audit.membership import roc_auc
from privml.audit.neighbour_test import _clopper_pearson
from privml.guarantee import PrivacyGuarantee

__all__ = [
    "STATISTICS",
    "AuditResult",
    "EpsilonLowerBound",
    "audit_epsilon",
    "audit_mechanism",
    "canary_log_odds",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "run_trials",
    "trial_seeds",
    "white_box_statistic",
]

#: A trial: (canary inserted?, generator) -> a test statistic (higher: "canary in") or a vector.
Trial = Callable[[bool, np.random.Generator], Any]
# Share of each world's trials that choose the statistic and threshold (the rest bound).
_SELECT_FRACTION = 0.5


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


# ----------------------------------------------------------------- trials
def trial_seeds(random_state: RandomState, trials: int) -> list[np.random.SeedSequence]:
    """``2 trials`` independent seeds, in the order [out_0, in_0, out_1, in_1, ...].

    Derived with :meth:`numpy.random.SeedSequence.spawn` from one root, so
    trial i gets the same randomness whatever the number of workers or the
    order they finish in.
    """
    return _root_seed(random_state).spawn(2 * trials)


def _root_seed(random_state: RandomState) -> np.random.SeedSequence:
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(int(random_state.integers(2**63)))
    return np.random.SeedSequence(random_state)


def _run(trial: Trial, inserted: bool, seed: np.random.SeedSequence) -> np.ndarray:
    return np.asarray(trial(inserted, np.random.default_rng(seed)), dtype=np.float64)


def run_trials(
    trial: Trial,
    *,
    trials: int,
    random_state: RandomState = None,
    n_jobs: int = 1,
    progress: bool = False,
    desc: str = "audit",
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``trial`` ``trials`` times in each world; return (outputs_out, outputs_in) in trial order.

    A trial returns a number (a test statistic) or a vector (e.g. released
    weights, for :func:`white_box_statistic`); the outputs have shape
    ``(trials,)`` or ``(trials, p)``.

    Parallel with joblib (``n_jobs``; -1 for every core); each run draws from
    its own seed (:func:`trial_seeds`), so results do not depend on
    ``n_jobs``.
    """
    trials = check_count(trials, "trials", minimum=2)
    seeds = trial_seeds(random_state, trials)
    worlds = [(i % 2 == 1, seeds[i]) for i in range(2 * trials)]
    results: list[np.ndarray] = []
    with progress_bar(2 * trials, desc=desc, unit="model", enabled=progress) as bar:
        runner = Parallel(n_jobs=n_jobs, return_as="generator")
        for value in runner(delayed(_run)(trial, inserted, seed) for inserted, seed in worlds):
            results.append(value)
            bar.update(1)
    values = np.asarray(results, dtype=np.float64)
    return values[0::2], values[1::2]


#: White-box statistics of released parameter vectors (see :func:`white_box_statistic`).
STATISTICS: tuple[str, ...] = ("projection", "distance")


def white_box_statistic(
    kind: str, outputs_out: np.ndarray, outputs_in: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """A likelihood-ratio statistic for released vectors, fitted on selection trials only.

    With ``m_out`` and ``m_in`` the coordinate-wise medians of the outputs
    on D and D' (the centres of symmetric noise), the log-likelihood ratio of
    ``w`` is, up to a positive factor,

    * ``"projection"``: ``w . (m_in - m_out)``, for isotropic Gaussian noise;
    * ``"distance"``: ``||w - m_out|| - ||w - m_in||``, for L2-Laplace noise
      (density proportional to ``exp(-||z|| / b)``; CMS11).

    By Neyman-Pearson these are the most powerful tests when the noise is of
    that kind and the centres are right (Nasr et al. 2021 audit white-box
    parameters the same way). Pass only the selection half: fitting on the
    bounding trials would void the bound.
    """
    if kind not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {kind!r}")
    m_out = np.median(np.asarray(outputs_out, dtype=np.float64), axis=0)
    m_in = np.median(np.asarray(outputs_in, dtype=np.float64), axis=0)
    if kind == "projection":
        direction = m_in - m_out
        return lambda w: np.asarray(w, dtype=np.float64) @ direction
    return lambda w: np.linalg.norm(np.asarray(w) - m_out, axis=-1) - np.linalg.norm(np.asarray(w) - m_in, axis=-1)


# ------------------------------------------------------------- the audit
@dataclass(frozen=True, eq=False)
class AuditResult:
    """Outcome of :func:`audit_epsilon` or :func:`audit_mechanism`.

    Attributes
    ----------
    claimed : PrivacyGuarantee
        What the implementation says it satisfies.
    bound : EpsilonLowerBound
        The empirical lower bound (at ``claimed.delta``).
    auc : float
        Area under the ROC curve of the canary test over all trials (0.5:
        the canary is invisible; 1: always detected). Descriptive only.
    scores_out, scores_in : ndarray
        The test statistic of every trial.
    seconds : float
        Wall time of the trials.
    details : dict
        What was audited (canary, statistic, dataset size, ...).
    """

    claimed: PrivacyGuarantee
    bound: EpsilonLowerBound
    auc: float
    scores_out: np.ndarray
    scores_in: np.ndarray
    seconds: float
    details: dict = field(default_factory=dict)

    @property
    def epsilon_lower_bound(self) -> float:
        return self.bound.epsilon

    @property
    def violated(self) -> bool:
        """True when the bound exceeds the claimed epsilon: the claim is false, at ``bound.confidence``."""
        return self.bound.epsilon > self.claimed.epsilon

    @property
    def tightness(self) -> float:
        """``epsilon_lower_bound / claimed_epsilon`` (1: the audit matches the claim; 0 for a non-private claim)."""
        claimed = self.claimed.epsilon
        return 0.0 if not math.isfinite(claimed) or claimed == 0 else self.bound.epsilon / claimed

    def to_dict(self) -> dict:
        """JSON-ready summary (no per-trial scores)."""
        return {
            "claimed_epsilon": self.claimed.epsilon,
            "epsilon_lower_bound": self.bound.epsilon,
            "confidence": self.bound.confidence,
            "auc": self.auc,
            "delta": self.claimed.delta,
            "neighbouring": self.claimed.neighbouring.value,
            "violated": self.violated,
            "tightness": self.tightness,
            "threshold": self.bound.threshold,
            "direction": self.bound.direction,
            "fpr": self.bound.fpr,
            "fnr": self.bound.fnr,
            "fpr_upper": self.bound.fpr_upper,
            "fnr_upper": self.bound.fnr_upper,
            "trials_per_world": int(self.scores_out.size),
            "trials_for_threshold": self.bound.n_select,
            "trials_for_bound": self.bound.n_bound,
            "seconds": self.seconds,
            **self.details,
        }


def audit_mechanism(
    trial: Trial,
    *,
    claimed: PrivacyGuarantee,
    trials: int,
    confidence: float = 0.95,
    random_state: RandomState = None,
    n_jobs: int = 1,
    progress: bool = False,
    details: dict | None = None,
    statistic: str | None = None,
) -> AuditResult:
    """Audit any randomised procedure given as ``trial(canary_in, rng) -> output``.

    ``trial(False, rng)`` must run the mechanism on D and ``trial(True, rng)``
    on a neighbour D' under ``claimed.neighbouring``, each time with fresh
    randomness from ``rng``. It returns either a number that tends to be
    larger when the canary is in, or a vector (released parameters), turned
    into a number by the white-box ``statistic`` (:data:`STATISTICS`) fitted on
    the selection half of the trials. The bound is
    :func:`epsilon_lower_bound` at ``claimed.delta``.
    """
    start = time.perf_counter()
    out, inn = run_trials(trial, trials=trials, random_state=random_state, n_jobs=n_jobs, progress=progress)
    seconds = time.perf_counter() - start
    if out.ndim == 2:
        if statistic is None:
            raise ValueError("the trials return vectors: pass statistic='projection' or 'distance'")
        k = int(round(_SELECT_FRACTION * out.shape[0]))
        score = white_box_statistic(statistic, out[:k], inn[:k])
        out, inn = score(out), score(inn)
    bound = epsilon_lower_bound(out, inn, delta=claimed.delta, confidence=confidence, select_fraction=_SELECT_FRACTION)
    return AuditResult(claimed, bound, roc_auc(inn, out), out, inn, seconds, dict(details or {}))


def canary_log_odds(model: Any, x: np.ndarray, label: object) -> float:
    """The model's log-odds of ``label`` at ``x``: ``s_y - logsumexp(s_{-y})`` (the canary statistic).

    Uses ``decision_function`` when the model has one (exact, never
    saturates), else ``predict_proba``. Monotone in the model's loss on the
    canary for binary models (the statistic of Yeom et al. 2018), and the
    logit scaling of Carlini et al. (2022) for k classes.
    """
    classes = np.asarray(model.classes_)
    j = int(np.flatnonzero(classes == label)[0])
    row = np.asarray(x, dtype=np.float64)[None, :]
    if hasattr(model, "decision_function"):
        scores = np.asarray(model.decision_function(row), dtype=np.float64)
        if scores.ndim == 1 or scores.shape[1] == 1:
            s = float(scores.ravel()[0])
            return s if j == 1 else -s
        s = scores[0]
        return float(s[j] - logsumexp(np.delete(s, j)))
    p = np.clip(np.asarray(model.predict_proba(row), dtype=np.float64)[0], 1e-300, 1.0)
    return float(np.log(p[j]) - np.log(max(1.0 - p[j], 1e-300)))


def _freeze_calibration(template: Any, pilot: Any) -> Any:
    """Reuse the pilot's calibrated noise multiplier in every trial.

    Calibration is a deterministic function of public quantities (epsilon,
    delta, n, q, steps), so every trial would find the same value; fixing it
    skips a bisection per trial. The estimator still re-accounts for the
    given multiplier and refuses to fit if it would exceed the budget.
    """
    params = template.get_params()
    multiplier = getattr(pilot, "fit_info_", {}).get("noise_multiplier")
    if "noise_multiplier" in params and params["noise_multiplier"] is None and multiplier is not None:
        return clone(template).set_params(noise_multiplier=multiplier)
    return template


def audit_epsilon(
    estimator: Any,
    X: Any,
    y: Any,
    *,
    trials: int,
    canary: str | Canary = "clipbkd",
    canary_label: object | None = None,
    score: str | Callable[[Any, np.ndarray, object], float] = "log-odds",
    confidence: float = 0.95,
    X_pool: np.ndarray | None = None,
    y_pool: np.ndarray | None = None,
    random_state: RandomState = None,
    n_jobs: int = 1,
    progress: bool = False,
) -> AuditResult:
    """Empirical lower bound on the epsilon of a private training method.

    Trains ``trials`` models on D and ``trials`` on its neighbour D' (with a
    canary), scores the canary on each, and bounds epsilon with
    :func:`epsilon_lower_bound`.

    Parameters
    ----------
    estimator :
        An unfitted scikit-learn style estimator with ``fit`` and
        ``privacy_`` (every privml classifier), cloned per trial; its
        ``random_state``, if it has one, is set from the audit's seed.
        If its ``classes`` is None it is set to the labels of ``y`` and the
        canary (the auditor knows them; nothing is released).
    X, y :
        The base records (keep them small: each trial trains a model).
    trials : int
        Models per world (>= 2); half choose the threshold, half bound.
    canary : {"clipbkd", "random", "record"} or Canary
        See :mod:`privml.audit.canaries`. ``"record"`` needs ``X_pool, y_pool``.
    canary_label : optional
        Label of the canary (default: the last public class).
    score : {"log-odds", "weights-projection", "weights-distance"} or callable
        ``"log-odds"`` (default): :func:`canary_log_odds`, a black-box
        statistic. ``"weights-*"``: white-box, the released ``coef_`` scored by
        :func:`white_box_statistic` (``projection`` suits Gaussian noise,
        ``distance`` L2-Laplace noise). A callable
        ``score(model, x, label) -> float`` (higher for "canary in").
    confidence : float, default 0.95
    random_state :
        Seed of the whole audit; trial i always gets the same seed.
    n_jobs : int, default 1
        joblib workers.
    progress : bool
        Progress bar on stderr.

    Returns
    -------
    AuditResult
        ``claimed`` is the guarantee a pilot fit reports (epsilon, delta and
        neighbouring relation); D' is built under that relation
        (:func:`~privml.audit.canaries.neighbouring_pair`).

    Notes
    -----
    The bound holds for the pair (D, D') and the statistic used; a correct
    implementation stays below its claim except with probability
    ``1 - confidence``.

    Examples
    --------
    >>> from privml.testing.negative_controls import control_data
    >>> from privml.linear import OutputPerturbationClassifier
    >>> X, y = control_data(50, bias=False)
    >>> model = OutputPerturbationClassifier(epsilon=1.0, classes=(0, 1))
    >>> result = audit_epsilon(model, X, y, trials=50, canary_label=1, random_state=0)
    >>> result.claimed.epsilon, str(result.claimed.neighbouring), result.violated
    (1.0, 'replace-one', False)
    """
    # long-function: a long numpy-style docstring (parameters, guarantee, references) and code that is one sequence:
    # class set, canary, pilot fit, neighbouring pair, the trial closure and the call to audit_mechanism.
    trials = check_count(trials, "trials", minimum=2)
    statistic, score_fn = _check_score(score)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    # One seed for the canary and the pilot fit, one root for the trials.
    setup_seed, trials_seed = _root_seed(random_state).spawn(2)
    params = estimator.get_params()
    classes = params.get("classes")
    if classes is None:
        known = np.unique(y) if canary_label is None else np.unique(np.append(y, np.asarray(canary_label)))
        classes = tuple(known.tolist())
        if "classes" in params:
            estimator = clone(estimator).set_params(classes=classes)
    if isinstance(canary, str):
        kind = canary
        canary = make_canary(
            canary, X, classes=classes, label=canary_label, X_pool=X_pool, y_pool=y_pool, random_state=setup_seed
        )
    else:
        kind = canary.kind
    seeded = "random_state" in estimator.get_params()
    pilot = clone(estimator)
    if seeded:
        pilot.set_params(random_state=_int_seed(np.random.default_rng(setup_seed)))
    pilot.fit(np.vstack([X, canary.x]), np.append(y, np.asarray(canary.y)))
    claimed = getattr(pilot, "privacy_", None)
    if not isinstance(claimed, PrivacyGuarantee):
        raise TypeError(
            f"{type(estimator).__name__} reports no privacy_ guarantee after fit; "
            "audit it with audit_mechanism and an explicit claimed guarantee"
        )
    pair = neighbouring_pair(X, y, canary, claimed.neighbouring)
    template = _freeze_calibration(estimator, pilot)

    def trial(inserted: bool, rng: np.random.Generator) -> Any:
        X_w, y_w = (pair.X_in, pair.y_in) if inserted else (pair.X_out, pair.y_out)
        model = clone(template)
        if seeded:
            model.set_params(random_state=_int_seed(rng))
        model.fit(X_w, y_w)
        if score_fn is None:
            return np.ravel(model.coef_)
        return score_fn(model, canary.x, canary.y)

    details = {
        "estimator": type(estimator).__name__,
        "method": getattr(estimator, "method", type(estimator).__name__),
        "canary": kind,
        "statistic": statistic or getattr(score_fn, "__name__", "custom"),
        "n_train": int(pair.X_in.shape[0]),
        "n_features": int(X.shape[1]),
    }
    return audit_mechanism(
        trial,
        claimed=claimed,
        trials=trials,
        confidence=confidence,
        random_state=trials_seed,
        n_jobs=n_jobs,
        progress=progress,
        details=details,
        statistic=statistic,
    )


def _int_seed(rng: np.random.Generator) -> int:
    # An int is the one random_state every scikit-learn style estimator accepts.
    return int(rng.integers(2**32))


def _check_score(score: Any) -> tuple[str | None, Callable | None]:
    """(white-box statistic, black-box score function): exactly one is not None."""
    if callable(score):
        return None, score
    if score == "log-odds":
        return None, canary_log_odds
    if isinstance(score, str) and score.startswith("weights-") and score[len("weights-"):] in STATISTICS:
        return score[len("weights-"):], None
    choices = ", ".join(["log-odds"] + [f"weights-{s}" for s in STATISTICS])
    raise ValueError(f"score must be a callable or one of {choices}, got {score!r}")
