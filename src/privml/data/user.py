"""User data: ``csv:PATH`` and ``npz:PATH``.

CSV: a header row is required; the label column (default ``label``) may hold
numbers or strings, stripped of surrounding spaces, and no empty cell (see
:mod:`privml.data.labels` for how labels match the class set); every other
column must be numeric and finite. NPZ: arrays
``X`` and ``y``, or ``X_train, y_train, X_test, y_test``; it is read with
``allow_pickle=False`` (a pickled object array could run code), so labels
must be numeric or fixed-width strings.

Without a separate test file (``test_path``) or split arrays, the records are
split 80/20 by :func:`privml.data.split.fixed_split`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privml.data.schema import Schema
from privml.data.split import fixed_split


@dataclass(frozen=True, eq=False)
class UserSplits:
    """Features and raw (not yet encoded) labels of user data."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    source: str
    # File line of each record (CSV only), for error messages about labels.
    lines_train: np.ndarray | None = None
    lines_test: np.ndarray | None = None


def load_csv(path: Path, *, label_column: str, test_path: Path | None, schema: Schema | None = None) -> UserSplits:
    """Read a CSV file (and optionally a separate test CSV with the same header).

    With ``schema`` the cells are encoded by it (:func:`read_csv_schema`)
    and its label column is read; ``label_column`` is then unused.

    Raises
    ------
    FileNotFoundError
        If a file does not exist.
    ValueError
        Naming the file, line and column of a missing label column, a
        non-numeric or non-finite feature, or a row of the wrong length.
    """
    def read(p: Path) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        return read_csv(p, label_column=label_column) if schema is None else read_csv_schema(p, schema)

    header, X, y, lines = read(path)
    if test_path is None:
        train, test = fixed_split(X.shape[0])
        return UserSplits(
            X[train], y[train], X[test], y[test],
            source=f"{path} (fixed 80/20 split, seed 0)",
            lines_train=lines[train], lines_test=lines[test],
        )  # fmt: skip
    test_header, X_test, y_test, lines_test = read(test_path)
    if test_header != header:
        raise ValueError(f"{test_path}: header {test_header} differs from the training file's {header}")
    return UserSplits(
        X, y, X_test, y_test, source=f"{path} (train), {test_path} (test)", lines_train=lines, lines_test=lines_test
    )


def read_csv(path: Path, *, label_column: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Parse one CSV file into features, raw labels and the line of each record.

    Returns
    -------
    header : list of str
        The column names.
    X : numpy.ndarray, shape (n, d), float64
        All columns but the label, in file order.
    y : numpy.ndarray of str, shape (n,)
        The label cells, stripped.
    lines : numpy.ndarray of int, shape (n,)
        The 1-based file line of each record (the header is line 1).
    """
    try:
        return _read_csv_cells(path, label_column)
    except (csv.Error, UnicodeDecodeError) as exc:  # e.g. a cell over the csv module's field limit
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path} is not a readable CSV file ({reason})") from None


def _read_csv_cells(path: Path, label_column: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    header, table, line_numbers, label_at = _read_table(path, label_column)
    feature_names = [h for j, h in enumerate(header) if j != label_at]
    if not feature_names:
        raise ValueError(f"{path}: no feature columns besides {label_column!r}")
    features = np.delete(table, label_at, axis=1)
    X = _to_float(features, path=path, names=feature_names, lines=line_numbers)
    y = np.char.strip(table[:, label_at])
    return header, X, y, line_numbers


def read_csv_schema(path: Path, schema: Schema) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Parse one CSV file through ``schema``: its feature columns encoded, the label cells and each record's line.

    Like :func:`read_csv`, with the cells read and checked by
    :meth:`~privml.data.schema.Schema.transform` (ranges, levels, missing
    values) and the label column the schema's.
    """
    label = schema.require_label(str(path))
    try:
        header, table, lines, label_at = _read_table(path, label.column)
    except (csv.Error, UnicodeDecodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path} is not a readable CSV file ({reason})") from None
    X = schema.transform(table.tolist(), header=header, where=str(path), lines=lines.tolist())
    return header, X, np.char.strip(table[:, label_at]), lines


def _read_table(path: Path, label_column: str) -> tuple[list[str], np.ndarray, np.ndarray, int]:
    """The header, the cells (str), the line of each record and where the label column is."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path} is empty; a header row is required")
        header = [h.strip() for h in header]
        if all(is_number(h) for h in header):
            raise ValueError(
                f"{path}: the first row {header} looks like data; a header row naming the columns is required"
            )
        if label_column not in header:
            raise ValueError(f"{path}: label column {label_column!r} not found in the header {header}")
        if len(set(header)) != len(header):
            raise ValueError(f"{path}: duplicate column names in the header {header}")
        label_at = header.index(label_column)
        cells: list[list[str]] = []
        lines: list[int] = []
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{path} line {reader.line_num}: {len(row)} fields, the header has {len(header)}")
            if not row[label_at].strip():  # a missing label is not a class ''
                raise ValueError(f"{path} line {reader.line_num}: empty label in column {label_column!r}")
            cells.append(row)
            lines.append(reader.line_num)
    if not cells:
        raise ValueError(f"{path} has a header but no records")
    return header, np.array(cells, dtype=str), np.array(lines, dtype=np.int64), label_at


def is_number(text: str) -> bool:
    """Whether a CSV cell reads as a float (the header test and the cell checks, here and in privml predict)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _to_float(cells: np.ndarray, *, path: Path, names: list[str], lines: np.ndarray) -> np.ndarray:
    try:
        X = np.char.strip(cells).astype(np.float64)
    except ValueError:
        # Fast path failed: find the first offending cell for the message.
        for i, row in enumerate(cells):
            for j, cell in enumerate(row):
                if not is_number(cell):
                    raise ValueError(
                        # The place, not the value (a private record's): the user finds it there.
                        f"{path} line {lines[i]}, column {names[j]!r}: the cell is not a number"
                    ) from None
        raise
    bad = ~np.isfinite(X)
    if np.any(bad):
        i, j = (int(k) for k in np.argwhere(bad)[0])
        raise ValueError(
            f"{path} line {lines[i]}, column {names[j]!r}: the cell is not finite (NaN or inf)"
        )
    return X


def load_npz(path: Path, *, test_path: Path | None) -> UserSplits:
    """Read ``X, y`` or ``X_train, y_train, X_test, y_test`` from an ``.npz`` file.

    Arrays with more than two dimensions (images) are kept as they are;
    flattening is part of preprocessing.

    Raises
    ------
    ValueError
        If arrays are missing, object arrays, non-numeric or non-finite
        features, or of mismatched lengths.
    """
    arrays = _read_npz(path)
    if {"X_train", "y_train", "X_test", "y_test"} <= arrays.keys():
        if test_path is not None:
            raise ValueError(f"{path} already holds X_test and y_test; do not pass test_path as well")
        parts = (arrays["X_train"], arrays["y_train"], arrays["X_test"], arrays["y_test"])
        source = str(path)
    elif {"X", "y"} <= arrays.keys():
        X, y = arrays["X"], arrays["y"]
        _check_pair(X, y, what=f"{path} X/y")
        if test_path is None:
            train, test = fixed_split(X.shape[0])
            parts = (X[train], y[train], X[test], y[test])
            source = f"{path} (fixed 80/20 split, seed 0)"
        else:
            test_arrays = _read_npz(test_path)
            if not {"X", "y"} <= test_arrays.keys():
                raise ValueError(f"{test_path} must hold arrays X and y, found {sorted(test_arrays)}")
            parts = (X, y, test_arrays["X"], test_arrays["y"])
            source = f"{path} (train), {test_path} (test)"
    else:
        raise ValueError(
            f"{path} must hold arrays X and y, or X_train, y_train, X_test, y_test; found {sorted(arrays)}"
        )
    for split, (X, y) in (("train", parts[:2]), ("test", parts[2:])):
        _check_pair(X, y, what=f"{path} {split}")
    X_train, y_train, X_test, y_test = (np.asarray(p) for p in parts)
    return UserSplits(X_train, y_train, X_test, y_test, source=source)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    # np.load takes any file that is not a zip or .npy for a pickle and then speaks of pickled object arrays
    # (e.g. a CSV given as the --test file of npz: data): say plainly that the file is not an .npz.
    with open(path, "rb") as handle:
        if handle.read(2) != b"PK":  # every zip (npz) starts so
            raise ValueError(f"{path} is not an .npz file (a zip of arrays, as numpy.savez writes); "
                             "npz: data and its test file must both be .npz")
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except ValueError as exc:
        raise ValueError(
            f"{path} holds an object array ({exc}); privml reads .npz with allow_pickle=False because a pickle can "
            "run code: save numeric features and numeric or fixed-width string labels"
        ) from exc


def _check_pair(X: np.ndarray, y: np.ndarray, *, what: str) -> None:
    if X.ndim < 2 or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"{what}: features must be a numeric array with a record axis, got {X.dtype} {X.shape}")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"{what}: labels must have shape ({X.shape[0]},), got {y.shape}")
    finite = np.isfinite(X.reshape(X.shape[0], -1))
    if not np.all(finite):
        i, j = (int(k) for k in np.argwhere(~finite)[0])
        raise ValueError(f"{what}: feature {j} of record {i} is not finite (NaN or inf)")
