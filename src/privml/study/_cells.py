"""What a study measured, cell by cell: one method's repeats at one value of a sweep, and its line.

Plain data, built by :mod:`privml.study._aggregate` from the stored runs and read by the
evidence, findings, recommendations and summary of the report.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

__all__ = ["Cell", "Curve"]


@dataclass(frozen=True)
class Cell:
    """The repeats of one method at one value of one sweep."""

    value: Any
    setting: dict[str, Any]
    accuracies: tuple[float, ...]
    train_seconds: tuple[float, ...]
    predict_seconds: tuple[float, ...]
    epsilons: tuple[float, ...]
    deltas: tuple[float, ...]
    selection_modes: tuple[str, ...]
    chosen: tuple[dict[str, Any], ...]
    #: the repeat index of each accuracy (pairs cells repeat by repeat: privml.study._evidence); () for in order
    repeats: tuple[int, ...] = ()
    #: the rows of the test split the accuracies were measured on (None: not recorded)
    n_test: int | None = None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.accuracies)

    @property
    def std(self) -> float:
        return statistics.stdev(self.accuracies) if len(self.accuracies) > 1 else 0.0

    @property
    def train_time(self) -> float:
        """Mean training seconds; NaN where runs keep none (private selection stores no time: runner)."""
        kept = [t for t in self.train_seconds if t is not None]
        return statistics.fmean(kept) if kept and len(kept) == len(self.train_seconds) else math.nan

    @property
    def predict_time(self) -> float:
        return statistics.fmean(self.predict_seconds)


@dataclass(frozen=True)
class Curve:
    """One method's line on one figure (values in the sweep's order; missing values left out)."""

    method: str
    label: str
    kind: str
    cells: tuple[Cell, ...]

    def at(self, value: Any) -> Cell | None:
        for cell in self.cells:
            if cell.value == value:
                return cell
        return None
