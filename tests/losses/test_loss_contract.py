"""One contract every loss honours, checked for all of them at once.

Derivatives are checked against central finite differences; the constants are
checked as the inequalities they claim (Lipschitz, gradient-Lipschitz,
Hessian norm, rank, coordinate-wise smoothness) at random and extreme points.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.losses._numerics import CASES, Case, central_gradient, central_jacobian, draw

pytestmark = pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)

SEEDS = range(4)


def test_gradient_matches_finite_differences(case: Case) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        w, X, y = draw(case, rng)
        numeric = central_gradient(lambda v: case.loss.value(v, X, y), w)
        np.testing.assert_allclose(case.loss.gradient(w, X, y), numeric, rtol=1e-6, atol=1e-7)


def test_per_example_gradients_match_finite_differences(case: Case) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(100 + seed)
        w, X, y = draw(case, rng)
        numeric = central_jacobian(lambda v: case.loss.per_example_values(v, X, y), w)
        np.testing.assert_allclose(case.loss.per_example_gradients(w, X, y), numeric, rtol=1e-6, atol=1e-7)


def test_per_example_gradients_average_to_the_gradient(case: Case) -> None:
    rng = np.random.default_rng(1)
    w, X, y = draw(case, rng, n=20, d=5)
    per_example = case.loss.per_example_gradients(w, X, y)
    assert per_example.shape == (20, case.loss.n_parameters(5))
    mean_gradient = case.loss.gradient(w, X, y).reshape(-1)
    np.testing.assert_allclose(per_example.mean(axis=0), mean_gradient, rtol=1e-12, atol=1e-14)


def test_value_and_grad_agree_with_separate_calls(case: Case) -> None:
    rng = np.random.default_rng(2)
    w, X, y = draw(case, rng)
    value, grad = case.loss.value_and_grad(w, X, y)
    assert value == pytest.approx(case.loss.value(w, X, y), rel=1e-14)
    assert value == pytest.approx(np.mean(case.loss.per_example_values(w, X, y)), rel=1e-14)
    np.testing.assert_allclose(grad, case.loss.gradient(w, X, y), rtol=1e-14)


@pytest.mark.parametrize("scale", [0.0, 1.0, 10.0, 1e3, 1e6])
def test_per_example_gradient_norms_never_exceed_lipschitz(case: Case, scale: float) -> None:
    rng = np.random.default_rng(3)
    w, X, y = draw(case, rng, n=200, d=4, scale=scale)
    norms = np.linalg.norm(case.loss.per_example_gradients(w, X, y), axis=1)
    assert np.all(np.isfinite(norms))
    assert norms.max() <= case.loss.lipschitz * (1 + 1e-12)


def test_per_example_gradients_are_smoothness_lipschitz(case: Case) -> None:
    # ||grad_i(w1) - grad_i(w2)|| <= c ||w1 - w2|| is what "c-smooth" means; it
    # needs no second derivative, so it also holds across the Huber knots.
    rng = np.random.default_rng(4)
    for _ in range(20):
        w1, X, y = draw(case, rng, n=50, d=3, scale=3.0)
        w2 = w1 + rng.standard_normal(w1.shape) * rng.choice([1e-3, 0.1, 1.0, 10.0])
        moved = np.linalg.norm(
            case.loss.per_example_gradients(w1, X, y) - case.loss.per_example_gradients(w2, X, y), axis=1
        )
        assert moved.max() <= case.loss.smoothness * np.linalg.norm(w1 - w2) * (1 + 1e-9)


def test_per_example_hessian_norm_never_exceeds_smoothness(case: Case) -> None:
    rng = np.random.default_rng(5)
    for scale in (0.1, 1.0, 3.0, 1e3):
        w, X, y = draw(case, rng, n=30, d=3, scale=scale)
        for i in range(X.shape[0]):
            hessian = case.loss.hessian(w, X[i : i + 1], y[i : i + 1])
            assert np.linalg.norm(hessian, 2) <= case.loss.smoothness * (1 + 1e-12)


def test_hessian_matches_finite_differences_of_the_gradient(case: Case) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(200 + seed)
        w, X, y = draw(case, rng, kink_margin=1e-3)
        numeric = central_jacobian(lambda v: case.loss.gradient(v, X, y), w, step=1e-5)
        hessian = case.loss.hessian(w, X, y)
        np.testing.assert_allclose(hessian, numeric, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(hessian, hessian.T, atol=1e-15)


def test_hessian_vector_product_matches_finite_differences_and_hessian(case: Case) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(300 + seed)
        w, X, y = draw(case, rng, kink_margin=1e-3)
        v = rng.standard_normal(w.shape)
        step = 1e-5
        numeric = (case.loss.gradient(w + step * v, X, y) - case.loss.gradient(w - step * v, X, y)) / (2 * step)
        product = case.loss.hessian_vector_product(w, X, y, v)
        assert product.shape == v.shape
        np.testing.assert_allclose(product, numeric, rtol=1e-6, atol=1e-8)
        dense = case.loss.hessian(w, X, y) @ v.reshape(-1)
        np.testing.assert_allclose(product.reshape(-1), dense, rtol=1e-10, atol=1e-14)


def test_per_example_hessian_rank_is_bounded(case: Case) -> None:
    rng = np.random.default_rng(6)
    w, X, y = draw(case, rng, n=150, d=6, scale=1.0)
    ranks = [np.linalg.matrix_rank(case.loss.hessian(w, X[i : i + 1], y[i : i + 1]), tol=1e-10) for i in range(150)]
    assert max(ranks) <= case.loss.hessian_rank
    # The bound is attained wherever the curvature is non-zero: everywhere at
    # finite scores, except outside the quadratic piece of a Huber loss.
    assert case.loss.hessian_rank in ranks


def test_coordinate_gradients_are_the_columns_of_per_example_gradients(case: Case) -> None:
    rng = np.random.default_rng(7)
    w, X, y = draw(case, rng, n=11, d=4)
    full = case.loss.per_example_gradients(w, X, y)
    scores = case.loss.scores(w, X)
    for j in range(full.shape[1]):
        np.testing.assert_allclose(case.loss.per_example_coordinate_gradients(w, X, y, j), full[:, j], rtol=1e-14)
        np.testing.assert_allclose(case.loss.coordinate_gradients_from_scores(scores, X, y, j), full[:, j], rtol=1e-14)


def test_update_scores_tracks_coordinate_steps(case: Case) -> None:
    rng = np.random.default_rng(8)
    w, X, y = draw(case, rng, n=9, d=4)
    flat = w.reshape(-1).copy()
    scores = case.loss.scores(w, X)
    for _ in range(50):
        j = int(rng.integers(flat.size))
        step = float(rng.normal())
        flat[j] += step
        returned = case.loss.update_scores(scores, X, j, step)
        assert returned is scores
    np.testing.assert_allclose(scores, case.loss.scores(flat.reshape(w.shape), X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        case.loss.coordinate_gradients_from_scores(scores, X, y, 0),
        case.loss.per_example_gradients(flat.reshape(w.shape), X, y)[:, 0],
        rtol=1e-10,
        atol=1e-12,
    )


def test_coordinate_constants_hold_for_public_feature_bounds(case: Case) -> None:
    rng = np.random.default_rng(9)
    bounds = np.array([0.05, 0.3, 1.0, 2.5])
    M = case.loss.coordinate_smoothness(bounds)
    L = case.loss.coordinate_lipschitz(bounds)
    p = case.loss.n_parameters(bounds.size)
    assert M.shape == L.shape == (p,)
    for _ in range(10):
        # Only |x_ij| <= b_j is assumed, not ||x|| <= 1.
        X = rng.uniform(-1.0, 1.0, size=(40, bounds.size)) * bounds
        y = case.labels(rng, 40)
        w = 3.0 * rng.standard_normal(case.loss.parameter_shape(bounds.size))
        assert np.all(np.abs(case.loss.per_example_gradients(w, X, y)) <= L * (1 + 1e-12))
        assert np.all(np.diag(case.loss.hessian(w, X, y)) <= M * (1 + 1e-12))
        # One-coordinate descent lemma in derivative form, valid across kinks too.
        j = int(rng.integers(p))
        t = float(rng.normal(0.0, 3.0))
        moved = w.reshape(-1).copy()
        moved[j] += t
        before = case.loss.gradient(w, X, y).reshape(-1)[j]
        change = case.loss.gradient(moved.reshape(w.shape), X, y).reshape(-1)[j] - before
        assert abs(change) <= M[j] * abs(t) * (1 + 1e-9)


def test_gradient_keeps_the_shape_it_was_given(case: Case) -> None:
    rng = np.random.default_rng(10)
    w, X, y = draw(case, rng)
    flat = w.reshape(-1)
    np.testing.assert_array_equal(case.loss.gradient(flat, X, y), case.loss.gradient(w, X, y).reshape(-1))
    assert case.loss.gradient(w, X, y).shape == w.shape
    assert case.loss.hessian_vector_product(flat, X, y, flat).shape == flat.shape
    assert case.loss.value(flat, X, y) == case.loss.value(w, X, y)


def test_constants_are_positive_numbers(case: Case) -> None:
    assert case.loss.lipschitz > 0 and (math.isfinite(case.loss.lipschitz) or case.name == "squared")
    assert 0 < case.loss.smoothness < math.inf
    assert isinstance(case.loss.hessian_rank, int) and case.loss.hessian_rank >= 1
