"""breast_cancer written as a hospital would: raw units, labels no/yes, a categorical column, empty cells.

Shared by the schema tests of privml.data and of the CLI.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from sklearn.datasets import load_breast_cancer

from privml.data._bundled import BREAST_CANCER_BOUNDS
from privml.data._schema import Categorical, Label, Numeric, Schema

SITES = ("north", "south")


def write_raw_breast_cancer(path: Path) -> Path:
    """569 rows: 30 raw-unit columns (one cell in ten left empty), ``site`` (north/south, and a few 'east',
    a level the schema does not name) and ``outcome`` (no = malignant, yes = benign)."""
    data = load_breast_cancer()
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*data.feature_names, "site", "outcome"])
        for i, (row, target) in enumerate(zip(data.data, data.target, strict=True)):
            cells = [repr(float(v)) for v in row]
            if i % 10 == 3:
                cells[(i // 10) % 30] = ""  # a missing value, in a different column each time
            site = "east" if i % 50 == 7 else SITES[i % 2]
            writer.writerow([*cells, site, "yes" if target else "no"])
    return path


def breast_cancer_schema(*, missing: str = "indicator", unseen: str = "other") -> Schema:
    """The public schema: the ranges published in the dataset's description (not read from this file)."""
    names = load_breast_cancer().feature_names
    columns = [
        Numeric(name=str(name), lower=lo, upper=hi, missing=missing)
        for name, (lo, hi) in zip(names, BREAST_CANCER_BOUNDS, strict=True)
    ]
    columns.append(Categorical(name="site", levels=SITES, unseen=unseen))
    return Schema(columns=tuple(columns), label=Label(column="outcome", classes=("no", "yes")))


def round_up(value: float) -> float:
    """The next of 1, 2, 5 times a power of ten at or above ``value`` (a round number a clinician would quote)."""
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * 10.0**exponent >= value:
            return float(f"{step * 10.0 ** exponent:.12g}")
    raise AssertionError("unreachable")


def generous_breast_cancer_schema() -> Schema:
    """A schema a hospital could write without the data: every feature is a length, area or ratio, so at least 0,
    and below a round number above the range the dataset's description (UCI WDBC) publishes, not its minimum and
    maximum (e.g. "mean area" in [0, 5000] rather than [143.5, 2501])."""
    names = load_breast_cancer().feature_names
    columns = [
        Numeric(name=str(name), lower=0.0, upper=round_up(hi), missing="indicator")
        for name, (_, hi) in zip(names, BREAST_CANCER_BOUNDS, strict=True)
    ]
    columns.append(Categorical(name="site", levels=SITES, unseen="other"))
    return Schema(columns=tuple(columns), label=Label(column="outcome", classes=("no", "yes")))
