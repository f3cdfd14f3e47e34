"""``privml audit --prediction-service``: a black-box audit of the per-answer epsilon of ``privml serve``.

    privml audit --prediction-service --method prediction-sensitivity|subsample-aggregate
                 --dataset NAME|csv:PATH|npz:PATH [--schema FILE] --epsilon E --queries N
                 [--n-models M] [--query auto|canary] [--canary clipbkd|random|record] [--n-train K]
                 [--classes A,B|all] [--confidence C] [--seed S] [--jobs J] [--json]

Trains the private predictor on neighbouring datasets (with and without a
canary), saves each, opens each as the server does with a budget of exactly
``N`` answers, asks the same query ``N`` times in each and prints a
Clopper-Pearson lower bound on the epsilon of one answer against the claimed
``E`` (:func:`privml.audit.audit_prediction_service`).
``--epsilon`` is the per-answer epsilon (the model is trained at ``E * N``
over a budget of ``N`` answers, basic composition, delta = 0).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from privml._validation import check_count
from privml.audit._prediction_service import (
    PREDICTION_AUDIT_METHODS,
    QUERY_POINTS,
    audit_prediction_service,
    check_audit_settings,
)
from privml.cli._audit_model import select_classes
from privml.cli._common import BIAS, CliError, check_schema_options, emit, fmt, integer, table, warnings_as_lines
from privml.data import load_dataset
from privml.data._registry import is_user_data
from privml.exceptions import PrivacyLeakWarning

__all__ = ["METHODS", "add_arguments", "before", "dispatch", "run"]

#: ``--method`` values of a prediction-service audit.
METHODS = PREDICTION_AUDIT_METHODS
#: Options of ``privml audit`` that a prediction-service audit refuses (dest -> why).
_NOT_HERE = {
    "delta": "the per-answer guarantee audited is pure epsilon (delta = 0, basic composition)",
    "trials": "a prediction-service audit trains one model per world and asks --queries answers of each",
    "one_run": "it is a different audit",
    "canaries": "it belongs to one-run audits",
    "white_box": "it belongs to one-run audits",
    "plot": "no plot is drawn for a prediction-service audit",
}
_OWN = (("queries", "--queries"), ("n_models", "--n-models"), ("query", "--query"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a prediction-service audit (the rest are ``privml audit``'s own)."""
    parser.add_argument(
        "--prediction-service", action="store_true",
        help="audit the private prediction service instead of a training method: --epsilon is the per-answer "
             "epsilon, --queries the answers asked in each world (and each world's budget)",
    )
    parser.add_argument("--queries", type=integer, help="answers asked per world with --prediction-service (>= 4)")
    parser.add_argument("--n-models", type=integer,
                        help="teachers of subsample-aggregate with --prediction-service (default 8)")
    parser.add_argument("--query", choices=QUERY_POINTS,
                        help="where a --prediction-service audit asks (default auto: the canary's point, moved to "
                             "where the teachers split their votes for subsample-aggregate)")


def dispatch(args: argparse.Namespace) -> bool:
    """Run a prediction-service audit when asked (True); else refuse its options and methods (False)."""
    if args.prediction_service:
        run(args)
        return True
    for dest, flag in _OWN:
        if getattr(args, dest) is not None:
            raise CliError(f"{flag} applies to --prediction-service audits only")
    if args.method in METHODS:
        raise CliError(f"--method {args.method} is a private-prediction method: audit it with --prediction-service")
    return False


def before(handler: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int | None]:
    """``privml audit``'s handler, preceded by :func:`dispatch` (which runs or refuses a prediction-service audit)."""

    def audit(args: argparse.Namespace) -> int | None:
        return None if dispatch(args) else handler(args)

    return audit


def _check(args: argparse.Namespace) -> dict[str, Any]:
    """Every option checked before any data is read; the audit's keyword arguments."""
    if args.method not in METHODS:
        raise CliError(f"--prediction-service audits {' or '.join(METHODS)}, not --method {args.method}")
    for dest, why in _NOT_HERE.items():
        value = getattr(args, dest)
        if value not in (None, False):
            raise CliError(f"--{dest.replace('_', '-')} does not apply to --prediction-service: {why}")
    if args.epsilon is None:
        raise CliError("--epsilon (the per-answer epsilon to audit) is required")
    if args.queries is None:
        raise CliError("--queries is required with --prediction-service")
    params: dict[str, Any] = {}
    if args.method == "subsample-aggregate":
        if args.n_models is not None:
            params["n_models"] = args.n_models
        if args.n_jobs != 1:
            params["n_jobs"] = args.n_jobs
    else:
        if args.n_models is not None:
            raise CliError("--n-models applies to --method subsample-aggregate only")
        if args.n_jobs != 1:
            raise CliError("--jobs applies to --method subsample-aggregate only (its teachers train in parallel)")
    if args.bounds is not None and args.bounds.startswith("private"):
        raise CliError("--bounds private does not apply to --prediction-service: it would spend privacy on the "
                       "ranges, outside the per-answer claim audited")
    # --epsilon, --queries, --confidence, --n-models, --jobs: the audit's own check, its predictor's included,
    # before any data is read.
    check_audit_settings(args.method, epsilon_query=args.epsilon, queries=args.queries, params=params,
                         confidence=args.confidence)
    return {
        "epsilon_query": args.epsilon,
        "queries": args.queries,
        "n_train": None if args.n_train is None else check_count(args.n_train, "--n-train", minimum=2),
        "params": params,
    }


def run(args: argparse.Namespace) -> None:
    """``privml audit --prediction-service``: checks, data, the audit, the report."""
    settings = _check(args)
    user = is_user_data(args.dataset)
    if user and args.classes is not None:
        raise CliError("--classes applies to built-in datasets (a csv: dataset's class set is its schema's)")
    schema = check_schema_options(args)
    with warnings_as_lines():
        classes = None if user else select_classes(args.dataset, args.classes)
        data = load_dataset(args.dataset, bias=BIAS, max_train=settings["n_train"], classes=classes,
                            random_state=args.seed, schema=schema, bounds=args.bounds)
        if user:
            warnings.warn(PrivacyLeakWarning(
                "the audit's figures are computed from your private records without noise and are not covered by "
                "any privacy guarantee; do not publish them"), stacklevel=1)
    info = data.info
    if not args.no_progress:
        print(f"auditing {args.method} served on {info.name} ({info.n_train} records, {len(info.classes)} classes): "
              f"2 models, 2 x {settings['queries']} answers...", file=sys.stderr)
    result = audit_prediction_service(
        args.method, data.X_train, data.y_train, epsilon_query=settings["epsilon_query"],
        queries=settings["queries"], canary=args.canary or "clipbkd", query=args.query or "auto",
        params=settings["params"], classes=range(len(info.classes)), confidence=args.confidence,
        X_pool=data.X_test, y_pool=data.y_test, random_state=args.seed,
    )
    out = {
        **result.to_dict(),
        "dataset": info.name,
        "classes": [c.item() if isinstance(c, np.generic) else c for c in info.classes],
    }
    emit(out, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    verdict = "VIOLATED: the claim is false" if r["violated"] else "consistent with the claim"
    after = r["answer_after_budget"]
    enforced = "refused in both worlds" if after == ["refused", "refused"] else f"NOT refused ({', '.join(after)})"
    rows = [
        ("method", f"{r['method']} ({r['estimator']}) served on {r['dataset']}, {r['n_train']} records"
                   + (f", {r['n_models']} teachers" if "n_models" in r else "")),
        ("claimed per answer", f"({fmt(r['claimed_epsilon'], 4)}, 0)-DP, {r['neighbouring']}"),
        ("epsilon lower bound", f"{r['epsilon_lower_bound']:.4f} at {100 * r['confidence']:.0f}% confidence "
                                f"({verdict})"),
        ("answers", f"{r['queries']} per world at the {r['query']} point ({r['canary']} canary), "
                    f"statistic: {r['statistic']}, AUC {r['auc']:.3f}"),
        ("ledger", f"budget {r['ledger_budget']} answers (epsilon {fmt(r['epsilon_total'], 6)} in all), spent "
                   f"{r['ledger_spent'][0]} and {r['ledger_spent'][1]}; answer {r['ledger_budget'] + 1}: {enforced}"),
        ("time", f"{r['seconds']:.1f} s"),
    ]
    return table(rows)
