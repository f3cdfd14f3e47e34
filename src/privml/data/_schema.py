"""A public schema for tabular user data: ranges, levels, missing values, classes.

Every constant here is a **public input** (:doc:`/releases`): it must come
from what is known about the data before looking at it (a laboratory's
reference ranges, a form's list of answers, the outcome's possible values),
never from the records themselves. Given such constants, :meth:`Schema.transform`
is a fixed per-record map, so encoding a dataset with it costs no privacy and
neighbouring datasets stay neighbouring (as every step of
:mod:`privml.data._preprocessing`).

Encoding, column by column, in schema order:

- **numeric** ``[lower, upper]``: clip to the range, then map it linearly onto
  ``[-1, 1]`` (``lower`` -> -1, ``upper`` -> 1). Centred features let the
  regularised linear models of privml spend less of their weight on the
  intercept; their only assumption on the features is ``||x||_2 <= 1``
  (CMS11, Sec. 2), which the unit-ball projection that follows enforces.
- **categorical** with public ``levels``: one-hot, one column per level, plus
  an ``other`` column when unseen levels are declared to map there
  (``unseen = "other"``); otherwise an unseen level is refused.
- **missing** cells (an empty cell, or a token of ``missing_values``): refused
  (``"refuse"``, the default), replaced by a public constant (``"constant"``
  with ``fill``), or flagged in an extra 0/1 indicator column
  (``"indicator"``; the value itself becomes ``fill`` when given, else the
  middle of the range, 0, or an all-zero one-hot block).

Norm bound: a numeric column contributes at most 1 to ``||x||^2``, a one-hot
block exactly 1 (0 when missing), an indicator at most 1, so every encoded
row has ``||x|| <= sqrt(D)`` with ``D`` from :meth:`Schema.norm_bound`. The
loader then projects rows onto the unit ball
(:func:`~privml.data.project_to_unit_ball`, no privacy cost),
which keeps each row's direction, all a linear classifier's sign depends on.

Files: TOML (read with :mod:`tomllib`; written by :meth:`Schema.to_toml`) or
JSON (:meth:`Schema.to_dict`). ``privml schema suggest`` (:mod:`privml.data._schema_draft`) writes a *draft*
(``draft = true``) whose data-derived values are commented as such; a draft is
refused until the user replaces them and deletes the line.

Examples
--------
>>> schema = Schema(
...     columns=(Numeric(name="age", lower=0, upper=100), Categorical(name="sex", levels=("F", "M"))),
...     label=Label(column="outcome", classes=("no", "yes")),
... )
>>> schema.feature_names()
('age', 'sex=F', 'sex=M')
>>> schema.transform([["25", "M"], ["100", "F"]]).tolist()
[[-0.5, 0.0, 1.0], [1.0, 1.0, 0.0]]
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Categorical", "Label", "Numeric", "Schema", "load_schema"]

SCHEMA_VERSION = 1
MISSING_RULES = ("refuse", "constant", "indicator")
UNSEEN_RULES = ("refuse", "other")
#: What a cell reads as missing unless the schema says otherwise.
DEFAULT_MISSING_VALUES = ("",)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value.strip()


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number")
    return float(value)


def _check_missing(name: str, missing: str, fill: Any) -> None:
    if missing not in MISSING_RULES:
        raise ValueError(f"column {name!r}: missing must be one of {', '.join(MISSING_RULES)}, got {missing!r}")
    if missing == "constant" and fill is None:
        raise ValueError(f"column {name!r}: missing = \"constant\" needs a public fill value")
    if missing == "refuse" and fill is not None:
        raise ValueError(f"column {name!r}: fill applies to missing = \"constant\" or \"indicator\" only")


@dataclass(frozen=True, kw_only=True)
class Numeric:
    """A numeric column with a public range ``[lower, upper]``: clipped, then scaled onto ``[-1, 1]``."""

    name: str
    lower: float
    upper: float
    missing: str = "refuse"
    fill: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _text(self.name, "a column name"))
        where = f"column {self.name!r}"
        object.__setattr__(self, "lower", _number(self.lower, f"{where}: lower"))
        object.__setattr__(self, "upper", _number(self.upper, f"{where}: upper"))
        if not self.lower < self.upper:
            raise ValueError(f"{where}: the range needs lower < upper")
        _check_missing(self.name, self.missing, self.fill)
        if self.fill is not None:
            object.__setattr__(self, "fill", _number(self.fill, f"{where}: fill"))

    @property
    def kind(self) -> str:
        return "numeric"

    def names(self) -> list[str]:
        return [self.name] + ([f"{self.name} missing"] if self.missing == "indicator" else [])

    def scale(self, value: float) -> float:
        """``value`` clipped to the range and mapped onto ``[-1, 1]``."""
        clipped = min(max(value, self.lower), self.upper)
        return 2.0 * (clipped - self.lower) / (self.upper - self.lower) - 1.0


@dataclass(frozen=True, kw_only=True)
class Categorical:
    """A categorical column with public ``levels``, one-hot encoded."""

    name: str
    levels: tuple[str, ...]
    unseen: str = "refuse"
    missing: str = "refuse"
    fill: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _text(self.name, "a column name"))
        where = f"column {self.name!r}"
        if isinstance(self.levels, str) or not isinstance(self.levels, Iterable):
            raise ValueError(f"{where}: levels must be a list of strings")
        levels = tuple(_text(level, f"{where}: a level") for level in self.levels)
        if not levels:
            raise ValueError(f"{where}: levels must name at least one level")
        if len(set(levels)) != len(levels):
            raise ValueError(f"{where}: levels are repeated")
        object.__setattr__(self, "levels", levels)
        if self.unseen not in UNSEEN_RULES:
            raise ValueError(f"{where}: unseen must be one of {', '.join(UNSEEN_RULES)}, got {self.unseen!r}")
        _check_missing(self.name, self.missing, self.fill)
        if self.fill is not None and self.fill not in levels:
            raise ValueError(f"{where}: fill must be one of its levels")

    @property
    def kind(self) -> str:
        return "categorical"

    def names(self) -> list[str]:
        names = [f"{self.name}={level}" for level in self.levels]
        if self.unseen == "other":
            names.append(f"{self.name}=other")
        if self.missing == "indicator":
            names.append(f"{self.name} missing")
        return names


Column = Numeric | Categorical


@dataclass(frozen=True, kw_only=True)
class Label:
    """The label column and its public class set, in the order the model encodes them."""

    column: str
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "column", _text(self.column, "the label column"))
        if isinstance(self.classes, str) or not isinstance(self.classes, Iterable):
            raise ValueError("label: classes must be a list of strings")
        classes = tuple(_text(c, "label: a class") for c in self.classes)
        if len(classes) < 2 or len(set(classes)) != len(classes):
            raise ValueError("label: classes must name at least two distinct classes")
        object.__setattr__(self, "classes", classes)


@dataclass(frozen=True, kw_only=True)
class Schema:
    """Public description of a table: its feature columns, ignored columns and label.

    Attributes
    ----------
    columns : tuple of Numeric or Categorical
        The feature columns, in the order they are encoded.
    label : Label or None
        The label column and its classes (``None``: rows to predict on only).
    drop : tuple of str
        Columns of the file that are not features (an identifier, a free-text
        note); any other column not in ``columns`` is refused, so that a
        column is never left out silently.
    missing_values : tuple of str
        Cell texts (after stripping spaces) that mean "missing"; ``""``
        (an empty cell) by default, ``"?"`` for UCI files.
    draft : bool
        Written by ``privml schema suggest``: some values came from the data.
        :meth:`check_final` refuses a draft.
    """

    columns: tuple[Column, ...]
    label: Label | None = None
    drop: tuple[str, ...] = ()
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES
    draft: bool = False

    def __post_init__(self) -> None:
        columns = tuple(self.columns)
        if not columns or not all(isinstance(c, Numeric | Categorical) for c in columns):
            raise ValueError("a schema needs at least one Numeric or Categorical column")
        names = [c.name for c in columns]
        drop = tuple(_text(d, "a dropped column") for d in self.drop)
        taken = names + list(drop) + ([self.label.column] if self.label is not None else [])
        repeated = sorted({n for n in taken if taken.count(n) > 1})
        if repeated:
            raise ValueError(f"column {repeated[0]!r} is named more than once (features, drop and label)")
        if isinstance(self.missing_values, str):
            raise ValueError("missing_values must be a list of strings")
        missing = tuple(m.strip() if isinstance(m, str) else _text(m, "missing_values") for m in self.missing_values)
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "drop", drop)
        object.__setattr__(self, "missing_values", missing)
        for column in columns:
            if isinstance(column, Categorical):
                clash = [level for level in column.levels if level in missing]
                if clash:
                    raise ValueError(f"column {column.name!r}: level {clash[0]!r} is also a missing value")

    # ----------------------------------------------------------------- encoding
    def feature_names(self) -> tuple[str, ...]:
        """The names of the encoded columns, in order (``"sex=M"``, ``"age missing"``...)."""
        return tuple(name for column in self.columns for name in column.names())

    @property
    def n_features(self) -> int:
        """Width of :meth:`transform`'s output."""
        return len(self.feature_names())

    def norm_bound(self) -> float:
        """A public bound on ``||x||`` of an encoded row: ``sqrt(D)``, ``D`` the number of numeric and
        categorical columns plus the number of indicator columns (each contributes at most 1 to ``||x||^2``)."""
        return math.sqrt(len(self.columns) + sum(c.missing == "indicator" for c in self.columns))

    def feature_columns(self) -> tuple[str, ...]:
        """The file columns the features are read from, in schema order."""
        return tuple(c.name for c in self.columns)

    def check_header(self, header: Sequence[str], *, where: str) -> list[int]:
        """Where each schema column is in ``header``; refuses a missing or undeclared column."""
        known = set(self.feature_columns()) | set(self.drop) | ({self.label.column} if self.label else set())
        for name in header:
            if name not in known:
                raise ValueError(f"{where}: column {name!r} is not in the schema (declare it, or list it under drop)")
        positions = []
        for name in self.feature_columns():
            if name not in header:
                raise ValueError(f"{where}: the schema's column {name!r} is missing from the file")
            positions.append(list(header).index(name))
        return positions

    def transform(
        self,
        rows: Iterable[Sequence[Any]],
        *,
        header: Sequence[str] | None = None,
        where: str = "row",
        lines: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Encode ``rows`` into features (clip and scale, one-hot, fill, indicators).

        A fixed per-record map of public constants: no privacy cost.

        Parameters
        ----------
        rows : iterable of sequences
            Cells as read from a file (strings) or numbers; ``None`` is
            missing. Without ``header``, each row holds the feature columns in
            schema order; with it, the row follows ``header`` (other columns
            are dropped or refused, see :meth:`check_header`).
        header : sequence of str, optional
        where : str
            Names the source in errors (``"data.csv"``).
        lines : sequence of int, optional
            The file line of each row, for errors (default: 1-based row number).

        Returns
        -------
        numpy.ndarray, shape (n, n_features), float64

        Raises
        ------
        ValueError
            One line naming the source, line and column of a cell that does not
            fit (never the cell's value, which may be private).
        """
        positions = (
            list(range(len(self.columns))) if header is None else self.check_header(list(header), where=where)
        )
        width = len(positions) if header is None else len(header)
        out: list[list[float]] = []
        for i, row in enumerate(rows):
            line = lines[i] if lines is not None else i + 1
            place = f"{where} line {line}" if lines is not None else f"{where} {line}"
            if len(row) != width:
                raise ValueError(f"{place}: {len(row)} cells, expected {width}")
            encoded: list[float] = []
            for column, j in zip(self.columns, positions, strict=True):
                encoded += self._encode(column, row[j], place)
            out.append(encoded)
        return np.asarray(out, dtype=np.float64).reshape(len(out), self.n_features)

    def _missing(self, cell: Any) -> bool:
        return cell is None or (isinstance(cell, str) and cell.strip() in self.missing_values)

    def _encode(self, column: Column, cell: Any, place: str) -> list[float]:
        where = f"{place}, column {column.name!r}"
        missing = self._missing(cell)
        if missing and column.missing == "refuse":
            raise ValueError(f"{where}: the cell is missing and the schema refuses missing values there "
                             "(declare missing = \"constant\" or \"indicator\")")
        flag = [1.0 if missing else 0.0] if column.missing == "indicator" else []
        if isinstance(column, Numeric):
            if missing:
                value = 0.0 if column.fill is None else column.scale(column.fill)
                return [value, *flag]
            return [column.scale(_numeric_cell(cell, where)), *flag]
        block = [0.0] * (len(column.levels) + (column.unseen == "other"))
        level = column.fill if missing else _categorical_cell(cell, where)
        if level is not None:
            if level in column.levels:
                block[column.levels.index(level)] = 1.0
            elif column.unseen == "other":
                block[-1] = 1.0
            else:
                raise ValueError(f"{where}: the cell is not one of the schema's levels "
                                 "(add it to levels, or declare unseen = \"other\")")
        return [*block, *flag]

    # --------------------------------------------------------------- checking
    def check_final(self, where: str) -> None:
        """Refuse a draft (values from the data not yet replaced by public ones)."""
        if self.draft:
            raise ValueError(
                f"{where} is a draft (draft = true): replace every value marked FROM THE DATA by public knowledge, "
                "then delete the line draft = true"
            )

    def require_label(self, where: str) -> Label:
        if self.label is None:
            raise ValueError(f"{where} names no label column: add a [label] table with column and classes")
        return self.label

    # --------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (read back by :meth:`from_dict`); stored in model files."""
        out: dict[str, Any] = {"version": SCHEMA_VERSION}
        if self.draft:
            out["draft"] = True
        out["missing_values"] = list(self.missing_values)
        if self.drop:
            out["drop"] = list(self.drop)
        if self.label is not None:
            out["label"] = {"column": self.label.column, "classes": list(self.label.classes)}
        out["columns"] = [_column_dict(c) for c in self.columns]
        return out

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "schema") -> Schema:
        """Build a schema from :meth:`to_dict`'s form (or a TOML file's tables).

        Raises
        ------
        ValueError
            One line naming ``where`` and the column at fault.
        """
        try:
            return _from_dict(data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    def to_toml(self, *, comments: Mapping[tuple[str, str], str] | None = None) -> str:
        """The schema as TOML text; ``comments[(column, key)]`` is written after that value (``column`` is
        ``"[label]"`` for the label table)."""
        notes = dict(comments or {})

        def line(key: str, value: Any, owner: str) -> str:
            note = notes.get((owner, key))
            return f"{key} = {_toml_value(value)}" + (f"  # {note}" if note else "")

        out = ["# privml data schema: every value here is a public input (docs: 'Your own data').",
               f"version = {SCHEMA_VERSION}"]
        if self.draft:
            out.append("draft = true  # delete this line once every value marked FROM THE DATA is replaced")
        out.append(line("missing_values", list(self.missing_values), ""))
        if self.drop:
            out.append(line("drop", list(self.drop), ""))
        if self.label is not None:
            out += ["", "[label]", line("column", self.label.column, "[label]"),
                    line("classes", list(self.label.classes), "[label]")]
        for column in self.columns:
            out += ["", "[[columns]]"]
            out += [line(key, value, column.name) for key, value in _column_dict(column).items()]
        return "\n".join(out) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write ``path`` as TOML (``.toml``) or JSON (any other suffix)."""
        path = Path(path)
        text = self.to_toml() if path.suffix == ".toml" else json.dumps(self.to_dict(), indent=2) + "\n"
        path.write_text(text, encoding="utf-8")
        return path


def _numeric_cell(cell: Any, where: str) -> float:
    if isinstance(cell, bool):
        raise ValueError(f"{where}: the cell is not a number")
    if isinstance(cell, int | float | np.integer | np.floating):
        value = float(cell)
    else:
        try:
            value = float(str(cell).strip())
        except ValueError:
            raise ValueError(f"{where}: the cell is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: the cell is not finite (NaN or inf)")
    return value


def _categorical_cell(cell: Any, where: str) -> str:
    if isinstance(cell, str):
        return cell.strip()
    if isinstance(cell, int | np.integer) and not isinstance(cell, bool):
        return str(int(cell))  # a level "1" sent as the number 1 (JSON)
    raise ValueError(f"{where}: the cell is not a level (a string)")


def _column_dict(column: Column) -> dict[str, Any]:
    out: dict[str, Any] = {"name": column.name, "kind": column.kind}
    if isinstance(column, Numeric):
        out.update(lower=column.lower, upper=column.upper)
    else:
        out.update(levels=list(column.levels), unseen=column.unseen)
    out["missing"] = column.missing
    if column.fill is not None:
        out["fill"] = column.fill
    return out


# from_the_data: a JSON draft's list of the values read from the data (JSON has no comments).
_TOP_KEYS = {"version", "draft", "missing_values", "drop", "label", "columns", "from_the_data"}
_COLUMN_KEYS = {"numeric": {"name", "kind", "lower", "upper", "missing", "fill"},
                "categorical": {"name", "kind", "levels", "unseen", "missing", "fill"}}


def _from_dict(data: Any) -> Schema:
    if not isinstance(data, dict):
        raise ValueError("a schema must be a table (a JSON object)")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})")
    version = data.get("version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ValueError(f"schema version {version!r} is not supported (this privml reads version {SCHEMA_VERSION})")
    draft = data.get("draft", False)
    if not isinstance(draft, bool):
        raise ValueError("draft must be true or false")
    if "from_the_data" in data and not draft:
        raise ValueError("from_the_data lists values read from the data: replace them, then delete it with draft")
    raw_columns = data.get("columns")
    if not isinstance(raw_columns, list) or not raw_columns:
        raise ValueError("columns must be a non-empty list of tables ([[columns]])")
    columns = [_column(i, c) for i, c in enumerate(raw_columns)]
    label = data.get("label")
    if label is not None:
        if not isinstance(label, dict) or set(label) - {"column", "classes"}:
            raise ValueError("label must be a table with keys column and classes")
        if not isinstance(label.get("classes"), list):
            raise ValueError("label: classes must be a list of strings")
        label = Label(column=label.get("column", ""), classes=tuple(label["classes"]))
    lists = {}
    for key, default in (("missing_values", DEFAULT_MISSING_VALUES), ("drop", ())):
        value = data.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} must be a list of strings")
        lists[key] = tuple(value)
    return Schema(columns=tuple(columns), label=label, draft=draft, **lists)


def _column(i: int, raw: Any) -> Column:
    if not isinstance(raw, dict):
        raise ValueError(f"columns[{i}] must be a table")
    name = raw.get("name")
    where = f"column {name!r}" if isinstance(name, str) else f"columns[{i}]"
    kind = raw.get("kind")
    if kind not in _COLUMN_KEYS:
        raise ValueError(f"{where}: kind must be numeric or categorical")
    unknown = sorted(set(raw) - _COLUMN_KEYS[kind])
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} for a {kind} column")
    fields = {k: v for k, v in raw.items() if k != "kind"}
    if kind == "numeric":
        for key in ("lower", "upper"):
            if key not in fields:
                raise ValueError(f"{where}: a numeric column needs {key} (a public bound)")
        return Numeric(**fields)
    if not isinstance(fields.get("levels"), list):
        raise ValueError(f"{where}: a categorical column needs levels (a list of strings)")
    fields["levels"] = tuple(fields["levels"])
    return Categorical(**fields)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, float):
        return repr(value)  # finite by construction; repr round-trips
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ValueError(f"cannot write {type(value).__name__} as TOML")


def load_schema(path: str | os.PathLike[str]) -> Schema:
    """Read a schema file: TOML (``.toml``) or JSON (any other suffix).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        One line naming the file (and the TOML/JSON line, or the column) at fault.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"schema file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid {'TOML' if path.suffix == '.toml' else 'JSON'} ({exc})") from None
    return Schema.from_dict(data, where=str(path))

