"""Logistic loss: closed forms, the tight constants, stability and label checks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from privml.losses import LogisticLoss

LOSS = LogisticLoss()
UNIT_X = np.array([[0.6, 0.8]])


def test_matches_the_textbook_formula_at_moderate_margins() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(-0.5, 0.5, size=(30, 3))
    y = rng.choice([-1, 1], size=30)
    w = rng.normal(size=3)
    z = y * (X @ w)
    np.testing.assert_allclose(LOSS.per_example_values(w, X, y), np.log(1 + np.exp(-z)), rtol=1e-13)
    sigma = 1 / (1 + np.exp(z))
    np.testing.assert_allclose(LOSS.per_example_gradients(w, X, y), (-sigma * y)[:, None] * X, rtol=1e-12)


def test_smoothness_is_attained_exactly_at_margin_zero() -> None:
    # phi''(0) = 1/2 * 1/2, and the Hessian phi'' x x^T has norm phi'' ||x||^2 = 1/4.
    assert LOSS.margin_second_derivative(0.0) == 0.25
    hessian = LOSS.hessian(np.zeros(2), UNIT_X, np.array([1]))
    assert np.linalg.norm(hessian, 2) == pytest.approx(0.25, rel=1e-15)
    z = np.linspace(-30, 30, 100_001)
    assert LOSS.margin_second_derivative(z).max() <= 0.25


def test_lipschitz_is_approached_by_a_confidently_wrong_example() -> None:
    w = -1e3 * UNIT_X[0]  # margin -1000 for y = +1
    norm = np.linalg.norm(LOSS.per_example_gradients(w, UNIT_X, np.array([1]))[0])
    assert norm == pytest.approx(1.0, rel=1e-14)
    assert norm <= LOSS.lipschitz


@pytest.mark.parametrize("margin", [1e3, -1e3, 1e6, -1e6, 1e300, -1e300])
def test_no_overflow_or_warning_for_huge_margins(margin: float) -> None:
    w = margin * UNIT_X[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = LOSS.value(w, UNIT_X, np.array([1]))
        grad = LOSS.gradient(w, UNIT_X, np.array([1]))
        hvp = LOSS.hessian_vector_product(w, UNIT_X, np.array([1]), np.ones(2))
    assert np.isfinite(value) and np.all(np.isfinite(grad)) and np.all(np.isfinite(hvp))
    if margin > 0:
        assert value == 0.0  # log(1 + e^-z) < 1e-400 underflows to exactly 0
        np.testing.assert_array_equal(grad, 0.0)
    else:
        assert value == pytest.approx(-margin, rel=1e-15)  # log(1 + e^|z|) = |z| + log(1 + e^-|z|)
        np.testing.assert_allclose(grad, -UNIT_X[0], rtol=1e-15)


def test_labels_in_zero_one_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"\{0, 1\}.*2 \* y - 1"):
        LOSS.value(np.zeros(2), np.vstack([UNIT_X, UNIT_X]), np.array([0, 1]))


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (np.array([1, 2]), r"-1 or \+1, got the values \{1, 2\}"),
        (np.array([1.0, 0.5]), r"-1 or \+1"),
        (np.array([1.0, np.nan]), "NaN"),
        (np.array([True, False]), "booleans"),
        (np.array(["a", "b"]), "numeric"),
        (np.array([[1, -1]]), "1-D"),
    ],
)
def test_bad_labels_are_refused(labels: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LOSS.check_labels(labels)


def test_integer_and_float_plus_minus_one_labels_are_accepted() -> None:
    np.testing.assert_array_equal(LOSS.check_labels([1, -1, 1]), [1.0, -1.0, 1.0])
    assert LOSS.check_labels(np.array([-1.0, 1.0])).dtype == np.float64
