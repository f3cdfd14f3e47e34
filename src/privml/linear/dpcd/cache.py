"""Cached scores ``X theta`` for DP-CD's inner loop: clipped block gradients and
cheap block moves in O(nnz_j) (O(nnz_j k) for a softmax row); see :mod:`privml.linear.dpcd`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from privml.linear.dpcd.steps import clip_coordinate_gradients
from privml.losses import Loss


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


class _Columns:
    """Each feature's non-zero records: ``rows[j]`` (None when every record is non-zero) and ``values[j]``."""

    def __init__(self, X: np.ndarray) -> None:
        n, d = X.shape
        self.rows: list[np.ndarray | None] = []
        self.values: list[np.ndarray] = []
        for start in range(0, d, 256):  # transpose a slab at a time: no second copy of X
            slab = np.ascontiguousarray(X[:, start : start + 256].T)
            for column in slab:
                nonzero = np.flatnonzero(column)
                if nonzero.size == n:
                    self.rows.append(None)
                    self.values.append(column.copy())
                else:
                    self.rows.append(nonzero)
                    self.values.append(column[nonzero])


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


class _SoftmaxRows(_BlockState):
    """Cached class-major scores ``(X W)^T`` of a k-class softmax model, for steps on a row ``W[j, :]``.

    The block gradient of record ``i`` is ``x_ij (p_i - e_{y_i})``, of norm
    ``|x_ij| ||p_i - e_{y_i}||``: computing the softmax of the ``nnz_j``
    records with ``x_ij != 0`` (from their cached scores, shifted by their
    maximum: exact, nothing accumulates) gives all ``k`` entries at once, and
    the move changes only those records' scores. O(nnz_j k) per step, in
    preallocated buffers, a chunk of records at a time so that the
    temporaries stay in cache (a dense column of MNIST's size otherwise runs
    about three times slower).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, k: int, *, chunk: int | None = None) -> None:
        n = X.shape[0]
        self._X, self._y, self._k, self._n = X, y, k, n
        self._columns = _Columns(X)
        self._scores = np.zeros((k, n))
        self._chunk = max(1, chunk if chunk is not None else 65536 // k)
        c = min(self._chunk, n)
        self._gathered = np.empty(k * n)  # the current block's records' scores, chunk after chunk
        self._work = np.empty(k * c)  # residuals, then the score change, of one chunk
        self._per_record = np.empty(c)
        self._per_record_b = np.empty(c)
        self._index = np.arange(c)
        self._current = -1  # block whose records' scores sit in _gathered

    def reset(self, W: np.ndarray) -> None:
        self._scores = np.ascontiguousarray((self._X @ W).T)
        self._current = -1

    def _chunk_scores(self, rows: np.ndarray | None, lo: int, hi: int, gather: bool) -> np.ndarray:
        """Scores ``(k, hi - lo)`` of records ``lo:hi`` of the block: a view (dense column) or gathered."""
        if rows is None:
            return self._scores[:, lo:hi]
        k = self._k
        region = self._gathered[k * lo : k * hi].reshape(k, hi - lo)
        if gather:
            np.take(self._scores, rows[lo:hi], axis=1, out=region)
        return region

    def block_gradient(self, j: int, threshold: float) -> np.ndarray:
        rows, values = self._columns.rows[j], self._columns.values[j]
        m, k = values.size, self._k
        gather = self._current != j
        self._current = -1 if rows is None else j
        g = np.zeros(k)
        for lo in range(0, m, self._chunk):
            hi = min(lo + self._chunk, m)
            w = hi - lo
            x = values[lo:hi]
            scores = self._chunk_scores(rows, lo, hi, gather)
            labels = self._y[lo:hi] if rows is None else self._y[rows[lo:hi]]
            residual = self._work[: k * w].reshape(k, w)
            top = self._per_record[:w]
            np.max(scores, axis=0, out=top)
            np.subtract(scores, top, out=residual)
            np.exp(residual, out=residual)
            total = self._per_record_b[:w]
            np.sum(residual, axis=0, out=total)
            residual /= total
            residual[labels, self._index[:w]] -= 1.0  # p_i - e_{y_i}, one column per record
            # Per-record L2 clipping of x_ij (p_i - e_{y_i}): weight x_ij min(1, C_j / norm_i).
            norm = np.einsum("ci,ci->i", residual, residual, out=top)
            np.sqrt(norm, out=norm)
            norm *= np.abs(x)
            np.maximum(norm, threshold, out=norm)  # C_j / max(norm, C_j) = min(1, C_j / norm), no 0/0
            np.divide(threshold, norm, out=norm)
            norm *= x
            g += residual @ norm
        return g / self._n

    def block_move(self, j: int, change: np.ndarray) -> None:
        rows, values = self._columns.rows[j], self._columns.values[j]
        m, k = values.size, self._k
        gather = self._current != j
        for lo in range(0, m, self._chunk):
            hi = min(lo + self._chunk, m)
            delta = self._work[: k * (hi - lo)].reshape(k, hi - lo)
            np.multiply.outer(change, values[lo:hi], out=delta)
            scores = self._chunk_scores(rows, lo, hi, gather)
            scores += delta
            if rows is not None:
                self._scores[:, rows[lo:hi]] = scores
        # A dense column moved every record: the gathered scores of any block are stale.
        self._current = -1 if rows is None else j


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
