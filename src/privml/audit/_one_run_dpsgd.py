"""White-box one-run audits of linear DP-SGD (:class:`privml.linear.DPSGDClassifier`).

Steinke, Nasr and Jagielski (NeurIPS 2023), "Privacy Auditing with One (1)
Training Run", white-box, at the data's full size: ONE fit on the user's n
records plus m canary slots, each canary in its slot with probability 1/2
(the coins are drawn once, before the run). The scores are read from what
DP-SGD releases at every step, the noisy clipped gradient sum (each iterate,
and so the model, is a function of those sums), as
:mod:`privml.audit._one_run_torch` does for torch models, with its two
statistics (:func:`privml.audit._one_run_torch.white_box_statistics`: the sum
over steps, the paper's score, and the log likelihood ratio of the
Poisson-sampled Gaussian step; each tested at half the level).

The relation. The fit is planned for ``n_real + m`` records in every world
(n public), and privml's DP-SGD states its guarantee under add/remove-one in
the zero-out view: an excluded canary's slot is a null record (zero
features, so a zero gradient for every linear loss). Flipping one coin, the
others fixed, is one such neighbour, and the fit's own ``privacy_`` is the
claim. Replace-one fits (``neighbouring="replace-one"``, fixed-size
sampling, the ``direct`` design) are refused: a replace-one claim does not
bound a zero-out step.

Two kinds of canaries:

* ``"dirac"`` (the paper's white-box canaries, the default): canary i is
  the gradient ``C e_{k_i}`` on one coordinate ``k_i`` of the weights. Its
  slot is a null record, sampled by DP-SGD's own Poisson sampler like any
  other; when an included canary's slot is sampled, ``C e_{k_i}`` is added
  to the clipped sum (through the estimator's audit-only ``_audit_step``
  seam; production never sets it). It tests the noise and the accounting,
  not the clipping (it is clipped already). The coordinates are the
  quietest of the weights: the features with the least energy in the
  records (``sum_i x_ij^2``; MNIST's blank border pixels have none), every
  class's weight of one feature before the next feature's, so the real
  records' gradients hardly reach the canaries' coordinates. They are the
  auditor's choice, made from the data and never from the coins.
* ``"records"``: canary records ``(x_i, y_i)`` (random unit directions in
  the records' quietest subspace, random labels:
  :func:`privml.audit._one_run_linear.make_one_run_canaries`), trained
  through the estimator's own clipping like every record, so a clipping
  fault shows. Canary i is scored along its own per-example gradient at the
  initial weights (zero), normalised: public, a function of the canary alone.

The per-step value of canary i is the released sum's coordinate ``k_i`` (or
its projection on canary i's direction) divided by C: 1 plus noise of
standard deviation s in a step that samples an included Dirac canary, noise
alone otherwise. The audit costs one training run on ``n_real + m`` records
plus m projections a step. It is a test, not a release: it reads the coins.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from privml._random import RandomState, check_random_state
from privml.audit._one_run import audit_from_statistics
from privml.audit._one_run_claims import linear_claim
from privml.audit._one_run_linear import (
    LinearOneRunResult,
    check_audit_inputs,
    fit_audited,
    make_one_run_canaries,
    one_run_training_set,
    quiet_basis,
)
from privml.audit._one_run_torch import white_box_statistics
from privml.data._labels import fit_classes
from privml.linear._base import loss_labels, make_loss
from privml.linear._dpsgd import DPSGDClassifier
from privml.neighbouring import Neighbouring

__all__ = ["CANARY_KINDS", "check_dirac_count", "dirac_coordinates", "dpsgd_white_box_audit"]

#: The white-box canaries of a linear DP-SGD audit (see the module notes).
CANARY_KINDS = ("dirac", "records")


def check_dirac_count(m: int, n_features: int, n_classes: int) -> int:
    """ValueError unless the weights (``n_features`` times one per class, or one for two classes) hold m Dirac
    canaries; returns the weights per feature."""
    width = 1 if n_classes == 2 else n_classes
    if m > n_features * width:
        raise ValueError(f"m = {m} Dirac canaries need as many coordinates; the model has {n_features * width} weights")
    return width


def dirac_coordinates(X: np.ndarray, n_classes: int, m: int) -> np.ndarray:
    """The m quietest coordinates of the flattened weights (row-major ``(d,)`` or ``(d, k)``), sorted.

    Features in increasing order of ``sum_i x_ij^2`` (ties by index), each feature's k class weights together.
    """
    width = check_dirac_count(m, X.shape[1], n_classes)
    features = np.argsort(np.einsum("ij,ij->j", X, X), kind="stable")
    coordinates = (features[:, None] * width + np.arange(width)[None, :]).reshape(-1)
    return np.sort(coordinates[:m])


class _StepReader:
    """The audit's seam on one fit: adds the Dirac canaries and keeps each step's values along the canaries."""

    def __init__(
        self,
        n_real: int,
        included: np.ndarray,
        clip: float,
        coordinates: np.ndarray | None,
        directions: np.ndarray | None,
    ) -> None:
        self.n_real, self.included, self.clip = n_real, included, clip
        self.coordinates, self.directions = coordinates, directions
        self.rows: list[np.ndarray] = []

    def __call__(self, index: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        flat = noisy.reshape(-1)  # the step's sum in the weights' row-major order (returned: a copy is not lost)
        if self.coordinates is not None:
            slots = index[index >= self.n_real] - self.n_real
            chosen = slots[self.included[slots]]
            flat[self.coordinates[chosen]] += self.clip  # distinct coordinates: C e_k for each sampled canary
            self.rows.append(flat[self.coordinates] / self.clip)
        else:
            assert self.directions is not None
            self.rows.append(flat @ self.directions / self.clip)
        return flat.reshape(noisy.shape)


def _initial_directions(canary_x: np.ndarray, codes: np.ndarray, n_classes: int) -> np.ndarray:
    """(P, m): each record canary's gradient at zero weights, normalised (flattened as the weights)."""
    loss = make_loss(n_classes)
    zero = np.zeros(loss.parameter_shape(canary_x.shape[1]))
    grads = loss.per_example_gradients(zero, canary_x, loss_labels(codes, n_classes))
    return (grads / np.linalg.norm(grads, axis=1, keepdims=True)).T.copy()


def _check_estimator(estimator: Any, canaries: str) -> None:
    if not isinstance(estimator, DPSGDClassifier):
        raise TypeError(
            f"the white-box audit runs privml's linear DP-SGD (DPSGDClassifier), got {type(estimator).__name__}"
        )
    if canaries not in CANARY_KINDS:
        raise ValueError(f"canaries must be one of {', '.join(CANARY_KINDS)}, got {canaries!r}")
    estimator._check_hyperparameters()  # noqa: SLF001 - the estimator's own checks, before anything is drawn
    relation, sampling = estimator._check_relation()  # noqa: SLF001
    if relation is not Neighbouring.ADD_REMOVE_ONE or sampling != "poisson":
        raise ValueError(
            "a white-box one-run audit of DP-SGD needs add/remove-one neighbours with Poisson sampling "
            f"(each canary slot holds the canary or a null record); this fit is {relation.value} with "
            f"{sampling} sampling"
        )


def _slots(
    X: np.ndarray, y: np.ndarray, classes: list, m: int, canaries: str, clip: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, _StepReader]:
    """The training set (real records, then the m canary slots), with the coins and the seam that reads the run."""
    k = len(classes)
    coordinates = directions = None
    if canaries == "dirac":
        coordinates = dirac_coordinates(X, k, m)
        included = rng.random(m) < 0.5
        X_train = np.vstack([X, np.zeros((m, X.shape[1]))])  # every slot a null record: the seam adds C e_k
        y_train = np.concatenate([y, np.repeat(np.asarray(classes)[:1], m)])  # a null record's label: no gradient
    else:
        drawn = make_one_run_canaries(m, X.shape[1], classes, basis=quiet_basis(X), random_state=rng)
        included = rng.random(m) < 0.5
        X_train, y_train = one_run_training_set(X, y, drawn, included, Neighbouring.ADD_REMOVE_ONE)
        directions = _initial_directions(drawn.x, fit_classes(drawn.y, classes, owner="canaries")[1], k)
    return X_train, y_train, _StepReader(X.shape[0], included, clip, coordinates, directions)


def dpsgd_white_box_audit(
    estimator: DPSGDClassifier,
    X: object,
    y: object,
    *,
    m: int = 1000,
    canaries: str = "dirac",
    confidence: float = 0.95,
    guesses: int | Sequence[int] | None = None,
    random_state: RandomState = None,
) -> LinearOneRunResult:
    """Audit one fit of a linear DP-SGD estimator white-box with m canaries (see the module notes).

    ``X``, ``y``, ``m``, ``confidence``, ``guesses`` and ``random_state`` are those of the black-box
    :func:`privml.audit._one_run_linear.linear_one_run_audit`; the fit is planned for ``len(X) + m`` records.

    Parameters
    ----------
    estimator:
        An unfitted :class:`~privml.linear.DPSGDClassifier` (or a subclass, e.g. a negative control)
        with its public class set given, Poisson-sampled under add/remove-one; it is cloned.
    canaries:
        ``"dirac"`` (gradient canaries on the quietest weights) or ``"records"`` (canary records trained
        through the clipping).
    """
    started = time.perf_counter()
    _check_estimator(estimator, canaries)
    X_, y_, m_, classes = check_audit_inputs(estimator, X, y, m)
    rng = check_random_state(random_state)
    X_train, y_train, reader = _slots(X_, y_, classes, m_, canaries, float(estimator.clip_norm), rng)
    included = reader.included
    model, seconds_fit = fit_audited(
        estimator, X_train, y_train, rng, prepare=lambda fresh: setattr(fresh, "_audit_step", reader)
    )
    del model._audit_step  # the fitted model keeps no seam
    info = model.fit_info_
    values = np.stack(reader.rows) if reader.rows else np.zeros((0, m_))
    stats = white_box_statistics(values, sample_rate=info["sample_rate"], noise_multiplier=info["noise_multiplier"])
    claim = linear_claim(model, Neighbouring.ADD_REMOVE_ONE, int(X_train.shape[0]))
    audit, name = audit_from_statistics(
        stats,
        included,
        confidence=confidence,
        delta=claim.delta,
        claimed_epsilon=claim.epsilon,
        guesses=guesses,
        neighbouring=Neighbouring.ADD_REMOVE_ONE,
        scores_from="white-box",
        claim_note=claim.note,
        claimed_profile=claim.profile,
    )
    details = {
        "statistic": name,
        "canaries": canaries,
        "steps": int(info["steps"]),
        "noise_multiplier": float(info["noise_multiplier"]),
        "sample_rate": float(info["sample_rate"]),
    }
    return LinearOneRunResult(
        audit=audit,
        method=model.method,
        estimator=type(model).__name__,
        n_real=int(X_.shape[0]),
        n_train=int(X_train.shape[0]),
        n_included=int(included.sum()),
        seconds_fit=seconds_fit,
        seconds_total=time.perf_counter() - started,
        scores=stats[name],
        included=included,
        details=details,
    )
