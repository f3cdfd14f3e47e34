"""Canary records and the neighbouring datasets an audit trains on.

An epsilon audit (Jagielski, Ullman and Oprea 2020; Nasr et al. 2021) trains
many models on a dataset D and on a neighbour D' that holds a *canary*: a
record chosen to move the model as much as the privacy proof allows. The
neighbour must be one the guarantee covers, so it is built from the
estimator's own neighbouring relation:

* **replace-one** (every ERM method, DP-CD): D' replaces one record of D by
  the canary. The replaced record is, by default, the *mirror* of the canary:
  the same features with another label. Replacing it flips the sign of the
  canary's gradient, the largest change one record can make to the objective
  of a linear model (gradient difference ``2 L`` along ``x``; the worst case
  the ``2L / (n lambda)`` sensitivity of CMS11 allows).
* **add/remove-one** (DP-SGD with Poisson sampling): D' is D plus the
  canary. DP-SGD normalises by the expected batch size ``q n`` with n
  public, so D is padded with a record of zero features instead (zero
  gradient for every linear loss): both datasets have n + 1 rows and differ
  in exactly the canary's gradient, the "zero-out" neighbours of Kairouz et
  al. (2021), which is the add/remove relation of the mechanism with n fixed.

Canaries here are feature vectors of norm 1 (the unit ball that every privml
estimator projects onto, the feature convention of CMS11, Sec. 2).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from privml._random import RandomState, check_random_state
from privml._validation import check_finite_array
from privml.neighbouring import Neighbouring

__all__ = [
    "CANARIES",
    "Canary",
    "NeighbouringPair",
    "clipbkd_canary",
    "make_canary",
    "neighbouring_pair",
    "random_canary",
    "record_canary",
]

#: Canary constructions accepted by :func:`make_canary` and ``privml audit --canary``.
CANARIES: tuple[str, ...] = ("clipbkd", "random", "record")


@dataclass(frozen=True, eq=False)
class Canary:
    """A record inserted into D' and the record it replaces under replace-one.

    Attributes
    ----------
    x : ndarray, shape (d,)
        Canary features (norm <= 1).
    y : object
        Canary label (a member of the public class set).
    replaced_x, replaced_y :
        The record of D that D' replaces (replace-one audits).
    kind : str
        How it was built (``"clipbkd"``, ``"random"``, ``"record"``, ...).
    """

    x: np.ndarray
    y: object
    replaced_x: np.ndarray
    replaced_y: object
    kind: str


@dataclass(frozen=True, eq=False)
class NeighbouringPair:
    """Two neighbouring training sets: ``X_out, y_out`` (D) and ``X_in, y_in`` (D', with the canary)."""

    X_out: np.ndarray
    y_out: np.ndarray
    X_in: np.ndarray
    y_in: np.ndarray
    neighbouring: Neighbouring


def _other_label(label: object, classes: np.ndarray) -> object:
    """The next class after ``label`` in the public class set (wrapping round)."""
    index = int(np.flatnonzero(classes == label)[0])
    return classes[(index + 1) % classes.size].item()


def _check_label(label: object, classes: Iterable[object]) -> tuple[object, np.ndarray]:
    classes = np.asarray(list(classes))
    if classes.size < 2:
        raise ValueError(f"need at least two public classes, got {classes.tolist()!r}")
    if not np.any(classes == label):
        raise ValueError(f"canary label {label!r} is not in the public class set {classes.tolist()!r}")
    return (label.item() if isinstance(label, np.generic) else label), classes


def clipbkd_canary(X: object, *, label: object, classes: Iterable[object]) -> Canary:
    """The ClipBKD canary: the direction of least data variance, scaled to norm 1.

    Parameters
    ----------
    X : array-like, shape (n, d)
        The training features the audit starts from.
    label : object
        The canary's label (a public class).
    classes : sequence
        The public class set; the mirror record takes the next class.

    Returns
    -------
    Canary
        ``x`` is the right singular vector of ``X`` with the smallest
        singular value (Jagielski, Ullman and Oprea 2020, Section 3,
        "ClipBKD"). Along it the other records contribute the least
        curvature and gradient, so the canary's own gradient, which any
        L-Lipschitz linear loss bounds by L along ``x``, dominates what the
        model learns there: the worst case for a linear model, and the case
        a sensitivity bound must cover. Under replace-one it replaces its
        mirror (same ``x``, the next label).

    Notes
    -----
    Uses the uncentred second moment (the SVD of ``X`` itself), not the
    covariance: privml's linear models have no separate intercept, so the
    curvature of the objective along ``u`` is ``sum_i l''_i (x_i . u)^2``.
    The canary is computed from the data; that is the auditor's knowledge,
    not a release.
    """
    X = check_finite_array(X, "X", ndim=2)
    label, classes = _check_label(label, classes)
    # Every right singular vector is needed (n < d: the null space too), never the n x n left ones.
    _, _, vt = np.linalg.svd(X, full_matrices=X.shape[0] < X.shape[1])
    direction = vt[-1]
    # Make the sign deterministic (SVD signs are arbitrary).
    direction = direction * (1.0 if direction[np.argmax(np.abs(direction))] >= 0 else -1.0)
    direction = direction / np.linalg.norm(direction)
    return Canary(direction, label, direction.copy(), _other_label(label, classes), "clipbkd")


def random_canary(
    n_features: int, *, label: object, classes: Iterable[object], random_state: RandomState = None
) -> Canary:
    """A canary in a uniformly random direction of the unit sphere (an average-case canary).

    Replace-one audits replace its mirror (same features, next label).
    """
    label, classes = _check_label(label, classes)
    rng = check_random_state(random_state)
    direction = rng.standard_normal(int(n_features))
    direction /= np.linalg.norm(direction)
    return Canary(direction, label, direction.copy(), _other_label(label, classes), "random")


def record_canary(
    X_pool: object, y_pool: object, *, classes: Iterable[object], random_state: RandomState = None
) -> Canary:
    """A real record (e.g. from a held-out set) with its true label: the realistic, weakest canary.

    Replace-one audits replace its mirror (same features, next label).
    """
    X_pool = check_finite_array(X_pool, "X_pool", ndim=2)
    y_pool = np.asarray(y_pool)
    rng = check_random_state(random_state)
    i = int(rng.integers(X_pool.shape[0]))
    label, classes = _check_label(y_pool[i], classes)
    x = X_pool[i] / max(1.0, float(np.linalg.norm(X_pool[i])))
    return Canary(x, label, x.copy(), _other_label(label, classes), "record")


def make_canary(
    kind: str,
    X: np.ndarray,
    *,
    classes: Iterable[object],
    label: object | None = None,
    X_pool: np.ndarray | None = None,
    y_pool: np.ndarray | None = None,
    random_state: RandomState = None,
) -> Canary:
    """Build a canary by name (``"clipbkd"``, ``"random"`` or ``"record"``).

    ``label`` defaults to the last public class; ``record`` draws from
    ``(X_pool, y_pool)`` (records not in the training set).
    """
    if kind not in CANARIES:
        raise ValueError(f"canary must be one of {', '.join(CANARIES)}, got {kind!r}")
    classes = list(classes)
    label = classes[-1] if label is None else label
    if kind == "clipbkd":
        return clipbkd_canary(X, label=label, classes=classes)
    if kind == "random":
        return random_canary(np.shape(X)[1], label=label, classes=classes, random_state=random_state)
    if X_pool is None or y_pool is None:
        raise ValueError("the 'record' canary needs a pool of records not used for training (X_pool, y_pool)")
    return record_canary(X_pool, y_pool, classes=classes, random_state=random_state)


def neighbouring_pair(
    X: object, y: object, canary: Canary, neighbouring: Neighbouring | str
) -> NeighbouringPair:
    """D and D' for an audit of a guarantee stated under ``neighbouring``.

    Parameters
    ----------
    X, y :
        The base records (shared by both datasets).
    canary :
        The canary; under replace-one, ``canary.replaced_x/y`` is the record of
        D that D' replaces.
    neighbouring :
        ``replace-one``: D = base + replaced record, D' = base + canary (same
        n). ``add/remove-one``: D = base + a zero-feature record, D' = base +
        canary (zero-out neighbours; see the module notes).

    Returns
    -------
    NeighbouringPair
        The canary (or its counterpart) is the last row of both datasets.
    """
    X = check_finite_array(X, "X", ndim=2)
    y = np.asarray(y)
    relation = Neighbouring.parse(neighbouring)
    x_in = np.asarray(canary.x, dtype=np.float64)
    if x_in.shape != (X.shape[1],):
        raise ValueError(f"canary has {x_in.shape} features, the data {X.shape[1]}")
    if relation is Neighbouring.REPLACE_ONE:
        x_out, y_out = np.asarray(canary.replaced_x, dtype=np.float64), canary.replaced_y
    else:
        # Zero features: zero gradient for any linear loss, so D' adds exactly one gradient.
        x_out, y_out = np.zeros_like(x_in), canary.y
    label_dtype = np.result_type(y.dtype, np.asarray([canary.y, y_out]).dtype)
    return NeighbouringPair(
        X_out=np.vstack([X, x_out]),
        y_out=np.concatenate([y, np.asarray([y_out])]).astype(label_dtype),
        X_in=np.vstack([X, x_in]),
        y_in=np.concatenate([y, np.asarray([canary.y])]).astype(label_dtype),
        neighbouring=relation,
    )
