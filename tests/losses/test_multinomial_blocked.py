"""The multinomial loss on large data goes block by block: the same values as the two-product form."""

from __future__ import annotations

import numpy as np

from privml.linear._solvers import minimise_objective
from privml.losses import MultinomialLogisticLoss, RegularisedObjective
from privml.losses import _multinomial as multinomial
from privml.losses._base import Loss


def large(n: int = 12_000, d: int = 100, k: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    assert X.nbytes >= multinomial.BLOCKED_MIN_BYTES  # the blocked path is the one tested
    return X, rng.integers(0, k, size=n), rng.normal(size=(d, k)), rng.normal(size=(d, k))


def test_blocked_value_gradient_and_hessian_products_equal_the_whole_array_form():
    X, y, W, V = large()
    loss = MultinomialLogisticLoss(4)
    value, grad = loss._value_and_grad(W, X, y)
    plain_value, plain_grad = Loss._value_and_grad(loss, W, X, y)
    assert abs(value - plain_value) <= 1e-13 * abs(plain_value)
    np.testing.assert_allclose(grad, plain_grad, rtol=0, atol=1e-14 * np.abs(plain_grad).max())
    product = loss._hessian_vector_product(W, X, y, V)
    plain = Loss._hessian_vector_product(loss, W, X, y, V)
    np.testing.assert_allclose(product, plain, rtol=0, atol=1e-14 * np.abs(plain).max())
    # Deterministic: the same bits every time (the study's bit-for-bit reuse relies on it).
    again = loss._value_and_grad(W, X, y)
    assert again[0] == value and np.array_equal(again[1], grad)


def test_a_solve_on_large_data_reaches_the_certified_tolerance():
    X, y, _, _ = large(n=11_000, d=96, k=3, seed=1)
    result = minimise_objective(RegularisedObjective(MultinomialLogisticLoss(3), X, y, 1e-3))
    assert result.converged and result.grad_norm <= 1e-10
    # The gradient the solver certified, recomputed by the whole-array form, is as small.
    flat = result.weights
    plain = Loss._value_and_grad(MultinomialLogisticLoss(3), flat, X, y)[1] + 1e-3 * flat
    assert np.linalg.norm(plain) <= 1e-9
