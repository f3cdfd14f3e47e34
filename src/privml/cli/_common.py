"""Shared plumbing for subcommands: strict number parsing, output, errors.

Contract for every subcommand: with ``--json`` stdout carries exactly one JSON
object on success; progress and logs go to stderr; bad arguments exit with
status 2 and a one-line message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from privml.io import json_safe

EXIT_USAGE = 2


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class StrictParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def finite_float(text: str) -> float:
    """argparse type: a finite real number (rejects nan, inf and non-numbers)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def integer(text: str) -> int:
    """argparse type: an integer (``1e3`` and ``1000.0`` are accepted when integral)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not math.isfinite(value) or not value.is_integer():
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    return int(value)


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def emit(result: dict, *, as_json: bool, render: Callable[[dict], str]) -> None:
    """Print ``result`` as one JSON object or as human-readable text."""
    if as_json:
        sys.stdout.write(json.dumps(json_safe(result), allow_nan=False) + "\n")
    else:
        sys.stdout.write(render(result).rstrip("\n") + "\n")


def table(rows: list[tuple[str, str]]) -> str:
    """Two aligned columns."""
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def fmt(x: float | None, digits: int = 6) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}g}"
