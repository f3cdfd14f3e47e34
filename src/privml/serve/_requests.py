"""Validation of request bodies: bytes in, a checked float matrix out.

Everything here runs before the ledger is charged, and every failure is a
:class:`RequestError` carrying the HTTP status to answer with, so hostile
input can never reach the model or the budget.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from privml.exceptions import PrivmlError

__all__ = ["PredictRequest", "RequestError", "content_length", "parse_predict_body"]

_FIELDS = frozenset({"rows", "probabilities"})


class RequestError(PrivmlError):
    """A client error: ``status`` and a one-line ``message`` for the JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def content_length(values: list[str], transfer_encoding: str | None) -> int | None:
    """The body length a request declares in its ``Content-Length`` header(s) ``values``; None without one.

    Raises :class:`RequestError` 411 for a chunked or encoded body (``transfer_encoding`` given) and 400 for a
    malformed or repeated header: both transports answer alike.
    """
    if transfer_encoding is not None:
        raise RequestError(411, "chunked or encoded bodies are not accepted: send a Content-Length")
    if not values:
        return None
    text = values[0].strip()
    # ASCII digits only: str.isdigit() also accepts characters such as "²" that int() rejects.
    if len(values) > 1 or not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise RequestError(400, "invalid Content-Length header")
    return int(text)


@dataclass(frozen=True)
class PredictRequest:
    """A validated ``POST /predict`` body."""

    rows: np.ndarray  # float64, shape (n, d), finite
    probabilities: bool


def _invalid(message: str) -> NoReturn:
    raise RequestError(422, message)


def _reject_constant(name: str) -> NoReturn:
    # Python's json accepts NaN and Infinity, which are not JSON.
    _invalid(f"body is not valid JSON: {name} is not a JSON number")


def _finite(value: Any, i: int, j: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        _invalid(f"rows[{i}][{j}] must be a number, got {type(value).__name__}")
    try:
        out = float(value)
    except OverflowError:
        _invalid(f"rows[{i}][{j}] is too large for a float")
    if not math.isfinite(out):
        _invalid(f"rows[{i}][{j}] must be finite")
    return out


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members, refusing a repeated name (``json`` would keep the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:40]!r}")
        out[key] = value
    return out


def decode_json(body: bytes) -> Any:
    """Strict JSON (UTF-8, no NaN/Infinity, no repeated keys); errors are 422."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        _invalid("body is not UTF-8 text")
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        _invalid("body is not acceptable JSON: nested too deeply")
    except ValueError as exc:  # JSONDecodeError, or an integer with too many digits
        _invalid(f"body is not valid JSON: {str(exc).splitlines()[0]}")


def parse_predict_body(body: bytes, *, max_rows: int, text: bool = False) -> PredictRequest:
    """Validate a ``POST /predict`` body.

    The body must be a JSON object ``{"rows": [[number, ...], ...],
    "probabilities": bool}`` (``probabilities`` optional, default false),
    with 1 to ``max_rows`` rows of equal, non-zero width and finite numbers.
    The width against the model is checked by the service (after the
    model's preprocessing). With ``text`` (a model trained through a data
    schema) a cell may also be a string (a categorical level) or ``null``
    (missing); the rows are then an object array for the schema to check.

    Raises
    ------
    RequestError
        Status 422 with a one-line reason.
    """
    data = decode_json(body)
    if not isinstance(data, dict):
        _invalid(f"body must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        _invalid(f"unknown field(s) {', '.join(repr(k) for k in unknown)}: expected 'rows' and 'probabilities'")
    if "rows" not in data:
        _invalid("missing field 'rows'")
    probabilities = data.get("probabilities", False)
    if not isinstance(probabilities, bool):
        _invalid(f"'probabilities' must be true or false, got {type(probabilities).__name__}")
    rows = data["rows"]
    if not isinstance(rows, list):
        _invalid(f"'rows' must be a list of rows, got {type(rows).__name__}")
    if not rows:
        _invalid("'rows' is empty: send at least one row")
    if len(rows) > max_rows:
        _invalid(f"too many rows: {len(rows)} > {max_rows} per request")
    width = None
    matrix = []
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            _invalid(f"rows[{i}] must be a list of numbers, got {type(row).__name__}")
        if width is None:
            width = len(row)
            if width == 0:
                _invalid("rows[0] is empty")
        elif len(row) != width:
            _invalid(f"rows[{i}] has {len(row)} values, rows[0] has {width}: rows must have equal width")
        matrix.append([v if text and (v is None or isinstance(v, str)) else _finite(v, i, j)
                       for j, v in enumerate(row)])
    if text:
        cells = np.empty((len(matrix), width or 0), dtype=object)
        cells[:] = matrix
        return PredictRequest(rows=cells, probabilities=probabilities)
    return PredictRequest(rows=np.asarray(matrix, dtype=np.float64), probabilities=probabilities)
