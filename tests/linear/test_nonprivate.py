"""Tests for the non-private baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from privml.exceptions import ConvergenceError, PrivacyLeakWarning
from privml.linear._nonprivate import NonPrivateClassifier
from privml.linear._solvers import DEFAULT_TOL
from privml.neighbouring import Neighbouring


def _data(k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(31)
    X = rng.standard_normal((300, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.argmax(X @ rng.standard_normal((4, k)) * 3 + rng.standard_normal((300, k)), axis=1)
    return X, y


@pytest.mark.parametrize("k", [2, 3])
def test_matches_scikit_learn(k: int) -> None:
    X, y = _data(k)
    lam = 1e-2
    ours = NonPrivateClassifier(l2=lam, classes=list(range(k))).fit(X, y)
    # scikit-learn: C sum_i loss + ||w||^2 / 2, the same objective with lambda = 1 / (n C).
    reference = LogisticRegression(C=1 / (len(y) * lam), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    # Binary: one w with classes_[1] positive, as scikit-learn's coef_; k classes: (k, d).
    assert np.allclose(ours.coef_, reference.coef_, atol=1e-6)
    assert np.array_equal(ours.predict(X), reference.predict(X))
    assert np.allclose(ours.predict_proba(X), reference.predict_proba(X), atol=1e-6)


def test_guarantee_and_info() -> None:
    X, y = _data(3)
    model = NonPrivateClassifier(classes=[0, 1, 2]).fit(X, y)
    assert model.privacy_.epsilon == math.inf and model.privacy_.delta == 0.0
    assert model.privacy_.accountant == "none"
    assert model.privacy_.neighbouring is Neighbouring.REPLACE_ONE
    assert model.fit_info_["l2"] == pytest.approx(1 / 300)  # auto: scikit-learn's C = 1
    assert model.nonprivate_diagnostics_["grad_norm"] <= DEFAULT_TOL
    assert "epsilon" not in model.get_params()
    assert clone(model).get_params() == model.get_params()


def test_is_deterministic() -> None:
    X, y = _data(2)
    first = NonPrivateClassifier(classes=[0, 1]).fit(X, y)
    second = NonPrivateClassifier(classes=[0, 1]).fit(X, y)
    assert np.array_equal(first.weights_, second.weights_)


def test_huber_loss_for_two_classes() -> None:
    X, y = _data(2)
    huber = NonPrivateClassifier(loss="huber", classes=[0, 1]).fit(X, y)
    logistic = NonPrivateClassifier(classes=[0, 1]).fit(X, y)
    assert not np.allclose(huber.weights_, logistic.weights_)
    assert abs(huber.score(X, y) - logistic.score(X, y)) < 0.03
    assert huber.score(X, y) > 0.65  # the labels are noisy: majority class 0.5


@pytest.mark.parametrize(
    "params",
    [{"l2": 0.0}, {"l2": "none"}, {"loss": "hinge"}, {"tol": 0.0}, {"max_iter": -1}, {"huber_width": 0.0, "loss": "huber"}],
)
def test_bad_parameters(params: dict) -> None:
    X, y = _data(2)
    with pytest.raises((ValueError, TypeError)):
        NonPrivateClassifier(classes=[0, 1], **params).fit(X, y)


def test_bad_data_and_classes() -> None:
    X, y = _data(3)
    X_bad = X.copy()
    X_bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        NonPrivateClassifier(classes=[0, 1, 2]).fit(X_bad, y)
    with pytest.raises(ValueError, match="not in the public class set"):
        NonPrivateClassifier(classes=[0, 1]).fit(X, y)
    with pytest.warns(PrivacyLeakWarning):
        model = NonPrivateClassifier().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])


def test_a_tiny_iteration_cap_is_finished_by_the_certified_phase() -> None:
    X, y = _data(2)
    model = NonPrivateClassifier(classes=[0, 1], max_iter=1, l2=1e-3).fit(X, y)
    assert model.nonprivate_diagnostics_["grad_norm"] <= DEFAULT_TOL
    assert ConvergenceError  # kept for compatibility; never raised by a fit
