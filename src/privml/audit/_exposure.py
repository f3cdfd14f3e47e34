"""Canary exposure (Carlini, Liu, Erlingsson, Kos and Song 2019, "The Secret Sharer").

Insert a random secret into the training data, then ask how highly the
trained model ranks it among every secret it could have been::

    exposure = log2 |R| - log2 rank,

where R is the space the secret was drawn from and ``rank`` is the position
of the inserted secret when all candidates are sorted from most to least
likely under the model (Carlini et al. 2019, Definition 4; ``rank = 1`` gives
the maximum ``log2 |R|``). A model that has not memorised the secret ranks it
like any other candidate, expected exposure about 1 bit; a model that
reproduces it exposes all ``log2 |R|`` bits.

Here the secret is a *label pattern*: ``length`` random inputs, each given a
random label, inserted (optionally several times) into a classifier's
training set. A candidate is any assignment of labels to those inputs, so
``|R| = k^length``, and its likelihood is ``sum_j log p(c_j | x_j)``. Ranks are
exact (every candidate is scored), so ``|R|`` is capped (:data:`MAX_CANDIDATES`).

Ties are broken against the secret (``rank`` counts every candidate at least
as likely as it, itself included): exposure is never overstated.
Exposure measures memorisation; it is not a differential privacy bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privml._random import RandomState, check_random_state
from privml._validation import check_count, check_finite_array

__all__ = [
    "MAX_CANDIDATES",
    "ExposureResult",
    "LabelCanary",
    "exposure_from_scores",
    "insert_label_canary",
    "label_sequence_exposure",
]

#: Largest candidate space :func:`label_sequence_exposure` scores exactly.
MAX_CANDIDATES = 2**24

# Probabilities floored before the log (a model certain of another label).
_TINY = 1e-300


@dataclass(frozen=True)
class ExposureResult:
    """Exposure of one inserted secret.

    Attributes
    ----------
    rank : int
        Candidates at least as likely as the secret (itself included), >= 1.
    n_candidates : int
        ``|R|``.
    exposure : float
        ``log2 |R| - log2 rank``, in ``[0, log2 |R|]`` bits.
    max_exposure : float
        ``log2 |R|``.
    """

    rank: int
    n_candidates: int
    exposure: float
    max_exposure: float

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "n_candidates": self.n_candidates,
            "exposure": self.exposure,
            "max_exposure": self.max_exposure,
        }


def exposure_from_scores(secret_score: float, candidate_scores: Any) -> ExposureResult:
    """Exposure of a secret given the model's score (higher: more likely) of every candidate.

    Parameters
    ----------
    secret_score : float
        The score of the inserted secret.
    candidate_scores : array-like
        Scores of every element of R, the secret included.

    Examples
    --------
    >>> exposure_from_scores(5.0, [5.0, 1.0, 2.0, 3.0]).exposure
    2.0
    """
    scores = np.asarray(candidate_scores, dtype=np.float64).ravel()
    if scores.size == 0 or np.isnan(scores).any() or np.isnan(secret_score):
        raise ValueError("need a non-empty set of candidate scores without NaN")
    rank = max(1, int(np.count_nonzero(scores >= secret_score)))
    top = float(np.log2(scores.size))
    exposure = top - float(np.log2(rank))
    return ExposureResult(rank=rank, n_candidates=int(scores.size), exposure=exposure, max_exposure=top)


@dataclass(frozen=True, eq=False)
class LabelCanary:
    """A secret label pattern: inputs ``X`` (norm 1) and their secret labels ``labels``."""

    X: np.ndarray
    labels: np.ndarray


def insert_label_canary(
    X: Any,
    y: Any,
    *,
    length: int,
    classes: Any,
    repeats: int = 1,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray, LabelCanary]:
    """Draw a label-pattern secret and append it ``repeats`` times to (X, y).

    The inputs are uniform on the unit sphere of ``R^d`` and the labels
    uniform on ``classes``, so the secret space has ``k^length`` equally likely
    elements and exposure is measured against the right ``|R|``.

    Returns
    -------
    X_aug, y_aug, canary
        The training set with the secret appended and the secret itself.
    """
    X = check_finite_array(X, "X", ndim=2)
    y = np.asarray(y)
    length = check_count(length, "length")
    repeats = check_count(repeats, "repeats")
    classes = np.asarray(list(classes))
    rng = check_random_state(random_state)
    inputs = rng.standard_normal((length, X.shape[1]))
    inputs /= np.linalg.norm(inputs, axis=1, keepdims=True)
    labels = classes[rng.integers(classes.size, size=length)]
    X_aug = np.vstack([X] + [inputs] * repeats)
    y_aug = np.concatenate([y] + [labels] * repeats)
    return X_aug, y_aug, LabelCanary(inputs, labels)


def label_sequence_exposure(model: Any, canary: LabelCanary) -> ExposureResult:
    """Exposure of a label-pattern secret under a fitted classifier with ``predict_proba``.

    Every one of the ``k^length`` label assignments is scored by
    ``sum_j log p(c_j | x_j)`` and the secret is ranked among them.

    Raises
    ------
    ValueError
        If ``k^length`` exceeds :data:`MAX_CANDIDATES` (use a shorter secret).
    """
    classes = np.asarray(model.classes_)
    log_p = np.log(np.maximum(np.asarray(model.predict_proba(canary.X), dtype=np.float64), _TINY))
    length, k = log_p.shape
    if float(k) ** length > MAX_CANDIDATES:
        raise ValueError(f"{k}^{length} candidates exceed {MAX_CANDIDATES}; use a shorter secret")
    index = np.asarray([int(np.flatnonzero(classes == label)[0]) for label in canary.labels])
    secret = float(log_p[np.arange(length), index].sum())
    totals = np.zeros(1)
    for row in log_p:
        # All partial assignments extended by every label of the next input.
        totals = (totals[:, None] + row[None, :]).ravel()
    return exposure_from_scores(secret, totals)
