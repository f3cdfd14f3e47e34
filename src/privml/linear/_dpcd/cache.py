"""Cached scores ``X theta`` for DP-CD's inner loop: clipped block gradients and
cheap block moves in O(nnz_j) (O(nnz_j k) for a softmax row); see :mod:`privml.linear._dpcd`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np
import scipy.sparse

from privml.linear._dpcd.steps import clip_coordinate_gradients
from privml.losses import Loss

try:  # y += A x for a CSC matrix A, in place and in C (the public ``A @ x`` allocates an n x k result)
    from scipy.sparse._sparsetools import csc_matvecs as _csc_matvecs
except ImportError:  # pragma: no cover - a SciPy without it takes the NumPy path, which is tested
    _csc_matvecs = None

#: Entries (records x classes) of a softmax row step processed at a time, so that the chunk's
#: exponentials and their squares stay near a core's L2 cache (on MNIST, 4096 to 12288 records
#: of 10 classes ran within noise of each other; 2048 records, or whole columns, were slower).
_CHUNK_ENTRIES = 81920
#: Row sums ``t`` of exp(scores) outside [_TINY, _HUGE] (scores beyond about +-230) take the
#: max-shifted softmax. Inside, exp(s) and its square neither overflow nor underflow where it
#: matters: at the clipping boundary the squared norm is at least ``(C_j t)^2``, far above the
#: smallest normal float, so clipping is as exact as with shifted scores.
_TINY, _HUGE = 1e-100, 1e100
#: While no score can exceed this in absolute value, every ``t`` lies in [_TINY, _HUGE]
#: (``exp(+-200)`` is about ``1e+-87``) and the range check is skipped.
_SAFE_SCORE = 200.0


class _BlockState(ABC):
    """What the inner loop needs from a model: clipped block gradients and cheap moves.

    ``block_gradient(j, C_j)`` returns ``(1/n) sum_i clip(grad_i of block j, C_j)``
    (shape ``(width,)``, L2 clipping per record), computed from cached scores
    ``X theta``; ``block_move(j, change)`` adds ``change`` to block ``j`` and
    updates the cache. Only records with ``x_ij != 0`` have a non-zero gradient
    on a block of feature ``j`` (every loss here is a function of the scores,
    so that gradient is ``x_ij`` times a per-record residual) or see their
    scores move, so both cost O(nnz_j width) on sparse features such as
    image pixels; the mean still divides by ``n``.
    """

    @abstractmethod
    def reset(self, theta: np.ndarray) -> None:
        """Recompute the cached scores exactly for parameters ``theta``."""

    @abstractmethod
    def block_gradient(self, j: int, threshold: float) -> np.ndarray | float:
        """Mean over records of the block-``j`` gradients, each clipped to L2 norm ``threshold``."""

    @abstractmethod
    def block_move(self, j: int, change: np.ndarray) -> None:
        """Add ``change`` to block ``j`` and update the cached scores."""


def _nonzero_columns(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSC arrays ``(indptr, indices, data)`` of ``X`` (rows sorted within each column), in one pass over it.

    Column-major ``X``: its transpose's flat non-zeros are already in column order. Otherwise the
    row-major non-zeros go through SciPy's CSR-to-CSC transposition (a counting sort in C), which
    needs no transposed copy of ``X``.
    """
    n, d = X.shape
    by_column = X.flags.f_contiguous and not X.flags.c_contiguous
    if by_column:
        major, minor, length = X.T, n, d  # rows of X.T are the columns of X
    else:
        major, minor, length = np.ascontiguousarray(X), d, n
    nonzero = major != 0
    start = np.zeros(length + 1, dtype=np.intp)
    np.cumsum(np.count_nonzero(nonzero, axis=1), out=start[1:])
    flat = np.flatnonzero(nonzero)
    del nonzero
    data = major.reshape(-1)[flat]
    np.remainder(flat, minor, out=flat)  # position along the other axis
    if not by_column:
        csc = scipy.sparse.csr_array((data, flat, start), shape=(n, d)).tocsc()
        start, flat, data = csc.indptr, csc.indices, csc.data
    return start.astype(np.intp, copy=False), flat.astype(np.intp, copy=False), data


class _Columns:
    """Each feature's non-zero records (a CSC copy of ``X``), built once per fit and never kept after it.

    ``rows[j]`` (None when every record is non-zero) and ``values[j]`` are views of the
    column-major arrays ``indices`` and ``data`` (:func:`_nonzero_columns`).
    """

    def __init__(self, X: np.ndarray) -> None:
        n = X.shape[0]
        self._X = X
        self.indptr, self.indices, self.data = _nonzero_columns(X)
        self.rows: list[np.ndarray | None] = []
        self.values: list[np.ndarray] = []
        for lo, hi in zip(self.indptr[:-1].tolist(), self.indptr[1:].tolist()):
            self.rows.append(None if hi - lo == n else self.indices[lo:hi])
            self.values.append(self.data[lo:hi])
        self._pointers = np.zeros(2, dtype=np.intp)

    def product(self, W: np.ndarray, out: np.ndarray) -> None:
        """``out[:] = X @ W`` for ``W`` of shape (d, k): O(nnz k) from the non-zeros (dense BLAS reads all of X)."""
        W = np.ascontiguousarray(W, dtype=np.float64)
        out.fill(0.0)
        if not W.any():  # the first pass starts from zero
            return
        if _csc_matvecs is None:
            np.matmul(self._X, W, out=out)
            return
        n, d = self._X.shape
        _csc_matvecs(n, d, W.shape[1], self.indptr, self.indices, self.data, W, out)

    def add_outer(self, j: int, change: np.ndarray, out: np.ndarray) -> None:
        """``out += outer(X[:, j], change)`` on the records of feature ``j`` only, in place."""
        lo, hi = int(self.indptr[j]), int(self.indptr[j + 1])
        if _csc_matvecs is None:
            out[self.indices[lo:hi]] += np.multiply.outer(self.data[lo:hi], change)
            return
        self._pointers[1] = hi - lo
        _csc_matvecs(out.shape[0], 1, out.shape[1], self._pointers, self.indices[lo:hi], self.data[lo:hi], change, out)


class _Scores(_BlockState):
    """Cached scores ``X theta`` of a one-output model (binary, regression): O(nnz_j) per step."""

    def __init__(self, X: np.ndarray, y: np.ndarray, loss: Loss) -> None:
        self._X, self._y, self._loss = X, y, loss
        self._n = X.shape[0]
        self._columns = _Columns(X)
        self._scores = np.zeros(self._n)

    def reset(self, theta: np.ndarray) -> None:
        # Recomputed once per outer iteration: O(n d), and no rounding drift.
        self._scores = self._X @ theta

    def block_gradient(self, j: int, threshold: float) -> float:
        rows, values = self._columns.rows[j], self._columns.values[j]
        if rows is None:
            per_example = self._loss._score_gradients(self._scores, self._y) * values
        else:
            per_example = self._loss._score_gradients(self._scores[rows], self._y[rows]) * values
        return float(clip_coordinate_gradients(per_example, threshold).sum()) / self._n

    def block_move(self, j: int, change: np.ndarray) -> None:
        rows, values = self._columns.rows[j], self._columns.values[j]
        if rows is None:
            self._scores += change[0] * values
        else:
            self._scores[rows] += change[0] * values


class _RowBlock(NamedTuple):
    """What a softmax row step reads of one feature (views of the column, or arrays derived from it)."""

    rows: np.ndarray | None
    values: np.ndarray
    magnitudes: np.ndarray
    positions: np.ndarray


def _records(a: np.ndarray) -> np.ndarray:
    """A (rows, k) C-contiguous float array as a 1-D array of k-float records: ``take`` copies whole rows."""
    return a.view(np.dtype((np.void, a.itemsize * a.shape[1]))).reshape(-1)


class _SoftmaxRows(_BlockState):
    """Cached record-major scores ``X W`` (n, k) of a k-class softmax model, for steps on a row ``W[j, :]``.

    The block gradient of record ``i`` is ``x_ij (p_i - e_{y_i})``, of norm
    ``|x_ij| ||p_i - e_{y_i}||``: computing the softmax of the ``nnz_j``
    records with ``x_ij != 0`` from their cached scores gives all ``k``
    entries at once, and the move changes only those records' scores.
    O(nnz_j k) per step (DP-CD, Mangold et al. 2022, with rows as blocks).
    What makes it fast in NumPy (a default fit on MNIST, 55000 x 785 with
    10 classes and one BLAS thread, takes about 3.8 s against 7.9 s with the
    former class-major cache of max-shifted scores):

    * a record's k scores are contiguous, so gathering them is one copy per
      record, and a move is a sparse rank-one update in place (``add_outer``);
    * ``E = exp(scores)`` is used unshifted while its row sums ``t`` stay in
      ``[_TINY, _HUGE]`` (else the chunk is redone shifted by its row maxima,
      which gives the same softmax): no max, no broadcast subtraction;
    * ``E - t e_y = t (p - e_y)`` (one entry per record changes) gives the
      per-record norm from one row-wise sum of squares and the clipped mean
      from one matrix-vector product, with weight
      ``x / max(t, |x| ||E - t e_y|| / C) = x min(1, C / norm) / t``;
    * a chunk of records at a time, in preallocated buffers, so the
      temporaries stay in cache; the range check on ``t`` only runs once a
      running bound on ``max |score|`` (exact at each reset, then grown by
      ``max |x_j| max |change|`` per move) passes ``_SAFE_SCORE``.

    The clipping, hence the sensitivity, is unchanged: each record's term is
    its row of ``E - t e_y`` times a weight computed from that same row's
    norm, so it has L2 norm at most ``C`` up to rounding, as before. Results
    agree with the direct computation to rounding (float64; a default MNIST
    fit's weights within 1e-14 relative of the former cache's), not bit for
    bit: the summation order differs.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, k: int, *, chunk: int | None = None) -> None:
        n = X.shape[0]
        self._y, self._k, self._n = np.asarray(y, dtype=np.intp), k, n
        self._columns = _Columns(X)
        self._largest = [float(max(v.max(), -v.min())) if v.size else 0.0 for v in self._columns.values]  # max |x_ij|
        self._blocks: list[_RowBlock | None] = [None] * len(self._columns.values)  # filled on first visit
        self._scores = np.zeros((n, k))
        self._score_records = _records(self._scores)
        self._bound = 0.0  # >= max |score|
        self._chunk = max(1, chunk if chunk is not None else _CHUNK_ENTRIES // k)
        c = min(self._chunk, n)
        self._exp = np.empty((c, k))  # exp(scores) of one chunk, then t (p - e_y)
        self._exp_records = _records(self._exp)
        self._squares = np.empty((c, k))
        self._ones = np.ones(k)
        self._sums, self._norms, self._scale = np.empty(c), np.empty(c), np.empty(c)

    def reset(self, W: np.ndarray) -> None:
        self._columns.product(W, self._scores)
        self._bound = float(max(self._scores.max(), -self._scores.min()))

    def _exponentials(self, rows: np.ndarray | None, lo: int, hi: int, check: bool) -> tuple[np.ndarray, np.ndarray]:
        """``E = exp(scores - shift)`` of records ``lo:hi`` of the block and its row sums ``t``."""
        E = self._exp[: hi - lo]
        self._load(rows, lo, hi)
        np.exp(E, out=E)  # overflow is caught below (the caller silences its warning)
        t = np.matmul(E, self._ones, out=self._sums[: hi - lo])
        if check and not (np.minimum.reduce(t) > _TINY and np.maximum.reduce(t) < _HUGE):  # shift by row maxima
            self._load(rows, lo, hi)
            E -= E.max(axis=1, keepdims=True)
            np.exp(E, out=E)
            np.matmul(E, self._ones, out=t)
        return E, t

    def _load(self, rows: np.ndarray | None, lo: int, hi: int) -> None:
        """Copy the scores of records ``lo:hi`` of the block into the chunk buffer."""
        if rows is None:
            self._exp[: hi - lo] = self._scores[lo:hi]
        else:  # one k-float copy per record; "wrap" skips the bounds check of "raise" (twice as fast): rows fit
            np.take(self._score_records, rows[lo:hi], out=self._exp_records[: hi - lo], mode="wrap")

    def _block(self, j: int) -> _RowBlock:
        """Feature ``j``'s records, values, ``|values|`` and each record's label position in its chunk."""
        block = self._blocks[j]
        if block is None:
            rows, values = self._columns.rows[j], self._columns.values[j]
            labels = self._y if rows is None else self._y[rows]
            positions = np.arange(values.size) % self._chunk * self._k + labels  # flat (record, label) in E
            magnitudes = values if values.size == 0 or values.min() >= 0 else np.abs(values)  # pixels: no copy
            block = self._blocks[j] = _RowBlock(rows, values, magnitudes, positions)
        return block

    def _chunk_gradient(self, block: _RowBlock, lo: int, hi: int, threshold: float, check: bool) -> np.ndarray:
        """Sum over records ``lo:hi`` of the block of ``x (p - e_y)`` clipped to L2 norm ``threshold``."""
        w = hi - lo
        E, t = self._exponentials(block.rows, lo, hi, check)
        np.subtract.at(E.reshape(-1), block.positions[lo:hi], t)  # E is now t (p - e_y); np.put is slower
        norm = np.matmul(np.multiply(E, E, out=self._squares[:w]), self._ones, out=self._norms[:w])
        np.sqrt(norm, out=norm)  # t ||p - e_y||
        norm *= np.divide(block.magnitudes[lo:hi], threshold, out=self._scale[:w])
        np.maximum(norm, t, out=norm)
        np.divide(block.values[lo:hi], norm, out=norm)  # x min(1, C / (|x| ||p - e_y||)) / t
        return norm @ E

    def block_gradient(self, j: int, threshold: float) -> np.ndarray:
        block = self._block(j)
        m = block.values.size
        check = self._bound > _SAFE_SCORE
        g = np.zeros(self._k)
        with np.errstate(over="ignore", under="ignore"):  # out-of-range sums take the shifted softmax
            for lo in range(0, m, self._chunk):
                g += self._chunk_gradient(block, lo, min(lo + self._chunk, m), threshold, check)
        return g / self._n

    def block_move(self, j: int, change: np.ndarray) -> None:
        change = np.ascontiguousarray(change, dtype=np.float64)
        self._columns.add_outer(j, change, self._scores)
        self._bound += self._largest[j] * float(max(change.max(), -change.min()))


class _SoftmaxScores(_BlockState):
    """Cached scores of a k-class softmax model for one entry ``W[j, c]`` per step (``blocks="entry"``).

    ``d loss_i / d W[j, c] = (p_ic - [y_i = c]) x_ij`` needs the one column
    ``p_c = exp(s_c - lse)``; keeping ``lse = logsumexp(s)`` current after a
    change of column c by ``delta_i`` costs O(n) too:
    ``lse += log1p(p_c expm1(delta))``. Where that argument nears -1 (cancellation)
    the rows are recomputed exactly.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, k: int) -> None:
        self._X = X
        self._Xt = np.ascontiguousarray(X.T)  # row j is feature j: contiguous O(n) column reads
        self._k = k
        self._onehot = (np.arange(k)[:, None] == y[None, :]).astype(np.float64)  # (k, n)
        self._scores = np.zeros((k, X.shape[0]))  # class-major: each class row contiguous
        self._lse = np.zeros(X.shape[0])
        self._p: np.ndarray | None = None
        self._p_output = -1

    def _exact_lse(self, rows: np.ndarray | slice) -> np.ndarray:
        s = self._scores[:, rows]
        top = s.max(axis=0)
        return top + np.log(np.exp(s - top).sum(axis=0))

    def reset(self, W: np.ndarray) -> None:
        self._scores = np.ascontiguousarray((self._X @ W).T)
        self._lse = self._exact_lse(slice(None))
        self._p_output = -1

    def coordinate_gradients(self, column: np.ndarray, output: int) -> np.ndarray:
        self._p = np.exp(self._scores[output] - self._lse)
        self._p_output = output
        return (self._p - self._onehot[output]) * column

    def move(self, column: np.ndarray, output: int, change: float) -> None:
        delta = change * column
        p = self._p if self._p_output == output else np.exp(self._scores[output] - self._lse)
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = 1.0 + p * np.expm1(delta)  # sum_c' exp(s_c' new) / sum_c' exp(s_c' old)
        self._scores[output] += delta
        # Cancellation (ratio near 0), overflow (inf) or 0 * inf (nan): recompute those rows.
        stable = (ratio >= 1e-3) & (ratio < np.inf)
        if stable.all():
            self._lse += np.log(ratio)
        else:
            self._lse[stable] += np.log(ratio[stable])
            unstable = ~stable
            self._lse[unstable] = self._exact_lse(unstable)
        self._p_output = -1

    def block_gradient(self, j: int, threshold: float) -> float:
        feature, output = divmod(j, self._k)
        per_example = self.coordinate_gradients(self._Xt[feature], output)
        return float(clip_coordinate_gradients(per_example, threshold).mean())

    def block_move(self, j: int, change: np.ndarray) -> None:
        feature, output = divmod(j, self._k)
        self.move(self._Xt[feature], output, float(change[0]))
