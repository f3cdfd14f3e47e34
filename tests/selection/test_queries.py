"""The accuracy checks and their replace-one sensitivities (brute force on small data)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privml.linear._solvers import minimise_objective
from privml.losses import HuberHingeLoss, LogisticLoss, MultinomialLogisticLoss, RegularisedObjective
from privml.selection._queries import (
    accuracy_query,
    error_rate_sensitivity,
    excess_risk_query,
    excess_risk_sensitivity,
    loss_at_zero,
    minimiser_radius,
    project_to_ball,
)

from ._data import blobs


def test_error_rate_sensitivity() -> None:
    assert error_rate_sensitivity(200) == 0.005
    with pytest.raises(ValueError):
        error_rate_sensitivity(0)


def test_loss_at_zero() -> None:
    assert loss_at_zero(LogisticLoss()) == pytest.approx(math.log(2))
    assert loss_at_zero(MultinomialLogisticLoss(3)) == pytest.approx(math.log(3))
    assert loss_at_zero(HuberHingeLoss(0.5)) == pytest.approx(1.0)


@pytest.mark.parametrize("l2", [1e-3, 10.0])
def test_every_minimiser_lies_in_the_radius(l2: float) -> None:
    loss = LogisticLoss()
    radius = minimiser_radius(loss, l2)
    assert radius == min(1 / l2, math.sqrt(2 * math.log(2) / l2))
    rng = np.random.default_rng(0)
    for seed in range(5):
        X, y = blobs(n=50, d=3, seed=seed, separation=2.0)
        y = 2 * y - 1
        if seed % 2:  # adversarial-ish labels too
            y = rng.choice([-1, 1], size=y.size)
        w = minimise_objective(RegularisedObjective(loss, X, y, l2)).weights
        assert np.linalg.norm(w) <= radius


def test_projection() -> None:
    w = np.array([3.0, 4.0])
    assert np.allclose(project_to_ball(w, 1.0), [0.6, 0.8])
    inside = project_to_ball(w, 10.0)
    assert np.array_equal(inside, w) and inside is not w
    assert np.linalg.norm(project_to_ball(np.ones((2, 2)), 1.0)) == pytest.approx(1.0)


def test_accuracy_query_binary_and_multiclass() -> None:
    X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    binary = accuracy_query(X, np.array([1, 1, -1, 1]))
    assert binary(np.array([1.0, 1.0])) == 0.75
    multi = accuracy_query(X, np.array([0, 1, 2, 0]))
    W = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, -0.5]])
    assert multi(W) == 0.75
    with pytest.raises(ValueError):
        accuracy_query(X, np.array([1, 1]))


def _excess(X, y, w, l2, radius):
    loss = LogisticLoss()
    objective = RegularisedObjective(loss, X, y, l2)
    optimum = minimise_objective(objective).value
    return excess_risk_query(objective, optimum, radius)(w)


def test_excess_risk_is_zero_at_the_minimiser_and_negative_elsewhere() -> None:
    X, y = blobs(n=100, d=3)
    y = 2 * y - 1
    objective = RegularisedObjective(LogisticLoss(), X, y, 0.1)
    result = minimise_objective(objective)
    query = excess_risk_query(objective, result.value, minimiser_radius(LogisticLoss(), 0.1))
    assert abs(query(result.weights)) < 1e-12
    assert query(result.weights + 0.5) < 0


def test_excess_risk_sensitivity_holds_on_worst_case_replacements() -> None:
    # Brute force: replace one record by extreme ones and evaluate at extreme models.
    l2, n = 0.05, 20
    radius = minimiser_radius(LogisticLoss(), l2)
    bound = excess_risk_sensitivity(1.0, n, radius)
    X, y = blobs(n=n, d=2, seed=3)
    y = 2 * y - 1
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(30):
        u = rng.normal(size=2)
        u /= np.linalg.norm(u)
        w = radius * u
        for x_new, y_new in [(u, -1), (-u, 1), (u, 1)]:
            X2, y2 = X.copy(), y.copy()
            X2[0], y2[0] = x_new, y_new
            worst = max(worst, abs(_excess(X, y, w, l2, radius) - _excess(X2, y2, w, l2, radius)))
    assert worst <= bound
    assert worst > 0.15 * bound  # the bound is of the right order, not vacuous


def test_excess_risk_sensitivity_covers_the_solvers_optimum_slack() -> None:
    # The query subtracts J(w_hat), within tol^2 / (2 lambda) of min J: that slack is in the sensitivity.
    base = excess_risk_sensitivity(1.0, 100, 2.0)
    assert excess_risk_sensitivity(1.0, 100, 2.0, grad_tol=1e-3, l2=0.5) == pytest.approx(base + 1e-6)
    with pytest.raises(ValueError, match="needs l2"):
        excess_risk_sensitivity(1.0, 100, 2.0, grad_tol=1e-3)
