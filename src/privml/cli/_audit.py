"""``privml audit``: an empirical lower bound on a training method's epsilon, and its membership leakage.

    privml audit --method output|objective|dpsgd|dpcd|nonprivate --dataset NAME|csv:PATH [--schema FILE]
                 --epsilon E [--delta D] --trials N [--canary clipbkd|random|record]
                 [--n-train 100] [--classes A,B|all] [--seed S] [--jobs J] [--plot roc.png] [--json]
    privml audit --prediction-service --method prediction-sensitivity|subsample-aggregate ... --queries N
                 (the per-answer epsilon of the served predictor: privml.cli._audit_prediction)

    privml audit --one-run --method METHOD --dataset ... --epsilon E [--canaries M] [--max-train N] [--json]

    privml audit --one-run --method dpsgd-cnn|scatter-linear|scatter-cnn [--white-box] --dataset IMAGES --epsilon E
                 [privml train's dpsgd-cnn options]             (privml.cli._audit_torch)

    privml audit --model FILE --dataset ... [--one-run ...]  (privml.cli._audit_model: a model file's settings)

Prints ``{"claimed_epsilon", "epsilon_lower_bound", "confidence", "auc", ...}``:
the claim is the guarantee the trained model reports, the bound comes from
``2 * trials`` models trained with and without a canary
(:func:`privml.audit.audit_epsilon`), ``auc`` is the canary test's ROC AUC,
and ``membership_auc`` / ``membership_advantage`` are those of the
loss-threshold attack (Yeom et al. 2018) on one model, training records
against held-out ones.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from privml._validation import MAX_TRIALS, check_count, check_n_jobs
from privml.audit._canaries import CANARIES
from privml.audit._epsilon_lower_bound import audit_epsilon
from privml.audit._membership import loss_threshold_attack, roc_curve
from privml.audit._one_run_dpsgd import check_dirac_count, dpsgd_white_box_audit
from privml.audit._one_run_linear import linear_one_run_audit
from privml.audit._plotting import check_plot_path, plot_one_run, plot_roc, require_matplotlib
from privml.cli import _audit_prediction as audit_prediction
from privml.cli._audit_model import TORCH_AUDIT_METHODS, AuditedRun, add_run_options, audited_run, select_classes
from privml.cli._audit_torch import audit_cnn
from privml.cli._common import (
    CliError,
    add_command,
    add_json_flag,
    add_schema_options,
    check_output_path,
    emit,
    finite_float,
    fmt,
    integer,
    seed_integer,
    table,
    warnings_as_lines,
)
from privml.cli._train import TRAIN_METHODS, check_privacy_options
from privml.data._registry import is_user_data

DEFAULT_N_TRAIN = 100
#: Methods the audit trains (every private linear method and the baseline; a CNN per trial is out of scope).
AUDIT_METHODS = ("output", "objective", "dpsgd", "dpcd", "nonprivate")


def register(subparsers: argparse._SubParsersAction) -> None:
    # --prediction-service audits run in privml.cli._audit_prediction; without it, its options are refused there.
    parser = add_command(
        subparsers, "audit", audit_prediction.before(_audit),
        description=(
            "Train 2 x TRIALS models on a small subsample of a dataset, half of them with a canary record, and "
            "turn how well the canary can be detected into a Clopper-Pearson lower bound on epsilon "
            "(Jagielski et al. 2020; Nasr et al. 2021). A correct implementation stays below its claimed "
            "epsilon; a bound above it means the claim is false (at the stated confidence). The audited set "
            f"is kept small on purpose (--n-train, default {DEFAULT_N_TRAIN} records, and by default the first "
            "two classes) so that thousands of models train in minutes; the bound is about that small set."
        ),
    )
    parser.add_argument("--method", choices=(*TRAIN_METHODS, *audit_prediction.METHODS),
                        help=f"{', '.join(AUDIT_METHODS)}, dpsgd-cnn or scatter-* (--one-run), or "
                             f"{', '.join(audit_prediction.METHODS)} (--prediction-service); required unless --model")
    parser.add_argument("--dataset", required=True,
                        help="built-in dataset name (see `privml datasets`), or csv:PATH (with --schema) / npz:PATH")
    add_schema_options(parser)
    parser.add_argument("--epsilon", type=finite_float, help="claimed epsilon to train at (required unless nonprivate)")
    parser.add_argument("--delta", type=finite_float, help="delta in [0, 1) (default 1e-5; not for nonprivate)")
    parser.add_argument("--trials", type=integer, help="models per world (with / without canary), >= 4")
    parser.add_argument("--canary", choices=CANARIES, help="canary construction (default clipbkd)")
    parser.add_argument(
        "--one-run", action="store_true",
        help="one-run audit (Steinke, Nasr and Jagielski 2023): ONE fit on the whole dataset plus --canaries "
             "canaries, each in with probability 1/2; built-in, csv: and npz: datasets",
    )
    parser.add_argument("--canaries", type=integer, help="canaries of a one-run audit (default 1000)")
    parser.add_argument("--white-box", action="store_true",
                        help="one-run audit scored from training internals (DP-SGD methods only)")
    parser.add_argument(
        "--n-train", type=integer,
        help=f"training records drawn from the dataset (default {DEFAULT_N_TRAIN}; each trial trains on them, "
             "plus the canary in the worlds that hold it: the output's n_train counts it)",
    )
    parser.add_argument(
        "--classes", default=None,
        help="comma-separated public classes to keep, or 'all' (default: the first two, a binary audit)",
    )
    parser.add_argument("--confidence", type=finite_float, default=0.95, help="confidence of the bound (default 0.95)")
    parser.add_argument("--seed", type=seed_integer, help="random seed of the whole audit (default: fresh OS entropy)")
    parser.add_argument("--jobs", dest="n_jobs", type=integer, default=1,
                        help="parallel workers (joblib; -1: every core)")
    parser.add_argument("--plot", help="write the ROC curves (canary test, membership attack) to this PNG")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_run_options(parser)  # --model FILE, --max-train, and privml train's training options (cli.audit_model)
    audit_prediction.add_arguments(parser)
    add_json_flag(parser)


def _audit(args: argparse.Namespace) -> None:
    # Validate everything before loading data or training anything.
    run = audited_run(args)  # the options' method and settings, or --model FILE's (privml.cli._audit_model)
    if run.method in TORCH_AUDIT_METHODS:
        _check_plot(args.plot)
        audit_cnn(args, run)  # torch is imported there, after its checks
        return
    if args.one_run:
        _one_run(args, run)
        return
    for flag, value in (("--canaries", args.canaries), ("--white-box", args.white_box or None)):
        if value is not None:
            raise CliError(f"{flag} applies to one-run audits only (add --one-run)")
    if args.trials is None:
        raise CliError("--trials is required (or use --one-run)")
    args.canary = "clipbkd" if args.canary is None else args.canary
    args.n_train = DEFAULT_N_TRAIN if args.n_train is None else args.n_train
    check_privacy_options(args)  # as privml train: --epsilon required, none for the baseline
    run.check_settings(args)  # their values, by the estimator (one instance: the trials' models are its clones)
    trials = check_count(args.trials, "--trials", minimum=4, maximum=MAX_TRIALS)
    n_train = check_count(args.n_train, "--n-train", minimum=2)
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence must be in (0, 1), got {args.confidence!r}")
    check_n_jobs(args.n_jobs, "--jobs")
    _check_plot(args.plot)  # fail now, not after the trials

    with warnings_as_lines():
        classes = None if is_user_data(args.dataset) else select_classes(args.dataset, args.classes)
    data = run.load(args, max_train=n_train, classes=classes)  # through the run's schema or bounds
    info = data.info
    model = run.estimator(args, info)
    print(
        f"auditing {type(model).__name__} on {info.name} ({info.n_train} records, {len(info.classes)} classes): "
        f"2 x {trials} models...",
        file=sys.stderr,
    )
    result = audit_epsilon(
        model,
        data.X_train,
        data.y_train,
        trials=trials,
        canary=args.canary,
        confidence=args.confidence,
        X_pool=data.X_test,
        y_pool=data.y_test,
        random_state=args.seed,
        n_jobs=args.n_jobs,
        progress=not args.no_progress,
    )
    # Membership leakage of one model: its training records against as many held-out ones.
    fitted = model.fit(data.X_train, data.y_train)
    k = min(info.n_train, info.n_test)
    attack = loss_threshold_attack(fitted, data.X_train[:k], data.y_train[:k], data.X_test[:k], data.y_test[:k])
    out = {
        **result.to_dict(),
        "method": args.method,
        "dataset": info.name,
        "classes": [c.item() if isinstance(c, np.generic) else c for c in info.classes],
        "membership_auc": attack.auc,
        "membership_advantage": attack.advantage,
        "membership_tpr_at_fpr": attack.to_dict()["tpr_at_fpr"],
        **run.fields(),
    }
    if args.plot:
        fpr_c, tpr_c, _ = roc_curve(result.scores_in, result.scores_out)
        out["plot"] = plot_roc(
            {
                f"canary test (AUC {result.auc:.3f})": (fpr_c, tpr_c),
                f"loss-threshold attack (AUC {attack.auc:.3f})": (attack.fpr, attack.tpr),
            },
            args.plot,
            title=f"{args.method} on {info.name}",
        )
    emit(out, as_json=args.json, render=_render)


def _check_plot(path: str | None) -> None:
    check_output_path(path, "--plot")
    if path:
        try:  # fail now, not after training
            check_plot_path(path)
            require_matplotlib()
        except (ImportError, ValueError) as exc:
            raise CliError(f"--plot: {exc}") from None


def _one_run(args: argparse.Namespace, run: AuditedRun) -> None:
    """``--one-run``: every check before the data is read; then one fit (privml.audit._one_run_linear)."""
    for flag, value in (("--trials", args.trials), ("--canary", args.canary), ("--n-train", args.n_train)):
        if value is not None:
            raise CliError(f"{flag} does not apply to --one-run (one fit on the whole dataset with --canaries "
                           "random canaries)")
    if args.white_box and args.method != "dpsgd":
        raise CliError(f"--white-box applies to DP-SGD methods only, not --method {args.method}")
    check_privacy_options(args)
    run.check_settings(args)  # their values, by the estimator
    m = check_count(1000 if args.canaries is None else args.canaries, "--canaries", minimum=1, maximum=10**7)
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence must be in (0, 1), got {args.confidence!r}")
    _check_plot(args.plot)

    with warnings_as_lines():
        classes = None if args.classes is None else select_classes(args.dataset, args.classes)
    data = run.load(args, max_train=args.max_train, classes=classes)  # through the run's schema or bounds
    info = data.info
    model = run.estimator(args, info)
    if args.white_box:
        check_dirac_count(m, data.X_train.shape[1], len(info.classes))
    if not args.no_progress:
        print(f"one-run audit of {type(model).__name__} on {info.name} ({info.n_train} records + {m} canary "
              "slots): one training run...", file=sys.stderr)
    # Labels are indices into the public class set, as every estimator here is built with classes=range(k).
    if args.white_box:  # Dirac gradient canaries scored on every step's released sum (privml.audit._one_run_dpsgd)

        result = dpsgd_white_box_audit(model, data.X_train, data.y_train, m=m, confidence=args.confidence,
                                       random_state=args.seed)
    else:
        result = linear_one_run_audit(model, data.X_train, data.y_train, m=m, confidence=args.confidence,
                                      random_state=args.seed)
    if not args.no_progress:
        print(f"trained in {result.seconds_fit:.1f} s; scored {m} canaries", file=sys.stderr)
    out = {
        **result.to_dict(),
        "dataset": info.name,
        "method": args.method,
        "audit": "one-run",
        "guarantee_of_the_audit": "none: the audit reads which canaries were trained on; it is a test, not a "
                                  "release (the audited fit itself has the claimed guarantee on n_train records)",
        **run.fields(),
    }
    if args.plot:
        out["plot"] = plot_one_run(result.scores, result.included, args.plot, guesses_in=result.audit.guesses_in,
                                   guesses_out=result.audit.guesses_out,
                                   title=f"one-run audit: {args.method} on {info.name}, "
                                         f"bound {result.audit.epsilon_lower:.3f}")
    emit(out, as_json=args.json, render=_render_one_run)


def _render_one_run(r: dict) -> str:
    claim = r["claimed_epsilon"]
    if claim is None:
        verdict, claimed = "no claim to compare", "none (not private)"
    else:
        verdict = "VIOLATED: the claim is false" if r["exceeds_claim"] else "consistent with the claim"
        claimed = f"({fmt(claim, 4)}, {fmt(r['delta'], 3)})-DP, {r['neighbouring']}"
    rows = [
        ("method", f"{r['method']} ({r['estimator']}) on {r['dataset']}: {r['n_real']} records + {r['m']} canary "
                   f"slots = {r['n_train']} (one training run)"),
        ("claimed", claimed),
        ("epsilon lower bound", f"{r['epsilon_lower']:.4f} at {100 * r['confidence']:.0f}% confidence ({verdict})"),
        ("guesses", f"{r['correct']} of {r['guesses']} right (top {r['guesses_in']} in, bottom {r['guesses_out']} "
                    f"out; best of {r['tried']} counts, union bound)"),
        ("time", f"{r['seconds']:.1f} s (fit {r['seconds_fit']:.1f} s)"),
    ]
    if r.get("claim_rejected") is not None:
        rows.insert(3, ("claimed curve (f-DP)", f"{'REFUTED' if r['claim_rejected'] else 'not refuted'}; "
                                                f"mu-GDP refuted up to mu = {r['mu_lower']:.4f}"))
    if r["scores_from"] == "white-box":
        rows.insert(1, ("scores", f"white-box: {r['statistic']} of {r['canaries']} canaries over {r['steps']} steps"))
    if r.get("claim_note"):
        rows.append(("note", r["claim_note"]))
    if "plot" in r:
        rows.append(("plot", r["plot"]))
    return table(rows)


def _render(r: dict) -> str:
    verdict = "VIOLATED: the claim is false" if r["violated"] else "consistent with the claim"
    rows = [
        ("method", f"{r['method']} ({r['estimator']}) on {r['dataset']}, {r['n_train']} records"),
        ("claimed", f"({fmt(r['claimed_epsilon'], 4)}, {fmt(r['delta'], 3)})-DP, {r['neighbouring']}"),
        (
            "epsilon lower bound",
            f"{r['epsilon_lower_bound']:.4f} at {100 * r['confidence']:.0f}% confidence ({verdict})",
        ),
        ("canary test", f"{r['canary']} canary, AUC {r['auc']:.3f}, {r['trials_per_world']} models per world"),
        ("membership attack", f"AUC {r['membership_auc']:.3f}, advantage {r['membership_advantage']:.3f}"),
        ("time", f"{r['seconds']:.1f} s"),
    ]
    if "plot" in r:
        rows.append(("plot", r["plot"]))
    return table(rows)
