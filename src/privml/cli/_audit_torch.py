"""``privml audit --one-run --method dpsgd-cnn|scatter-*``: a one-run audit of a DP-SGD image run, as users train it.

    privml audit --one-run --method dpsgd-cnn [--white-box] --dataset mnist|fashion-mnist|npz:PATH --epsilon E
                 [--delta D] [--canaries M] [--epochs N] [--batch-size B] [--learning-rate LR] [--clip-norm C]
                 [--architecture A] [--max-train N] [--threads T] [--device D] [--precision P]
                 [--clip-precision P] [--seed S] [--plot FILE] [--json]

    privml audit --one-run --model CNN.npz --dataset ... [the same, but the options the file fixes]

``--method scatter-linear|scatter-cnn`` audits the run ``privml train`` makes with those methods (the
:class:`~privml.torch.ScatterClassifier` of :func:`privml.cli._train.build_scatter_classifier`, its features
computed afresh: the audit caches none; built-in MNIST, Fashion-MNIST, CIFAR-10 or npz: images), with its
private feature mean and weight average. The run is the one ``privml train --method dpsgd-cnn`` makes with the
same options (the same :class:`~privml.torch.TorchClassifier`, built by
:func:`privml.cli._train.build_cnn_classifier`, on
the same images: MNIST and Fashion-MNIST standardised by public constants, or the user's ``npz:`` images
used as given, channels first), or the one a model file's settings make (:mod:`privml.cli._audit_model`),
trained once on the training records plus M canary slots, each canary in with probability 1/2
(:func:`privml.audit._one_run_torch.torch_classifier_one_run_audit`; Steinke, Nasr and Jagielski 2023).
Black-box (default): out-of-distribution image canaries scored by their loss under the final model;
``--white-box``: gradient (Dirac) canaries scored from every step's released noisy gradient. The claim
compared is the run's own guarantee (add/remove-one with n public; replace-one or fixed-size runs are
refused). A multi-run audit (2 x TRIALS CNNs) is out of scope: ``--trials`` is refused.

Torch is imported only here, after the CLI's own checks of the options; without it the command is one line
naming the torch extra (exit 2). The estimator then checks its settings (:mod:`privml.cli._settings`) before
any data is read.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from privml._extras import import_torch_or_explain
from privml._validation import check_count
from privml.audit._one_run_torch import torch_classifier_one_run_audit
from privml.cli._audit_model import AuditedRun, rebuild_estimator
from privml.cli._common import CliError, emit, fmt, table, warnings_as_lines
from privml.cli._settings import checked
from privml.cli._train import (
    CNN_DATASETS,
    SCATTER_DATASETS,
    SCATTER_METHODS,
    build_cnn_classifier,
    build_scatter_classifier,
    check_privacy_options,
    load_image_arrays,
)
from privml.exceptions import PrivacyLeakWarning

__all__ = ["audit_cnn"]


def _check_options(args: argparse.Namespace, run: AuditedRun) -> tuple[str, int]:
    """Every option of a CNN audit checked before torch is imported or data read: (dataset, canaries)."""
    if not args.one_run:
        raise CliError(f"--method {run.method} is audited with --one-run only (2 x TRIALS CNNs are out of scope)")
    for flag, value in (("--trials", args.trials), ("--canary", args.canary), ("--n-train", args.n_train)):
        if value is not None:
            raise CliError(
                f"{flag} does not apply to --one-run (one fit on the whole dataset with --canaries canaries)"
            )
    if args.n_jobs != 1:
        raise CliError("--jobs applies to the multi-run audit (a one-run audit is one training run)")
    if args.schema is not None or args.bounds is not None:
        raise CliError(f"--schema and --bounds do not apply to --method {run.method} (images: a public pixel scale)")
    if args.classes is not None:
        raise CliError(
            f"--classes does not apply to --method {run.method} (it trains on every class, as privml train does)"
        )
    if run.params is None:  # a model file's epsilon, delta (or noise multiplier) are its own settings
        check_privacy_options(args)  # --epsilon required; the values: the estimator's, checked in audit_cnn
    user = args.dataset.startswith("npz:")
    dataset = args.dataset if user else args.dataset.lower().replace("_", "-")
    scatter = run.method in SCATTER_METHODS
    built_in = SCATTER_DATASETS if scatter else CNN_DATASETS
    if not user and dataset not in built_in:
        raise CliError(
            f"--method {run.method} audits --dataset {', '.join(built_in)} or npz:PATH (images), got {args.dataset!r}"
        )
    if scatter and args.architecture is not None:
        raise CliError(f"--architecture applies to --method dpsgd-cnn only ({run.method} trains its own head)")
    m = check_count(1000 if args.canaries is None else args.canaries, "--canaries", minimum=1, maximum=10**7)
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence must be in (0, 1), got {args.confidence!r}")
    return dataset, m


def audit_cnn(args: argparse.Namespace, run: AuditedRun) -> None:
    """Audit one DP-SGD training run of a CNN (see the module notes); prints the result."""
    dataset, m = _check_options(args, run)
    import_torch_or_explain(f"--method {run.method}" if run.model is None else f"auditing {run.model} ({run.method})")
    from privml.torch._classifier import resolve_device  # lazy(extra): torch, known to be there now

    device = resolve_device(args.device or "auto")  # a missing GPU is an error before any data is read
    # The estimator, its settings checked by its own check before any data is read; the data's classes after.
    if run.params is None and run.method in SCATTER_METHODS:  # features are not cached: the audit writes nothing
        estimator = checked(build_scatter_classifier(args, device=device, cache_features=False))
    elif run.params is None:
        estimator = checked(build_cnn_classifier(args, classes=None, device=device))
    else:
        estimator = checked(rebuild_estimator(
            run, classes=None, seed=args.seed, device=str(device), threads=args.threads, progress=False
        ))
        if run.method in SCATTER_METHODS:
            estimator.set_params(cache_features=False)
    with warnings_as_lines():
        X, y, _, _, classes, names, shape = load_image_arrays(dataset, max_train=args.max_train, seed=args.seed)
        if dataset.startswith("npz:"):  # the release rule's stated exception, as for a study of the user's rows
            warnings.warn(
                PrivacyLeakWarning(
                    "the audit's figures are computed from your private records without noise and are not covered by "
                    "any privacy guarantee; do not publish them"
                ),
                stacklevel=1,
            )
    if run.params is not None:
        run.check_data(names, shape=shape)
    estimator.set_params(classes=classes, input_shape=tuple(int(s) for s in shape))
    architecture = estimator.head if run.method in SCATTER_METHODS else estimator.model  # scatter: its head
    if not args.no_progress:
        print(
            f"one-run audit of {_described(run.method, architecture)} on {dataset} ({len(X)} records + {m} canary "
            f"slots, {'white' if args.white_box else 'black'}-box, {device}): one training run...",
            file=sys.stderr,
        )
    result = torch_classifier_one_run_audit(
        estimator,
        X,
        y,
        m=m,
        white_box=args.white_box,
        confidence=args.confidence,
        random_state=args.seed,
        progress=not args.no_progress,
    )
    out = {
        **result.to_dict(),
        "dataset": dataset,
        "method": run.method,
        "estimator": type(estimator).__name__,
        "architecture": architecture,
        "audit": "one-run",
        "guarantee_of_the_audit": "none: the audit reads which canaries were trained on; it is a test, not a "
        "release (the audited run itself has the claimed guarantee on n_train records)",
        **run.fields(),
    }
    if args.plot:
        from privml.audit._plotting import plot_one_run  # lazy(extra): matplotlib, for --plot only

        out["plot"] = plot_one_run(
            result.scores,
            result.included,
            args.plot,
            guesses_in=result.audit.guesses_in,
            guesses_out=result.audit.guesses_out,
            title=f"one-run audit: {run.method} on {dataset}, bound {result.audit.epsilon_lower:.3f}",
        )
    emit(out, as_json=args.json, render=_render)


def _described(method: str, architecture: str) -> str:
    if method in SCATTER_METHODS:
        return f"{architecture} head on ScatterNet features"
    return f"{architecture} CNN"


def _render(r: dict[str, Any]) -> str:
    verdict = "VIOLATED: the claim is false" if r["exceeds_claim"] else "consistent with the claim"
    rows = [
        (
            "method",
            f"{r['method']} ({_described(r['method'], r['architecture'])}) on {r['dataset']}: {r['n_real']} records "
            f"+ {r['m']} canary slots = {r['n_train']} (one training run)",
        ),
        ("claimed", f"({fmt(r['claimed_epsilon'], 4)}, {fmt(r['delta'], 3)})-DP, {r['neighbouring']}"),
        ("epsilon lower bound", f"{r['epsilon_lower']:.4f} at {100 * r['confidence']:.0f}% confidence ({verdict})"),
        ("canaries", f"{r['canaries']}, scored {r['scores_from']} by {r['statistic']}"),
        (
            "guesses",
            f"{r['correct']} of {r['guesses']} right (top {r['guesses_in']} in, bottom {r['guesses_out']} "
            f"out; best of {r['tried']} counts, union bound)",
        ),
        (
            "f-DP test",
            f"claimed profile {'rejected' if r['claim_rejected'] else 'not rejected'}; mu-GDP refuted up "
            f"to mu = {fmt(r['mu_lower'], 4)}",
        ),
        (
            "run",
            f"{r['steps']} steps, sample rate {fmt(r['sample_rate'], 4)}, noise multiplier "
            f"{fmt(r['noise_multiplier'], 4)}",
        ),
        ("time", f"{r['seconds']:.1f} s (fit {r['seconds_fit']:.1f} s)"),
    ]
    if r.get("model_file"):
        rows.append(("model file", f"{r['model_file']} (its settings, a run of their own)"))
    if r.get("claim_note"):
        rows.append(("note", r["claim_note"]))
    if "plot" in r:
        rows.append(("plot", r["plot"]))
    return table(rows)
