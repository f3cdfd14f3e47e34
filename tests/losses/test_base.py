"""Validation shared by every loss, and the abstract contract itself."""

from __future__ import annotations

import numpy as np
import pytest

from privml.losses import LogisticLoss, Loss, MarginLoss, MultinomialLogisticLoss, SquaredLoss, check_feature_bounds
from tests.losses._numerics import central_gradient

X2 = np.array([[0.6, 0.8], [0.0, -1.0]])
Y2 = np.array([1, -1])


def test_the_bases_are_abstract() -> None:
    with pytest.raises(TypeError):
        Loss()  # type: ignore[abstract]
    with pytest.raises(TypeError):
        MarginLoss()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ([], "empty"),
        ([1.0, 0.0], "must all be > 0"),
        ([1.0, -2.0], "must all be > 0"),
        ([1.0, np.nan], "NaN or infinite"),
        ([[1.0, 2.0]], "1 dimension"),
    ],
)
def test_feature_bounds_are_validated(bounds: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_feature_bounds(bounds)
    with pytest.raises(ValueError, match=message):
        LogisticLoss().coordinate_smoothness(bounds)


def test_data_shapes_are_validated() -> None:
    loss = LogisticLoss()
    with pytest.raises(ValueError, match="X has 2 rows but y has 3 labels"):
        loss.value(np.zeros(2), X2, [1, -1, 1])
    with pytest.raises(ValueError, match="X must have 2 dimension"):
        loss.value(np.zeros(2), X2[0], Y2[:1])
    with pytest.raises(ValueError, match="X contains 1 NaN"):
        loss.value(np.zeros(2), np.array([[np.nan, 0.0], [0.0, 1.0]]), Y2)
    with pytest.raises(ValueError, match="at least one row"):
        loss.value(np.zeros(2), np.zeros((0, 2)), [])
    with pytest.raises(ValueError, match=r"w must have shape \(2,\) for X with 2 features, got \(3,\)"):
        loss.gradient(np.zeros(3), X2, Y2)
    with pytest.raises(ValueError, match="w contains"):
        loss.gradient(np.array([np.inf, 0.0]), X2, Y2)
    with pytest.raises(ValueError, match=r"v must have shape \(2,\)"):
        loss.hessian_vector_product(np.zeros(2), X2, Y2, np.zeros(4))


def test_coordinate_index_and_scores_are_validated() -> None:
    loss = MultinomialLogisticLoss(3)
    W = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"j must be a flat parameter index in \[0, 6\), got 6"):
        loss.per_example_coordinate_gradients(W, X2, [0, 1], 6)
    with pytest.raises(ValueError, match="j must be >= 0"):
        loss.per_example_coordinate_gradients(W, X2, [0, 1], -1)
    with pytest.raises(TypeError, match="j must be an integer"):
        loss.per_example_coordinate_gradients(W, X2, [0, 1], 1.5)
    with pytest.raises(ValueError, match=r"scores must have shape \(2, 3\)"):
        loss.coordinate_gradients_from_scores(np.zeros(2), X2, [0, 1], 0)
    with pytest.raises(ValueError, match="X has 1 rows but y has 2 labels"):
        loss.coordinate_gradients_from_scores(np.zeros((2, 3)), X2[:1], [0, 1], 0)


def test_update_scores_refuses_what_it_cannot_update_in_place() -> None:
    loss = SquaredLoss()
    with pytest.raises(TypeError, match="float64 numpy array"):
        loss.update_scores([0.0, 0.0], X2, 0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="float64 numpy array"):
        loss.update_scores(np.zeros(2, dtype=np.float32), X2, 0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"scores must have shape \(2,\)"):
        loss.update_scores(np.zeros(3), X2, 0, 1.0)
    with pytest.raises(ValueError, match="step must be finite"):
        loss.update_scores(np.zeros(2), X2, 0, np.inf)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        loss.update_scores(np.zeros(2), X2, 2, 1.0)


def test_score_gradients_are_the_derivative_in_score_space() -> None:
    loss = MultinomialLogisticLoss(3)
    scores = np.array([[0.3, -1.0, 2.0], [0.0, 0.5, -0.5]])
    y = np.array([2, 0])

    def total(s: np.ndarray) -> float:
        return float(np.sum(loss._values(s, y)))

    np.testing.assert_allclose(loss.score_gradients(scores, y), central_gradient(total, scores), rtol=1e-7, atol=1e-9)


def test_the_finite_difference_check_catches_a_wrong_gradient() -> None:
    # A guard for the tests themselves: a gradient off by 1% must fail the comparison they use.
    class SlightlyWrong(LogisticLoss):
        def _score_gradients(self, scores: np.ndarray, y: np.ndarray) -> np.ndarray:
            return 1.01 * super()._score_gradients(scores, y)

    loss = SlightlyWrong()
    w = np.array([0.3, -0.7])
    numeric = central_gradient(lambda v: loss.value(v, X2, Y2), w)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(loss.gradient(w, X2, Y2), numeric, rtol=1e-6, atol=1e-7)


def test_repr_names_the_parameters() -> None:
    assert repr(LogisticLoss()) == "LogisticLoss()"
    assert repr(MultinomialLogisticLoss(4)) == "MultinomialLogisticLoss(n_classes=4)"
