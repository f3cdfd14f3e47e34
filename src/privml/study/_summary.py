"""The trade-off table (the paper's table in Section 4.3), measured on this study.

Columns are the hyper-parameters n, k, d, B, m and lambda; rows are privacy
loss, failure probability, accuracy, training time and inference time. A
cell says how the row moves as the column grows: up, down, up then down,
unchanged, or mixed (methods disagree), with how many method curves agree.
The non-private baseline is left out, and the B column reads the private
prediction methods only (private training does not depend on B). Privacy is
held at the target by construction (every point calibrates its
noise to the sweep's epsilon and delta), so its rows read "held fixed": the
accuracy row is the price paid for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from privml.study._aggregate import StudyResults
from privml.study._cells import Cell

COLUMNS = (("n", "training examples n"), ("k", "classes k"), ("d", "dimensions d"),
           ("budget", "inference budget B"), ("m", "models m"), ("l2", "regularisation lambda"))
ROWS: tuple[tuple[str, Callable[[Cell], float] | None, float], ...] = (
    ("privacy loss (epsilon)", None, 0.0),
    ("privacy failure probability (delta)", None, 0.0),
    ("accuracy", lambda c: c.mean, 0.01),
    ("training time", lambda c: c.train_time, 0.25),
    ("inference time", lambda c: c.predict_time, 0.25),
)
SYMBOLS = {"up": "↑", "down": "↓", "up-down": "↑↓", "flat": "=", "mixed": "mixed"}


def trend(values: Sequence[float], tolerance: float, *, relative: bool) -> str:
    """``up``, ``down``, ``up-down``, ``flat`` or ``mixed`` for a sequence read left to right.

    Changes within ``tolerance`` (absolute, or relative to the largest value) are ties.
    """
    if len(values) < 2:
        return "flat"
    scale = max(abs(v) for v in values) if relative else 1.0
    tol = tolerance * scale
    if max(values) - min(values) <= tol:
        return "flat"
    peak = max(range(len(values)), key=values.__getitem__)
    rising = all(b >= a - tol for a, b in zip(values, values[1:]))
    falling = all(b <= a + tol for a, b in zip(values, values[1:]))
    if rising and values[-1] > values[0] + tol:
        return "up"
    if falling and values[0] > values[-1] + tol:
        return "down"
    if 0 < peak < len(values) - 1 and values[peak] > max(values[0], values[-1]) + tol:
        return "up-down"
    return "mixed"


def tradeoff_table(results: StudyResults) -> list[tuple[str, list[str]]]:
    """Rows of (row name, cell text per column of :data:`COLUMNS`)."""
    table = []
    for row, measure, tolerance in ROWS:
        cells = []
        for parameter, _ in COLUMNS:
            sweeps = results.sweeps_of(parameter)
            curves = [c for s in sweeps for c in results.curves.get(s.name, [])
                      if len(c.cells) >= 2 and c.kind != "baseline"]
            if parameter == "budget":
                # B is a hyper-parameter of private prediction only: private training is flat in B by design.
                curves = [c for c in curves if c.kind == "prediction"]
            if not curves:
                cells.append("not swept")
                continue
            if measure is None:
                cells.append("held fixed")
                continue
            # Curves without the measure (private selection keeps no training time) are left out of the vote.
            values = [[measure(cell) for cell in c.cells] for c in curves]
            values = [v for v in values if not any(math.isnan(x) for x in v)]
            if not values:
                cells.append("not recorded")
                continue
            votes = Counter(trend(v, tolerance, relative=row != "accuracy") for v in values)
            winner, count = votes.most_common(1)[0]
            cells.append(f"{SYMBOLS[winner]} ({count}/{len(values)})")
        table.append((row, cells))
    return table
