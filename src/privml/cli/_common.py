"""Shared plumbing for subcommands: strict number parsing, output, errors.

Contract for every subcommand: with ``--json`` stdout carries exactly one JSON
object on success; progress and logs go to stderr; bad arguments exit with
status 2 and a one-line message on stderr, never a traceback. A batch command
(many runs, each of which may fail on its own) still prints its result, then
exits with status 1 when any run failed, saying how many on stderr and each
distinct error once, one line each (:func:`report_failures`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from privml.exceptions import PrivacyLeakWarning, PrivmlError
from privml.release import reveal_nonprivate

EXIT_FAILED = 1
EXIT_USAGE = 2
#: The public constant feature appended to every record of a built-in dataset (privml.data.add_bias_feature)
#: by ``train``, ``select`` and ``audit``.
BIAS = 0.5
#: ``--device`` of ``predict`` and ``serve`` (an error for files that are not CNNs)
DEVICE_HELP = "auto (default), cpu, cuda or cuda:N: where a CNN model file (dpsgd-cnn) runs"


#: Each command's one-line help, as ``privml --help`` lists them (in that order) and the command's own parser says.
COMMAND_HELP: dict[str, str] = {
    "account": "compute or calibrate privacy guarantees",
    "train": "train a private model (linear or CNN) and report its test accuracy and guarantee",
    "predict": "predict labels for rows in a CSV with a saved model",
    "datasets": "list datasets and whether each is available",
    "serve": "serve private predictions over HTTP with an enforced query budget",
    "select": "find the most private model that meets an error target, with its ex-post privacy",
    "study": "run the trade-off study: which private method to use for your n, d, k, epsilon, delta and budget",
    "schema": "write a draft schema (public ranges, levels, classes) for a CSV",
    "audit": "lower-bound a training method's epsilon empirically (canary audit) and measure membership leakage",
}


def add_command(
    subparsers: Any,
    name: str,
    handler: Callable[[argparse.Namespace], Any] | None = None,
    *,
    summary: str | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """The parser of a command that runs ``handler``, with its one-line help ``summary`` (a top-level command's
    is :data:`COMMAND_HELP`'s).

    ``handler`` gets the parsed arguments; errors name the command by its ``prog``. A command with actions
    of its own (``privml study run``) has none: each action has its handler.
    """
    parser = subparsers.add_parser(name, help=COMMAND_HELP[name] if summary is None else summary,
                                   description=description)
    if handler is not None:
        parser.set_defaults(handler=handler, prog=parser.prog)
    return parser


class CliError(PrivmlError):
    """A user error: printed as one line, exit status 2."""


def add_accountant_option(parser: Any, choices: tuple[str, ...], help_text: str) -> None:
    """``--accountant``, privml's one name for it, as in the estimators."""
    # Default None, not "auto": a value given by the user must be told apart from none, so that it is
    # applied (or refused) rather than taken for the default.
    parser.add_argument("--accountant", choices=choices, default=None, help=help_text)


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


def seed_integer(text: str) -> int:
    """argparse type of ``--seed``: a non-negative integer (numpy's generators refuse a negative seed, and would
    only say so after the data were read, without naming the option)."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def refuse_seed_with_ledger(seed: int | None, ledger: str | None) -> None:
    """``--seed`` with ``--ledger``: refused before anything opens or is charged.

    Runs (and restarts) that share a persistent budget would draw the same
    noise, so subtracting the answers of two of them cancels it.
    """
    if seed is not None and ledger is not None:
        raise CliError("a fixed --seed replays the same noise in every run that shares --ledger's budget, so "
                       "differences of answers would cancel it: --seed (for tests only) cannot be used with --ledger")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_nonprivate_flag(parser: argparse.ArgumentParser) -> None:
    """``--show-nonprivate``: the opt-in of the release rule (:mod:`privml.release`)."""
    parser.add_argument(
        "--show-nonprivate",
        action="store_true",
        help="also print values computed from the private data without noise (solver diagnostics, exact scores "
        "on private held-out rows, timings); they are NOT covered by the guarantee, and a warning says so",
    )


def nonprivate_block(args: argparse.Namespace, values: dict[str, Any], *, what: str) -> dict[str, Any]:
    """``{"nonprivate": values}`` when the user passed ``--show-nonprivate`` (warning on stderr), else ``{}``."""
    if not getattr(args, "show_nonprivate", False) or not values:
        return {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shown = reveal_nonprivate(values, what=what)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return {"nonprivate": shown}


def _warning_line(category: type[Warning], message: Warning | str) -> str:
    """The CLI's one line for a warning: ``warning: PrivacyLeakWarning: <message>``, or ``warning: <message>``."""
    prefix = f"{category.__name__}: " if issubclass(category, PrivacyLeakWarning) else ""
    return f"warning: {prefix}{message}"


@contextlib.contextmanager
def leak_warnings_as_lines() -> Iterator[None]:
    """Inside, each PrivacyLeakWarning is printed at once on stderr as one line, ``warning: <category>: <message>``
    (the CLI's form; other warnings keep Python's)."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, PrivacyLeakWarning):
            print(_warning_line(category, message), file=sys.stderr)
        else:
            shown(message, category, *args, **kwargs)

    with warnings.catch_warnings():  # restores showwarning and the filters on the way out
        warnings.simplefilter("always", PrivacyLeakWarning)
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Record the warnings raised inside and print each as one line on stderr when the block ends, *also* when it
    raises: a PrivacyLeakWarning (e.g. classes read from the labels) must reach the user even if loading then
    fails (:func:`_warning_line`, as in :func:`leak_warnings_as_lines`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                print(_warning_line(w.category, w.message), file=sys.stderr)


def check_out_folder(path: str, flag: str) -> None:
    """Refuse an output folder that cannot be one (empty, an existing file, under a file, not writable), up front."""
    if not path:
        raise CliError(f"{flag} needs a folder, got an empty path")
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise CliError(f"{flag} {path} is a file; give a folder")
    existing = next((p for p in target.parents if p.exists()), Path("."))
    if not existing.is_dir():
        raise CliError(f"{flag} {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK):
        raise CliError(f"{flag} {path}: {existing} is not writable")


def check_output_path(path: str | None, flag: str, *, suffix: str | None = None) -> None:
    """Refuse an output path that cannot be written, before any work is done (or privacy spent)."""
    if path is None:
        return
    if not path:  # Path("") is ".", a directory: say what is actually wrong
        raise CliError(f"{flag} is empty; give a file path")
    target = Path(path)
    if target.is_dir():  # before the suffix is added: DIR would otherwise be written as DIR.npz
        raise CliError(f"{flag} {path} is a directory; give a file path")
    if suffix is not None and target.suffix != suffix:
        target = target.with_name(target.name + suffix)
    if target.is_dir():
        raise CliError(f"{flag} {path} is a directory; give a file path")
    parent = target.parent if str(target.parent) else Path(".")
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise CliError(f"{flag} {path}: {existing} is not a directory")
    if existing is not None and not os.access(existing, os.W_OK):
        raise CliError(f"{flag} {path}: {existing} is not writable")


def parse_classes(text: str | None) -> list[str] | None:
    """``--classes a,b,c`` as a list of distinct names; an empty or repeated list is an error."""
    if text is None:
        return None
    names = [c.strip() for c in text.split(",")]
    if not all(names):
        raise CliError(f"--classes needs comma-separated, non-empty class names, got {text!r}")
    if len(set(names)) != len(names) or len(names) < 2:
        raise CliError(f"--classes needs at least two distinct class names, got {text!r}")
    return names


def held_out_is_public(dataset: str) -> bool:
    """Whether a dataset's test split is public: a built-in set's published (or bundled) test
    split is; the held-out rows of the user's csv:/npz: data are private records."""
    from privml.data._registry import is_user_data  # lazy(startup): the data layer (numpy), for commands with data

    return not is_user_data(dataset)


def emit(result: dict, *, as_json: bool, render: Callable[[dict], str]) -> None:
    """Print ``result`` as one JSON object or as human-readable text."""
    if as_json:
        from privml.io import json_safe  # lazy(startup): numpy, loaded by every command with a result anyway

        sys.stdout.write(json.dumps(json_safe(result), allow_nan=False) + "\n")
    else:
        sys.stdout.write(render(result).rstrip("\n") + "\n")


def report_failures(prog: str, failed: int, total: int, errors: list[dict], *, what: str = "runs") -> int:
    """Say on stderr that ``failed`` of ``total`` ``what`` failed and each distinct error once; return the exit status.

    ``errors`` holds ``{"error": str, "count": int}`` (and optionally
    ``"methods"``), one per distinct error. Returns 0 when nothing failed, else
    :data:`EXIT_FAILED`.
    """
    if not failed:
        return 0
    sys.stderr.write(f"{prog}: {failed} of {total} {what} failed ({len(errors)} distinct "
                     f"error{'s' if len(errors) != 1 else ''}):\n")
    for entry in errors:
        where = f"{entry['count']}x"
        if entry.get("methods"):
            where += f", {', '.join(entry['methods'])}"
        message = " ".join(str(entry["error"]).split())  # one line whatever the error said
        sys.stderr.write(f"{prog}: error ({where}): {message}\n")
    return EXIT_FAILED


def table(rows: list[tuple[str, str]]) -> str:
    """Two aligned columns."""
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def fmt(x: float | None, digits: int = 6) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}g}"


#: The part of --epsilon that ``--bounds private`` spends on the ranges unless ``private:FRACTION`` says otherwise.
DEFAULT_BOUNDS_FRACTION = 0.25


def bounds_option(text: str) -> str:
    """argparse type of ``--bounds``: ``unit``, ``private`` or ``private:FRACTION`` (0 < FRACTION < 1)."""
    kind, colon, fraction = text.partition(":")
    if kind == "unit" and not colon:
        return text
    if kind == "private":
        if colon:
            try:
                value = float(fraction)
            except ValueError:
                raise argparse.ArgumentTypeError(f"private:FRACTION needs a number, got {text!r}") from None
            if not 0.0 < value < 1.0:
                raise argparse.ArgumentTypeError(f"private:FRACTION needs 0 < FRACTION < 1, got {text!r}")
        return text
    raise argparse.ArgumentTypeError(f"expected unit, private or private:FRACTION, got {text!r}")


def add_schema_options(parser: argparse.ArgumentParser) -> None:
    """``--schema`` and ``--bounds``: how the columns of a CSV reach the public scale the models need."""
    parser.add_argument("--schema", help="public schema of a csv: dataset, TOML or JSON (ranges, levels, missing "
                                         "values, classes; draft one with `privml schema suggest`)")
    parser.add_argument(
        "--bounds", type=bounds_option, metavar="unit|private[:FRACTION]",
        help="csv:/npz: data without a schema: 'unit' states every feature is already on a public scale within "
             "[-1, 1] (values are clipped to it); 'private' (csv: data, numeric columns) estimates each column's "
             "range from the training rows with DP quantiles, spending FRACTION of --epsilon on them "
             f"(default {DEFAULT_BOUNDS_FRACTION:g}), composed into the model's guarantee",
    )


def bounds_fraction(bounds: str | None) -> float | None:
    """The part of --epsilon that ``--bounds private[:FRACTION]`` spends on the ranges (None for other bounds)."""
    if bounds is None or not bounds.startswith("private"):
        return None
    _, colon, fraction = bounds.partition(":")
    return float(fraction) if colon else DEFAULT_BOUNDS_FRACTION


def check_schema_options(args: argparse.Namespace) -> Any:
    """The schema of ``args.schema`` (read and checked), or None; refuses a CSV given neither --schema nor --bounds,
    before any data is read."""
    dataset = args.dataset or ""
    if args.schema is None and args.bounds is None and dataset.startswith("csv:"):
        raise CliError(f"{dataset} has no public bounds: give --schema FILE (draft one with `privml schema suggest "
                       f"{dataset[4:]}`), --bounds private to estimate numeric ranges with DP quantiles (a part of "
                       "--epsilon), or --bounds unit if every feature is already scaled into [-1, 1]")
    if args.schema is None:
        if args.bounds is not None and held_out_is_public(dataset):
            raise CliError("--bounds applies to csv:/npz: datasets only")
        if bounds_fraction(args.bounds) is not None and not dataset.startswith("csv:"):
            raise CliError("--bounds private applies to csv: datasets only (its ranges are saved by column name)")
        return None
    if not dataset.startswith("csv:"):
        raise CliError("--schema applies to csv: datasets only")
    if args.bounds is not None:
        raise CliError("give --schema or --bounds, not both: the schema states each column's bounds")
    from privml.data._schema import load_schema  # lazy(startup): the data layer (numpy), for commands with data

    schema = load_schema(args.schema)
    schema.check_final(args.schema)
    return schema


def schema_extra(schema: Any, bounds: str | None) -> dict[str, Any]:
    """What a model file keeps of the schema or bounds, for ``predict`` and ``serve`` to apply (public inputs)."""
    if schema is not None:
        return {"schema": schema.to_dict()}
    return {"bounds": bounds} if bounds is not None else {}
