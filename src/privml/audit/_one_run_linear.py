"""One-run black-box audits of privml's linear training methods, at the data's full size.

The method is trained ONCE on the user's records plus m canaries
(:mod:`privml.audit._one_run`, Steinke, Nasr and Jagielski 2023). Each canary
i is a random unit direction x_i with a random label y_i and a second label
y'_i; a fair coin S_i decides which of two records the training set holds in
canary i's slot:

* **replace-one** methods (output and objective perturbation, DP-CD):
  S_i = in: the canary (x_i, y_i); out: its mirror (x_i, y'_i), the record
  the canary *replaces*, as in :mod:`privml.audit._canaries`. Flipping one
  coin is exactly one replace-one step, so the claim is compared as stated.
* **add/remove-one (zero-out)** methods (linear DP-SGD with Poisson
  sampling): in: the canary; out: a null record of zero features (zero
  gradient for every linear loss), the zero-out neighbour that privml's
  DP-SGD is analysed under with n public (:mod:`privml.neighbouring`).

Steinke et al.'s Theorem 3 asks only that flipping one coin moves the
output by one (eps, delta)-DP step with the other coins fixed; both designs
give that under the claim's own relation, so no conversion between relations
is made (none is needed, and a replace-one claim would not transfer to
add/remove with n changing). The training set has ``n_real + m`` rows in every
world (n is public, as both analyses require); the canaries and their
counterparts are the only records added, the real records are untouched.

Black-box score: the canary's margin under the released model, the log
probability of y_i minus that of y'_i (a function of the DP output and of
the auditor's own canaries only). The audit's cost is one training run on
``n_real + m`` records plus scoring m points. The audit itself is *not*
differentially private and is not a release: it reads the coins S, i.e.
which canaries were trained on. Its output is a test of the claim: the
(eps, delta) pair by Steinke et al.'s analysis and the curve the fit's
accountant states by the f-DP analysis (:mod:`privml.audit._one_run_claims`).
The white-box audit of DP-SGD is :mod:`privml.audit._one_run_dpsgd`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone

from privml._random import RandomState, check_random_state
from privml._validation import check_count, check_finite_array
from privml.audit._one_run import audit_from_scores
from privml.audit._one_run_claims import linear_claim
from privml.audit._one_run_result import OneRunFitResult
from privml.neighbouring import Neighbouring
from privml.registry import get_spec

__all__ = [
    "LinearOneRunResult",
    "check_audit_inputs",
    "fit_audited",
    "linear_one_run_audit",
    "make_one_run_canaries",
    "one_run_training_set",
    "quiet_basis",
]


@dataclass(frozen=True, eq=False)
class OneRunCanaries:
    """m canaries: features ``x`` (m, d), label ``y`` and the mirror's label ``y_other`` (replace-one)."""

    x: np.ndarray
    y: np.ndarray
    y_other: np.ndarray


@dataclass(frozen=True, eq=False)
class LinearOneRunResult(OneRunFitResult):
    """A one-run audit of a linear method, with what the plot needs (see :class:`OneRunFitResult`).

    ``details``: public facts of the run a white-box audit adds (its statistic, canaries, steps, noise
    multiplier, sample rate).
    """

    method: str
    estimator: str
    n_included: int
    details: dict[str, Any] = field(default_factory=dict)

    def audited(self) -> dict[str, Any]:
        return {**self.details, "method": self.method, "estimator": self.estimator}

    def run_facts(self) -> dict[str, Any]:
        return {"n_canaries_included": self.n_included}


def make_one_run_canaries(
    m: int, n_features: int, classes: Sequence[Any], *, basis: np.ndarray | None = None,
    random_state: RandomState = None,
) -> OneRunCanaries:
    """m random unit-norm directions, each with a random label and a different random second label.

    ``basis`` (k, d), orthonormal rows: draw the directions inside its span (:func:`quiet_basis` gives the
    directions the data uses least, ClipBKD's idea of Jagielski et al. 2020 for many canaries). Random
    directions are nearly orthogonal to each other, so a canary's effect on the model along its own
    direction is little disturbed by the others (the paper's black-box canaries are likewise mislabeled,
    out-of-distribution points).
    """
    m_ = check_count(m, "m")
    d = check_count(n_features, "n_features")
    labels = np.asarray(list(classes))
    k = labels.size
    if k < 2:
        raise ValueError(f"need at least two public classes, got {labels.tolist()!r}")
    rng = check_random_state(random_state)
    if basis is None:
        x = rng.standard_normal((m_, d))
    else:
        x = rng.standard_normal((m_, basis.shape[0])) @ basis
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    first = rng.integers(k, size=m_)
    second = (first + rng.integers(1, k, size=m_)) % k  # uniform over the other k - 1 classes
    return OneRunCanaries(x=x, y=labels[first], y_other=labels[second])


def quiet_basis(X: np.ndarray) -> np.ndarray:
    """Orthonormal rows spanning the half of feature space the records use least (smallest singular values
    of X, uncentred as privml's models have no separate intercept). Computed from the data: the auditor's
    knowledge, never released."""
    gram = X.T @ X
    _, vectors = np.linalg.eigh(gram)  # ascending eigenvalues
    k = max(1, (X.shape[1] + 1) // 2)
    return vectors[:, :k].T


def one_run_training_set(
    X: np.ndarray, y: np.ndarray, canaries: OneRunCanaries, included: np.ndarray, relation: Neighbouring
) -> tuple[np.ndarray, np.ndarray]:
    """The real records followed by one slot per canary: the canary if included, else its counterpart
    (the mirror under replace-one, a zero-feature record under zero-out add/remove)."""
    if relation is Neighbouring.REPLACE_ONE:
        x_out, y_out = canaries.x, canaries.y_other
    else:
        x_out, y_out = np.zeros_like(canaries.x), canaries.y
    slot_x = np.where(included[:, None], canaries.x, x_out)
    slot_y = np.where(included, canaries.y, y_out)
    label_dtype = np.result_type(np.asarray(y).dtype, slot_y.dtype)
    return np.vstack([X, slot_x]), np.concatenate([np.asarray(y), slot_y]).astype(label_dtype)


def _relation(estimator: Any) -> Neighbouring:
    """The relation the estimator's guarantee will be stated under, known before fitting."""
    check = getattr(estimator, "_check_relation", None)
    if check is not None:  # DP-SGD: configurable (design, neighbouring)
        return Neighbouring.parse(check()[0])
    spec = get_spec(getattr(estimator, "method", ""))
    return spec.neighbouring if spec.neighbouring is not None else Neighbouring.REPLACE_ONE


def _margins(model: Any, canaries: OneRunCanaries) -> np.ndarray:
    proba = np.asarray(model.predict_proba(canaries.x), dtype=np.float64)
    classes = list(model.classes_)
    a = np.array([classes.index(c) for c in canaries.y])
    b = np.array([classes.index(c) for c in canaries.y_other])
    rows = np.arange(proba.shape[0])
    tiny = np.finfo(np.float64).tiny  # a saturated probability stays finite
    return np.log(np.maximum(proba[rows, a], tiny)) - np.log(np.maximum(proba[rows, b], tiny))


def linear_one_run_audit(
    estimator: Any,
    X: object,
    y: object,
    *,
    m: int = 1000,
    confidence: float = 0.95,
    guesses: int | Sequence[int] | None = None,
    random_state: RandomState = None,
) -> LinearOneRunResult:
    """Audit one fit of a linear privml estimator with m canaries (black-box; see the module notes).

    Parameters
    ----------
    estimator:
        An unfitted privml linear classifier with its public class set (``classes=...``) given; it is cloned.
        Its fitted ``privacy_`` is the claim, tested as a pair and, by the f-DP analysis, as the curve its
        accountant states (:func:`privml.audit._one_run_claims.linear_claim`, which also says which epsilon an
        Accuracy First fit is compared against); a baseline without one is audited against no claim.
    X, y:
        The real training records (rows of norm <= 1, as every privml loader gives).
    m:
        Canaries (each in with probability 1/2).
    confidence, guesses:
        As :func:`privml.audit.audit_from_scores`.
    random_state:
        Seeds the canaries, the coins and, unless the estimator has its own, the training noise.
    """
    started = time.perf_counter()
    X_, y_, m_, classes = check_audit_inputs(estimator, X, y, m)
    rng = check_random_state(random_state)
    relation = _relation(estimator)
    canaries = make_one_run_canaries(m_, X_.shape[1], classes, basis=quiet_basis(X_), random_state=rng)
    included = rng.random(m_) < 0.5
    X_train, y_train = one_run_training_set(X_, y_, canaries, included, relation)
    model, seconds_fit = fit_audited(estimator, X_train, y_train, rng)
    claim = linear_claim(model, relation, int(X_train.shape[0]))
    scores = _margins(model, canaries)
    audit = audit_from_scores(scores, included, delta=claim.delta, confidence=confidence,
                              claimed_epsilon=claim.epsilon, guesses=guesses, neighbouring=relation,
                              scores_from="black-box", claim_note=claim.note, claimed_profile=claim.profile)
    return LinearOneRunResult(
        audit=audit, method=str(getattr(model, "method", type(model).__name__)), estimator=type(model).__name__,
        n_real=int(X_.shape[0]), n_train=int(X_train.shape[0]), n_included=int(included.sum()),
        seconds_fit=seconds_fit, seconds_total=time.perf_counter() - started, scores=scores, included=included,
    )


def check_audit_inputs(estimator: Any, X: object, y: object, m: object) -> tuple[np.ndarray, np.ndarray, int, list]:
    """(X, y, m, the public class set), checked before anything is drawn or trained."""
    X_ = check_finite_array(X, "X", ndim=2)
    y_ = np.asarray(y)
    if y_.shape != (X_.shape[0],):
        raise ValueError(f"y must hold one label per row of X ({X_.shape[0]}), got shape {y_.shape}")
    m_ = check_count(m, "m")
    classes = estimator.get_params().get("classes")
    if classes is None:
        raise ValueError("the estimator needs its public class set (classes=...): the canaries' labels come from it")
    return X_, y_, m_, list(classes)


def fit_audited(
    estimator: Any, X_train: np.ndarray, y_train: np.ndarray, rng: np.random.Generator,
    prepare: Callable[[Any], None] | None = None,
) -> tuple[Any, float]:
    """Fit a clone of ``estimator`` (seeded from ``rng`` unless it has its own seed); returns it and the fit's time.

    ``prepare(model)`` runs on the clone before the fit (the white-box audit sets its seam there).
    """
    model = clone(estimator)
    if "random_state" in model.get_params() and model.get_params()["random_state"] is None:
        model.set_params(random_state=int(rng.integers(2**63)))
    if prepare is not None:
        prepare(model)
    fit_start = time.perf_counter()
    model.fit(X_train, y_train)
    return model, time.perf_counter() - fit_start
