"""Membership inference: ROC arithmetic, and leakage of small non-private vs private models."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from privml.audit._membership import (
    example_losses,
    likelihood_ratio_attack,
    logit_confidence,
    loss_threshold_attack,
    membership_metrics,
    roc_auc,
    roc_curve,
)
from privml.data import load_dataset
from privml.linear import DPSGDClassifier, NonPrivateClassifier

N_TRAIN = 30  # small enough for a linear model on digits to memorise


def test_roc_curve_by_hand():
    fpr, tpr, thr = roc_curve([3.0, 2.0], [1.0, 2.0])
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 1])
    np.testing.assert_allclose(tpr, [0, 0.5, 1, 1])
    assert thr[0] == np.inf
    assert roc_auc([3.0, 2.0], [1.0, 2.0]) == pytest.approx(0.875)  # the tie counts one half


def test_auc_agrees_with_scikit_learn():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(0.5, 1, 300), rng.normal(0, 1, 200)
    expected = roc_auc_score(np.r_[np.ones(300), np.zeros(200)], np.r_[pos, neg])
    assert roc_auc(pos, neg) == pytest.approx(expected)


def test_metrics_of_a_perfect_attack():
    result = membership_metrics([5.0, 6.0], [1.0, 2.0])
    assert result.auc == 1.0 and result.advantage == 1.0
    assert result.tpr_at_fpr == {0.001: 1.0, 0.01: 1.0, 0.1: 1.0}


def test_roc_refuses_empty_or_nan():
    with pytest.raises(ValueError, match="at least one"):
        roc_curve([], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        roc_curve([np.nan], [1.0])


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits", bias=True, random_state=0)
    rng = np.random.default_rng(0)
    order = rng.permutation(data.y_train.size)
    members, others, population = order[:N_TRAIN], order[N_TRAIN : 2 * N_TRAIN], order[2 * N_TRAIN :]
    X, y = data.X_train, data.y_train
    return (X[members], y[members]), (X[others], y[others]), (X[population], y[population])


def test_losses_and_logits_are_consistent(digits):
    (X, y), _, _ = digits
    model = NonPrivateClassifier(classes=range(10)).fit(X, y)
    p = model.predict_proba(X)[np.arange(y.size), y]
    np.testing.assert_allclose(example_losses(model, X, y), -np.log(p))
    np.testing.assert_allclose(logit_confidence(model, X, y), np.log(p / (1 - p)), rtol=1e-9)
    with pytest.raises(ValueError, match="not one of the model's classes"):
        example_losses(model, X[:1], np.array([11]))


def test_non_private_model_on_a_small_set_leaks_membership(digits):
    (Xm, ym), (Xn, yn), (Xp, yp) = digits
    model = NonPrivateClassifier(classes=range(10)).fit(Xm, ym)
    loss = loss_threshold_attack(model, Xm, ym, Xn, yn)
    assert loss.auc > 0.75 and loss.advantage > 0.4
    assert loss.details["yeom_advantage"] > 0.2
    lira = likelihood_ratio_attack(model, Xm, ym, Xn, yn, X_population=Xp, y_population=yp)
    assert lira.auc > 0.75 and lira.advantage > 0.4


def test_private_model_leaks_far_less(digits):
    (Xm, ym), (Xn, yn), _ = digits
    private = DPSGDClassifier(epsilon=1.0, classes=range(10), random_state=0).fit(Xm, ym)
    baseline = NonPrivateClassifier(classes=range(10)).fit(Xm, ym)
    private_attack = loss_threshold_attack(private, Xm, ym, Xn, yn)
    assert private_attack.advantage < loss_threshold_attack(baseline, Xm, ym, Xn, yn).advantage - 0.2
    # eps-DP bounds the advantage by e^eps - 1 (Yeom et al. 2018, Thm 1); here far below it.
    assert private_attack.advantage < np.e - 1


def test_likelihood_ratio_needs_population_of_each_class(digits):
    (Xm, ym), (Xn, yn), _ = digits
    model = NonPrivateClassifier(classes=range(10)).fit(Xm, ym)
    with pytest.raises(ValueError, match="fewer than two records"):
        likelihood_ratio_attack(model, Xm, ym, Xn, yn, X_population=Xm[:3], y_population=ym[:3])
