"""``privml train``: train one private (or baseline) model on a dataset.

    privml train --method output|objective|dpsgd|dpcd|nonprivate --dataset NAME|csv:PATH
                 --epsilon E --delta D [--l2 L] [--seed S] [--out model.npz] [--json]

Prints ``{"method", "dataset", "n_train", "n_test", "test_accuracy", "epsilon",
"delta", "train_seconds", ...}``. The model file (``--out``) is ``.npz`` plus
JSON metadata (never a pickle), carrying the guarantee and the preprocessing
so ``privml predict`` can apply it to new rows.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time
import warnings
from typing import Any

import numpy as np

from privml._validation import check_count, check_delta, check_epsilon, check_positive
from privml.cli._common import add_json_flag, emit, finite_float, fmt, integer, table
from privml.data import load_dataset
from privml.io import MODEL_CLASSES, save_model

#: CLI method -> model-file method (the classifier variants of privml.io.MODEL_CLASSES)
TRAIN_METHODS = ("output", "objective", "dpsgd", "dpcd", "nonprivate")
BIAS = 0.5  # public constant feature appended to every record (privml.data.add_bias_feature)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a private linear model and report its test accuracy and guarantee",
        description=(
            "Train a differentially private linear classifier (output or objective perturbation, DP-SGD, "
            "DP coordinate descent) or the non-private baseline, on a built-in dataset or your CSV."
        ),
    )
    parser.add_argument("--method", choices=TRAIN_METHODS, required=True)
    parser.add_argument("--dataset", required=True, help="built-in name (see `privml datasets`) or csv:PATH / npz:PATH")
    parser.add_argument("--label-column", default="label", help="label column of a CSV (default: label)")
    parser.add_argument("--test", dest="test_path", help="separate test file for csv:/npz: data (default: 80/20 split)")
    parser.add_argument(
        "--classes",
        help="comma-separated public class set for user data (default: read from the labels, which leaks; warns)",
    )
    parser.add_argument("--epsilon", type=finite_float, help="privacy budget epsilon (required unless nonprivate)")
    parser.add_argument("--delta", type=finite_float, default=1e-5, help="delta in [0, 1) (default 1e-5)")
    parser.add_argument("--l2", type=finite_float, help="regularisation lambda (default: the method's own default)")
    parser.add_argument("--max-train", type=integer, help="use at most this many training records")
    parser.add_argument("--seed", type=integer, help="random seed (default: fresh OS entropy)")
    parser.add_argument("--no-bias", action="store_true", help="do not append the constant bias feature")
    parser.add_argument("--out", help="write the model to this .npz file")
    add_json_flag(parser)
    parser.set_defaults(handler=_train, prog=parser.prog)


def estimator_class(method: str) -> type:
    module_name, class_name = MODEL_CLASSES[method].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def build_estimator(method: str, *, n_classes: int, epsilon: float | None, delta: float, l2: float | None, seed: Any):
    """The estimator for ``method`` with the CLI's settings (defaults for the rest)."""
    cls = estimator_class(method)
    accepted = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {"classes": tuple(range(n_classes)), "random_state": seed}
    if method != "nonprivate":
        kwargs.update(epsilon=epsilon, delta=delta)
    if l2 is not None:
        kwargs["l2"] = l2
    return cls(**{k: v for k, v in kwargs.items() if k in accepted})


def _train(args: argparse.Namespace) -> None:
    # Validate everything before touching data or drawing noise.
    if args.method != "nonprivate":
        if args.epsilon is None:
            raise ValueError(f"--epsilon is required for --method {args.method}")
        check_epsilon(args.epsilon, "--epsilon")
    check_delta(args.delta, "--delta")
    if args.l2 is not None:
        check_positive(args.l2, "--l2")
    if args.max_train is not None:
        check_count(args.max_train, "--max-train")
    classes = [c.strip() for c in args.classes.split(",")] if args.classes else None
    user = args.dataset.startswith(("csv:", "npz:"))
    if not user and (args.test_path or args.label_column != "label" or classes):
        raise ValueError("--test, --label-column and --classes apply to csv:/npz: datasets only")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_dataset(
            args.dataset,
            bias=False if args.no_bias else BIAS,
            max_train=args.max_train,
            classes=classes if user else None,
            label_column=args.label_column,
            test_path=args.test_path,
            random_state=args.seed,
        )
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    info = data.info
    model = build_estimator(
        args.method, n_classes=len(info.classes), epsilon=args.epsilon, delta=args.delta, l2=args.l2, seed=args.seed
    )
    print(f"training {type(model).__name__} on {info.name} ({info.n_train} records)...", file=sys.stderr)
    start = time.perf_counter()
    model.fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(model.predict(data.X_test) == data.y_test))
    guarantee = model.privacy_
    result = {
        "method": args.method,
        "dataset": info.name,
        "n_train": info.n_train,
        "n_test": info.n_test,
        "n_features": info.n_features,
        "n_classes": len(info.classes),
        "test_accuracy": accuracy,
        "epsilon": guarantee.epsilon,
        "delta": guarantee.delta,
        "neighbouring": guarantee.neighbouring.value,
        "accountant": guarantee.accountant,
        "train_seconds": seconds,
    }
    if args.out:
        path = save_model(
            model,
            args.out,
            extra={"dataset": info.to_dict(), "bias": None if args.no_bias else BIAS, "test_accuracy": accuracy},
        )
        result["model"] = str(path)
    emit(result, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    rows = [
        ("method", r["method"]),
        ("dataset", f"{r['dataset']} ({r['n_train']} train / {r['n_test']} test, {r['n_features']} features)"),
        ("test accuracy", f"{100 * r['test_accuracy']:.2f}%"),
        ("guarantee", f"({fmt(r['epsilon'], 4)}, {fmt(r['delta'], 3)})-DP, {r['neighbouring']} [{r['accountant']}]"),
        ("train time", f"{r['train_seconds']:.2f} s"),
    ]
    if "model" in r:
        rows.append(("model file", r["model"]))
    return table(rows)
