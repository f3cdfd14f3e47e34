"""User data: ``csv:PATH`` and ``npz:PATH``.

CSV: a header row is required; the label column (default ``label``) may hold
numbers or strings, stripped of surrounding spaces, and no empty cell (see
:mod:`privml.data._labels` for how labels match the class set); every other
column must be numeric (plain ASCII decimals) and finite, and the last record
must end with a line break (a file cut short inside it is refused). NPZ: arrays
``X`` and ``y``, or ``X_train, y_train, X_test, y_test``; it is read with
``allow_pickle=False`` (a pickled object array could run code), so labels
must be numeric or fixed-width strings. Each member's CRC-32 and ``.npy``
header are checked: a damaged, truncated or crafted file is refused in one line.

Without a separate test file (``test_path``) or split arrays, the records are
split 80/20 by :func:`privml.data._split.fixed_split`.
"""

from __future__ import annotations

import csv
import math
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privml.data._schema import Schema
from privml.data._split import fixed_split
from privml.exceptions import PrivmlError


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
    _check_complete(path)
    try:
        return _read_csv_cells(path, label_column)
    except (csv.Error, UnicodeDecodeError) as exc:  # e.g. a cell over the csv module's field limit
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path} is not a readable CSV file ({reason})") from None


def _check_complete(path: Path) -> None:
    # A CSV has no checksum: a copy cut short inside its last record can still parse (0.125 read as 0.12),
    # so the last record must end with a line break, as every CSV writer ends it. A cut at a line break
    # leaves a shorter well-formed file, which no reader can tell from one written so.
    with open(path, "rb") as handle:
        if handle.seek(0, 2) > 0:
            handle.seek(-1, 2)
            if handle.read(1) not in (b"\n", b"\r"):
                raise ValueError(f"{path} does not end with a line break: its last record may have been cut "
                                 "short (an incomplete copy?); if the file is complete, end it with a newline")


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
    :meth:`~privml.data.Schema.transform` (ranges, levels, missing
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


def csv_feature_names(path: str | Path, label_column: str) -> list[str]:
    """The feature columns of a CSV's header (all but ``label_column``), in file order: public, the file's layout
    (call it once :func:`load_csv` has read and checked the file)."""
    with open(path, newline="", encoding="utf-8") as fh:
        header = [h.strip() for h in next(csv.reader(fh), [])]
    return [name for name in header if name != label_column]


def is_number(text: str) -> bool:
    """Whether a CSV cell reads as a float written in ASCII, without underscores, padded by spaces or tabs only
    (the header test and the cell checks, here and in privml predict)."""
    text = text.strip(" \t")
    if not text.isascii() or "_" in text or text != text.strip():
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _to_float(cells: np.ndarray, *, path: Path, names: list[str], lines: np.ndarray) -> np.ndarray:
    try:
        # Plain ASCII decimals only: Python's float() also reads '1_5' as 15 and other scripts' digits, so a
        # changed byte could turn into another number instead of a refusal.
        # Spaces and tabs around a number are padding; other whitespace (form feeds, the ASCII separators
        # Python counts as whitespace) is damage.
        ascii_cells = np.char.strip(cells, " \t").astype(np.bytes_)
        if np.any(np.char.find(ascii_cells, b"_") >= 0) or np.any(np.char.strip(ascii_cells) != ascii_cells):
            raise ValueError("underscore or whitespace")
        X = ascii_cells.astype(np.float64)
    except (ValueError, UnicodeEncodeError):
        # Fast path failed: find the first offending cell for the message.
        for i, row in enumerate(cells):
            for j, cell in enumerate(row):
                if not is_number(cell):
                    raise ValueError(
                        # The place, not the value (a private record's): the user finds it there.
                        f"{path} line {lines[i]}, column {names[j]!r}: the cell is not a number (a categorical "
                        "column needs a schema naming its public levels)"
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
    if parts[0].shape[1:] != parts[2].shape[1:]:
        raise ValueError(f"{path}: test features have shape {parts[2].shape[1:]} per record, training features "
                         f"{parts[0].shape[1:]}")
    X_train, y_train, X_test, y_test = (np.asarray(p) for p in parts)
    return UserSplits(X_train, y_train, X_test, y_test, source=source)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, or one-line ``ValueError`` for any file that is not one as written.

    Read member by member rather than by ``np.load``, so that every way a file can be damaged or crafted is
    refused before anything is allocated or trained: not a zip, truncated, a member whose CRC-32 does not match
    (any changed byte of an array), a ``.npy`` header that claims more or fewer elements than the member holds,
    and arrays privml does not train on (object, structured, complex, dates). numpy.savez writes no other kind.
    """
    # np.load takes any file that is not a zip or .npy for a pickle and then speaks of pickled object arrays
    # (e.g. a CSV given as the --test file of npz: data): say plainly that the file is not an .npz.
    with open(path, "rb") as handle:
        if handle.read(2) != b"PK":  # every zip (npz) starts so
            raise ValueError(f"{path} is not an .npz file (a zip of arrays, as numpy.savez writes); "
                             "npz: data and its test file must both be .npz")
    try:
        with zipfile.ZipFile(path) as archive:
            return {_array_name(info.filename, path): _read_member(archive, info, path)
                    for info in archive.infolist()}
    except _Refused:
        raise
    except (zipfile.BadZipFile, zlib.error, struct.error, EOFError, NotImplementedError, RuntimeError, OSError,
            ValueError, OverflowError) as exc:
        # A truncated or damaged archive (a CRC mismatch reads "Bad CRC-32"; a damaged directory can make
        # zipfile fail in struct or seek), or a zip feature numpy never writes (encryption, another
        # compression): the file is not the one numpy.savez wrote.
        raise ValueError(f"{path} is not a readable .npz file: damaged or truncated ({_first_line(exc)})") from None


class _Refused(PrivmlError, ValueError):
    """An .npz read whole but refused for what it holds (its message says why)."""


def _array_name(member: str, path: Path) -> str:
    if not member.endswith(".npy"):
        raise _Refused(f"{path}: member {member!r} is not an array (.npy); an .npz holds arrays only")
    return member[: -len(".npy")]


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> np.ndarray:
    name = info.filename[: -len(".npy")]
    with archive.open(info) as member:
        try:
            version = np.lib.format.read_magic(member)
            shape, fortran_order, dtype = _NPY_HEADERS[version](member)
        except (ValueError, KeyError) as exc:  # not .npy, or version 3.0 (only for unicode field names)
            raise _Refused(f"{path}: array {name!r} has no readable .npy header ({_first_line(exc)})") from None
        if dtype.hasobject:
            raise _Refused(
                f"{path}: array {name!r} is an object array; privml reads .npz with allow_pickle=False because a "
                "pickle can run code: save numeric features and numeric or fixed-width string labels"
            )
        if dtype.names is not None or dtype.subdtype is not None or dtype.kind not in "biufUS":
            raise _Refused(f"{path}: array {name!r} has dtype {dtype}; privml reads real numbers (features) and "
                           "real numbers or fixed-width strings (labels), not complex, structured or other arrays")
        # The header's shape against the member's size (from the zip directory, itself checked by the CRC and
        # the read below): a header that lies is refused before its array is allocated.
        expected = math.prod(shape) * dtype.itemsize
        if member.tell() + expected != info.file_size:
            raise _Refused(f"{path}: array {name!r} claims shape {shape} of {dtype} ({expected} bytes), but its "
                           f"member holds {info.file_size - member.tell()} bytes of data")
        data = member.read(expected)
        member.read()  # to the member's end, where zipfile checks the CRC-32 of what was read
    array = np.frombuffer(data, dtype=dtype, count=math.prod(shape))
    return array.reshape(shape, order="F" if fortran_order else "C").copy()


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _check_pair(X: np.ndarray, y: np.ndarray, *, what: str) -> None:
    if X.ndim < 2 or X.dtype.kind not in "biuf":  # bool, integers, floats: not complex
        raise ValueError(f"{what}: features must be a numeric array with a record axis, got {X.dtype} {X.shape}")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"{what}: labels must have shape ({X.shape[0]},), got {y.shape}")
    finite = np.isfinite(X.reshape(X.shape[0], -1))
    if not np.all(finite):
        i, j = (int(k) for k in np.argwhere(~finite)[0])
        raise ValueError(f"{what}: feature {j} of record {i} is not finite (NaN or inf)")
