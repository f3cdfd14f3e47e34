"""Squared loss: closed forms, no Lipschitz constant, and target checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privml.losses import SquaredLoss

LOSS = SquaredLoss()


def test_matches_the_closed_forms() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(-0.5, 0.5, size=(30, 4))
    y = rng.normal(size=30)
    w = rng.normal(size=4)
    residual = X @ w - y
    assert LOSS.value(w, X, y) == pytest.approx(0.5 * np.mean(residual**2), rel=1e-14)
    np.testing.assert_allclose(LOSS.gradient(w, X, y), X.T @ residual / 30, rtol=1e-13)
    np.testing.assert_allclose(LOSS.hessian(w, X, y), X.T @ X / 30, rtol=1e-13)


def test_has_no_lipschitz_constant() -> None:
    assert math.isinf(LOSS.lipschitz)
    x = np.array([[0.6, 0.8]])
    norms = [np.linalg.norm(LOSS.per_example_gradients(t * x[0], x, np.array([0.0]))) for t in (1, 10, 1e3)]
    np.testing.assert_allclose(norms, [1, 10, 1e3], rtol=1e-14)  # grows linearly: any finite L fails
    assert np.all(np.isinf(LOSS.coordinate_lipschitz([1.0, 2.0])))


def test_smoothness_and_coordinate_smoothness() -> None:
    x = np.array([[0.6, 0.8]])
    assert np.linalg.norm(LOSS.hessian(np.zeros(2), x, np.array([3.0])), 2) == pytest.approx(1.0, rel=1e-15)
    np.testing.assert_array_equal(LOSS.coordinate_smoothness([0.5, 3.0]), [0.25, 9.0])


@pytest.mark.parametrize("targets", [np.array([1.0, np.nan]), np.array([np.inf, 0.0])])
def test_targets_must_be_finite(targets: np.ndarray) -> None:
    with pytest.raises(ValueError, match="y contains"):
        LOSS.value(np.zeros(2), np.eye(2), targets)


def test_targets_must_be_one_dimensional() -> None:
    with pytest.raises(ValueError, match="y must have 1 dimension"):
        LOSS.check_labels(np.zeros((2, 1)))
