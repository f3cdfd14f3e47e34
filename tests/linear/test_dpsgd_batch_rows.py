"""The fast batch layouts of DP-SGD (CSR, dense chunks) against the straightforward step.

The straightforward step gathers the whole batch densely and calls
:func:`clipped_gradient_sum` once. The fast layouts must give the same clipped
sum up to float rounding (only the summation order of the products differs),
and a fit must release the same weights up to rounding, with the same noise.
"""

from __future__ import annotations

import numpy as np
import pytest

import privml.linear._dpsgd as dpsgd_module
from privml.linear import _batch_rows
from privml.linear._batch_rows import BatchRows, csr_copy
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._dpsgd_steps import clipped_gradient_sum, poisson_sample
from privml.losses import LogisticLoss, MultinomialLogisticLoss
from privml.testing.negative_controls import UnclippedDPSGD

RTOL = 1e-12


def _data(n: int, d: int, density: float, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Records in the unit ball with about ``density`` nonzero entries, and labels in range(k)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    X[:, -1] = 1.0  # a bias feature, as the study adds
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, rng.integers(0, k, n)


def _reference(loss, W, X, y, index, clip):
    """The straightforward step: dense gather of the whole batch, one clipped_gradient_sum."""
    norms = np.linalg.norm(X, axis=1)
    return clipped_gradient_sum(loss, W, np.take(X, index, axis=0), y[index], clip, row_norms=norms[index])[0]


def _by_parts(rows: BatchRows, loss, W, X, y, index, clip):
    norms = np.linalg.norm(X, axis=1)
    return sum(clipped_gradient_sum(loss, W, b, y[p], clip, row_norms=norms[p])[0] for p, b in rows.batches(index))


@pytest.mark.parametrize("density", [0.1, 1.0], ids=["sparse", "dense"])
@pytest.mark.parametrize("k", [2, 4], ids=["logistic", "softmax"])
@pytest.mark.parametrize("layout", ["csr", "chunks"])
def test_fast_layout_equals_dense_gather(density, k, layout):
    X, y = _data(400, 30, density, k)
    loss = LogisticLoss() if k == 2 else MultinomialLogisticLoss(k)
    X, y = loss.check_data(X, y * 2 - 1 if k == 2 else y)
    rng = np.random.default_rng(1)
    W = rng.standard_normal(loss.parameter_shape(30))
    csr = csr_copy(X, max_density=1.0) if layout == "csr" else None
    rows = BatchRows(X, csr, chunk_rows=17)  # several chunks, the last one short
    for clip in (0.05, 1.0, 100.0):  # binding for all, some and none of the records
        for index in (poisson_sample(400, 0.3, rng), rng.permutation(400)[:150], np.arange(0)):
            expected = _reference(loss, W, X, y, index, clip)
            got = _by_parts(rows, loss, W, X, y, index, clip)
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * clip)
            if index.size:
                assert np.abs(expected).max() > 1e3 * RTOL * clip  # not a vacuous comparison


def test_parts_cover_the_batch_in_order():
    X, _ = _data(50, 6, 0.3, 2)
    index = np.array([7, 3, 3, 49, 0, 12, 8])
    for rows in (BatchRows(X, chunk_rows=3), BatchRows(X, csr_copy(X, max_density=1.0))):
        parts = list(rows.batches(index))
        np.testing.assert_array_equal(np.concatenate([p for p, _ in parts]), index)
        for part, batch in parts:
            dense = batch if isinstance(batch, np.ndarray) else batch.toarray()
            np.testing.assert_array_equal(dense, X[part])
        assert len(list(rows.batches(np.arange(0)))) == 1  # an empty batch is still one (empty) part


def test_csr_copy_is_exact_and_declines_dense_data():
    X, _ = _data(60, 9, 0.2, 2)
    X[0, 0] = -0.0
    for order in ("C", "F"):
        csr = csr_copy(np.asarray(X, order=order), max_density=0.5)
        assert csr is not None and csr.has_sorted_indices
        np.testing.assert_array_equal(csr.toarray(), X)
        assert csr.nnz == np.count_nonzero(X)
    assert csr_copy(X, max_density=0.01) is None
    assert csr_copy(np.ones((5, 4))) is None


def test_for_fit_picks_csr_only_for_large_sparse_batches():
    sparse, _ = _data(3000, 200, 0.1, 2)
    dense, _ = _data(3000, 200, 1.0, 2)
    assert BatchRows.for_fit(sparse, 2000).csr is not None
    assert BatchRows.for_fit(sparse, 2000, sparse=False).csr is None
    assert BatchRows.for_fit(sparse, 10).csr is None  # too small to pay scipy's overhead
    assert BatchRows.for_fit(dense, 2000).csr is None


def _fit(X, y, **extra):
    return DPSGDClassifier(
        epsilon=1.0, batch_size=1500, epochs=5, classes=range(4), random_state=3, **extra
    ).fit(X, y)


@pytest.mark.parametrize("density", [0.1, 1.0], ids=["sparse", "dense"])
def test_fit_releases_the_straightforward_weights(monkeypatch, density):
    """End to end: same batches, same noise, same clipping, weights equal up to rounding."""
    X, y = _data(3000, 200, density, 4)
    layouts = []
    real_for_fit = BatchRows.for_fit

    def spy(X, expected_batch, *, sparse=True):
        rows = real_for_fit(X, expected_batch, sparse=sparse)
        layouts.append("csr" if rows.csr is not None else "chunks")
        return rows

    monkeypatch.setattr(_batch_rows, "CHUNK_BYTES", 200 * 8 * 300)  # 300-row chunks: several per batch
    monkeypatch.setattr(dpsgd_module.BatchRows, "for_fit", staticmethod(spy))
    fast = _fit(X, y)
    assert layouts == ["csr" if density < 0.25 else "chunks"]
    # The straightforward step: one dense gather of the whole batch.
    monkeypatch.setattr(dpsgd_module.BatchRows, "for_fit", staticmethod(lambda X, b, **_: BatchRows(X, None, 10**9)))
    plain = _fit(X, y)
    assert fast.fit_info_ == plain.fit_info_
    np.testing.assert_allclose(fast.weights_, plain.weights_, rtol=1e-9, atol=1e-9 * np.abs(plain.weights_).max())
    assert not np.allclose(fast.weights_, 0)


def test_a_step_that_overrides_the_clipped_sum_gets_dense_rows(monkeypatch):
    """Subclasses (the negative controls) were written for dense batches: they keep getting them."""
    X, y = _data(3000, 200, 0.1, 4)
    seen = set()

    class Spy(UnclippedDPSGD):
        def _clipped_sum(self, loss, weights, X, y, clip, row_norms):
            seen.add(type(X))
            return super()._clipped_sum(loss, weights, X, y, clip, row_norms)

    Spy(epsilon=1.0, batch_size=1500, epochs=1, classes=range(4), random_state=0).fit(X, y)
    assert seen == {np.ndarray}
