"""Multinomial logistic loss: closed forms, flattening, the constants of vdMH20 App. D."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from privml.losses import LogisticLoss, MultinomialLogisticLoss

UNIT_X = np.array([[0.6, 0.8]])


def test_matches_the_textbook_formula() -> None:
    rng = np.random.default_rng(0)
    loss = MultinomialLogisticLoss(3)
    X = rng.uniform(-0.5, 0.5, size=(25, 4))
    y = rng.integers(0, 3, size=25)
    W = rng.normal(size=(4, 3))
    S = X @ W
    P = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(loss.per_example_values(W, X, y), -np.log(P[np.arange(25), y]), rtol=1e-13)
    expected = np.einsum("ij,ic->ijc", X, P - np.eye(3)[y])  # x_i (p_i - e_y)^T
    np.testing.assert_allclose(loss.per_example_gradients(W, X, y), expected.reshape(25, 12), rtol=1e-12)


def test_two_classes_reduce_to_binary_logistic() -> None:
    # With W = [-w/2, w/2] the score difference is w.x, so class 1 vs 0 is logistic with y' = 2y - 1.
    rng = np.random.default_rng(1)
    X = rng.uniform(-0.6, 0.6, size=(20, 3))
    y = rng.integers(0, 2, size=20)
    w = rng.normal(size=3)
    W = np.stack([-w / 2, w / 2], axis=1)
    multinomial = MultinomialLogisticLoss(2).per_example_values(W, X, y)
    binary = LogisticLoss().per_example_values(w, X, 2 * y - 1)
    np.testing.assert_allclose(multinomial, binary, rtol=1e-13)


def test_flat_parameters_are_row_major() -> None:
    rng = np.random.default_rng(2)
    loss = MultinomialLogisticLoss(3)
    X = rng.uniform(-0.5, 0.5, size=(6, 4))
    y = rng.integers(0, 3, size=6)
    W = rng.normal(size=(4, 3))
    assert loss.parameter_shape(4) == (4, 3)
    assert loss.value(W.reshape(-1), X, y) == loss.value(W, X, y)
    np.testing.assert_array_equal(loss.gradient(W.reshape(-1), X, y), loss.gradient(W, X, y).reshape(-1))
    # Flat coordinate j * k + c is W[j, c]: feature 2, class 1 is index 7.
    column = loss.per_example_coordinate_gradients(W, X, y, 2 * 3 + 1)
    P = np.exp(X @ W) / np.exp(X @ W).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(column, X[:, 2] * (P[:, 1] - (y == 1)), rtol=1e-12)


def test_smoothness_is_attained_with_two_classes_at_one_half() -> None:
    loss = MultinomialLogisticLoss(2)
    hessian = loss.hessian(np.zeros((2, 2)), UNIT_X, np.array([0]))
    assert np.linalg.norm(hessian, 2) == pytest.approx(0.5, rel=1e-14)


def test_smoothness_is_approached_for_more_classes() -> None:
    # Two classes share the probability, the others are left far behind.
    loss = MultinomialLogisticLoss(5)
    W = np.outer(UNIT_X[0], [0.0, 0.0, -40.0, -40.0, -40.0])
    norm = np.linalg.norm(loss.hessian(W, UNIT_X, np.array([3])), 2)
    assert 0.5 - 1e-12 < norm <= 0.5 * (1 + 1e-14)  # rounding in the SVD only


def test_lipschitz_is_approached_when_a_wrong_class_takes_all_the_mass() -> None:
    loss = MultinomialLogisticLoss(4)
    W = np.outer(UNIT_X[0], [-500.0, 500.0, 0.0, 0.0])  # true class 0, class 1 certain
    norm = np.linalg.norm(loss.per_example_gradients(W, UNIT_X, np.array([0]))[0])
    assert norm == pytest.approx(math.sqrt(2), rel=1e-14)
    assert norm <= loss.lipschitz * (1 + 1e-15)


@pytest.mark.parametrize("k", [2, 3, 7])
def test_hessian_rank_is_k_minus_one(k: int) -> None:
    loss = MultinomialLogisticLoss(k)
    assert loss.hessian_rank == k - 1
    rng = np.random.default_rng(k)
    x = rng.normal(size=(1, 5))
    x /= np.linalg.norm(x)
    hessian = loss.hessian(rng.normal(size=(5, k)), x, np.array([0]))
    assert np.linalg.matrix_rank(hessian, tol=1e-12) == k - 1
    # The null direction is "add the same vector to every class column".
    shift = np.outer(rng.normal(size=5), np.ones(k)).reshape(-1)
    np.testing.assert_allclose(hessian @ shift, 0.0, atol=1e-14)


def test_coordinate_smoothness_is_tight_per_entry() -> None:
    loss = MultinomialLogisticLoss(2)
    bounds = np.array([0.5, 2.0])
    np.testing.assert_array_equal(loss.coordinate_smoothness(bounds), [0.0625, 0.0625, 1.0, 1.0])
    np.testing.assert_array_equal(loss.coordinate_lipschitz(bounds), [0.5, 0.5, 2.0, 2.0])
    # p = (1/2, 1/2) and |x_j| = b_j attain b_j^2 / 4 on the diagonal.
    X = np.array([[0.5, -2.0]])
    np.testing.assert_allclose(np.diag(loss.hessian(np.zeros((2, 2)), X, np.array([1]))), [0.0625, 0.0625, 1.0, 1.0])


@pytest.mark.parametrize("scale", [1e3, 1e6, 1e300])
def test_huge_scores_are_stable(scale: float) -> None:
    loss = MultinomialLogisticLoss(3)
    W = np.outer(UNIT_X[0], [scale, -scale, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        right = loss.value(W, UNIT_X, np.array([0]))
        wrong = loss.value(W, UNIT_X, np.array([1]))
        grad = loss.gradient(W, UNIT_X, np.array([1]))
        hvp = loss.hessian_vector_product(W, UNIT_X, np.array([1]), np.ones((2, 3)))
    assert right == 0.0
    assert wrong == pytest.approx(2 * scale * 1.0, rel=1e-12)  # logsumexp - s_1 = s_0 - s_1, ||x|| = 1
    assert np.all(np.isfinite(grad)) and np.all(np.isfinite(hvp))


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (np.array([0, 3]), r"0\.\.2 \(n_classes=3\), got values from 0 to 3"),
        (np.array([-1, 0]), r"0\.\.2"),
        (np.array([0.0, 1.5]), "non-integral"),
        (np.array([0.0, np.nan]), "non-integral"),
        (np.array([True, False]), "dtype bool"),
        (np.array(["0", "1"]), "dtype"),
        (np.array([[0, 1]]), "1-D"),
    ],
)
def test_bad_labels_are_refused(labels: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MultinomialLogisticLoss(3).check_labels(labels)


def test_integral_float_labels_are_accepted() -> None:
    labels = MultinomialLogisticLoss(3).check_labels(np.array([0.0, 2.0, 1.0]))
    np.testing.assert_array_equal(labels, [0, 2, 1])
    assert labels.dtype.kind == "i"


@pytest.mark.parametrize("k", [1, 0, -2])
def test_needs_at_least_two_classes(k: int) -> None:
    with pytest.raises(ValueError, match="n_classes must be >= 2"):
        MultinomialLogisticLoss(k)


def test_parameter_shape_errors_name_both_accepted_shapes() -> None:
    loss = MultinomialLogisticLoss(3)
    with pytest.raises(ValueError, match=r"w must have shape \(2, 3\) \(or \(6,\) flattened row-major\)"):
        loss.value(np.zeros((3, 2)), UNIT_X, np.array([0]))
