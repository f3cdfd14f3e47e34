"""``privml``: entry point and subcommand registry."""

from __future__ import annotations

import sys

from privml import __version__
from privml.cli import account, datasets, predict, train
from privml.cli._common import EXIT_USAGE, CliError, StrictParser

# Each subcommand module exposes register(subparsers) and sets `handler`.
SUBCOMMANDS = (account, train, predict, datasets)


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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.handler(args)
    except (CliError, ValueError) as exc:
        # Validation errors from the library are one line by construction.
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        prog = getattr(args, "prog", f"privml {args.command}")
        sys.stderr.write(f"{prog}: error: {message}\n")
        return EXIT_USAGE
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
