"""``privml train``: train one private (or baseline) model on a dataset. Usage::

    privml train --method output|objective|dpsgd|dpcd|nonprivate --dataset NAME|csv:PATH
                 [--schema schema.toml | --bounds unit | --bounds private[:FRACTION]]
                 --epsilon E --delta D [--l2 L] [--clip-norm C] [--learning-rate LR]
                 [--neighbouring replace-one|add/remove-one] [--seed S] [--out model.npz] [--json]
    privml train --from-study RESULTS --epsilon E [--delta D] [--budget B] [--seed S] [--out model.npz] [--json]
    privml train --method dpsgd-cnn --dataset mnist|fashion-mnist --epsilon E [--epochs N]
                 [--batch-size B] [--learning-rate LR] [--clip-norm C] [--architecture A] [--threads T]
                 [--device auto|cpu|cuda[:N]] [--precision fp32|bf16]
                 [--clip-precision fp32|tf32]
    privml train --method scatter-linear|scatter-cnn --dataset mnist|fashion-mnist|cifar10|npz:PATH
                 --epsilon E [the dpsgd-cnn options but --architecture]

``dpsgd-cnn`` trains a CNN with DP-SGD (:mod:`privml.torch`, imported only for
this method) on the images standardised by public constants, with a progress
bar showing the epsilon spent after each epoch. ``scatter-linear`` and
``scatter-cnn`` (Tramer & Boneh 2021) train a linear model or a small CNN by
DP-SGD on ScatterNet features of the images (:mod:`privml.torch._scatter`),
also on CIFAR-10 and on the user's images (``npz:`` arrays of H x W or
H x W x C images); the features of a built-in set are cached in the data
cache (private, like the images).

Prints ``{"method", "dataset", "n_train", "n_test", "test_accuracy", "epsilon",
"delta", "neighbouring", ...}``. The model file (``--out``) is ``.npz`` plus
JSON metadata (never a pickle), carrying the guarantee and the preprocessing
so ``privml predict`` can apply it to new rows.

A CSV is read through a public schema (``--schema``, :mod:`privml.data._schema`;
``privml schema suggest`` drafts one), which the model file carries; a CSV
without one is refused in one line unless ``--bounds unit`` states that its
features are already on a public scale within [-1, 1] (then clipped to it), or
``--bounds private[:FRACTION]`` (a private method, numeric columns) estimates
each column's range from the training rows with DP quantiles
(:mod:`privml.data._private_bounds`), spending FRACTION of ``--epsilon`` (default
0.25) on them: the model gets the rest, the printed and saved guarantee is the
total (basic composition, under the model's relation), ``privacy_split`` states
both parts, and the model file carries the released ranges as its schema.
Unscaled columns (a column in the thousands) would otherwise swamp the rest
after the unit-ball projection and give a silently wrong model; deciding so
from the data would itself read the private records.

``--neighbouring`` states DP-SGD's relation: add/remove-one (the default,
Poisson sampling's own) or replace-one, as ``privml study`` runs it (the
other methods are analysed under replace-one). ``--clip-norm`` (DP-SGD, DP
coordinate descent) and ``--learning-rate`` (DP-SGD) are the study's tuned
hyper-parameters.

``--from-study RESULTS`` trains the method ``privml study recommend``
recommends at the given setting, exactly as the study ran it
(:mod:`privml.cli._from_study`): the same data preparation and split, its
settings, the hyper-parameters most of its repeats chose, and its relation.

The release rule (:mod:`privml.release`): ``test_accuracy`` is printed for a
built-in dataset, whose test split is public; on csv:/npz: data the held-out
rows are private, so their exact accuracy, the solver's diagnostics and the
training time (a function of the data-dependent iteration count) appear only
with ``--show-nonprivate``, under ``"nonprivate"``, with a warning.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from typing import Any

import numpy as np

from privml._extras import import_torch_or_explain
from privml.cli._common import (
    BIAS,
    CliError,
    add_command,
    add_json_flag,
    add_nonprivate_flag,
    add_schema_options,
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
from privml.cli._train_bounds import charge_ranges, private_ranges
from privml.data import load_dataset
from privml.io import save_model
from privml.registry import estimator_class

#: CLI method -> model-file method (the classifier variants of privml.io.MODEL_CLASSES)
TRAIN_METHODS = ("output", "objective", "dpsgd", "dpcd", "nonprivate", "dpsgd-cnn", "scatter-linear", "scatter-cnn")
#: DP-SGD on ScatterNet features (privml.torch._scatter_classifier): images, like dpsgd-cnn
SCATTER_METHODS = ("scatter-linear", "scatter-cnn")
#: image datasets of the scatter methods, besides npz:PATH images
SCATTER_DATASETS = ("mnist", "fashion-mnist", "cifar10")
#: image architectures of ``--method dpsgd-cnn`` (privml.torch.models.IMAGE_ARCHITECTURES; a test
#: keeps them equal without importing torch here)
CNN_ARCHITECTURES: tuple[str, ...] = ("tramer-boneh", "resnet", "wide-resnet")
#: image datasets that ``--method dpsgd-cnn`` accepts
CNN_DATASETS = ("mnist", "fashion-mnist")
DEFAULT_DELTA = 1e-5  #: --delta of a private method when none is given


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "train", _train, description=(
        "Train a differentially private linear classifier (output or objective perturbation, DP-SGD, "
        "DP coordinate descent), a CNN by DP-SGD on MNIST or Fashion-MNIST (dpsgd-cnn), or the non-private "
        "baseline, on a built-in dataset or your CSV."))
    parser.add_argument("--method", choices=TRAIN_METHODS, help="required unless --from-study")
    parser.add_argument("--dataset", help="built-in name (see `privml datasets`) or csv:PATH / npz:PATH "
                                          "(required unless --from-study)")
    parser.add_argument("--from-study", metavar="RESULTS",
                        help="train what `privml study recommend RESULTS` recommends at --epsilon (and --delta, "
                             "--budget), as the study ran it: its data preparation and split, its settings, the "
                             "hyper-parameters most of its repeats chose, its neighbouring relation")
    parser.add_argument("--budget", type=integer, help="with --from-study: the inference budget B asked about")
    parser.add_argument("--label-column", default="label", help="label column of a CSV (default: label)")
    parser.add_argument("--test", dest="test_path", help="separate test file for csv:/npz: data (default: 80/20 split)")
    parser.add_argument(
        "--classes",
        help="comma-separated public class set for user data (default: read from the labels, which leaks; warns)",
    )
    add_schema_options(parser)
    parser.add_argument("--epsilon", type=finite_float, help="privacy budget epsilon (required unless nonprivate)")
    # Default None, not 1e-5: a value the user gave must be told apart from none, so that it is refused where it
    # does not apply (nonprivate) rather than silently dropped; DEFAULT_DELTA is filled in otherwise.
    parser.add_argument("--delta", type=finite_float,
                        help=f"delta in [0, 1) (default {DEFAULT_DELTA:g}; not for nonprivate)")
    parser.add_argument("--l2", type=finite_float, help="regularisation lambda (default: the method's own default)")
    parser.add_argument("--neighbouring", choices=("replace-one", "add/remove-one"),
                        help="dpsgd only: the relation its guarantee is stated under (default add/remove-one; "
                             "privml study runs replace-one); the other methods are analysed under replace-one")
    parser.add_argument("--max-train", type=integer, help="use at most this many training records")
    parser.add_argument(
        "--seed", type=seed_integer,
        help="random seed, for experiments and tests only (default: fresh OS entropy); never saved in the model file",
    )
    parser.add_argument("--no-bias", action="store_true", help="do not append the constant bias feature")
    parser.add_argument("--out", help="write the model to this .npz file")
    cnn = parser.add_argument_group("dpsgd-cnn and scatter-* options (defaults: Tramer & Boneh 2021 for MNIST)")
    add_cnn_options(cnn)
    cnn.add_argument("--no-progress", action="store_true",
                     help="no progress bar on stderr (it shows the steps done, elapsed time and time left)")
    add_nonprivate_flag(parser)
    add_json_flag(parser)


#: The training options of dpsgd-cnn and the scatter methods (argparse names), in the order errors list them.
CNN_OPTIONS = ("epochs", "batch_size", "learning_rate", "clip_norm", "threads", "device", "precision",
               "clip_precision", "architecture")


def add_cnn_options(group: Any) -> None:
    """The :data:`CNN_OPTIONS` (``--clip-norm`` and ``--learning-rate`` also set DP-SGD's and DP-CD's), on an
    argument group; ``privml audit`` takes the same ones."""
    group.add_argument("--epochs", type=finite_float, help="epochs (default 40; scatter-linear: 80)")
    group.add_argument("--batch-size", type=integer,
                       help="expected Poisson batch size (default 512, scatter-*: 4096; at most n)")
    group.add_argument("--learning-rate", type=finite_float,
                       help="SGD learning rate (dpsgd-cnn: momentum 0.9, default 0.5; scatter-*: see BENCHMARKS.md; "
                            "dpsgd: its own default)")
    group.add_argument("--clip-norm", type=finite_float,
                       help="clip norm C of each example's gradient (dpsgd-cnn: default 0.1; dpsgd, dpcd, scatter-*: "
                            "their own)")
    group.add_argument("--architecture", choices=CNN_ARCHITECTURES, help="dpsgd-cnn's network (default tramer-boneh)")
    group.add_argument("--threads", type=integer, help="torch threads (default: torch's choice)")
    group.add_argument("--device", help="auto (default: CUDA when available), cpu, cuda or cuda:N")
    group.add_argument("--precision", choices=("fp32", "bf16"),
                       help="fp32 (default), or bf16 autocast passes (clipping and noise stay float32)")
    group.add_argument("--clip-precision", choices=("fp32", "tf32"),
                       help="arithmetic of the per-example norms and clipped sum: fp32 (default), or tf32 (operands "
                            "rounded to TF32 by privml, rounding bounded inside C; faster on GPUs with TF32 cores)")


def refuse_cnn_options(args: argparse.Namespace, hyper: tuple[str, ...], *, more: tuple[str, ...] = (),
                       methods: str = "--method dpsgd-cnn and the scatter-* methods") -> None:
    """One line naming the :data:`CNN_OPTIONS` given to a linear method (but its ``hyper``: LINEAR_HYPER), and
    ``more`` options it cannot use either."""
    given = [f"--{k.replace('_', '-')}" for k in CNN_OPTIONS if getattr(args, k) is not None and k not in hyper]
    given += more
    if given:
        linear = any(k in given for k in ("--clip-norm", "--learning-rate"))
        also = " (--clip-norm, --learning-rate: also dpsgd; --clip-norm: dpcd)" if linear else ""
        raise ValueError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to {methods} only{also}")


def cnn_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The DP-SGD settings given among the CNN options, as the torch estimators' keyword arguments."""
    names = ("epochs", "batch_size", "learning_rate", "clip_norm", "threads", "precision", "clip_precision")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def build_cnn_classifier(args: argparse.Namespace, *, classes: tuple | None, device: Any,
                         input_shape: tuple[int, ...] = (1, 28, 28)) -> Any:
    """``--method dpsgd-cnn``'s :class:`~privml.torch.TorchClassifier` with the CLI's settings (imports
    torch); its settings are checked by :func:`~privml.cli._settings.checked`."""
    from privml.torch._classifier import TorchClassifier  # lazy(extra): torch

    return TorchClassifier(
        epsilon=args.epsilon, delta=args.delta, model=args.architecture or "tramer-boneh",
        input_shape=tuple(int(s) for s in input_shape), classes=classes, random_state=args.seed,
        progress=not args.no_progress, device=str(device), **cnn_settings(args),
    )


#: linear methods' hyper-parameters beyond l2 that --clip-norm and --learning-rate set
LINEAR_HYPER = {"dpsgd": ("clip_norm", "learning_rate"), "dpcd": ("clip_norm",)}


def build_estimator(method: str, *, n_classes: int | None, epsilon: float | None, delta: float, l2: float | None,
                    seed: Any, neighbouring: str | None = None, **hyper: float | None):
    """The estimator for ``method`` with the CLI's settings (defaults for the rest); ``n_classes`` None: no class
    set yet (an estimator built to check its settings before the data are read)."""
    cls = estimator_class(method)
    accepted = inspect.signature(cls).parameters
    classes = None if n_classes is None else tuple(range(n_classes))
    kwargs: dict[str, Any] = {"classes": classes, "random_state": seed}
    if method != "nonprivate":
        kwargs.update(epsilon=epsilon, delta=delta)
    if neighbouring is not None:
        kwargs["neighbouring"] = neighbouring
    kwargs.update({name: value for name, value in hyper.items() if value is not None})
    if l2 is not None:
        if "l2" not in accepted:
            # An option a method cannot use is an error, never silently dropped.
            raise ValueError(f"--l2 does not apply to --method {method} (it has no l2 parameter)")
        kwargs["l2"] = l2
    return cls(**{k: v for k, v in kwargs.items() if k in accepted})


def check_privacy_options(args: argparse.Namespace) -> None:
    """--epsilon required for a private method, --epsilon and --delta refused for the baseline; fills in
    --delta's default (DEFAULT_DELTA). Their values are the estimator's to check (:func:`checked`).

    Shared with ``privml audit``: checked before any data is read or noise drawn.
    """
    if args.method == "nonprivate":
        if args.epsilon is not None or args.delta is not None:
            raise ValueError("--epsilon and --delta do not apply to --method nonprivate (the baseline is not private)")
    else:
        if args.epsilon is None:
            raise ValueError(f"--epsilon is required for --method {args.method}")
    args.delta = DEFAULT_DELTA if args.delta is None else args.delta


def _train(args: argparse.Namespace) -> None:
    if args.from_study is not None:
        from privml.cli._from_study import train_from_study  # lazy(startup): the study package (1.3 s of imports)

        train_from_study(args)
        return
    if args.method is None or args.dataset is None:
        raise CliError("--method and --dataset are required (or --from-study RESULTS)")
    if args.budget is not None:
        raise CliError("--budget applies to --from-study only (the inference budget the study was asked about)")
    if args.method == "dpsgd-cnn" or args.method in SCATTER_METHODS:
        _train_cnn(args)
        return
    model, classes, user, schema = _check_linear_args(args)  # everything, before touching data or drawing noise
    ranges, model_epsilon = private_ranges(args)
    with warnings_as_lines():  # printed even when loading fails (a leak warning must not be lost)
        data = load_dataset(
            args.dataset,
            bias=False if args.no_bias else BIAS,
            max_train=args.max_train,
            classes=classes if user else None,
            label_column=args.label_column,
            test_path=args.test_path,
            random_state=args.seed,
            schema=schema,
            bounds=ranges if ranges is not None else args.bounds,
        )
    info = data.info
    model.set_params(classes=tuple(range(len(info.classes))))
    if ranges is not None:
        model.set_params(epsilon=model_epsilon)  # the part --bounds private leaves (of a checked --epsilon)
    print(f"training {type(model).__name__} on {info.name} ({info.n_train} records)...", file=sys.stderr)
    start = time.perf_counter()
    model.fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(model.predict(data.X_test) == data.y_test))
    # With private ranges: the split of the budget and the ranges (DP outputs), and the schema they make.
    released, schema = ({}, schema) if ranges is None else charge_ranges(args, model, ranges, info.classes)
    guarantee = model.privacy_
    result = {
        "method": args.method,
        "dataset": info.name,
        "n_train": info.n_train,
        "n_test": info.n_test,
        "n_features": info.n_features,
        "n_classes": len(info.classes),
        "epsilon": guarantee.epsilon,
        "delta": guarantee.delta,
        "neighbouring": guarantee.neighbouring.value,
        # Stated exactly: add/remove-one here keeps n public (the zero-out view), and n and the split are printed.
        "neighbouring_detail": guarantee.neighbouring.detail,
        "accountant": guarantee.accountant,
    }
    result.update(released)
    nonprivate = {**getattr(model, "nonprivate_diagnostics_", {}), "train_seconds": seconds}
    if held_out_is_public(args.dataset):
        result["test_accuracy"] = accuracy
    else:
        nonprivate["test_accuracy"] = accuracy
    if args.out:
        # Private ranges are saved as the schema they make, beside the split of the budget.
        extra = {"dataset": info.to_dict(), "bias": None if args.no_bias else BIAS,
                 **schema_extra(schema, None if released else args.bounds),
                 **{k: v for k, v in released.items() if k == "privacy_split"}}
        path = save_model(model, args.out, extra=extra)
        result["model"] = str(path)
    result.update(nonprivate_block(args, nonprivate, what="non-private diagnostics of this fit"))
    emit(result, as_json=args.json, render=_render)


def _check_linear_args(args: argparse.Namespace) -> tuple[Any, Any, bool, Any]:
    """Every option of a linear method checked before any data is read: (the estimator, classes, user?, schema)."""
    if args.neighbouring is not None and args.method != "dpsgd":
        raise CliError(f"--neighbouring applies to --method dpsgd only ({args.method} is analysed under replace-one)")
    hyper = LINEAR_HYPER.get(args.method, ())
    refuse_cnn_options(args, hyper, more=("--no-progress",) if args.no_progress else ())  # linear: no bar
    # Validate everything before touching data or drawing noise.
    check_privacy_options(args)
    # --epsilon, --delta, --l2, --clip-norm, --learning-rate: the estimator's own check (its class set comes
    # with the data). --max-train: load_dataset checks it first, before it reads (or fetches) anything.
    model = checked(build_estimator(
        args.method, n_classes=None, epsilon=args.epsilon, delta=args.delta, l2=args.l2, seed=args.seed,
        neighbouring=args.neighbouring, **{name: getattr(args, name) for name in hyper},
    ))
    classes = parse_classes(args.classes)
    check_output_path(args.out, "--out", suffix=".npz")
    user = not held_out_is_public(args.dataset)
    if not user and (args.test_path or args.label_column != "label" or classes is not None):
        raise ValueError("--test, --label-column and --classes apply to csv:/npz: datasets only")
    schema = check_schema_options(args)

    return model, classes, user, schema


def _check_cnn_args(args: argparse.Namespace) -> str:
    """Every ``dpsgd-cnn`` (or scatter) option checked before any data is read; returns the dataset's canonical name."""
    check_privacy_options(args)  # dpsgd-cnn is private: --epsilon required, delta > 0
    scatter = args.method in SCATTER_METHODS
    user = scatter and args.dataset.startswith("npz:")
    dataset = args.dataset if user else args.dataset.lower().replace("_", "-")
    if scatter and args.architecture is not None:
        raise ValueError(f"--architecture applies to --method dpsgd-cnn only ({args.method} trains its own head)")
    if scatter and not user and dataset not in SCATTER_DATASETS:
        raise ValueError(f"--method {args.method} supports --dataset {', '.join(SCATTER_DATASETS)} or npz:PATH, "
                         f"got {args.dataset!r}")
    if not scatter and dataset not in CNN_DATASETS:
        raise ValueError(f"--method dpsgd-cnn supports --dataset {' or '.join(CNN_DATASETS)}, got {args.dataset!r}")
    if args.neighbouring is not None:
        raise ValueError(f"--neighbouring applies to --method dpsgd only ({args.method} states add/remove-one)")
    if args.schema is not None or args.bounds is not None:
        raise ValueError(f"--schema and --bounds do not apply to --method {args.method} (images: a public pixel scale)")
    user_data_options = args.test_path or args.classes is not None or args.label_column != "label"
    if args.l2 is not None or args.no_bias or (user_data_options and not user):
        raise ValueError(f"--l2, --no-bias, --test, --label-column and --classes do not apply to --method "
                         f"{args.method}{' on a built-in dataset' if scatter else ''}")
    if user and args.label_column != "label":
        raise ValueError("--label-column applies to csv: data (npz: files hold arrays X and y)")
    check_output_path(args.out, "--out", suffix=".npz")
    return dataset


def _train_cnn(args: argparse.Namespace) -> None:
    """``--method dpsgd-cnn``: a CNN trained by DP-SGD on MNIST or Fashion-MNIST images."""
    dataset = _check_cnn_args(args)

    import_torch_or_explain(f"--method {args.method}")
    if args.method in SCATTER_METHODS:
        _train_scatter(args, dataset)
        return
    from privml.torch._classifier import resolve_device  # lazy(extra): torch, for this method only
    from privml.torch._data import load_images  # lazy(extra): torch

    device = resolve_device(args.device or "auto")  # a missing GPU is an error before any data is read
    model = checked(build_cnn_classifier(args, classes=None, device=device))  # its settings, before the data

    data = load_images(dataset, max_train=args.max_train, random_state=args.seed)
    architecture = args.architecture or "tramer-boneh"
    model.set_params(classes=data.classes)
    n_train, n_test = int(data.X_train.shape[0]), int(data.X_test.shape[0])
    print(f"training {architecture} CNN with DP-SGD on {dataset} ({n_train} records, {device})...",
          file=sys.stderr)
    start = time.perf_counter()
    model.fit(data.X_train.numpy(), data.y_train.numpy())
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(model.predict(data.X_test.numpy()) == data.y_test.numpy()))
    guarantee = model.privacy_
    info = model.fit_info_
    result = {
        "method": args.method,
        "dataset": dataset,
        "n_train": n_train,
        "n_test": n_test,
        "n_features": int(np.prod(data.X_train.shape[1:])),
        "n_classes": len(data.classes),
        "test_accuracy": accuracy,  # on the dataset's published test split: public
        "epsilon": guarantee.epsilon,
        "delta": guarantee.delta,
        "neighbouring": guarantee.neighbouring.value,
        # Stated exactly: add/remove-one here keeps n public (the zero-out view), and n and the split are printed.
        "neighbouring_detail": guarantee.neighbouring.detail,
        "accountant": guarantee.accountant,
        "architecture": architecture,
        "epochs": info["epochs"],
        "steps": info["steps"],
        "noise_multiplier": info["noise_multiplier"],
        "clip_norm": info["clip_norm"],
        "expected_batch_size": info["expected_batch_size"],
    }
    if args.out:
        # The public class names and the dataset whose pixel standardisation `privml predict` applies.
        extra = {"dataset": {"name": dataset, "classes": [_plain(c) for c in data.class_names]}}
        path = save_model(model, args.out, extra=extra)
        result["model"] = str(path)
    result.update(nonprivate_block(args, {"train_seconds": seconds}, what="the training time"))
    emit(result, as_json=args.json, render=_render)


def load_image_arrays(dataset: str, *, max_train: int | None, seed: int | None, classes: str | None = None,
                      test_path: str | None = None) -> tuple[Any, ...]:
    """(X_train, y_train, X_test, y_test, codes, class names, input shape) of a scatter method's images (also
    those ``privml audit`` audits a CNN on); ``classes`` and ``test_path``: npz: data's --classes and --test.

    MNIST and Fashion-MNIST are standardised by their public constants (as for dpsgd-cnn and at prediction);
    CIFAR-10 and npz: images are used as given, channels first (an H x W x C array is transposed), since the
    features are normalised per image anyway. No statistic of the data is used.
    """
    if dataset in CNN_DATASETS:
        from privml.torch._data import load_images  # lazy(extra): torch

        images = load_images(dataset, max_train=max_train, random_state=seed)
        return (images.X_train.numpy(), images.y_train.numpy(), images.X_test.numpy(), images.y_test.numpy(),
                images.classes, images.class_names, (1, 28, 28))
    user = dataset.startswith("npz:")
    with warnings_as_lines():  # a leak warning (classes read from the labels) must not be lost
        data = load_dataset(dataset, preprocess=False, max_train=max_train,
                            classes=parse_classes(classes) if user else None, test_path=test_path,
                            random_state=seed)
    parts = []
    for X in (data.X_train, data.X_test):
        X = np.asarray(X, dtype=np.float32)
        if X.ndim == 3:
            X = X[:, None]
        elif X.ndim == 4 and user:
            X = X.transpose(0, 3, 1, 2)  # H x W x C images -> channels first
        elif X.ndim != 4:
            raise ValueError(f"{dataset}: the scatter methods need images, arrays of H x W or H x W x C values per "
                             f"record; got records of shape {X.shape[1:]}")
        parts.append(np.ascontiguousarray(X))
    codes = tuple(range(len(data.info.classes)))
    return parts[0], data.y_train, parts[1], data.y_test, codes, tuple(data.info.classes), parts[0].shape[1:]


def build_scatter_classifier(args: argparse.Namespace, *, device: Any, cache_features: bool) -> Any:
    """``--method scatter-linear|scatter-cnn``'s :class:`~privml.torch.ScatterClassifier` with the CLI's settings
    (imports torch; also ``privml audit``'s); its settings are checked by :func:`~privml.cli._settings.checked`."""
    from privml.torch._scatter_classifier import ScatterClassifier  # lazy(extra): torch

    return ScatterClassifier(
        epsilon=args.epsilon, delta=args.delta, head=args.method.removeprefix("scatter-"), random_state=args.seed,
        progress=not args.no_progress, device=str(device), cache_features=cache_features, **cnn_settings(args),
    )


def _train_scatter(args: argparse.Namespace, dataset: str) -> None:
    """``--method scatter-linear|scatter-cnn``: DP-SGD on ScatterNet features of images."""
    from privml.torch._classifier import resolve_device  # lazy(extra): torch, for these methods only

    device = resolve_device(args.device or "auto")  # a missing GPU is an error before any data is read
    user = dataset.startswith("npz:")
    # A built-in set's features are kept in its (private) cache; the user's images are not copied anywhere.
    model = checked(build_scatter_classifier(args, device=device, cache_features=not user))  # the shape: at fit
    X_train, y_train, X_test, y_test, classes, names, shape = load_image_arrays(
        dataset, max_train=args.max_train, seed=args.seed, classes=args.classes, test_path=args.test_path)
    model.set_params(input_shape=tuple(int(s) for s in shape), classes=classes)
    print(f"training {args.method} with DP-SGD on {dataset} ({len(X_train)} records, {device})...", file=sys.stderr)
    start = time.perf_counter()
    model.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(model.predict(X_test) == np.asarray(y_test)))
    guarantee, info = model.privacy_, model.fit_info_
    result = {
        "method": args.method,
        "dataset": dataset,
        "n_train": len(X_train),
        "n_test": len(X_test),
        "n_features": int(np.prod(shape)),
        "n_classes": len(classes),
        "epsilon": guarantee.epsilon,
        "delta": guarantee.delta,
        "neighbouring": guarantee.neighbouring.value,
        "neighbouring_detail": guarantee.neighbouring.detail,
        "accountant": guarantee.accountant,
        "epochs": info["epochs"],
        "steps": info["steps"],
        "noise_multiplier": info["noise_multiplier"],
        "clip_norm": info["clip_norm"],
        "expected_batch_size": info["expected_batch_size"],
    }
    nonprivate = {"train_seconds": seconds}
    if user:
        nonprivate["test_accuracy"] = accuracy  # the held-out rows are private records
    else:
        result["test_accuracy"] = accuracy  # the published test split: public
    if args.out:
        # Built-in sets: the name whose pixel standardisation `privml predict` applies (MNIST, Fashion-MNIST); other
        # images are taken as given, channels first.
        described: dict[str, Any] = {"classes": [_plain(c) for c in names]}
        if dataset in CNN_DATASETS:
            described["name"] = dataset
        path = save_model(model, args.out, extra={"dataset": described})
        result["model"] = str(path)
    result.update(nonprivate_block(args, nonprivate, what="non-private diagnostics of this fit"))
    emit(result, as_json=args.json, render=_render)


def _plain(value: object) -> object:
    """A numpy scalar as the Python value JSON can hold."""
    return value.item() if hasattr(value, "item") else value


def _render(r: dict) -> str:
    rows = [
        ("method", r["method"]),
        ("dataset", f"{r['dataset']} ({r['n_train']} train / {r['n_test']} test, {r['n_features']} features)"),
        ("test accuracy", f"{100 * r['test_accuracy']:.2f}%" if "test_accuracy" in r
         else "below, not private (--show-nonprivate)" if "test_accuracy" in r.get("nonprivate", {})
         else "not shown: the held-out rows are private (--show-nonprivate prints it, with a warning)"),
        ("guarantee", f"({fmt(r['epsilon'], 4)}, {fmt(r['delta'], 3)})-DP, {r['neighbouring']} [{r['accountant']}]"),
        ("neighbouring", r["neighbouring_detail"]),
    ]
    if "privacy_split" in r:
        parts = r["privacy_split"]
        rows.append(("privacy split", f"bounds epsilon {fmt(parts['bounds']['epsilon'], 4)} "
                                      f"({parts['bounds']['mechanism']}) + model epsilon "
                                      f"{fmt(parts['model']['epsilon'], 4)}, delta {fmt(parts['model']['delta'], 3)} "
                                      f"[{parts['model']['accountant']}]"))
        rows.append(("private bounds", ", ".join(f"{name} [{fmt(lo, 4)}, {fmt(hi, 4)}]"
                                                 for name, (lo, hi) in r["private_bounds"].items())))
    if "model" in r:
        rows.append(("model file", r["model"]))
    rows += [(f"{key} (non-private)", str(value)) for key, value in r.get("nonprivate", {}).items()]
    return table(rows)
