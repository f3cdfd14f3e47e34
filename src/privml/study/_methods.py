"""The registry of runnable methods: one adapter per method, one contract.

Every adapter turns (training data, settings, seed) into a :class:`RunResult`:
accuracy on the evaluation records, the guarantee actually obtained, and the
time spent training and predicting.

Two kinds of private method are compared (van der Maaten & Hannun 2020):

- **private training** (``output``, ``objective``, ``dpsgd``, ``dpcd``): the
  released model is private, so any number of predictions costs nothing more;
  the inference budget B does not enter and is dropped from the run key (one
  run serves every B).
- **private prediction** (``prediction-sensitivity``, ``subsample-aggregate``):
  the model stays secret and every answer is noisy, with the noise calibrated
  so that B answers together are (epsilon, delta)-DP. Accuracy is *per-query*
  accuracy: the test set may hold more than B queries because each query is
  evaluated independently; the test set is answered in blocks of B, each by a
  fresh copy of the fitted predictor with a fresh budget of B (same trained
  models, independent noise), which gives exactly the accuracy a deployment
  answering B queries would see on average, without ever exceeding a budget.

Methods whose module is not installed stay in the registry and say so: asking
for one raises :class:`MethodUnavailable` naming what is missing.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privml._extras import TORCH_HINT, torch_is_missing
from privml.exceptions import PrivmlError
from privml.ledger import MemoryLedger

__all__ = ["METHODS", "Fitted", "Method", "MethodUnavailable", "RunResult", "get_method"]


class MethodUnavailable(PrivmlError, ValueError):
    """A method is registered but cannot run here (its module or class is missing)."""


@dataclass(frozen=True)
class RunResult:
    """What one run of a method measured.

    Attributes
    ----------
    accuracy : float
        Fraction of evaluation records answered correctly (per query).
    epsilon, delta : float
        The guarantee of the released model or of the B answers.
    train_seconds, predict_seconds : float
    info : dict
        Method diagnostics (JSON-ready).
    """

    accuracy: float
    epsilon: float
    delta: float
    train_seconds: float
    predict_seconds: float
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Method:
    """A runnable method.

    Attributes
    ----------
    name, label : str
        Registry key and display name.
    kind : {"baseline", "training", "prediction"}
    target : str
        ``"module:Class"`` of the estimator.
    uses : tuple of str
        Privacy settings the result depends on (``epsilon``, ``delta``,
        ``budget``); data settings always matter.
    hyper : dict
        Tunable hyper-parameter -> default grid (selection mode ``validation``
        or ``private``). ``l2`` and ``m`` are also study settings: a point
        that fixes them is not tuned.
    supports_pure : bool
        Whether delta = 0 is possible.
    kwargs : callable
        ``kwargs(params, n_classes, seed, image_shape)`` -> constructor keywords.
    inputs : {"features", "images"}
        What the estimator reads: unit-norm feature rows (linear models) or
        pixels (CNNs; see :func:`privml.study._prepare.prepare`).
    tunable : tuple of str
        Every hyper-parameter ``kwargs`` reads from the settings, so the only
        names a spec's ``selection.grids`` may give this method (empty: the
        keys of ``hyper``). A name outside it would be dropped without a word.
    """

    name: str
    label: str
    kind: str
    target: str
    uses: tuple[str, ...]
    hyper: dict[str, tuple[Any, ...]]
    supports_pure: bool
    kwargs: Callable[[dict[str, Any], int, int, tuple[int, ...] | None], dict[str, Any]]
    inputs: str = "features"
    tunable: tuple[str, ...] = ()

    @property
    def grid_names(self) -> tuple[str, ...]:
        """The hyper-parameters a grid may name for this method (see ``tunable``)."""
        return tuple(sorted({*self.hyper, *self.tunable}))

    def unavailable_reason(self) -> str | None:
        """``None`` if the method can run here, else one line saying what is missing."""
        # Every image method trains CNNs with privml.torch, whatever class aggregates them: without torch, a
        # subsample-and-aggregate over CNN teachers would be planned and then fail run by run.
        missing = _missing("privml.torch:TorchClassifier") if self.inputs == "images" else None
        missing = missing or _missing(self.target)
        return None if missing is None else f"method {self.name!r} ({self.label}) is unavailable: {missing}"

    def estimator_class(self) -> type:
        """The estimator class; raises :class:`MethodUnavailable` if it is missing."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise MethodUnavailable(reason)
        module_name, class_name = self.target.split(":")
        return getattr(importlib.import_module(module_name), class_name)

    def relevant(self, setting: dict[str, Any]) -> dict[str, Any]:
        """The part of ``setting`` this method's result depends on (the rest is dropped from its key)."""
        keep = {"n", "d", "k", *self.uses} | ({"l2", "m"} & set(self.hyper))
        if self.inputs == "images":  # a seeded CNN run draws other numbers on a GPU (StudySpec.device)
            keep.add("device")
        return {name: value for name, value in sorted(setting.items()) if name in keep}

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        *,
        params: dict[str, Any],
        n_classes: int,
        seed: int,
        image_shape: tuple[int, ...] | None = None,
    ) -> Fitted:
        """Fit the method's estimator with ``params`` (settings plus chosen hyper-parameters)."""
        cls = self.estimator_class()
        kwargs = self.kwargs(params, n_classes, seed, image_shape)
        accepted = inspect.signature(cls).parameters
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise TypeError(f"{cls.__name__} does not take {unknown[0]!r}; the study adapter for {self.name} is stale")
        model = cls(**kwargs)
        start = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - start
        if self.kind == "baseline":
            epsilon, delta = float("inf"), 1.0
        else:
            guarantee = model.privacy_
            epsilon, delta = float(guarantee.epsilon), float(guarantee.delta)
        info = {k: v for k, v in getattr(model, "fit_info_", {}).items() if isinstance(v, (int, float, str, bool))}
        if self.kind != "baseline":  # every stored run carries the relation its guarantee holds under
            info["neighbouring"] = model.privacy_.neighbouring.value
        budget = int(params["budget"]) if self.kind == "prediction" else None
        return Fitted(model=model, epsilon=epsilon, delta=delta, train_seconds=seconds, budget=budget, info=info)

    def evaluate(self, fitted: Fitted, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Per-query accuracy on ``(X, y)`` and the seconds spent predicting."""
        start = time.perf_counter()
        if fitted.budget is not None:
            predicted = _answer_in_budget_blocks(fitted.model, X, fitted.budget)
        else:
            predicted = fitted.model.predict(X)
        return float(np.mean(np.asarray(predicted) == y)), time.perf_counter() - start

    def run(
        self,
        X_train: np.ndarray,
        y_train: np.ndarray,
        X_eval: np.ndarray,
        y_eval: np.ndarray,
        *,
        params: dict[str, Any],
        n_classes: int,
        seed: int,
        image_shape: tuple[int, ...] | None = None,
    ) -> RunResult:
        """Fit on the training records and measure accuracy on the evaluation records."""
        fitted = self.fit(X_train, y_train, params=params, n_classes=n_classes, seed=seed, image_shape=image_shape)
        accuracy, predict_seconds = self.evaluate(fitted, X_eval, y_eval)
        return RunResult(
            accuracy=accuracy,
            epsilon=fitted.epsilon,
            delta=fitted.delta,
            train_seconds=fitted.train_seconds,
            predict_seconds=predict_seconds,
            info=fitted.info,
        )


@dataclass(frozen=True, eq=False)
class Fitted:
    """A fitted estimator with its guarantee (``budget``: B for private prediction, else None)."""

    model: Any
    epsilon: float
    delta: float
    train_seconds: float
    budget: int | None
    info: dict[str, Any]


@functools.cache
def _missing(target: str) -> str | None:
    """What is missing for ``"module:Class"`` (None: importable). Cached: a plan asks once per cell."""
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if torch_is_missing(exc):
            return f"it {TORCH_HINT}"
        return f"module {module_name} cannot be imported ({exc})"
    if not hasattr(module, class_name):
        return f"{module_name} has no {class_name} yet"
    return None


def _answer_in_budget_blocks(model: Any, X: np.ndarray, budget: int) -> np.ndarray:
    """Per-query answers to ``X`` as ``ceil(len(X) / budget)`` deployments of ``budget`` queries each.

    Every deployment shares the trained models and counts its own B answers,
    so no deployment answers more queries than its noise was calibrated for.
    privml's predictors draw each answer's noise independently with the same
    calibration, so the deployments are simulated in one call against an
    evaluation ledger sized to ``len(X)``: the answers have exactly the
    distribution of answering block by block (only faster: B = 1 would
    otherwise mean one call per query). Other predictors are answered block
    by block, each block by a deep copy.
    """
    if hasattr(model, "ledger_"):
        clone = copy.copy(model)
        clone.ledger_ = MemoryLedger(X.shape[0], context={"evaluation": f"{-(-X.shape[0] // budget)} deployments "
                                                                          f"of {budget} queries"})
        return np.asarray(clone.predict(X))
    out = [np.asarray(copy.deepcopy(model).predict(X[start : start + budget]))
           for start in range(0, X.shape[0], budget)]
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _classes(n_classes: int) -> tuple[int, ...]:
    return tuple(range(n_classes))


def _privacy(params: dict[str, Any]) -> dict[str, Any]:
    return {"epsilon": params["epsilon"], "delta": params["delta"]}


def _l2(params: dict[str, Any]) -> Any:
    # None -> the estimator's public default rule ("auto", a function of n, d, epsilon, delta).
    return "auto" if params.get("l2") is None else params["l2"]


def _given(params: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: params[name] for name in names if params.get(name) is not None}


Shape = tuple[int, ...] | None


def _nonprivate(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {"l2": _l2(p), "classes": _classes(k)}


def _perturbation(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {**_privacy(p), "l2": _l2(p), "classes": _classes(k), "random_state": seed}


def _relation(p: dict[str, Any]) -> dict[str, Any]:
    """DP-SGD's accounting for the study's relation: replace-one (tight) unless the study is add/remove or mixed."""
    return {"neighbouring": "replace-one"} if p.get("neighbouring", "replace-one") == "replace-one" else {}


def _dpsgd(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {**_privacy(p), **_relation(p), "classes": _classes(k), "random_state": seed,
            **_given(p, "clip_norm", "learning_rate")}


def _dpcd(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {**_privacy(p), "classes": _classes(k), "random_state": seed, **_given(p, "clip_norm")}


def _prediction_sensitivity(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {**_privacy(p), "budget": p["budget"], "l2": _l2(p), "classes": _classes(k), "random_state": seed}


def _subsample_aggregate(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    out = {**_privacy(p), "budget": p["budget"], "classes": _classes(k), "random_state": seed}
    if p.get("m") is not None:
        out["n_models"] = p["m"]
    return out


def _cnn_shape(shape: Shape) -> tuple[int, ...]:
    if shape is None:
        raise ValueError("CNN methods need image data (mnist, fashion-mnist)")
    # (h, w) grey images -> one channel; (h, w, c) colour -> channels first.
    return (1, *shape) if len(shape) == 2 else (shape[2], shape[0], shape[1])


def _cnn(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    # One torch thread per run: the study parallelises across runs, not inside them. A run
    # whose settings name no device runs on the CPU, as its key says (StudySpec.device).
    return {"input_shape": _cnn_shape(shape), "classes": _classes(k), "random_state": seed, "threads": 1,
            "device": p.get("device") or "cpu", **_given(p, "clip_norm", "learning_rate", "epochs")}


def _nonprivate_cnn(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {**_cnn(p, k, seed, shape), "epsilon": float("inf")}


def _dpsgd_cnn(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    return {**_cnn(p, k, seed, shape), **_privacy(p), **_relation(p)}


def _scatter(head: str) -> Callable[[dict[str, Any], int, int, Shape], dict[str, Any]]:
    def kwargs(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
        # The features of a training set are computed once and reused by its repeats and sweep points: they are
        # kept in the data cache, private like the records (privml.torch._scatter.cached_features).
        return {**_cnn(p, k, seed, shape), **_privacy(p), **_relation(p), "head": head, "cache_features": True}

    return kwargs


def _subsample_aggregate_cnn(p: dict[str, Any], k: int, seed: int, shape: Shape) -> dict[str, Any]:
    from privml.torch import TorchClassifier  # lazy(extra): torch, reached only when it imports

    teacher = TorchClassifier(**_nonprivate_cnn(p, k, seed, shape))
    return {**_subsample_aggregate(p, k, seed, shape), "estimator": teacher}


_L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)

#: Every method the study knows, available or not.
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("nonprivate", "non-private", "baseline", "privml.linear._nonprivate:NonPrivateClassifier",
               ("l2",), {}, True, _nonprivate, tunable=("l2",)),
        Method("output", "model sensitivity (output perturbation)", "training",
               "privml.linear._output_perturbation:OutputPerturbationClassifier",
               ("epsilon", "delta"), {"l2": _L2_GRID}, True, _perturbation),
        Method("objective", "loss perturbation (objective perturbation)", "training",
               "privml.linear._objective_perturbation:ObjectivePerturbationClassifier",
               ("epsilon", "delta"), {"l2": _L2_GRID}, True, _perturbation),
        Method("dpsgd", "DP-SGD", "training", "privml.linear._dpsgd:DPSGDClassifier",
               ("epsilon", "delta", "neighbouring"), {"clip_norm": (0.03, 0.1, 0.3, 1.0)}, False, _dpsgd,
               tunable=("clip_norm", "learning_rate")),
        Method("dpcd", "DP coordinate descent", "training", "privml.linear._dpcd:DPCDClassifier",
               ("epsilon", "delta"), {"clip_norm": (0.1, 0.5, 2.0)}, False, _dpcd),
        Method("prediction-sensitivity", "prediction sensitivity", "prediction",
               "privml.prediction:PredictionSensitivity",
               ("epsilon", "delta", "budget"), {"l2": _L2_GRID}, True, _prediction_sensitivity),
        Method("subsample-aggregate", "subsample-and-aggregate", "prediction",
               "privml.prediction:SubsampleAndAggregate",
               ("epsilon", "delta", "budget"), {"m": (8, 16, 32, 64)}, True, _subsample_aggregate),
        Method("nonprivate-cnn", "non-private CNN", "baseline", "privml.torch:TorchClassifier",
               (), {}, True, _nonprivate_cnn, inputs="images", tunable=("learning_rate", "epochs")),
        Method("dpsgd-cnn", "DP-SGD CNN", "training", "privml.torch:TorchClassifier",
               ("epsilon", "delta", "neighbouring"), {"clip_norm": (0.1, 1.0)}, False, _dpsgd_cnn, inputs="images",
               tunable=("clip_norm", "learning_rate", "epochs")),
        Method("scatter-linear", "DP-SGD, linear on ScatterNet features", "training",
               "privml.torch._scatter_classifier:ScatterClassifier", ("epsilon", "delta", "neighbouring"),
               {"learning_rate": (1.0, 4.0)}, False, _scatter("linear"), inputs="images",
               tunable=("clip_norm", "learning_rate", "epochs")),
        Method("scatter-cnn", "DP-SGD, CNN on ScatterNet features", "training",
               "privml.torch._scatter_classifier:ScatterClassifier", ("epsilon", "delta", "neighbouring"),
               {"learning_rate": (1.0, 4.0)}, False, _scatter("cnn"), inputs="images",
               tunable=("clip_norm", "learning_rate", "epochs")),
        Method("subsample-aggregate-cnn", "subsample-and-aggregate over CNNs", "prediction",
               "privml.prediction:SubsampleAndAggregate",
               ("epsilon", "delta", "budget"), {"m": (8, 16, 32)}, True, _subsample_aggregate_cnn, inputs="images",
               tunable=("m", "learning_rate", "epochs")),
    )
}


def get_method(name: str) -> Method:
    """The registered method ``name`` (available or not).

    Raises
    ------
    ValueError
        If no method has that name (the message lists them).
    """
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; methods are {', '.join(METHODS)}") from None
