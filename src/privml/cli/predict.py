"""``privml predict``: label new rows with a saved model.

    privml predict --model model.npz --input rows.csv [--label-column label] [--proba] [--json]

``rows.csv`` has a header and the model's raw feature columns (as in the
training data, before preprocessing: the model file records the dataset's
data-independent pipeline and it is applied here). A label column, if
present, is used to report accuracy. A model trained privately is a
post-processing of its release, so predicting costs no further privacy.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from privml.cli._common import CliError, add_json_flag, emit, table
from privml.data import preprocess_features
from privml.io import load_model


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="predict labels for rows in a CSV with a saved model",
        description="Apply a model file written by `privml train --out` to new rows (no privacy cost).",
    )
    parser.add_argument("--model", required=True, help="model .npz written by privml train --out")
    parser.add_argument("--input", required=True, help="CSV with a header row and the model's feature columns")
    parser.add_argument("--label-column", default="label", help="optional label column used to report accuracy")
    parser.add_argument("--proba", action="store_true", help="also output class probabilities")
    add_json_flag(parser)
    parser.set_defaults(handler=_predict, prog=parser.prog)


def _read_rows(path: Path, label_column: str) -> tuple[np.ndarray, list[str] | None]:
    if not path.is_file():
        raise CliError(f"input file not found: {path}")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise CliError(f"{path} is empty") from None
        rows = [row for row in reader if row]
    if not rows:
        raise CliError(f"{path} has a header but no rows")
    label_at = header.index(label_column) if label_column in header else None
    labels = [row[label_at].strip() for row in rows] if label_at is not None else None
    values = []
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise CliError(f"{path}:{line}: expected {len(header)} cells, got {len(row)}")
        cells = [c for i, c in enumerate(row) if i != label_at]
        try:
            values.append([float(c) for c in cells])
        except ValueError:
            raise CliError(f"{path}:{line}: non-numeric feature value") from None
    return np.asarray(values, dtype=np.float64), labels


def _predict(args: argparse.Namespace) -> None:
    model = load_model(args.model)
    extra = model.model_metadata_.get("extra", {})
    dataset = extra.get("dataset", {})
    X, labels = _read_rows(Path(args.input), args.label_column)
    if not np.all(np.isfinite(X)):
        raise CliError(f"{args.input} contains NaN or infinite values")
    if dataset.get("name"):
        X = preprocess_features(dataset["name"], X, bias=extra.get("bias") or False)
    if X.shape[1] != model.n_features_in_:
        raise CliError(f"{args.input} gives {X.shape[1]} features after preprocessing; the model expects "
                       f"{model.n_features_in_}")
    public = dataset.get("classes") or [c.item() if hasattr(c, "item") else c for c in model.classes_]
    index = model.predict(X).astype(np.int64) if dataset.get("classes") else None
    predicted = [public[i] for i in index] if index is not None else model.predict(X).tolist()
    result: dict = {"model": args.model, "method": model.method, "n": int(X.shape[0]), "labels": predicted}
    if args.proba:
        result["probabilities"] = np.round(model.predict_proba(X), 6).tolist()
        result["classes"] = list(public)
    if labels is not None:
        result["accuracy"] = float(np.mean([str(p) == t for p, t in zip(predicted, labels)]))
    result["privacy"] = model.privacy_.to_dict()
    emit(result, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    rows = [("model", f"{r['model']} ({r['method']})"), ("rows", str(r["n"]))]
    if "accuracy" in r:
        rows.append(("accuracy", f"{100 * r['accuracy']:.2f}%"))
    head = table(rows)
    return head + "\n" + "\n".join(str(label) for label in r["labels"])
