"""RegularisedObjective: the formula, its derivatives, and minimisers checked independently."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression

from privml.losses import HuberHingeLoss, LogisticLoss, MultinomialLogisticLoss, RegularisedObjective, SquaredLoss
from tests.losses._numerics import CASES, Case, central_gradient, draw, unit_ball_rows


def _minimise(objective: RegularisedObjective) -> np.ndarray:
    result = minimize(
        objective.value_and_grad,
        np.zeros(objective.n_parameters),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-13, "ftol": 0.0, "maxiter": 10_000},
    )
    assert np.linalg.norm(objective.gradient(result.x)) < 1e-9
    return result.x


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_value_is_the_documented_formula(case: Case) -> None:
    rng = np.random.default_rng(0)
    w, X, y = draw(case, rng, n=9, d=3)
    b = rng.normal(size=w.size)
    objective = RegularisedObjective(case.loss, X, y, 0.3, linear=b, extra_l2=0.05)
    flat = w.reshape(-1)
    expected = 0.15 * flat @ flat + case.loss.value(w, X, y) + b @ flat / 9 + 0.025 * flat @ flat
    assert objective.value(flat) == pytest.approx(expected, rel=1e-14)
    assert objective.value_and_grad(flat)[0] == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_derivatives_match_finite_differences(case: Case) -> None:
    rng = np.random.default_rng(1)
    w, X, y = draw(case, rng, n=9, d=3, kink_margin=1e-3)
    objective = RegularisedObjective(case.loss, X, y, 0.2, linear=rng.normal(size=w.size), extra_l2=0.1)
    flat = w.reshape(-1)
    value, grad = objective.value_and_grad(flat)
    np.testing.assert_allclose(grad, central_gradient(objective.value, flat), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grad, objective.gradient(flat), rtol=1e-15)
    v = rng.normal(size=flat.size)
    step = 1e-5
    numeric_hvp = (objective.gradient(flat + step * v) - objective.gradient(flat - step * v)) / (2 * step)
    np.testing.assert_allclose(objective.hessian_vector_product(flat, v), numeric_hvp, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(objective.hessian(flat) @ v, objective.hessian_vector_product(flat, v), rtol=1e-10)


def test_binary_logistic_minimiser_matches_scikit_learn() -> None:
    rng = np.random.default_rng(2)
    n, l2 = 200, 0.01
    X = unit_ball_rows(rng, n, 4)
    y = np.where(X @ np.array([2.0, -1.0, 0.5, 0.0]) + 0.3 * rng.normal(size=n) > 0, 1, -1)
    w = _minimise(RegularisedObjective(LogisticLoss(), X, y, l2))
    # scikit-learn minimises ||w||^2 / 2 + C sum_i loss_i, i.e. ours times n l2 with C = 1 / (n l2).
    reference = LogisticRegression(C=1 / (n * l2), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(w, reference.coef_[0], rtol=1e-5, atol=1e-6)


def test_multinomial_minimiser_matches_scikit_learn() -> None:
    rng = np.random.default_rng(3)
    n, k, l2 = 300, 3, 0.01
    X = unit_ball_rows(rng, n, 4)
    y = np.argmax(X @ rng.normal(size=(4, k)) + 0.3 * rng.normal(size=(n, k)), axis=1)
    W = _minimise(RegularisedObjective(MultinomialLogisticLoss(k), X, y, l2)).reshape(4, k)
    reference = LogisticRegression(C=1 / (n * l2), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(W, reference.coef_.T, rtol=1e-5, atol=1e-6)


def test_squared_minimiser_is_ridge_closed_form() -> None:
    rng = np.random.default_rng(4)
    n, l2 = 100, 0.05
    X = unit_ball_rows(rng, n, 5)
    y = X @ rng.normal(size=5) + 0.1 * rng.normal(size=n)
    b = rng.normal(size=5)
    w = _minimise(RegularisedObjective(SquaredLoss(), X, y, l2, linear=b, extra_l2=0.02))
    # Stationarity: (X^T X / n + (l2 + Delta) I) w = X^T y / n - b / n.
    closed_form = np.linalg.solve(X.T @ X / n + 0.07 * np.eye(5), X.T @ y / n - b / n)
    np.testing.assert_allclose(w, closed_form, rtol=1e-8, atol=1e-10)


def test_newton_cg_with_hessian_vector_products_converges() -> None:
    rng = np.random.default_rng(5)
    X = unit_ball_rows(rng, 80, 3)
    y = rng.choice([-1, 1], size=80)
    objective = RegularisedObjective(HuberHingeLoss(0.5), X, y, 0.1, linear=rng.normal(size=3))
    result = minimize(
        objective.value,
        np.zeros(3),
        jac=objective.gradient,
        hessp=objective.hessian_vector_product,
        method="Newton-CG",
        options={"xtol": 1e-14},
    )
    assert np.linalg.norm(objective.gradient(result.x)) < 1e-8


def test_constants() -> None:
    objective = RegularisedObjective(MultinomialLogisticLoss(3), np.eye(2), [0, 2], 0.1, extra_l2=0.4)
    assert objective.strong_convexity == pytest.approx(0.5)
    assert objective.smoothness == pytest.approx(1.0)
    assert objective.parameter_shape == (2, 3) and objective.n_parameters == 6
    assert objective.value(np.zeros((2, 3))) == pytest.approx(math.log(3))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"l2": -0.1}, ValueError, "l2 must be >= 0"),
        ({"l2": math.nan}, ValueError, "l2 must be a number"),
        ({"l2": 0.1, "extra_l2": -1.0}, ValueError, "extra_l2 must be >= 0"),
        ({"l2": 0.1, "linear": np.ones(3)}, ValueError, r"linear must have 2 entries"),
        ({"l2": 0.1, "linear": np.array([1.0, np.inf])}, ValueError, "linear contains"),
    ],
)
def test_invalid_arguments_are_refused(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        RegularisedObjective(LogisticLoss(), np.eye(2), [1, -1], **kwargs)


def test_wrong_loss_type_and_parameter_size_are_refused() -> None:
    with pytest.raises(TypeError, match="privml.losses.Loss"):
        RegularisedObjective(object(), np.eye(2), [1, -1], 0.1)  # type: ignore[arg-type]
    objective = RegularisedObjective(LogisticLoss(), np.eye(2), [1, -1], 0.1)
    with pytest.raises(ValueError, match=r"w must have 2 entries"):
        objective.value(np.zeros(3))
    with pytest.raises(ValueError, match="0, 1"):
        RegularisedObjective(LogisticLoss(), np.eye(2), [1, 0], 0.1)
