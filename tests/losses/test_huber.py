"""Huber hinge loss (CMS11 Sec. 3.4.2): the three pieces, the knots, and the constants."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from privml.losses import HuberHingeLoss

UNIT_X = np.array([[0.6, 0.8]])


@pytest.mark.parametrize("h", [0.5, 0.1, 2.0])
def test_pieces_follow_cms11(h: float) -> None:
    loss = HuberHingeLoss(h)
    z = np.linspace(-5, 5, 2001)
    expected = np.where(z > 1 + h, 0.0, np.where(np.abs(1 - z) <= h, (1 + h - z) ** 2 / (4 * h), 1 - z))
    np.testing.assert_allclose(loss.margin_value(z), expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("h", [0.5, 0.1, 2.0])
def test_value_and_derivative_are_continuous_at_the_knots(h: float) -> None:
    loss = HuberHingeLoss(h)
    left_knot, right_knot = 1 - h, 1 + h
    assert loss.margin_value(right_knot) == 0.0
    assert loss.margin_value(left_knot) == pytest.approx(h, rel=1e-15)  # the line 1 - z meets the parabola
    assert loss.margin_derivative(left_knot) == -1.0
    assert loss.margin_derivative(right_knot) == 0.0
    for knot in (left_knot, right_knot):
        for delta in (1e-4, 1e-8):
            jump = loss.margin_value(knot + delta) - loss.margin_value(knot - delta)
            assert abs(jump) <= 1.0 * 2 * delta * (1 + 1e-6)  # |phi'| <= 1
            slope_jump = loss.margin_derivative(knot + delta) - loss.margin_derivative(knot - delta)
            assert abs(slope_jump) <= 2 * delta / (2 * h) * (1 + 1e-6)  # |phi''| <= 1/(2h)
        # Differentiable at the knot: the central difference converges to phi'(knot),
        # with error at most (step/2) * max|phi''| from the one-sided curvatures.
        for step in (1e-3, 1e-6):
            numeric = (loss.margin_value(knot + step) - loss.margin_value(knot - step)) / (2 * step)
            assert numeric == pytest.approx(float(loss.margin_derivative(knot)), abs=step / (4 * h) + 1e-9)


def test_second_derivative_convention_at_the_knots() -> None:
    loss = HuberHingeLoss(0.25)
    # The quadratic branch is closed, so both knots carry the interior value 1/(2h).
    np.testing.assert_array_equal(loss.margin_second_derivative([0.75, 1.0, 1.25]), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(loss.margin_second_derivative([0.7499, 1.2501]), [0.0, 0.0])


@pytest.mark.parametrize("h", [0.5, 0.1])
def test_smoothness_is_attained_on_the_quadratic_piece(h: float) -> None:
    loss = HuberHingeLoss(h)
    assert loss.smoothness == 1 / (2 * h)
    w = 1.0 * UNIT_X[0]  # margin exactly 1, the centre of the quadratic piece
    hessian = loss.hessian(w, UNIT_X, np.array([1]))
    assert np.linalg.norm(hessian, 2) == pytest.approx(1 / (2 * h), rel=1e-14)


def test_lipschitz_is_attained_on_the_linear_piece() -> None:
    loss = HuberHingeLoss(0.5)
    w = -3.0 * UNIT_X[0]
    norm = np.linalg.norm(loss.per_example_gradients(w, UNIT_X, np.array([1]))[0])
    assert norm == pytest.approx(1.0, rel=1e-15)
    assert norm <= loss.lipschitz


def test_huge_margins_do_not_overflow() -> None:
    loss = HuberHingeLoss(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = loss.margin_value([1e300, -1e300, 1e3, -1e3])
        derivatives = loss.margin_derivative([1e300, -1e300])
    np.testing.assert_array_equal(values, [0.0, 1e300, 0.0, 1001.0])
    np.testing.assert_array_equal(derivatives, [0.0, -1.0])


@pytest.mark.parametrize("h", [0.0, -1.0, math.nan, math.inf])
def test_width_must_be_positive_and_finite(h: float) -> None:
    with pytest.raises(ValueError, match="h must be"):
        HuberHingeLoss(h)


def test_width_must_be_a_number() -> None:
    with pytest.raises(TypeError, match="h must be a real number"):
        HuberHingeLoss("0.5")  # type: ignore[arg-type]


def test_zero_one_labels_are_refused() -> None:
    with pytest.raises(ValueError, match="2 \\* y - 1"):
        HuberHingeLoss().gradient(np.zeros(2), np.vstack([UNIT_X, UNIT_X]), np.array([1, 0]))
