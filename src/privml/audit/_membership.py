"""Membership inference: how well can an attacker tell training records from others?

Two black-box attacks on any fitted classifier with ``predict_proba``:

* :func:`loss_threshold_attack` (Yeom, Giacomelli, Fredrikson and Jha 2018,
  "Privacy risk in machine learning", Section 3.2, Adversary 1): a record is
  called a member when the model's loss on it is low. Yeom et al. threshold
  at the expected training loss; the ROC sweeps every threshold.
* :func:`likelihood_ratio_attack`: the one-sided Gaussian likelihood test of
  the "offline" LiRA (Carlini et al. 2022, "Membership inference attacks from
  first principles", Section 4.3 and eq. 4) without shadow models. LiRA fits
  a Gaussian to the logit-scaled confidence ``phi = log(p_y / (1 - p_y))`` of
  each target example across reference models; here one Gaussian per class
  is fitted to ``phi`` of *population* records (drawn from the same
  distribution, never trained on), the population attack of Ye et al. 2022
  ("Enhanced membership inference attacks", Attack P) in LiRA's
  parametrisation. The score is ``-log P_out(Phi >= phi)``: how unusually
  confident the model is on a record for its class.

Metrics (:class:`MembershipResult`): the ROC curve, its AUC, the TPR at low
FPR (the metric Carlini et al. argue for: an attack that confidently
identifies a few members matters more than average accuracy) and the
membership advantage ``max_t TPR(t) - FPR(t)`` (Yeom et al. Def. 4), which
an epsilon-DP training algorithm bounds by ``e^epsilon - 1`` (Yeom et al.
Thm 1; Humphries et al. 2023 give the sharper
``(e^eps - 1 + 2 delta) / (e^eps + 1)`` for (eps, delta)-DP and a balanced
membership game).

These attacks measure leakage of one fitted model; they prove nothing about
a guarantee (see :mod:`privml.audit._epsilon_lower_bound` for that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from privml._validation import check_finite_array

__all__ = [
    "LOW_FPRS",
    "MembershipResult",
    "example_losses",
    "likelihood_ratio_attack",
    "logit_confidence",
    "loss_threshold_attack",
    "membership_metrics",
    "roc_auc",
    "roc_curve",
]

#: False-positive rates at which :class:`MembershipResult` reports the TPR.
LOW_FPRS: tuple[float, ...] = (0.001, 0.01, 0.1)

# Probabilities are floored here before logs: a model that is certain and wrong
# gets a large finite loss instead of inf, which keeps the scores sortable.
_TINY = 1e-300


def roc_curve(scores_members: Any, scores_nonmembers: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC of the test "member iff score >= t" over every threshold t.

    Returns
    -------
    fpr, tpr, thresholds : ndarray
        From (0, 0) at ``t = +inf`` to (1, 1); ties are handled by moving
        all tied scores at once (so the curve has a diagonal step there).
    """
    pos = np.asarray(scores_members, dtype=np.float64).ravel()
    neg = np.asarray(scores_nonmembers, dtype=np.float64).ravel()
    if pos.size == 0 or neg.size == 0:
        raise ValueError("need at least one member and one non-member score")
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ValueError("scores contain NaN")
    thresholds = np.unique(np.concatenate([pos, neg]))[::-1]
    tpr = (pos.size - np.searchsorted(np.sort(pos), thresholds, side="left")) / pos.size
    fpr = (neg.size - np.searchsorted(np.sort(neg), thresholds, side="left")) / neg.size
    return (
        np.concatenate([[0.0], fpr]),
        np.concatenate([[0.0], tpr]),
        np.concatenate([[np.inf], thresholds]),
    )


def roc_auc(scores_members: Any, scores_nonmembers: Any) -> float:
    """P(member score > non-member score) + P(tie) / 2: the area under :func:`roc_curve`."""
    fpr, tpr, _ = roc_curve(scores_members, scores_nonmembers)
    return float(np.trapezoid(tpr, fpr))


@dataclass(frozen=True, eq=False)
class MembershipResult:
    """Outcome of a membership inference attack.

    Attributes
    ----------
    auc : float
        Area under the ROC curve (0.5: no better than a coin).
    advantage : float
        ``max_t TPR - FPR`` over all thresholds (Yeom et al. 2018, Def. 4,
        maximised over the attack's threshold: the best the attacker could do).
    tpr_at_fpr : dict
        TPR at each FPR in :data:`LOW_FPRS` (the largest TPR whose FPR does
        not exceed it).
    fpr, tpr, thresholds : ndarray
        The ROC curve.
    scores_members, scores_nonmembers : ndarray
        The attack scores (higher: "member").
    details : dict
        Attack-specific values (e.g. Yeom's threshold and its advantage).
    """

    auc: float
    advantage: float
    tpr_at_fpr: dict[float, float]
    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    scores_members: np.ndarray
    scores_nonmembers: np.ndarray
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready summary (no per-record scores)."""
        return {
            "auc": self.auc,
            "advantage": self.advantage,
            "tpr_at_fpr": {f"{k:g}": v for k, v in self.tpr_at_fpr.items()},
            "n_members": int(self.scores_members.size),
            "n_nonmembers": int(self.scores_nonmembers.size),
            **self.details,
        }


def membership_metrics(scores_members: Any, scores_nonmembers: Any, **details: Any) -> MembershipResult:
    """ROC, AUC, advantage and TPR at :data:`LOW_FPRS` for any membership scores (higher: member)."""
    pos = np.asarray(scores_members, dtype=np.float64).ravel()
    neg = np.asarray(scores_nonmembers, dtype=np.float64).ravel()
    fpr, tpr, thresholds = roc_curve(pos, neg)
    low = {rate: float(tpr[fpr <= rate].max()) for rate in LOW_FPRS}
    return MembershipResult(
        auc=float(np.trapezoid(tpr, fpr)),
        advantage=float(np.max(tpr - fpr)),
        tpr_at_fpr=low,
        fpr=fpr,
        tpr=tpr,
        thresholds=thresholds,
        scores_members=pos,
        scores_nonmembers=neg,
        details=dict(details),
    )


def _label_probabilities(model: Any, X: Any, y: Any) -> np.ndarray:
    X = check_finite_array(X, "X", ndim=2)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    classes = np.asarray(model.classes_)
    lookup = {c.item() if hasattr(c, "item") else c: i for i, c in enumerate(classes)}
    try:
        index = np.asarray([lookup[v.item() if hasattr(v, "item") else v] for v in y], dtype=np.int64)
    except KeyError as exc:
        raise ValueError(f"label {exc.args[0]!r} is not one of the model's classes {classes.tolist()!r}") from None
    proba = np.asarray(model.predict_proba(X), dtype=np.float64)
    return proba[np.arange(y.size), index]


def example_losses(model: Any, X: Any, y: Any) -> np.ndarray:
    """Cross-entropy ``-log p(y | x)`` of each record under a fitted classifier with ``predict_proba``."""
    return -np.log(np.maximum(_label_probabilities(model, X, y), _TINY))


def logit_confidence(model: Any, X: Any, y: Any) -> np.ndarray:
    """``phi = log(p_y / (1 - p_y))`` per record: the logit scaling of Carlini et al. (2022), eq. 4.

    Roughly Gaussian across models and records, unlike ``p_y`` itself.
    Computed as ``log p_y - log(sum_{c != y} p_c)`` from floored
    probabilities, so it stays finite when ``p_y`` rounds to 1.
    """
    p = np.maximum(_label_probabilities(model, X, y), _TINY)
    rest = np.maximum(1.0 - p, _TINY)
    return np.log(p) - np.log(rest)


def loss_threshold_attack(
    model: Any, X_members: Any, y_members: Any, X_nonmembers: Any, y_nonmembers: Any
) -> MembershipResult:
    """Yeom et al. (2018) loss-threshold attack: "member" when the loss is low.

    Parameters
    ----------
    model :
        A fitted classifier with ``classes_`` and ``predict_proba``.
    X_members, y_members :
        Records the model was trained on.
    X_nonmembers, y_nonmembers :
        Records from the same distribution it was not trained on.

    Returns
    -------
    MembershipResult
        Scores are negative losses. ``details`` holds Yeom's threshold (the
        mean training loss, which their attacker is assumed to know) and the
        advantage at that threshold, ``yeom_advantage``.

    Examples
    --------
    >>> from privml.data import load_dataset
    >>> from privml.linear import NonPrivateClassifier
    >>> data = load_dataset("breast_cancer", random_state=0)
    >>> model = NonPrivateClassifier(classes=[0, 1]).fit(data.X_train, data.y_train)
    >>> result = loss_threshold_attack(model, data.X_train, data.y_train, data.X_test, data.y_test)
    >>> 0.0 <= result.advantage <= 1.0
    True
    """
    loss_in = example_losses(model, X_members, y_members)
    loss_out = example_losses(model, X_nonmembers, y_nonmembers)
    threshold = float(np.mean(loss_in))
    yeom = float(np.mean(loss_in <= threshold) - np.mean(loss_out <= threshold))
    return membership_metrics(
        -loss_in, -loss_out, attack="loss-threshold", yeom_threshold=threshold, yeom_advantage=yeom
    )


def likelihood_ratio_attack(
    model: Any,
    X_members: Any,
    y_members: Any,
    X_nonmembers: Any,
    y_nonmembers: Any,
    *,
    X_population: Any,
    y_population: Any,
) -> MembershipResult:
    """Shadow-free likelihood-ratio attack: offline LiRA with per-class population statistics.

    Parameters
    ----------
    model :
        A fitted classifier with ``classes_`` and ``predict_proba``.
    X_members, y_members, X_nonmembers, y_nonmembers :
        As in :func:`loss_threshold_attack`.
    X_population, y_population :
        Reference records from the same distribution, disjoint from the
        training set *and* from the evaluated non-members (otherwise the
        non-members would calibrate the test they are scored by). At least
        two per class present in the evaluated records.

    Returns
    -------
    MembershipResult
        Score of a record (x, y): ``-log P[N(mu_y, s_y^2) >= phi(x, y)]``, the
        one-sided likelihood test of Carlini et al. (2022, Section 4.3, offline
        variant) with the OUT distribution ``N(mu_y, s_y^2)`` fitted to the
        :func:`logit_confidence` of class-y population records instead of to
        shadow models (Ye et al. 2022, Attack P). Normalising per class lets
        records of easy and hard classes be compared.
    """
    phi_pop = logit_confidence(model, X_population, y_population)
    y_pop = np.asarray(y_population)
    fitted: dict[Any, tuple[float, float]] = {}
    for label in np.unique(y_pop):
        values = phi_pop[y_pop == label]
        if values.size >= 2:
            # A floor on the spread: a class the model is uniformly sure about would give s = 0.
            fitted[label.item() if hasattr(label, "item") else label] = (
                float(values.mean()),
                max(float(values.std(ddof=1)), 1e-6),
            )

    def scores(X: Any, y: Any) -> np.ndarray:
        phi = logit_confidence(model, X, y)
        out = np.empty(phi.size)
        for i, label in enumerate(np.asarray(y)):
            key = label.item() if hasattr(label, "item") else label
            if key not in fitted:
                raise ValueError(f"the population has fewer than two records of class {key!r}")
            mu, sd = fitted[key]
            out[i] = -stats.norm.logsf(phi[i], loc=mu, scale=sd)
        return out

    return membership_metrics(
        scores(X_members, y_members),
        scores(X_nonmembers, y_nonmembers),
        attack="likelihood-ratio (offline, population)",
    )
