"""How much a study's repeats support a difference of accuracies: paired confidence intervals.

A finding compares cells (one method at two values of a sweep, or two
methods at one value). Every setting of a repeat shares that repeat's
seed (common random numbers: the same split, the same sampled noise
stream), so cells are compared repeat by repeat: the per-repeat
difference ``d_r`` of a contrast (say ``acc(last) - acc(first)``), its mean
``d`` over the repeats both cells have, and a two-sided 95% Student-t
interval ``d +- t_{0.975, r-1} s / sqrt(r)``.

With few repeats the sample spread ``s`` can be small by chance: two
repeats on a 114-row test split whose differences are both +0.9 points
have ``s = 0``. The test split is itself a sample, and a difference ``d``
of accuracies on one test set of ``n_test`` rows means at least a fraction
``|d|`` of its rows are answered differently, so the test-sampling variance
of one repeat's difference is at least ``(|d| - d^2) / n_test`` (McNemar's
setting: the variance of a paired difference of proportions is
``(q - d^2) / n`` for a discordant fraction ``q >= |d|``). Each repeat's
variance is taken as the larger of the two. A single repeat gives no
interval: its verdicts are "inconclusive".

The verdict of a claim that a contrast is positive: ``holds`` when the
whole interval is above 0, ``refuted`` when it is at or below 0 (the claim
fails: no better, with confidence, or exactly flat), otherwise
``inconclusive``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from privml.study._cells import Cell

#: Two-sided confidence of every interval of the report's findings.
CONFIDENCE = 0.95


def t_quantile(repeats: int) -> float:
    """The Student-t quantile of a two-sided :data:`CONFIDENCE` interval over ``repeats`` (>= 2) repeats."""
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, repeats - 1))


@dataclass(frozen=True)
class Interval:
    """A paired contrast of accuracies over the repeats its cells share."""

    mean: float
    low: float
    high: float
    repeats: int

    @property
    def verdict(self) -> str:
        """``holds`` (above 0), ``refuted`` (at or below 0) or ``inconclusive`` (see the module docstring)."""
        if self.repeats < 2:
            return "inconclusive"
        if self.low > 0:
            return "holds"
        if self.high <= 0:
            return "refuted"
        return "inconclusive"

    def describe(self) -> str:
        """``+3.1 pts [+0.4, +5.8]``, or the mean alone with one repeat."""
        if self.repeats < 2:
            return f"{100 * self.mean:+.1f} pts (one repeat)"
        return f"{100 * self.mean:+.1f} pts [{100 * self.low:+.1f}, {100 * self.high:+.1f}]"


def _by_repeat(cell: Cell) -> dict[int, float]:
    repeats = cell.repeats or tuple(range(len(cell.accuracies)))
    return dict(zip(repeats, cell.accuracies))


def contrast(terms: Sequence[tuple[float, Cell]]) -> Interval:
    """The interval of ``sum_j c_j acc_j`` over the repeats every cell has; ``terms`` are ``(c_j, cell_j)``.

    The test-sampling floor (module docstring) is exact for a difference of
    two cells; a contrast of more adds the floors of its positive and
    negative halves paired in order (an approximation, said here).
    """
    tables = [(c, _by_repeat(cell)) for c, cell in terms]
    common = sorted(set.intersection(*(set(t) for _, t in tables))) if tables else []
    diffs = [sum(c * table[r] for c, table in tables) for r in common]
    if not diffs:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Interval(mean, mean, mean, len(diffs))
    floor = _sampling_floor(terms, tables, common)
    variance = max(statistics.variance(diffs), floor)
    half = t_quantile(len(diffs)) * math.sqrt(variance / len(diffs))
    return Interval(mean, mean - half, mean + half, len(diffs))


def difference(better: Cell, worse: Cell) -> Interval:
    """The interval of ``acc(better) - acc(worse)``."""
    return contrast([(1.0, better), (-1.0, worse)])


def _sampling_floor(terms: Sequence[tuple[float, Cell]], tables: list, common: list[int]) -> float:
    plus = [(t, cell) for (c, cell), (_, t) in zip(terms, tables) if c > 0]
    minus = [(t, cell) for (c, cell), (_, t) in zip(terms, tables) if c < 0]
    floor = 0.0
    for (a, cell_a), (b, cell_b) in zip(plus, minus):
        n_test = min(n for n in (cell_a.n_test, cell_b.n_test) if n) if (cell_a.n_test or cell_b.n_test) else None
        if not n_test:
            continue  # no test size recorded: the spread of the repeats alone
        d = abs(statistics.fmean(a[r] - b[r] for r in common))
        floor += max(d - d * d, 0.0) / n_test
    return floor


def combine(verdicts: Sequence[str]) -> str:
    """A claim about every method: ``refuted`` if any is, ``holds`` if all do, else ``inconclusive``."""
    if "refuted" in verdicts:
        return "refuted"
    if verdicts and all(v == "holds" for v in verdicts):
        return "holds"
    return "inconclusive"


__all__ = ["CONFIDENCE", "Interval", "combine", "contrast", "difference", "t_quantile"]
