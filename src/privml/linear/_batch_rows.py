"""Rows of DP-SGD's batches, in the layout that makes a step cheapest.

A step of :class:`privml.linear.DPSGDClassifier` reads its batch twice
(scores ``X_B W``, then the clipped sum ``X_B^T (c * R)``), and on a
4096-record MNIST batch it is memory-bound: gathering the rows into a fresh
``(b, d)`` array (26 MB) and streaming it twice cost about 17 ms a step on one
BLAS thread, most of the fit. Two layouts avoid most of that traffic:

* **CSR** when at most :data:`MAX_SPARSE_DENSITY` of the entries are nonzero
  (MNIST: 19%): a CSR copy of X made once per fit, whose batch rows are
  gathered (about 12 bytes per nonzero instead of 8 per entry) and multiplied
  sparse: about 6 ms instead of 17.
* **Dense chunks** otherwise: the batch is gathered :data:`CHUNK_BYTES` at a
  time, so the second product reads rows the first left in cache: about
  11 ms instead of 17 (a whole batch is far larger than the cache).

The layout is a performance detail only. The batch, its order, the clipping
and the noise are those of the straightforward dense gather; each per-example
gradient is clipped on its own, so summing a batch in chunks is the same sum.
Only the summation order of the products changes, hence the last bits of the
result (the norms that clipping uses are computed by the caller, unchanged).
The choice depends on the data (its density), so nothing about it is stored
or reported (nor is the nonzero count): it never changes what is released
beyond float rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeAlias

import numpy as np
import scipy.sparse as sp

__all__ = ["CHUNK_BYTES", "MAX_SPARSE_DENSITY", "MIN_SPARSE_BATCH_ENTRIES", "BatchRows"]

#: Largest share of nonzero entries at which the CSR layout is used. On MNIST-sized
#: batches (4096 x 785, one thread) CSR and dense chunks cost the same near 0.35;
#: below 0.25 CSR is clearly ahead (3x at MNIST's 0.19), so 0.25 leaves a margin.
MAX_SPARSE_DENSITY = 0.25
#: Smallest expected batch (rows x features) worth the CSR layout: below it scipy's
#: per-call overhead outweighs the work saved (d = 785, density 0.19: CSR no faster at 128 rows,
#: 1.5x faster at 1024).
MIN_SPARSE_BATCH_ENTRIES = 1 << 18
#: Bytes of a dense chunk, read twice while in cache: at d = 785, chunks of 1.6-3.2 MB took
#: 11 ms a 4096-row step (whole batch: 17 ms), 0.8 MB and 6.4 MB chunks 12-14 ms.
CHUNK_BYTES = 3 << 20

Batch: TypeAlias = np.ndarray | sp.csr_matrix


def csr_copy(X: np.ndarray, max_density: float = MAX_SPARSE_DENSITY) -> sp.csr_matrix | None:
    """CSR copy of ``X`` (same values, columns sorted in each row), or None if it is too dense.

    Built from one boolean mask rather than by ``scipy.sparse.csr_matrix(X)``,
    which went through COO and took 3x longer (0.4 s on MNIST, once per fit).
    """
    n, d = X.shape
    mask = X != 0
    counts = np.count_nonzero(mask, axis=1)
    nnz = int(counts.sum())
    if nnz > max_density * n * d:
        return None
    index_type = np.int32 if max(nnz, d) < np.iinfo(np.int32).max else np.int64
    indptr = np.zeros(n + 1, dtype=index_type)
    np.cumsum(counts, out=indptr[1:])
    columns = np.broadcast_to(np.arange(d, dtype=index_type), X.shape)[mask]
    return sp.csr_matrix((X[mask], columns, indptr), shape=X.shape)


class BatchRows:
    """Batches of the rows of ``X``, as CSR or as dense chunks (see the module docstring).

    Parameters
    ----------
    X:
        The validated training records, ``(n, d)`` float64. Held, not copied.
    csr:
        A CSR copy of ``X`` (:func:`csr_copy`), or None for dense chunks.
    chunk_rows:
        Rows of a dense chunk; by default :data:`CHUNK_BYTES` worth.

    Notes
    -----
    Each chunk is a fresh gather: writing into one reused buffer measured no
    faster (and ``np.take`` into ``out`` copies twice unless told to clip
    indices). What is fast is that a chunk fits in the cache between its two
    products.
    """

    def __init__(self, X: np.ndarray, csr: sp.csr_matrix | None = None, chunk_rows: int | None = None) -> None:
        self.X = X
        self.csr = csr
        d = max(1, X.shape[1])
        self.chunk_rows = max(1, CHUNK_BYTES // (8 * d)) if chunk_rows is None else int(chunk_rows)

    @classmethod
    def for_fit(cls, X: np.ndarray, expected_batch: float, *, sparse: bool = True) -> BatchRows:
        """The layout for a fit whose batches hold ``expected_batch`` rows on average.

        ``sparse=False`` forces dense chunks (for a step that needs dense rows).
        """
        big = expected_batch * X.shape[1] >= MIN_SPARSE_BATCH_ENTRIES
        return cls(X, csr_copy(X) if sparse and big else None)

    def batches(self, index: np.ndarray) -> Iterator[tuple[np.ndarray, Batch]]:
        """Yield ``(part, rows)``: consecutive parts of ``index`` and the rows of X they name.

        The parts cover ``index`` in order; an empty index yields one empty batch.
        """
        if self.csr is not None:
            yield index, self.csr[index]
            return
        step = self.chunk_rows
        for start in range(0, max(index.size, 1), step):
            part = index[start : start + step]
            yield part, np.take(self.X, part, axis=0)
