"""``privml select``: the most private model that meets an accuracy target (Accuracy First).

    privml select --dataset NAME|csv:PATH|npz:PATH --method output --target-error A [--max-epsilon E] [--delta D]
                  [--label-column C] [--classes a,b] [--test PATH]
                  [--search noise-reduction|doubling] [--at-epsilon E_AT] [--seed S] [--plot PATH]
                  [--out model.npz] [--json]

Prints ``{"ex_post_epsilon", "ex_post_delta", "test_accuracy", "stopped_at", "met_target", "trace": [...]}``;
each trace entry is one published model: ``epsilon`` (its level), ``ex_post_epsilon`` (the cost had the
search stopped there) and ``passed`` (the private check). ``stopped_at`` is null when no model met the
target; the guarantee then covers every level searched (never -1). ``--plot`` writes a PNG of the trace.
``--out`` saves the model it selected (the last one published when none met the target), with the
dataset's preprocessing and schema, as a model file ``privml predict`` and ``privml serve`` read; its
guarantee is the ex-post one.

The validation split is private training data, so the exact validation accuracy of each step, the
solver's diagnostics and the search time are printed (and plotted) only with ``--show-nonprivate``,
which warns (:mod:`privml.release`). ``test_accuracy`` is on the built-in set's public test split.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from privml._validation import check_count
from privml.cli._common import (
    BIAS,
    CliError,
    add_command,
    add_json_flag,
    add_nonprivate_flag,
    add_schema_options,
    bounds_fraction,
    check_output_path,
    check_schema_options,
    emit,
    finite_float,
    fmt,
    held_out_is_public,
    integer,
    nonprivate_block,
    parse_classes,
    schema_extra,
    seed_integer,
    table,
    warnings_as_lines,
)
from privml.cli._settings import checked
from privml.data import load_dataset
from privml.io import save_model
from privml.selection import AccuracyFirstClassifier, AccuracyFirstWarning
from privml.selection._plotting import plot_trace

SELECT_METHODS = ("output",)
MIN_TRAIN = 3  #: fewest records whose 20% validation part and the rest are both non-empty


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "select", _select, description=(
        "Accuracy First (Ligett et al. 2017): publish output-perturbation models from the most private "
        "level up, check each privately on a held-out part of the training set, stop at the first that "
        "meets the target, and report the ex-post privacy of where it stopped."))
    parser.add_argument("--dataset", required=True,
                        help="built-in name (see `privml datasets`) or csv:PATH / npz:PATH (your data)")
    parser.add_argument("--label-column", default="label", help="label column of a CSV (default: label)")
    parser.add_argument("--test", dest="test_path", help="separate test file for csv:/npz: data (default: 80/20 split)")
    parser.add_argument(
        "--classes",
        help="comma-separated public class set for user data (default: read from the labels, which leaks; warns)",
    )
    add_schema_options(parser)
    parser.add_argument("--method", choices=SELECT_METHODS, default="output", help="private ERM method (output)")
    parser.add_argument("--target-error", type=finite_float, required=True, help="largest acceptable error, in (0, 1)")
    parser.add_argument("--max-epsilon", type=finite_float, default=10.0, help="top of the search (default 10)")
    parser.add_argument("--min-epsilon", type=finite_float, default=0.01, help="bottom of the search (default 0.01)")
    parser.add_argument("--steps", type=integer,
                        help="levels of the noise-reduction grid (default 40; doubling has no grid)")
    parser.add_argument("--at-epsilon", type=finite_float, default=0.1, help="budget of the private check (0.1)")
    parser.add_argument(
        "--delta", type=finite_float, default=1e-5, help="delta: > 0 Gaussian releases, 0 pure DP (default 1e-5)"
    )
    parser.add_argument("--search", choices=("noise-reduction", "doubling"), default="noise-reduction")
    parser.add_argument("--l2", type=finite_float, help="regularisation lambda (default: auto, public)")
    parser.add_argument("--max-train", type=integer, help="use at most this many training records")
    parser.add_argument("--seed", type=seed_integer,
                        help="random seed, for experiments and tests only (default: fresh OS entropy)")
    parser.add_argument("--plot", help="write a PNG of the trace to this path (needs matplotlib)")
    parser.add_argument("--out", help="save the selected model to this .npz file (for privml predict and serve)")
    add_nonprivate_flag(parser)
    add_json_flag(parser)


def _check_args(args: argparse.Namespace) -> AccuracyFirstClassifier:
    """Everything the library would refuse, refused before the data are read; returns the estimator, whose own
    check refused its settings (--target-error, the epsilons, --steps, --delta, --l2: :func:`checked`)."""
    if args.steps is not None and args.search == "doubling":
        # A given option, which the estimator cannot tell from its default grid: refused, not ignored.
        raise ValueError("--steps sets the noise-reduction grid; --search doubling doubles epsilon and has no grid")
    model = checked(AccuracyFirstClassifier(  # its class set and loss come with the data
        target=args.target_error,
        metric="error",
        search=args.search,
        epsilon_min=args.min_epsilon,
        epsilon_max=args.max_epsilon,
        **({} if args.steps is None else {"n_steps": args.steps}),  # else the estimator's default grid
        at_epsilon=args.at_epsilon,
        delta=args.delta,
        l2="auto" if args.l2 is None else args.l2,
        random_state=args.seed,
    ))
    if args.max_train is not None:
        # The search holds out round(0.2 n) records (AccuracyFirstClassifier's validation_fraction) and needs both
        # parts non-empty: n >= 3. Checked here, not after the data are read.
        check_count(args.max_train, "--max-train", minimum=MIN_TRAIN)
    user = not held_out_is_public(args.dataset)
    if not user and (args.test_path or args.label_column != "label" or args.classes is not None):
        raise ValueError("--test, --label-column and --classes apply to csv:/npz: datasets only")
    parse_classes(args.classes)
    args.public_schema = check_schema_options(args)  # a CSV without public bounds is refused here
    if bounds_fraction(args.bounds) is not None:
        # Its budget has no --epsilon to be a part of: the search's is ex post. Not silently ignored.
        raise CliError("--bounds private is for `privml train` (a part of its --epsilon); select needs --schema "
                       "(public ranges) or --bounds unit")
    check_output_path(args.plot, "--plot")
    check_output_path(args.out, "--out", suffix=".npz")
    if args.plot:
        try:
            import matplotlib  # lazy(extra): matplotlib: is it there  # noqa: F401
        except ImportError:
            raise CliError("--plot needs the matplotlib package: pip install matplotlib") from None
    return model


def _warn_if_the_check_is_noise(query_sensitivity: float, at_epsilon: float, target: float) -> float:
    """Say so when AboveThreshold's query noise rivals the target (public values only: n_val, epsilon, target).

    On a small validation part at a small ``--at-epsilon`` a model passes or
    fails on noise alone: a review saw "met_target" on 10 of 10 runs of a
    600-row CSV whose held-out error exceeded the target in 8.
    """
    scale = 4.0 * query_sensitivity / at_epsilon  # the Laplace scale of each check (AboveThreshold's queries)
    if scale > target / 2:
        print(f"warning: the accuracy check's noise (Laplace scale {scale:.3g}, from {1 / query_sensitivity:.0f} "
              f"validation records at --at-epsilon {at_epsilon:g}) is larger than half the target error "
              f"{target:g}: a model may pass or fail on noise alone; raise --at-epsilon or use more records",
              file=sys.stderr)
    return scale


def _select(args: argparse.Namespace) -> None:
    model = _check_args(args)
    with warnings_as_lines():  # printed even when loading fails (a leak warning must not be lost)
        user = not held_out_is_public(args.dataset)
        data = load_dataset(
            args.dataset, bias=BIAS, max_train=args.max_train, random_state=args.seed,
            classes=parse_classes(args.classes),
            label_column=args.label_column, test_path=args.test_path if user else None,
            schema=args.public_schema, bounds=args.bounds,
        )
    info = data.info
    model.set_params(loss="logistic" if len(info.classes) == 2 else "multinomial",
                     classes=tuple(range(len(info.classes))))
    print(f"searching {args.search} on {info.name} ({info.n_train} records)...", file=sys.stderr)
    start = time.perf_counter()
    with warnings.catch_warnings():
        # Not meeting the target is reported in the result (met_target, stopped_at = null).
        warnings.simplefilter("ignore", AccuracyFirstWarning)
        model.fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    selection, guarantee = model.selection_, model.privacy_
    check_noise = _warn_if_the_check_is_noise(model.fit_info_["query_sensitivity"], selection.at_epsilon,
                                              args.target_error)
    accuracy = float(np.mean(model.predict(data.X_test) == data.y_test))
    nonprivate = {**model.nonprivate_diagnostics_, "seconds": seconds,
                  "validation_accuracy": [s.nonprivate_value for s in selection.steps]}
    result = {
        "dataset": info.name,
        "method": args.method,
        "search": selection.search,
        "noise": selection.noise,
        "target_error": args.target_error,
        "ex_post_epsilon": guarantee.epsilon,
        "ex_post_delta": guarantee.delta,
        "neighbouring": guarantee.neighbouring.value,
        "neighbouring_detail": guarantee.neighbouring.detail,
        "accountant": guarantee.accountant,
        "at_epsilon": selection.at_epsilon,
        "stopped_at": selection.stopped_at,
        "met_target": selection.met_target,
        # The Laplace scale of each accuracy check (public): beside met_target, how far to trust it.
        "check_noise_scale": check_noise,
        "n_published": len(selection.released),
        "l2": model.fit_info_["l2"],
        "n_train": model.fit_info_["n_train"],
        "n_validation": model.fit_info_["n_val"],
        "trace": selection.trace(),
    }
    if held_out_is_public(args.dataset):
        result["test_accuracy"] = accuracy
    else:
        nonprivate["test_accuracy"] = accuracy
    if args.out:
        extra = {"dataset": info.to_dict(), "bias": BIAS, **schema_extra(args.public_schema, args.bounds)}
        result["model"] = str(save_model(model, args.out, extra=extra))
    result.update(nonprivate_block(args, nonprivate, what="non-private diagnostics of the search"))
    if args.plot:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # --show-nonprivate has already warned once
            result["plot"] = str(plot_trace(selection, args.plot, show_nonprivate=args.show_nonprivate))
    emit(result, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    stop = "target not met (all levels published)" if r["stopped_at"] is None else f"step {r['stopped_at']}"
    rows = [
        ("dataset", f"{r['dataset']} ({r['n_train']} train / {r['n_validation']} validation)"),
        ("search", f"{r['search']} ({r['noise']} noise), target error {fmt(r['target_error'], 4)}"),
        ("stopped", stop),
        (
            "ex-post guarantee",
            f"({fmt(r['ex_post_epsilon'], 4)}, {fmt(r['ex_post_delta'], 3)})-DP, {r['neighbouring']} [ex-post]",
        ),
        ("neighbouring", r["neighbouring_detail"]),
    ]
    if "test_accuracy" in r:
        rows.append(("test accuracy", f"{100 * r['test_accuracy']:.2f}%"))
    if "plot" in r:
        rows.append(("plot", r["plot"]))
    if "model" in r:
        rows.append(("model file", r["model"]))
    shown = r.get("nonprivate", {})
    validation = shown.get("validation_accuracy")
    rows += [(f"{key} (non-private)", str(value)) for key, value in shown.items() if key != "validation_accuracy"]
    header = "step  epsilon   ex-post eps  passed" + ("  validation acc (non-private)" if validation else "")
    lines = [table(rows), "", header]
    for i, s in enumerate(r["trace"]):
        line = f"{s['step']:>4}  {s['epsilon']:<8.4g}  {s['ex_post_epsilon']:<11.4g}  {str(s['passed']):<6}"
        lines.append(line + (f"  {validation[i]:.4f}" if validation else ""))
    return "\n".join(lines)
