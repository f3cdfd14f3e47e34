"""Canary exposure (Carlini et al. 2019): ranks, and a label-pattern secret in a classifier."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privml.audit._exposure import (
    LabelCanary,
    exposure_from_scores,
    insert_label_canary,
    label_sequence_exposure,
)
from privml.data import load_dataset
from privml.linear import NonPrivateClassifier, OutputPerturbationClassifier


def test_exposure_from_ranks():
    top = exposure_from_scores(9.0, np.arange(10.0))
    assert (top.rank, top.exposure) == (1, pytest.approx(math.log2(10)))
    bottom = exposure_from_scores(0.0, np.arange(10.0))
    assert (bottom.rank, bottom.exposure) == (10, 0.0)
    tied = exposure_from_scores(1.0, [1.0, 1.0, 0.0, 0.0])
    assert tied.rank == 2  # ties counted against the secret
    with pytest.raises(ValueError, match="NaN"):
        exposure_from_scores(0.0, [np.nan])


def test_insert_label_canary_appends_repeats():
    X, y = np.zeros((5, 3)), np.zeros(5, dtype=int)
    X_aug, y_aug, canary = insert_label_canary(X, y, length=4, classes=range(3), repeats=2, random_state=0)
    assert X_aug.shape == (13, 3) and y_aug.shape == (13,)
    np.testing.assert_allclose(np.linalg.norm(canary.X, axis=1), 1.0)
    np.testing.assert_array_equal(y_aug[5:9], canary.labels)
    np.testing.assert_array_equal(y_aug[9:], canary.labels)


class _Fixed:
    """A 'model' with given class probabilities, for exact ranks."""

    classes_ = np.array([0, 1])

    def __init__(self, proba: np.ndarray) -> None:
        self.proba = proba

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.proba


def test_label_sequence_rank_is_exact():
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    canary = LabelCanary(np.zeros((3, 2)), np.array([0, 1, 0]))  # the most likely sequence
    result = label_sequence_exposure(_Fixed(proba), canary)
    assert (result.rank, result.n_candidates) == (1, 8)
    second = label_sequence_exposure(_Fixed(proba), LabelCanary(np.zeros((3, 2)), np.array([0, 1, 1])))
    assert second.rank == 2  # flipping the least certain label costs least


def test_too_many_candidates_are_refused():
    canary = LabelCanary(np.zeros((30, 2)), np.zeros(30, dtype=int))
    with pytest.raises(ValueError, match="shorter secret"):
        label_sequence_exposure(_Fixed(np.full((30, 2), 0.5)), canary)


def test_non_private_model_exposes_an_inserted_label_pattern_and_a_private_one_does_not():
    data = load_dataset("digits", bias=True, max_train=300, random_state=0)
    X, y, canary = insert_label_canary(data.X_train, data.y_train, length=5, classes=range(10), random_state=0)
    exposed = label_sequence_exposure(NonPrivateClassifier(classes=range(10), l2=1e-3).fit(X, y), canary)
    assert exposed.max_exposure == pytest.approx(5 * math.log2(10))
    assert exposed.exposure == exposed.max_exposure  # ranked first of 100000
    private = OutputPerturbationClassifier(epsilon=1.0, delta=1e-5, classes=range(10), random_state=0).fit(X, y)
    assert label_sequence_exposure(private, canary).exposure < 8.0
