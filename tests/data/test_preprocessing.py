from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privml.data._preprocessing import (
    DEFAULT_BIAS,
    add_bias_feature,
    flatten_images,
    one_hot,
    project_to_unit_ball,
    scale_by_bounds,
    scale_by_norm_bound,
    scale_pixels,
    to_signed,
)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
matrices = st.tuples(st.integers(1, 8), st.integers(1, 40)).flatmap(lambda s: arrays(np.float64, s, elements=finite))


class TestProjectToUnitBall:
    @settings(max_examples=200, deadline=None)
    @given(matrices)
    def test_every_row_ends_inside_the_ball_however_the_norm_is_summed(self, X):
        out = project_to_unit_ball(X)
        assert np.all(np.linalg.norm(out, axis=1) <= 1.0)
        assert np.all(np.sqrt(np.sum(out * out, axis=1)) <= 1.0)
        assert np.all([math.sqrt(math.fsum(v * v for v in row)) <= 1.0 for row in out])

    def test_rows_whose_squared_norm_overflows_keep_their_direction(self):
        X = np.array([[3e200, -4e200], [1e308, 1e308], [0.3, 0.4]])
        out = project_to_unit_ball(X)
        np.testing.assert_allclose(out[0], [0.6, -0.8], rtol=1e-9)
        np.testing.assert_allclose(out[1], [2**-0.5, 2**-0.5], rtol=1e-9)
        np.testing.assert_array_equal(out[2], X[2])
        np.testing.assert_array_equal(X[0], [3e200, -4e200])  # input untouched

    @settings(max_examples=200, deadline=None)
    @given(matrices)
    def test_is_a_per_record_map_that_keeps_direction(self, X):
        out = project_to_unit_ball(X)
        # Per record: projecting rows one at a time gives the same result.
        for i in range(X.shape[0]):
            np.testing.assert_array_equal(project_to_unit_ball(X[i : i + 1])[0], out[i])
        # Direction kept: out is a non-negative multiple of x, at most x itself.
        norms = np.linalg.norm(X, axis=1)
        for x, y, n in zip(X, out, norms, strict=True):
            if n > 0:
                scale = np.linalg.norm(y) / n
                assert scale <= 1.0 + 1e-12
                np.testing.assert_allclose(y, scale * x, rtol=1e-12, atol=1e-300)

    @settings(max_examples=100, deadline=None)
    @given(matrices)
    def test_is_idempotent(self, X):
        once = project_to_unit_ball(X)
        np.testing.assert_array_equal(project_to_unit_ball(once), once)

    def test_short_rows_are_unchanged_long_rows_reach_the_sphere(self):
        X = np.array([[0.3, 0.4], [3.0, 4.0], [0.0, 0.0]])
        out = project_to_unit_ball(X)
        np.testing.assert_array_equal(out[0], X[0])
        np.testing.assert_array_equal(out[2], X[2])
        np.testing.assert_allclose(out[1], [0.6, 0.8], rtol=1e-11)
        assert np.linalg.norm(out[1]) <= 1.0

    def test_radius(self):
        out = project_to_unit_ball([[30.0, 40.0]], radius=2.0)
        np.testing.assert_allclose(out, [[1.2, 1.6]], rtol=1e-11)

    def test_rejects_nan_and_bad_shapes(self):
        with pytest.raises(ValueError, match="NaN or infinite"):
            project_to_unit_ball([[np.nan, 1.0]])
        with pytest.raises(ValueError, match="2 dimension"):
            project_to_unit_ball([1.0, 2.0])
        with pytest.raises(ValueError, match="radius must be > 0"):
            project_to_unit_ball([[1.0]], radius=0.0)


class TestAddBiasFeature:
    @settings(max_examples=200, deadline=None)
    @given(matrices, st.floats(min_value=0.01, max_value=0.99))
    def test_rows_keep_norm_at_most_one_and_bias_is_exact(self, X, b):
        out = add_bias_feature(project_to_unit_ball(X), value=b)
        assert out.shape == (X.shape[0], X.shape[1] + 1)
        assert np.all(out[:, -1] == b)
        assert np.all(np.linalg.norm(out, axis=1) <= 1.0)

    def test_features_are_scaled_by_sqrt_one_minus_b_squared(self):
        X = np.array([[0.6, 0.8], [0.0, 0.5]])
        out = add_bias_feature(X, value=0.6)
        np.testing.assert_allclose(out[:, :2], 0.8 * X, rtol=1e-11)
        np.testing.assert_allclose(np.linalg.norm(out[0]), 1.0, rtol=1e-11)

    def test_default_value(self):
        assert add_bias_feature([[0.0]])[0, -1] == DEFAULT_BIAS == 0.5

    def test_rejects_rows_outside_the_ball(self):
        with pytest.raises(ValueError, match="project onto the unit ball"):
            add_bias_feature([[3.0, 4.0]])

    @pytest.mark.parametrize("b", [0.0, 1.0, 1.5, -0.2])
    def test_rejects_bias_outside_open_interval(self, b):
        with pytest.raises(ValueError, match="value must be"):
            add_bias_feature([[0.1]], value=b)


class TestScaling:
    def test_scale_by_bounds_maps_public_range_and_clips(self):
        X = np.array([[17.0, 0.0], [90.0, 50.0], [100.0, -5.0]])
        out = scale_by_bounds(X, [17.0, 0.0], [90.0, 100.0])
        np.testing.assert_allclose(out, [[0.0, 0.0], [1.0, 0.5], [1.0, 0.0]])

    def test_scale_by_bounds_without_clip_names_the_offending_cell(self):
        with pytest.raises(ValueError, match=r"X\[1, 0\] = 5.0 lies outside its bounds \[0.0, 1.0\]"):
            scale_by_bounds([[0.5], [5.0]], 0.0, 1.0, clip=False)

    def test_scale_by_bounds_does_not_depend_on_the_data(self):
        # Adding an extreme record must not change how the others are scaled.
        X = np.array([[1.0, 2.0], [3.0, 4.0]])
        with_outlier = np.vstack([X, [1e9, -1e9]])
        np.testing.assert_array_equal(scale_by_bounds(X, 0, 10), scale_by_bounds(with_outlier, 0, 10)[:2])

    def test_scale_by_bounds_rejects_empty_interval(self):
        with pytest.raises(ValueError, match="lower < upper, feature 1"):
            scale_by_bounds([[0.0, 0.0]], [0.0, 1.0], [1.0, 1.0])

    def test_scale_pixels(self):
        out = scale_pixels(np.array([[0, 51, 255]], dtype=np.uint8))
        assert out.dtype == np.float64
        np.testing.assert_allclose(out, [[0.0, 0.2, 1.0]])
        np.testing.assert_allclose(scale_pixels([[16]], max_value=16), [[1.0]])

    def test_scale_by_norm_bound_keeps_relative_lengths(self):
        X = np.array([[1.0, 1.0], [0.5, 0.0]])
        out = scale_by_norm_bound(X, math.sqrt(2))
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), [1.0, 0.5 / math.sqrt(2)])

    def test_scale_by_norm_bound_rejects_a_bound_that_does_not_hold(self):
        with pytest.raises(ValueError, match="row 1 has norm 5 > bound 2"):
            scale_by_norm_bound([[1.0, 0.0], [3.0, 4.0]], 2.0)


class TestEncoding:
    def test_flatten_images(self):
        X = np.arange(2 * 3 * 4).reshape(2, 3, 4)
        out = flatten_images(X)
        assert out.shape == (2, 12)
        np.testing.assert_array_equal(out[1], np.arange(12, 24))

    def test_one_hot_with_missing(self):
        out = one_hot(np.array([0, 2, -1]), 3)
        np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 1], [0, 0, 0]])

    @pytest.mark.parametrize("codes", [[3], [-2], [0.5]])
    def test_one_hot_rejects_codes_outside_the_public_list(self, codes):
        with pytest.raises(ValueError, match="not an integer in"):
            one_hot(np.array(codes), 3)

    def test_to_signed(self):
        np.testing.assert_array_equal(to_signed(np.array([0, 1, 1, 0], dtype=np.uint8)), [-1, 1, 1, -1])
        assert to_signed([True, False]).tolist() == [1, -1]

    @pytest.mark.parametrize("y", [[0, 2], [-1, 1], ["a", "b"]])
    def test_to_signed_rejects_non_binary(self, y):
        with pytest.raises(ValueError, match=r"labels in \{0, 1\}"):
            to_signed(y)
