"""Draft schemas read off a CSV (``privml schema suggest``): every value from the data, marked as such.

A draft is where a data owner starts writing the public schema
(:mod:`privml.data._schema`) of a file: it lists the columns with the kinds,
ranges, levels and classes the data shows. None of these is public: the
draft is marked ``draft = true``, every value read from the data carries a
``FROM THE DATA`` note, and every reader refuses it until the user has
replaced them with public knowledge (published ranges, the form's list of
answers) and deleted the line.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from privml.data._schema import Categorical, Column, Label, Numeric, Schema
from privml.data._user import _read_table  # the CSV reader of user data (header, blank rows, line numbers)
from privml.exceptions import PrivacyLeakWarning

__all__ = ["FROM_THE_DATA", "SUGGEST_MISSING_VALUES", "suggest_schema"]


#: Cells ``privml schema suggest`` reads as missing (a public list; the draft states it).
SUGGEST_MISSING_VALUES = ("", "?", "NA")
#: The note on every value of a draft that was read from the data.
FROM_THE_DATA = "FROM THE DATA"


def suggest_schema(path: str | os.PathLike[str], *, label_column: str = "label") -> tuple[Schema, dict]:
    """A draft schema read off the CSV ``path``, and a note for each value that came from the data.

    The draft's numeric ranges are the columns' minimum and maximum, its
    levels and classes the values seen, and its kinds and missing rules what
    the cells look like: all of them are functions of the private records, so
    the draft is marked ``draft = true`` (refused by every reader until the
    user replaces them with public knowledge) and this function warns with
    :class:`~privml.exceptions.PrivacyLeakWarning`. Keep the draft as private
    as the data.

    Returns
    -------
    schema : Schema
        With ``draft=True``.
    comments : dict
        ``{(column, key): note}`` for :meth:`Schema.to_toml`.
    """
    where = Path(path)
    if not where.is_file():
        raise FileNotFoundError(f"{where} does not exist or is not a file")
    header, table, _, label_at = _read_table(where, label_column)
    warnings.warn(
        f"the draft schema of {where} holds values read from the data (ranges, levels, classes): they are not "
        "public; replace each one marked FROM THE DATA with public knowledge before training",
        PrivacyLeakWarning,
        stacklevel=2,
    )
    cells = np.char.strip(table)
    comments: dict[tuple[str, str], str] = {}
    columns: list[Column] = []
    for j, name in enumerate(header):
        if j == label_at:
            continue
        column = cells[:, j]
        missing = np.isin(column, SUGGEST_MISSING_VALUES)
        present = column[~missing]
        rule = "indicator" if missing.any() else "refuse"
        comments[(name, "missing")] = f"{FROM_THE_DATA}: the data {'has' if missing.any() else 'has no'} missing cells"
        values = _floats(present)
        if values is not None and values.size:
            lower, upper = float(values.min()), float(values.max())
            upper = upper if upper > lower else lower + 1.0
            columns.append(Numeric(name=name, lower=lower, upper=upper, missing=rule))
            comments[(name, "kind")] = f"{FROM_THE_DATA}: every cell is a number"
            comments[(name, "lower")] = f"{FROM_THE_DATA}: the column's minimum; replace with a public lower bound"
            comments[(name, "upper")] = f"{FROM_THE_DATA}: the column's maximum; replace with a public upper bound"
        else:
            levels = tuple(sorted(set(present.tolist()))) or ("other",)
            columns.append(Categorical(name=name, levels=levels, missing=rule))
            comments[(name, "kind")] = f"{FROM_THE_DATA}: some cells are not numbers"
            comments[(name, "levels")] = f"{FROM_THE_DATA}: the levels seen; replace with the public list of levels"
    classes = tuple(sorted(set(cells[:, label_at].tolist())))
    label = Label(column=header[label_at], classes=classes if len(classes) >= 2 else (*classes, "other"))
    comments[("[label]", "classes")] = f"{FROM_THE_DATA}: the labels seen; replace with the public class set"
    schema = Schema(columns=tuple(columns), label=label, missing_values=SUGGEST_MISSING_VALUES, draft=True)
    return schema, comments


def _floats(cells: np.ndarray) -> np.ndarray | None:
    """``cells`` as finite floats, or ``None`` when one is not a finite number."""
    try:
        values = cells.astype(np.float64)
    except ValueError:
        return None
    return values if np.all(np.isfinite(values)) else None
