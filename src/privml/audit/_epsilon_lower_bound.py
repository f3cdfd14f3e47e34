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

Neighbours follow the estimator's own guarantee (:mod:`privml.audit._canaries`):
replace-one for ERM methods and DP-CD, zero-out/add-remove for DP-SGD.

The threshold test and its bound live in :mod:`privml.audit._threshold_test`,
the trials and the white-box statistics in :mod:`privml.audit._trials`; this
module holds the two audit entry points,
:func:`audit_mechanism` and :func:`audit_epsilon`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import logsumexp
from sklearn.base import clone

from privml._random import RandomState
from privml._validation import check_count
from privml.audit._canaries import Canary, make_canary, neighbouring_pair
from privml.audit._membership import roc_auc
from privml.audit._threshold_test import EpsilonLowerBound, epsilon_lower_bound
from privml.audit._trials import STATISTICS, Trial, _root_seed, run_trials, white_box_statistic
from privml.guarantee import PrivacyGuarantee

__all__ = [
    "AuditResult",
    "audit_epsilon",
    "audit_mechanism",
    "canary_log_odds",
]

# Share of each world's trials that choose the statistic and threshold (the rest bound).
_SELECT_FRACTION = 0.5


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
    into a number by the white-box ``statistic`` (:data:`~privml.audit._trials.STATISTICS`) fitted on
    the selection half of the trials. The bound is
    :func:`~privml.audit.epsilon_lower_bound` at ``claimed.delta``.
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
    :func:`~privml.audit.epsilon_lower_bound`.

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
        See :mod:`privml.audit._canaries`. ``"record"`` needs ``X_pool, y_pool``.
    canary_label : optional
        Label of the canary (default: the last public class).
    score : {"log-odds", "weights-projection", "weights-distance"} or callable
        ``"log-odds"`` (default): :func:`canary_log_odds`, a black-box
        statistic. ``"weights-*"``: white-box, the released ``coef_`` scored by
        :func:`~privml.audit._trials.white_box_statistic` (``projection`` suits Gaussian noise,
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
        (:func:`~privml.audit.neighbouring_pair`).

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
