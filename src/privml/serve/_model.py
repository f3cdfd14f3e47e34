"""What a model file is served as: predictor, ledger, preprocessing, class names.

A privately trained model is served as is (no budget). A private-prediction
model is served only against a persistent ledger: an in-memory count would
restart at zero with the process and silently void the guarantee.
:class:`ModelSpec` holds what ``privml predict``, ``privml serve`` and every
server worker open; :func:`open_served_model` opens it, reading the file once.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privml._extras import import_torch_or_explain
from privml.data import preprocess_features
from privml.data._schema import Schema
from privml.io import MODEL_CLASSES, read_model_file
from privml.ledger import BudgetLedger, open_ledger
from privml.prediction._loading import PRIVATE_TRAINING_METHODS, load_predictor, refuse_privacy_settings

__all__ = ["ModelSpec", "SchemaPipeline", "ServedModel", "model_device", "model_pipeline", "open_served_model"]


@dataclass(frozen=True)
class ModelSpec:
    """A model file and the settings it is served under (picklable: each server worker opens it anew).

    Attributes
    ----------
    path:
        A model file (:func:`privml.io.save_model`).
    method, epsilon, delta, budget, accountant, random_state:
        As for :func:`privml.prediction.load_predictor` (``None``: not given;
        any of them given for a file that cannot use it is an error).
    ledger:
        SQLite file or ``postgresql://`` URL counting the answers; required
        for private-prediction models (unless :func:`open_served_model` is told
        otherwise), refused for privately trained ones.
        The ledger is bound to the calibration (method, epsilon, delta,
        accountant: :func:`~privml.ledger.calibration_context`), so it cannot
        be continued under another one; it records nothing of the model file
        (two models of one calibration may share a budget name).
    ledger_name:
        Which budget of the ledger store to use (default ``"default"``);
        an error without ``ledger``, which it would not name anything in.
    device:
        For a CNN file only: ``"auto"`` (the default: CUDA when available),
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (:func:`model_device`).
    """

    path: str | Path
    method: str | None = None
    epsilon: float | None = None
    delta: float | None = None  # None: not given (the file's setting, or 0); an explicit 0 asks for pure DP
    budget: int | None = None
    accountant: str | None = None
    ledger: str | Path | None = None
    ledger_name: str | None = None
    random_state: Any = None
    device: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ModelSpec:
        """The options of ``privml predict`` and ``privml serve`` (``--seed`` is the random state)."""
        return cls(path=args.model, method=args.method, epsilon=args.epsilon, delta=args.delta, budget=args.budget,
                   accountant=args.accountant, ledger=args.ledger, ledger_name=args.ledger_name,
                   random_state=args.seed, device=args.device)


@dataclass(frozen=True)
class ServedModel:
    """A loaded model and how requests reach it."""

    predictor: Any
    preprocess: Callable[[np.ndarray], np.ndarray] | None
    class_names: list[Any] | None
    method: str

    @property
    def ledger(self) -> BudgetLedger | None:
        return getattr(self.predictor, "ledger_", None)


def model_pipeline(metadata: dict) -> tuple[Callable[[np.ndarray], np.ndarray] | None, list[Any] | None]:
    """The data-independent preprocessing and public class names recorded by ``privml train``.

    Raises
    ------
    ValueError
        For a field of the wrong type (a file from elsewhere), before anything is loaded or charged.
    """
    extra = metadata.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError("model metadata field 'extra' must be a JSON object")
    dataset = extra.get("dataset") or {}
    if isinstance(dataset, str):  # CNN files of privml <= 0.1.0 recorded the name only
        dataset = {"name": dataset}
    if not isinstance(dataset, dict):
        raise ValueError(f"model metadata field 'extra.dataset' must be a name or an object, not {_kind(dataset)}")
    name = dataset.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"model metadata field 'extra.dataset.name' must be a string, not {_kind(name)}")
    names = dataset.get("classes")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str | int | float) for n in names)):
        raise ValueError("model metadata field 'extra.dataset.classes' must be a list of class names")
    preprocess = None
    if name and _runs_on_torch(metadata):
        import_torch_or_explain(f"a CNN model file ({metadata.get('method')})")
        from privml.torch._data import standardise_images  # lazy(extra): torch, for CNN files only

        def preprocess(X: np.ndarray) -> np.ndarray:
            return standardise_images(name, X).reshape(len(X), -1)

    elif extra.get("schema") is not None:
        preprocess = SchemaPipeline(schema=_schema(extra["schema"]), bias=extra.get("bias") or False)
    elif name:
        bias = extra.get("bias") or False
        bounds = extra.get("bounds")
        if bounds is not None and bounds != "unit":
            raise ValueError("model metadata field 'extra.bounds' must be \"unit\" or absent")

        def preprocess(X: np.ndarray) -> np.ndarray:
            return preprocess_features(name, X, bias=bias, bounds=bounds)

    return preprocess, dataset.get("classes") or None


@dataclass(frozen=True)
class SchemaPipeline:
    """The preprocessing of a model trained through a data schema: rows of cells in the schema's column order
    (numbers, or strings for categorical columns; ``None`` is missing) encoded, projected, given the bias."""

    schema: Schema
    bias: bool | float

    #: Served rows may hold strings (categorical levels) and nulls, not only numbers.
    accepts_text = True

    @property
    def raw_width(self) -> int:
        return len(self.schema.columns)

    def __call__(self, X: Any) -> np.ndarray:
        return preprocess_features("csv:", X, bias=self.bias, schema=self.schema)


def _schema(data: Any) -> Schema:
    schema = Schema.from_dict(data, where="model metadata field 'extra.schema'")
    schema.check_final("model metadata field 'extra.schema'")
    return schema


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _runs_on_torch(metadata: dict) -> bool:
    """Whether the file's estimator is a torch model (``dpsgd-cnn``, ``scatter-*``), from the registry, without
    importing torch."""
    method = metadata.get("method")
    target = MODEL_CLASSES.get(method, "") if isinstance(method, str) else ""
    return target.startswith("privml.torch.")


def model_device(path: str | Path, metadata: dict, device: str | None) -> str | None:
    """Where the model of a CNN file runs: ``device`` (default ``"auto"``), checked now; ``None`` for other files.

    The device a file was trained on is not where it must run, so a CNN file
    is served on ``device`` whatever its metadata says. Checked before any
    ledger is opened or any answer charged. Only ``dpsgd-cnn`` and
    ``scatter-*`` files hold a torch model: private-prediction files store
    linear models only.

    Raises
    ------
    ValueError
        For a ``device`` given with a file that is not a CNN (an option a
        method cannot use is an error, never dropped), an unknown device name,
        or a CUDA device this machine does not have.
    """
    if not _runs_on_torch(metadata):
        if device is not None:
            raise ValueError(f"--device applies to CNN model files (dpsgd-cnn, scatter-*) only; {path} holds a "
                             f"{metadata.get('method')} model")
        return None
    import_torch_or_explain(f"{path}, a CNN model file ({metadata.get('method')}),")
    from privml.torch._classifier import resolve_device  # lazy(extra): torch, for CNN files only

    device = "auto" if device is None else device
    resolve_device(device)
    return device


def _place(predictor: Any, device: str | None) -> Any:
    """Run a CNN file's ``predictor`` on ``device`` (None: not a CNN); never written to a file or an answer."""
    if device is not None:
        predictor.set_params(device=device)
    return predictor


def open_served_model(
    spec: ModelSpec,
    *,
    contents: tuple[dict[str, np.ndarray], dict] | None = None,
    require_ledger: bool = True,
    check: Callable[[Any], None] | None = None,
) -> ServedModel:
    """Load ``spec.path`` for serving, bound to the persistent ledger ``spec.ledger``.

    Parameters
    ----------
    spec:
        The file and its settings (:class:`ModelSpec`).
    contents:
        The file as :func:`privml.io.read_model_file` returned it, for a caller
        that has read it already; by default it is read here. Either way it is
        read once.
    require_ledger:
        Refuse a private-prediction model without a ledger (the server's
        rule). ``False`` lets one process count in memory instead (offline
        ``privml predict``): the budget then covers that process only.
    check:
        Called with the loaded predictor before the ledger is opened (it
        counts in memory until then, and nothing is charged), so that input
        it raises on binds no budget in the ledger.

    Raises
    ------
    ValueError
        For a missing or superfluous ledger, or anything ``load_predictor`` refuses.
    """
    if spec.ledger_name is not None and (not isinstance(spec.ledger_name, str) or not spec.ledger_name):
        # Not read as "default": an empty name is a mistake, refused like any other invalid one, before anything opens.
        raise ValueError(f"ledger name must be a non-empty string, got {spec.ledger_name!r}")
    path = Path(spec.path)
    arrays, metadata = read_model_file(path) if contents is None else contents
    device = model_device(path, metadata, spec.device)  # before any ledger is opened
    preprocess, class_names = model_pipeline(metadata)
    stored = metadata.get("method")
    if stored in PRIVATE_TRAINING_METHODS:
        refuse_privacy_settings(path, stored, method=spec.method, epsilon=spec.epsilon, delta=spec.delta,
                                budget=spec.budget, accountant=spec.accountant, ledger=spec.ledger,
                                ledger_name=spec.ledger_name, random_state=spec.random_state)
    else:
        _check_ledger_options(spec, require_ledger)
    # A private predictor counts in memory until the persistent ledger is opened below (its calibration, which
    # the ledger is bound to, is known only now).
    predictor = _place(load_predictor(path, method=spec.method, epsilon=spec.epsilon, delta=spec.delta,
                                      budget=spec.budget, accountant=spec.accountant, random_state=spec.random_state,
                                      contents=(arrays, metadata)), device)
    if check is not None:
        check(predictor)
    if spec.ledger is not None:
        # The calibration only: a hash of the model file would put a fingerprint of the training data into a
        # ledger that may be shared (a prediction-sensitivity file holds the non-private weights).
        store = open_ledger(spec.ledger, budget=predictor.ledger_.budget, name=spec.ledger_name or "default",
                            context=predictor.ledger_context())
        try:
            predictor.use_ledger(store)
        except BaseException:
            store.close()
            raise
    return ServedModel(predictor, preprocess, class_names, predictor.method)


def _check_ledger_options(spec: ModelSpec, require_ledger: bool) -> None:
    """The ledger options of a private-prediction model, refused before the file's predictor is built."""
    if spec.ledger is not None and spec.random_state is not None:
        # As --seed with --ledger: restarts sharing the persistent budget would repeat their noise answer for answer.
        raise ValueError("a fixed random_state replays the same noise in every process that shares the ledger's "
                         "budget, so differences of answers would cancel it: give no seed with a persistent ledger")
    if spec.ledger is None and spec.ledger_name is not None:
        # Dropping it would silently count in memory, for this process only, under a name that suggests otherwise.
        raise ValueError(f"ledger name {spec.ledger_name!r} names a budget inside a ledger, but no ledger was given")
    if spec.ledger is None and require_ledger:
        raise ValueError(
            "a private-prediction model needs a persistent ledger (a SQLite file or postgresql:// URL): "
            "an in-memory count would restart at zero and void the guarantee"
        )
