"""``privml``: entry point and subcommand registry."""

from __future__ import annotations

import sys

from privml import __version__
from privml.cli import account, audit, datasets, predict, select, serve, study, train
from privml.cli._common import EXIT_USAGE, CliError, StrictParser
from privml.exceptions import ConvergenceError

# Each subcommand module exposes register(subparsers) and sets `handler`.
SUBCOMMANDS = (account, train, predict, datasets, serve, select, study, audit)


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
    return parser


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = getattr(args, "prog", f"privml {args.command}")
    try:
        args.handler(args)
    except (CliError, ValueError, FileNotFoundError) as exc:
        # Bad arguments, unreadable or missing data: one line, exit 2, no traceback.
        # Library validation messages are one line by construction.
        sys.stderr.write(f"{prog}: error: {_one_line(exc)}\n")
        return EXIT_USAGE
    except ConvergenceError as exc:
        # Nothing was released: the optimiser did not reach the precision the proof needs.
        sys.stderr.write(f"{prog}: error: {_one_line(exc)}\n")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
