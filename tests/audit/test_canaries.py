"""Canaries and the neighbouring datasets audits train on."""

from __future__ import annotations

import numpy as np
import pytest

from privml.audit._canaries import clipbkd_canary, make_canary, neighbouring_pair, random_canary, record_canary
from privml.neighbouring import Neighbouring


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)) * [1.0, 0.5, 0.0, 0.2]  # feature 2 is never used
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, (X[:, 0] > 0).astype(int)


def test_clipbkd_points_along_the_direction_no_record_uses(data):
    X, _ = data
    canary = clipbkd_canary(X, label=1, classes=[0, 1])
    assert np.linalg.norm(canary.x) == pytest.approx(1.0)
    np.testing.assert_allclose(np.abs(canary.x), [0, 0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(X @ canary.x, 0.0, atol=1e-12)
    # The mirror: same features, the other label.
    np.testing.assert_array_equal(canary.replaced_x, canary.x)
    assert (canary.y, canary.replaced_y) == (1, 0)


def test_clipbkd_takes_the_smallest_singular_direction(data):
    X, _ = data
    X = X.copy()
    X[:, 2] = 0.01  # now every direction is used; feature 2 least
    canary = clipbkd_canary(X, label=0, classes=[0, 1])
    variances = [np.mean((X @ v) ** 2) for v in np.eye(4)]
    assert np.mean((X @ canary.x) ** 2) <= min(variances) + 1e-12


def test_mirror_label_wraps_round_the_class_set():
    canary = random_canary(3, label=2, classes=[0, 1, 2], random_state=0)
    assert canary.replaced_y == 0
    assert np.linalg.norm(canary.x) == pytest.approx(1.0)


def test_record_canary_is_a_pool_record_with_its_label():
    pool = np.array([[3.0, 4.0], [0.1, 0.2]])
    canary = record_canary(pool, np.array([1, 0]), classes=[0, 1], random_state=1)
    i = 0 if canary.y == 1 else 1
    np.testing.assert_allclose(canary.x, pool[i] / max(1.0, np.linalg.norm(pool[i])))


def test_replace_one_pair_differs_in_the_last_record_only(data):
    X, y = data
    canary = clipbkd_canary(X, label=1, classes=[0, 1])
    pair = neighbouring_pair(X, y, canary, "replace-one")
    assert pair.neighbouring is Neighbouring.REPLACE_ONE
    assert pair.X_out.shape == pair.X_in.shape == (41, 4)
    np.testing.assert_array_equal(pair.X_out[:40], X)
    np.testing.assert_array_equal(pair.X_in[-1], canary.x)
    assert (pair.y_out[-1], pair.y_in[-1]) == (0, 1)


def test_add_remove_pair_pads_with_a_zero_record(data):
    X, y = data
    canary = clipbkd_canary(X, label=1, classes=[0, 1])
    pair = neighbouring_pair(X, y, canary, Neighbouring.ADD_REMOVE_ONE)
    np.testing.assert_array_equal(pair.X_out[-1], 0.0)  # zero gradient: D' adds exactly one gradient
    np.testing.assert_array_equal(pair.X_in[-1], canary.x)


def test_bad_canaries_are_refused(data):
    X, y = data
    with pytest.raises(ValueError, match="not in the public class set"):
        clipbkd_canary(X, label=7, classes=[0, 1])
    with pytest.raises(ValueError, match="canary must be one of"):
        make_canary("loudest", X, classes=[0, 1])
    with pytest.raises(ValueError, match="pool"):
        make_canary("record", X, classes=[0, 1])
    canary = random_canary(3, label=1, classes=[0, 1], random_state=0)
    with pytest.raises(ValueError, match="features"):
        neighbouring_pair(X, y, canary, "replace-one")
