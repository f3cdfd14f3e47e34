"""The fast row step of DP-CD's softmax cache against the straightforward computation.

:class:`privml.linear._dpcd.cache._SoftmaxRows` computes the clipped mean block
gradient from unshifted exponentials, ``E - t e_y`` and row-wise BLAS sums, and
moves by a sparse rank-one update in place; here every gradient is checked
against the direct float64 formula (max-shifted softmax, per-record L2 norm,
``min(1, C / norm)``), on sparse, dense, empty and signed features, for chunk
sizes that split columns anywhere, through moves, with scores large enough to
overflow ``exp``, and without SciPy's in-place sparse kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

from privml.linear import _dpcd as dpcd
from privml.linear._dpcd import DPCDClassifier
from privml.linear._dpcd import cache as dpcd_cache


def _data(seed: int, n: int = 60, d: int = 6, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    X[rng.random(X.shape) < 0.6] = 0.0  # sparse features take the gathered path
    X[:, 1] = 0.4  # dense (a bias): every record
    X[:, 3] = 0.0  # empty
    X[:, 4] = np.abs(X[:, 4])  # non-negative, as pixels are: |x| is the column itself
    return X, rng.integers(0, k, size=n)


def _direct(X: np.ndarray, y: np.ndarray, W: np.ndarray, j: int, threshold: float) -> np.ndarray:
    """(1/n) sum_i clip(x_ij (softmax(x_i W) - e_{y_i}), threshold), written out."""
    scores = X @ W
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    G = X[:, j : j + 1] * p
    norms = np.linalg.norm(G, axis=1, keepdims=True)
    return (G * np.minimum(1.0, threshold / np.maximum(norms, 1e-300))).mean(axis=0)


def _check_steps(cache: dpcd_cache._SoftmaxRows, X: np.ndarray, y: np.ndarray, W: np.ndarray, moves) -> None:
    for j, change in moves:
        for threshold in (0.01, 0.1, 100.0):  # mostly clipped, some clipped, never clipped
            expected = _direct(X, y, W, j, threshold)
            np.testing.assert_allclose(cache.block_gradient(j, threshold), expected, rtol=1e-11, atol=1e-15)
        cache.block_move(j, change)
        W[j] += change
    np.testing.assert_allclose(cache._scores, X @ W, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 2, 7, None])
@pytest.mark.parametrize("seed", [0, 1])
def test_row_step_matches_the_direct_computation_through_moves(chunk, seed):
    X, y = _data(seed)
    rng = np.random.default_rng(10 + seed)
    W = rng.normal(size=(X.shape[1], 4))
    cache = dpcd_cache._SoftmaxRows(X, y, 4, chunk=chunk)
    cache.reset(W)
    moves = [(j, rng.normal(size=4)) for j in (0, 0, 1, 2, 3, 4, 5, 1, 2, 0)]
    _check_steps(cache, X, y, W, moves)


def test_the_check_discriminates():
    # The test data must make clipping bind for some records and not for others, or a
    # kernel that skipped (or always applied) the clip would pass the comparison above.
    X, y = _data(0)
    W = np.random.default_rng(10).normal(size=(X.shape[1], 4))
    for j in (0, 1, 2, 4, 5):
        clipped, loose = _direct(X, y, W, j, 0.01), _direct(X, y, W, j, 100.0)
        assert not np.allclose(clipped, loose, rtol=1e-3)
        assert not np.allclose(_direct(X, y, W, j, 0.1), clipped, rtol=1e-3)


def test_dense_data_and_one_chunk_per_record():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(25, 3)) / 2  # no zero at all: every column takes the dense path
    y = rng.integers(0, 3, size=25)
    W = rng.normal(size=(3, 3))
    cache = dpcd_cache._SoftmaxRows(X, y, 3, chunk=1)
    cache.reset(W)
    _check_steps(cache, X, y, W, [(0, rng.normal(size=3)), (2, rng.normal(size=3)), (0, rng.normal(size=3))])


@pytest.mark.parametrize("size", [150.0, 400.0, 2000.0])
def test_scores_beyond_the_safe_range_take_the_shifted_softmax(size):
    # exp(400) overflows the squares and exp(2000) overflows exp itself; every score of a
    # record far below zero underflows them. The result must still be the exact clipped
    # gradient, in both directions of the scores.
    X, y = _data(3)
    W = np.random.default_rng(4).normal(size=(X.shape[1], 4))
    cache = dpcd_cache._SoftmaxRows(X, y, 4, chunk=5)
    cache.reset(W)
    push = np.array([size, -size, 0.5 * size, 0.0]) / 0.4
    down = np.full(4, -size / 0.4)  # the same for every class: the softmax is unchanged
    moves = [(1, push), (0, np.ones(4)), (2, -push), (1, -2 * push), (5, np.zeros(4) + 3.0), (1, push + down), (2, -down)]
    _check_steps(cache, X, y, W, moves)
    assert cache._bound >= size  # the running bound saw the large scores


def test_skipping_the_range_check_changes_nothing(monkeypatch):
    # In the safe range the check on t never fires: forcing it on gives the same bits.
    X, y = _data(5)
    W = np.random.default_rng(6).normal(size=(X.shape[1], 4))
    moves = [(j, np.random.default_rng(j).normal(size=4)) for j in (0, 2, 1, 4, 0, 5)]

    def run() -> list[np.ndarray]:
        cache = dpcd_cache._SoftmaxRows(X, y, 4, chunk=7)
        cache.reset(W)
        out = []
        for j, change in moves:
            out.append(cache.block_gradient(j, 0.05))
            cache.block_move(j, change)
        return out

    fast = run()
    monkeypatch.setattr(dpcd_cache, "_SAFE_SCORE", -1.0)
    checked = run()
    assert all(np.array_equal(a, b) for a, b in zip(fast, checked))


def test_numpy_path_without_scipys_sparse_kernel(monkeypatch):
    X, y = _data(7)
    rng = np.random.default_rng(8)
    W = rng.normal(size=(X.shape[1], 4))
    moves = [(j, rng.normal(size=4)) for j in (0, 1, 2, 3, 4, 5, 0)]
    monkeypatch.setattr(dpcd_cache, "_csc_matvecs", None)
    cache = dpcd_cache._SoftmaxRows(X, y, 4, chunk=3)
    cache.reset(W)
    _check_steps(cache, X, y, W.copy(), moves)


@pytest.mark.parametrize("layout", ["C", "F", "rows", "columns"])
def test_columns_hold_each_features_nonzero_records(layout):
    X, _ = _data(9, n=30, d=8)
    X = {"C": X, "F": np.asfortranarray(X), "rows": X[::2], "columns": X[:, ::2]}[layout]
    columns = dpcd_cache._Columns(X)
    assert len(columns.rows) == len(columns.values) == X.shape[1]
    for j in range(X.shape[1]):
        nonzero = np.flatnonzero(X[:, j])
        rows = columns.rows[j]
        if nonzero.size == X.shape[0]:
            assert rows is None
        else:
            assert rows is not None and rows.dtype == np.intp
            np.testing.assert_array_equal(rows, nonzero)
        np.testing.assert_array_equal(columns.values[j], X[nonzero, j])
    W = np.random.default_rng(0).normal(size=(X.shape[1], 3))
    out = np.empty((X.shape[0], 3))
    columns.product(W, out)
    np.testing.assert_allclose(out, X @ W, rtol=1e-13, atol=1e-15)


def test_fitted_classifier_keeps_no_score_cache():
    # The cache (and the column index built from the private X) lives only during fit.
    X, y = _data(11, n=80, d=5, k=3)
    clf = DPCDClassifier(epsilon=1.0, classes=[0, 1, 2], feature_bounds=np.ones(5), random_state=0).fit(X, y)
    kept = [value for value in vars(clf).values() if isinstance(value, dpcd_cache._BlockState | dpcd_cache._Columns)]
    assert not kept
    arrays = [value for value in vars(clf).values() if isinstance(value, np.ndarray)]
    assert all(a.size != np.count_nonzero(X) and a.shape[0] != X.shape[0] for a in arrays)
    assert clf.fit_info_["blocks"] == "feature" and set(clf.fit_info_) <= set(dpcd.DPCDClassifier.released_info)
