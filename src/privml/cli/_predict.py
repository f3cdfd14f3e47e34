"""``privml predict``: label new rows with a saved model::

    privml predict --model model.npz --input rows.csv [--label-column label] [--proba] [--device D] [--json]
    privml predict --model model.npz --input rows.csv --method prediction-sensitivity|subsample-aggregate
                   --epsilon E [--delta D] --budget B [--accountant A] [--ledger PATH|URL [--ledger-name N]]
                   [--seed S] [--proba] [--json]

``rows.csv`` has a header and the model's raw feature columns (as in the
training data, before preprocessing: the model file records the dataset's
data-independent pipeline and it is applied here). For a CNN file
(``privml train --method dpsgd-cnn``) the columns are the 784 raw grey
levels (0-255) of each image, row by row, standardised here by the dataset's
public constants, and the CNN runs on ``--device`` (``auto``, the default:
CUDA when available; ``cpu``, ``cuda`` or ``cuda:N``), an option that is an
error for any other file. A label column (``--label-column``; without it, a
column named ``label`` if there is one) is used to report accuracy. The rows
are read and checked (cells, width, ``--proba``) before any ledger is opened.

A model trained privately is a post-processing of its release, so predicting
costs no further privacy, and the privacy options are refused for it. A
non-private model (``privml train --method nonprivate``) or a
subsample-and-aggregate model is answered privately
(:func:`privml.prediction.load_predictor`): every row is one answer charged to
a budget of ``--budget`` answers with total guarantee ``(--epsilon, --delta)``
under replace-one neighbours; a batch with more rows than the budget allows
is refused whole (exit 2) and nothing is answered. With ``--ledger`` (a SQLite
file or ``postgresql://`` URL, as for ``privml serve``) the count persists and
is shared across runs and with a server on the same ledger; without it the
count lives in memory for this one invocation, so each run is a fresh
deployment of its own budget and repeated runs compose their guarantees
(the output says which: ``budget_scope``). ``--ledger-name`` needs
``--ledger``; ``--seed`` (for tests) is refused with it, since runs sharing
one budget would replay the same noise. ``--delta`` and ``--accountant`` default to the file's settings;
an explicit ``--delta 0`` asks for pure DP. Without any of ``--method``,
``--epsilon``, ``--budget`` or ``--ledger`` a non-private model file answers
without privacy, as the baseline it is (its guarantee reads epsilon = inf),
and ``--delta``, ``--accountant`` or ``--seed`` are then refused (exit 2).
"""

from __future__ import annotations

import argparse
import csv
import functools
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from privml.cli._common import (
    DEVICE_HELP,
    CliError,
    add_command,
    add_json_flag,
    emit,
    integer,
    refuse_seed_with_ledger,
    table,
)
from privml.cli._served_options import add_privacy_options
from privml.data._schema import Schema
from privml.data._user import is_number
from privml.exceptions import BudgetExhausted
from privml.io import model_from_file, read_model_file
from privml.registry import Kind, names_of_kind
from privml.serve._model import ModelSpec, SchemaPipeline, model_device, model_pipeline, open_served_model

#: Non-private baselines (linear, CNN): predict answers them locally, with a warning, when no private option is given
BASELINES = names_of_kind(Kind.BASELINE)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "predict", _predict,
        description="Apply a model file written by `privml train --out` to new rows (no privacy cost).",
    )
    parser.add_argument("--model", required=True, help="model .npz written by privml train --out")
    parser.add_argument("--input", required=True, help="CSV with a header row and the model's feature columns")
    parser.add_argument("--label-column",
                        help="label column used to report accuracy; must be in the header (default: 'label', if there)")
    parser.add_argument("--proba", action="store_true", help="also output class probabilities")
    parser.add_argument("--device", help=DEVICE_HELP)
    private = parser.add_argument_group(
        "private prediction",
        "answer each row privately from a non-private or subsample-and-aggregate model file "
        "(each row counts against --budget)",
    )
    add_privacy_options(private, ledger_help="SQLite file or postgresql:// URL counting the answers across runs "
                                             "(default: this run only)")
    private.add_argument(
        "--seed", type=integer,
        help="noise seed, for tests only: a known seed lets anyone replay the noise "
             "(default: fresh OS entropy on every run; never read from the model file; not with --ledger)",
    )
    add_json_flag(parser)


def _read_cells(
    path: Path, label_column: str | None, default_label: str = "label"
) -> tuple[list[str], list[tuple[int, list[str]]], int | None, str]:
    """The header, each row with its file line, where the label column is (or None) and its name."""
    if label_column == "":
        raise CliError("--label-column must name a column of the input (drop it to use a column named 'label')")
    if not path.is_file():
        raise CliError(f"input file not found: {path}")
    try:
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            try:
                header = next(reader)
            except StopIteration:
                raise CliError(f"{path} is empty") from None
            # Each row with its line in the file (blank rows are skipped, and a quoted cell may span lines).
            rows = [(reader.line_num, row) for row in reader if row]
    except (csv.Error, UnicodeDecodeError) as exc:  # e.g. a cell over the csv module's field limit
        raise CliError(f"{path} is not a readable CSV file ({str(exc).splitlines()[0]})") from None
    if not rows:
        raise CliError(f"{path} has a header but no rows")
    if label_column is not None and label_column not in header:
        # Ignored, a misspelt name would silently report no accuracy (or read the label as a feature).
        raise CliError(f"--label-column {label_column!r} is not a column of {path} (its header: {', '.join(header)})")
    label_column = default_label if label_column is None else label_column
    label_at = header.index(label_column) if label_column in header else None
    for line, row in rows:
        if len(row) != len(header):  # before the row is indexed: a short row has no label cell
            raise CliError(f"{path}:{line}: expected {len(header)} cells, got {len(row)}")
    return header, rows, label_at, label_column


def _read_rows(path: Path, label_column: str | None) -> tuple[np.ndarray, list[str] | None, list[str]]:
    """Feature values, labels (or None) and the feature column names of ``path``."""
    header, rows, label_at, _ = _read_cells(path, label_column)
    names = [name for i, name in enumerate(header) if i != label_at]
    values, labels = [], []
    for line, row in rows:
        if label_at is not None:
            labels.append(row[label_at].strip())
        cells = [c for i, c in enumerate(row) if i != label_at]
        try:
            values.append([float(c) for c in cells])
        except ValueError:
            raise CliError(_not_a_number(path, line, names, cells, label_at is None)) from None
    return np.asarray(values, dtype=np.float64), (labels if label_at is not None else None), names


def _read_schema_rows(
    path: Path, label_column: str | None, schema: Schema
) -> tuple[list[list[str]], list[str] | None, list[str]]:
    """The feature cells of ``path`` in the schema's column order, checked against it (one line naming the file
    line and column of a cell that does not fit), the labels (or None) and the feature column names."""
    default = schema.label.column if schema.label is not None else "label"
    header, rows, label_at, _ = _read_cells(path, label_column, default)
    names = [name for i, name in enumerate(header) if i != label_at]
    cells = [[c for i, c in enumerate(row) if i != label_at] for _, row in rows]
    try:
        schema.transform(cells, header=names, where=str(path), lines=[line for line, _ in rows])
        positions = schema.check_header(names, where=str(path))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    labels = [row[label_at].strip() for _, row in rows] if label_at is not None else None
    return [[row[j] for j in positions] for row in cells], labels, list(schema.feature_columns())


def _not_a_number(path: Path, line: int, names: list[str], cells: list[str], no_label: bool) -> str:
    """Which column holds a cell that is not a number (its name, never the cell), and a hint when it may be labels."""
    column, cell = next((name, cell) for name, cell in zip(names, cells, strict=True) if not is_number(cell))
    if not cell.strip():
        return f"{path}:{line}: column {column!r} has an empty cell (a missing value)"
    hint = f"; if {column!r} holds the labels, pass --label-column {shlex.quote(column)}" if no_label else ""
    return f"{path}:{line}: column {column!r} holds a value that is not a number{hint}"


class _Answering(Protocol):
    """What :func:`_answer` asks of a loaded predictor (``predict_proba`` only with ``--proba``)."""

    classes_: ArrayLike

    def predict(self, X: np.ndarray) -> ArrayLike: ...

    def predict_proba(self, X: np.ndarray) -> ArrayLike: ...


def _answer(predictor: _Answering, X: np.ndarray, proba: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Labels (and probabilities), charging one answer per row at most once."""
    try:
        if proba:
            # One charge per row: the labels are read off the released probabilities.
            probabilities = np.asarray(predictor.predict_proba(X))
            return np.asarray(predictor.classes_)[np.argmax(probabilities, axis=1)], probabilities
        return np.asarray(predictor.predict(X)), None
    except BudgetExhausted as exc:
        raise CliError(str(exc)) from None
    except NotImplementedError as exc:  # labels-only predictors refuse before charging
        raise CliError(f"--proba is not available: {exc}") from None


def _predict(args: argparse.Namespace) -> None:
    refuse_seed_with_ledger(args.seed, args.ledger)
    contents = read_model_file(args.model)  # read once: the loader below is given what is read here
    metadata = contents[1]
    model_device(args.model, metadata, args.device)  # a wrong --device is refused before any budget is charged
    if args.ledger_name is not None and args.ledger is None:
        # Dropped, it would leave each run a fresh in-memory budget under a name that suggests a shared one.
        raise CliError("--ledger-name names a budget inside --ledger: give --ledger too (without it the budget "
                       "covers this run only)")
    # The rows are read and preprocessed before any ledger is opened: opening one binds its budget for good,
    # so input refused afterwards would leave a budget the corrected command cannot use.
    preprocess, class_names = model_pipeline(metadata)
    if isinstance(preprocess, SchemaPipeline):  # trained through a schema: the cells are read and checked by it
        cells, labels, names = _read_schema_rows(Path(args.input), args.label_column, preprocess.schema)
        X = preprocess(cells)
    else:
        X, labels, names = _read_rows(Path(args.input), args.label_column)
        X = _features(args, X, names, preprocess)
    check = functools.partial(_check_rows, args, X, names, class_names)
    private_options = (args.method, args.epsilon, args.budget, args.ledger)
    if metadata.get("method") in BASELINES and all(option is None for option in private_options):
        _refuse_unused(args)
        # The non-private baseline answers as before; its privacy_ says epsilon = inf, and stderr says so.
        print("warning: PrivacyLeakWarning: this is the non-private baseline (epsilon = inf): its answers are not "
              "covered by any guarantee; serve it privately with --epsilon and --budget", file=sys.stderr)
        predictor = model_from_file(*contents, args.model)
        check(predictor)
    else:
        served = open_served_model(
            ModelSpec.from_args(args),
            contents=contents,
            require_ledger=False,
            check=check,  # while it counts in memory, before --ledger is opened
        )
        predictor = served.predictor
    try:
        _predict_rows(args, metadata, predictor, X, labels, class_names)
    finally:
        if getattr(predictor, "ledger_", None) is not None:
            predictor.ledger_.close()


def _features(
    args: argparse.Namespace, X: np.ndarray, names: list[str], preprocess: Callable[[np.ndarray], np.ndarray] | None
) -> np.ndarray:
    """The model's input: ``X`` through the file's data-independent pipeline, refused in one line if it cannot be."""
    if not np.all(np.isfinite(X)):
        raise CliError(f"{args.input} contains NaN or infinite values")
    if preprocess is None:
        return X
    try:
        return preprocess(X)
    except ValueError as exc:  # a dataset pipeline given the wrong number of columns: numpy's message names none
        raise CliError(f"{_columns(args, names)}, which the model's preprocessing does not accept "
                       f"({str(exc).splitlines()[0]})") from None


def _columns(args: argparse.Namespace, names: list[str]) -> str:
    """What was read as features, with the label column that was left out (the usual cause of a wrong width)."""
    label = f"--label-column {args.label_column!r}" if args.label_column is not None else "no --label-column"
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"{args.input} gives {len(names)} feature columns ({shown}; {label})"


def _check_rows(
    args: argparse.Namespace, X: np.ndarray, names: list[str], class_names: list | None, predictor: Any
) -> None:
    """Everything about the input that ``predictor`` would refuse only after a ledger had been opened."""
    if X.shape[1] != predictor.n_features_in_:
        raise CliError(f"{_columns(args, names)}: {X.shape[1]} features after preprocessing; the model expects "
                       f"{predictor.n_features_in_}")
    classes = np.asarray(predictor.classes_).tolist()
    if class_names is not None and len(class_names) != len(classes):
        # Checked before answering (an answer is charged): names pair with classes_ one to one, as in serve.
        raise CliError(f"{args.model} names {len(class_names)} classes but its model has {len(classes)}")
    ledger = getattr(predictor, "ledger_", None)
    if args.proba and ledger is not None:  # a model without a ledger (privately trained) gives probabilities
        try:
            # Labels-only predictors refuse predict_proba before looking at X or charging (privml.prediction._loading);
            # the others refuse zero rows. Only probes and in-memory ledgers get here, never a persistent one.
            predictor.predict_proba(X[:0])
        except NotImplementedError as exc:
            raise CliError(f"--proba is not available: {exc}") from None
        except ValueError:
            pass
    if ledger is not None and X.shape[0] > ledger.budget:
        # A batch no ledger of this budget could answer: refused before a persistent one is created and bound.
        raise CliError(f"privacy budget exhausted: {X.shape[0]} rows need {X.shape[0]} answers, more than the whole "
                       f"budget of {ledger.budget}; nothing was answered")


def _refuse_unused(args: argparse.Namespace) -> None:
    """A non-private file answered without privacy uses no private-prediction option: one given is an error."""
    given = [flag for flag, value in (("--delta", args.delta), ("--accountant", args.accountant),
                                      ("--seed", args.seed)) if value is not None]
    if given:
        raise CliError(f"{', '.join(given)} only apply to private prediction, and {args.model} is answered without "
                       "privacy unless --epsilon and --budget are given: give them, or drop " + ", ".join(given))


def _predict_rows(
    args: argparse.Namespace,
    metadata: dict,
    predictor: Any,
    X: np.ndarray,
    labels: list[str] | None,
    class_names: list | None,
) -> None:
    classes = np.asarray(predictor.classes_).tolist()
    public = list(class_names) if class_names else classes
    label_of = dict(zip(classes, public))
    raw, probabilities = _answer(predictor, X, args.proba)
    predicted = [label_of[label] for label in np.asarray(raw).tolist()]
    method = getattr(predictor, "method", metadata.get("method"))
    result: dict = {"model": args.model, "method": method, "n": int(X.shape[0]), "labels": predicted}
    if probabilities is not None:
        result["probabilities"] = np.round(probabilities, 6).tolist()
        result["classes"] = list(public)
    if labels is not None:
        result["accuracy"] = float(np.mean([str(p) == t for p, t in zip(predicted, labels)]))
    result["privacy"] = predictor.privacy_.to_dict()
    if getattr(predictor, "ledger_", None) is not None:
        result["budget"] = predictor.ledger_.state().to_dict()
        result["accountant"] = predictor.fit_info_["accountant"]
        # Said plainly: an in-memory budget is a fresh deployment per run, and repeated runs compose.
        result["budget_scope"] = (
            f"ledger budget {args.ledger_name or 'default'!r}, shared across runs and servers" if args.ledger
            else "this run only (no --ledger): every run starts a fresh budget and their guarantees add up"
        )
    emit(result, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    rows = [("model", f"{r['model']} ({r['method']})"), ("rows", str(r["n"]))]
    if "budget" in r:
        b = r["budget"]
        rows.append(("budget", f"{b['spent']} of {b['budget']} answers spent ({r['accountant']} accounting)"))
        rows.append(("budget covers", r["budget_scope"]))
    if "accuracy" in r:
        rows.append(("accuracy", f"{100 * r['accuracy']:.2f}%"))
    head = table(rows)
    return head + "\n" + "\n".join(str(label) for label in r["labels"])
