"""What ``privml audit`` trains: the method and settings of its options, or those of a model file (``--model``).

    privml audit --model FILE --dataset NAME|csv:PATH|npz:PATH [--one-run --canaries M [--white-box]]
                 [--trials N ...] [--device D] [--threads T] [--seed S] [--json]

``--model FILE`` rebuilds the estimator from the file's metadata (:mod:`privml.io`): its method, every
hyper-parameter, epsilon, delta and neighbouring relation, and the preprocessing its rows went through
(the schema or ``--bounds unit``, the bias feature), and audits a run with those settings on the given
data; options that would change them (``--method``, ``--epsilon``, ``--schema``, the training options)
are refused. The file's weights are not read: an audit tests the training method at these settings, on a
run of its own. Refused in one line: private prediction methods (the file is not the release, the answers
are), the non-private baselines (no claim), Accuracy First (its guarantee is an ex-post epsilon of a
search, not of one training run), the DP-CD regressor (the canaries are labelled records), the
ScatterNet methods, and files that do not record how their rows were prepared.

A file trained with ``--bounds private`` holds the released ranges as its schema; its settings' epsilon is
the model's part of the total, which is what the audited run claims (the ranges are a separate release).

Without ``--model`` the audited run is the options' (:func:`audited_run`): ``--method``, ``--epsilon``,
``--delta``, and, for DP-SGD and DP-CD, ``--clip-norm`` and ``--learning-rate`` as ``privml train`` takes
them; a CSV is read through ``--schema`` or ``--bounds unit`` as ``train`` reads it, in multi-run and one-run
audits alike.
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass, field
from typing import Any

from privml.cli._common import BIAS, CliError, check_schema_options, integer, warnings_as_lines
from privml.cli._settings import checked
from privml.cli._train import (
    CNN_OPTIONS,
    LINEAR_HYPER,
    SCATTER_METHODS,
    add_cnn_options,
    build_estimator,
    refuse_cnn_options,
)
from privml.data._loaders import load_dataset
from privml.data._registry import is_user_data
from privml.data._schema import Schema
from privml.exceptions import PrivacyLeakWarning
from privml.io import read_model_metadata
from privml.registry import Kind, estimator_class, get_spec

__all__ = ["TORCH_AUDIT_METHODS", "AuditedRun", "add_run_options", "audited_run", "rebuild_estimator", "select_classes"]

#: Methods audited by a torch run (privml.cli._audit_torch); one-run only.
TORCH_AUDIT_METHODS = ("dpsgd-cnn", *SCATTER_METHODS)
#: Options a model file fixes (argparse names): refused with --model.
_FROM_THE_FILE = ("method", "epsilon", "delta", "schema", "bounds", "classes")
#: Options of the machine that runs the audit, not of the method: taken with --model (CNN files).
_MACHINE_OPTIONS = ("device", "threads")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--max-train`` and the training options ``privml train`` takes (:func:`add_cnn_options`)."""
    parser.add_argument(
        "--model",
        metavar="FILE",
        help="audit a run with the settings of this model file (method, hyper-parameters, epsilon, "
        "delta, relation, schema or bounds) on --dataset, instead of --method and --epsilon",
    )
    parser.add_argument(
        "--max-train", type=integer, help="one-run audits: use at most this many training records (as privml train)"
    )
    add_cnn_options(
        parser.add_argument_group(
            "training options, as privml train's (dpsgd-cnn; --clip-norm and --learning-rate also dpsgd, dpcd)"
        )
    )


@dataclass(frozen=True)
class AuditedRun:
    """The method audited and how its data are prepared: from the options (``params`` None) or a model file."""

    method: str
    schema: Any = None
    bounds: str | None = None
    bias: float | bool = BIAS
    hyper: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    params: dict[str, Any] | None = None
    class_names: list[Any] | None = None
    n_features: int | None = None
    image_shape: tuple[int, ...] | None = None

    def fields(self) -> dict[str, Any]:
        """What the audit's output says of the run's origin (the model file's path: a public input)."""
        return {} if self.model is None else {"model_file": self.model}

    def load(self, args: argparse.Namespace, *, max_train: int | None, classes: tuple | None) -> Any:
        """The dataset, through the run's schema or bounds and bias (a warning when it is the user's own rows)."""
        user = is_user_data(args.dataset)
        if self.class_names is not None:  # the file's public class set: none read from the labels
            classes = tuple(self.class_names) if user else self._built_in_classes(args.dataset)
        with warnings_as_lines():  # printed even when loading fails (a leak warning must not be lost)
            data = load_dataset(
                args.dataset,
                bias=self.bias,
                max_train=max_train,
                classes=classes,
                random_state=args.seed,
                schema=self.schema,
                bounds=self.bounds,
            )
            if user:  # the release rule's stated exception, as for a study of the user's own rows
                warnings.warn(
                    PrivacyLeakWarning(
                        "the audit's figures are computed from your private records without noise and are not covered "
                        "by any privacy guarantee; do not publish them"
                    ),
                    stacklevel=1,
                )
        return data

    def _built_in_classes(self, dataset: str) -> tuple:
        """The built-in dataset's classes the model file was trained on, matched by their printed names."""
        assert self.class_names is not None
        public = load_dataset(dataset).info.classes
        by_name = {str(c): c for c in public}
        if not all(str(c) in by_name for c in self.class_names):
            raise CliError(f"{self.model} was trained on the classes {self.class_names}; --dataset has {list(by_name)}")
        return tuple(by_name[str(c)] for c in self.class_names)

    def estimator(self, args: argparse.Namespace, info: Any) -> Any:
        """The unfitted linear estimator audited on data described by ``info`` (a DatasetInfo)."""
        if self.params is None:
            return build_estimator(
                self.method,
                n_classes=len(info.classes),
                epsilon=args.epsilon,
                delta=args.delta,
                l2=None,
                seed=args.seed,
                **self.hyper,
            )
        self.check_data(info.classes, n_features=info.n_features)
        return rebuild_estimator(self, classes=tuple(range(len(info.classes))), seed=args.seed)

    def check_settings(self, args: argparse.Namespace) -> None:
        """The estimator's own data-free check (:func:`~privml.cli._settings.checked`) of the run's settings, on
        one representative instance, before any data is read (the audit builds its models after)."""
        if self.params is None:
            checked(build_estimator(self.method, n_classes=None, epsilon=args.epsilon, delta=args.delta, l2=None,
                                    seed=args.seed, **self.hyper))
        else:
            checked(rebuild_estimator(self, classes=None, seed=args.seed))

    def check_data(self, classes: tuple, *, n_features: int | None = None, shape: tuple | None = None) -> None:
        """The data's classes and width must be the model file's (a run on other data is another run)."""
        assert self.params is not None and self.model is not None
        known = self.params.get("classes")
        count = len(known) if isinstance(known, list | tuple) else None
        if count is not None and count != len(classes):
            raise CliError(f"{self.model} was trained on {count} classes; --dataset has {len(classes)}")
        if self.class_names is not None and [str(c) for c in self.class_names] != [str(c) for c in classes]:
            raise CliError(
                f"{self.model} was trained on the classes {self.class_names}; --dataset has {[str(c) for c in classes]}"
            )
        if self.n_features is not None and n_features is not None and self.n_features != n_features:
            raise CliError(f"{self.model} was trained on {self.n_features} features; --dataset gives {n_features}")
        if self.image_shape is not None and shape is not None and tuple(self.image_shape) != tuple(shape):
            raise CliError(
                f"{self.model} takes images of shape {tuple(self.image_shape)}; --dataset holds {tuple(shape)}"
            )


def rebuild_estimator(run: AuditedRun, *, classes: tuple | None, seed: int | None, **machine: Any) -> Any:
    """The estimator of a model file's settings (seeds blanked, as files store none), with the data's class codes,
    the audit's seed and the machine's settings (``device``, ``threads``: None keeps the file's)."""
    assert run.params is not None
    params = {**run.params, "classes": classes, "random_state": seed}
    params.update({k: v for k, v in machine.items() if v is not None})
    try:
        return estimator_class(run.method)(**params)
    except TypeError as exc:
        raise CliError(f"{run.model}: its settings do not fit the {run.method} estimator ({exc})") from None


def audited_run(args: argparse.Namespace) -> AuditedRun:
    """The run to audit, every option checked before any data is read: ``--model FILE``'s, else the options'."""
    if args.model is not None:
        return _from_file(args)
    if args.method is None:
        raise CliError("--method is required (or --model FILE)")
    if args.method in TORCH_AUDIT_METHODS:
        return AuditedRun(method=args.method)  # its options: privml.cli._audit_torch
    hyper = LINEAR_HYPER.get(args.method, ())
    refuse_cnn_options(args, hyper, methods="--method dpsgd-cnn")  # the values: AuditedRun.check_settings
    _check_data_options(args)
    if args.dataset.startswith("csv:") and args.schema is None and args.bounds is None:
        raise CliError(
            f"{args.dataset} has no public bounds: give --schema FILE (draft one with `privml schema "
            f"suggest {args.dataset[4:]}`) or --bounds unit if every feature is already scaled into "
            "[-1, 1], as privml train reads it"
        )
    return AuditedRun(
        method=args.method,
        schema=check_schema_options(args),
        bounds=args.bounds,
        hyper={name: getattr(args, name) for name in hyper if getattr(args, name) is not None},
    )


def _check_data_options(args: argparse.Namespace) -> None:
    if args.one_run and args.n_jobs != 1:
        raise CliError("--jobs applies to the multi-run audit (a one-run audit is one training run)")
    if args.max_train is not None and not args.one_run:
        raise CliError("--max-train applies to --one-run (the multi-run audit trains on --n-train records)")
    if is_user_data(args.dataset) and args.classes is not None:
        raise CliError("--classes applies to built-in datasets (a csv: dataset's class set is its schema's)")
    if args.bounds is not None and args.bounds.startswith("private"):
        raise CliError(
            "--bounds private spends a part of epsilon on the ranges, a release the audit does not "
            "test: give --schema or --bounds unit, or audit a model file trained so (--model)"
        )


def _from_file(args: argparse.Namespace) -> AuditedRun:
    """``--model FILE``: refuse what it cannot audit, then take its method, settings and preprocessing."""
    given = [f"--{name}" for name in _FROM_THE_FILE if getattr(args, name) is not None]
    given += [
        f"--{name.replace('_', '-')}"
        for name in CNN_OPTIONS
        if name not in _MACHINE_OPTIONS and getattr(args, name) is not None
    ]
    if given:
        raise CliError(
            f"{', '.join(given)} cannot be given with --model: the model file fixes "
            f"{'them' if len(given) > 1 else 'it'}"
        )
    path = args.model
    metadata = read_model_metadata(path)  # one-line ValueError for anything that is not a privml model file
    method = metadata.get("method")
    spec = get_spec(method if isinstance(method, str) else repr(method))
    _refuse_method(path, spec)
    method = spec.name
    params, extra = dict(metadata.get("params", {})), metadata.get("extra", {})
    dataset = extra.get("dataset")
    if isinstance(dataset, str):  # CNN files of privml <= 0.1.0 recorded the name only
        dataset = {"name": dataset}
    if dataset is not None and not isinstance(dataset, dict):
        raise CliError(f"{path}: its metadata field 'extra.dataset' is not an object")
    names = None if dataset is None else dataset.get("classes")
    if names is not None and not isinstance(names, list):
        raise CliError(f"{path}: its metadata field 'extra.dataset.classes' is not a list")
    args.method, args.epsilon, args.delta = method, params.get("epsilon"), params.get("delta")
    if method in TORCH_AUDIT_METHODS:
        if not args.one_run:
            raise CliError(f"{path} is a {method} model: audit it with --one-run (one training run)")
        shape = params.get("input_shape")
        return AuditedRun(
            method=method,
            model=str(path),
            params=params,
            class_names=names,
            image_shape=tuple(shape) if isinstance(shape, list | tuple) else None,
        )
    refuse_cnn_options(args, (), methods="--method dpsgd-cnn")  # --device, --threads: a linear run has neither
    _check_data_options(args)
    if dataset is None:
        raise CliError(
            f"{path} does not record the data it was trained on (written by save_model without "
            "privml train's metadata): the audit cannot prepare rows as its training did"
        )
    schema, bounds = _file_preprocessing(path, extra, args.dataset)
    width = dataset.get("n_features")
    return AuditedRun(
        method=method,
        schema=schema,
        bounds=bounds,
        bias=extra.get("bias") or False,
        model=str(path),
        params=params,
        class_names=names,
        n_features=width if isinstance(width, int) else None,
    )


def _refuse_method(path: str, spec: Any) -> None:
    if spec.kind is Kind.PRIVATE_PREDICTION:
        raise CliError(
            f"{path} is a {spec.name} model, a private prediction method: its file is the server's "
            "secret and its answers are the release, so there is no training run to audit"
        )
    if spec.kind is Kind.BASELINE:
        raise CliError(f"{path} is the non-private baseline ({spec.name}): it claims no guarantee to audit")
    if spec.kind is Kind.SELECTION:
        raise CliError(
            f"{path} is an Accuracy First model: its guarantee is the ex-post epsilon of a search, not "
            "of one training run with fixed settings; audit its method with --method output"
        )
    if spec.name == "dpcd-regressor":
        raise CliError(
            f"{path} is a regressor: the audit's canaries are labelled records, so only classifiers are audited"
        )


def _file_preprocessing(path: str, extra: dict, dataset: str) -> tuple[Any, str | None]:
    """The schema or bounds of the file's rows, checked against ``--dataset``."""
    schema, bounds = extra.get("schema"), extra.get("bounds")
    if bounds is not None and bounds != "unit":
        raise CliError(f"{path}: its metadata field 'extra.bounds' must be \"unit\" or absent")
    if schema is not None:
        if not dataset.startswith("csv:"):
            raise CliError(f"{path} was trained on a CSV through a schema: give --dataset csv:PATH")
        parsed = Schema.from_dict(schema, where=f"{path}: its schema")
        parsed.check_final(f"{path}: its schema")
        return parsed, None
    if bounds is not None and not is_user_data(dataset):
        raise CliError(f"{path} was trained on user data with --bounds unit: give --dataset csv:PATH or npz:PATH")
    if bounds is None and dataset.startswith("csv:"):
        raise CliError(
            f"{path} was not trained through a schema or bounds, so {dataset} has no public scale to read it with"
        )
    return None, bounds


def select_classes(dataset: str, text: str | None) -> tuple | None:
    """The public classes to keep (None: all), matched by their printed names."""
    if text == "all":
        return None
    public = load_dataset(dataset).info.classes
    if text is None:
        return tuple(public[:2])
    by_name = {str(c): c for c in public}
    chosen = []
    for token in (t.strip() for t in text.split(",")):
        if token not in by_name:
            raise CliError(f"--classes: {token!r} is not a class of {dataset}; choose from {', '.join(by_name)}")
        chosen.append(by_name[token])
    if len(chosen) < 2:
        raise CliError("--classes needs at least two classes")
    return tuple(chosen)
