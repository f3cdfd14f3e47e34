"""The release rule, checked on neighbouring datasets (privml.release).

Every method, predictor, Accuracy First search, study row and CLI subcommand
runs on neighbouring datasets D and D' (one record replaced; the same n, so
this covers DP-SGD's zero-out view too) with identical randomness. Every
released field that differs must be one the registry declares a DP output of
that method (or a secret of a server-side file); everything else must be
byte-identical. Reinserting a solver fingerprint or a stored seed must make
the check fail, and a method or subcommand added without a case here fails
the coverage tests.
"""

from __future__ import annotations

import csv
import fnmatch
import functools
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privml import io, registry
from privml.cli.main import SUBCOMMANDS
from privml.io import read_model_file, save_model
from privml.release import SEED_PARAMETERS
from tests.cli_runner import run

SEED = 12345
N, D = 80, 4


def _neighbours(seed: int = 0, regression: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y) and (X', y'): the same records except the first, replaced by a far-away one."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = X[:, 0] + 0.3 * X[:, 1] if regression else (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    # A genuinely different record: (-x, -y) would leave a margin loss unchanged.
    X2, y2 = X.copy(), y.copy()
    X2[0] = np.array([0.6, -0.7, 0.3, 0.1])
    y2[0] = 2.0 if regression else 1 - y[0]
    return X, y, X2, y2


def _images(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattened 16x16 blobs (class 0 top left, class 1 bottom right) and a neighbour with the last record replaced.

    Not the first: with ``SEED`` DP-SGD's Poisson sampling never draws record 0 here, so the two fits were
    identical and the CNN's check vacuous (test_model_files_release_only_declared_dp_fields now says so).
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 60)
    X = rng.normal(0, 0.3, (60, 1, 16, 16)).astype(np.float32)
    X[y == 0, :, :8, :8] += 1.5
    X[y == 1, :, 8:, 8:] += 1.5
    X2, y2 = X.copy(), y.copy()
    X2[-1] = rng.normal(0, 1.0, (1, 16, 16)).astype(np.float32)
    y2[-1] = 1 - y[-1]
    return X.reshape(60, -1), y, X2.reshape(60, -1), y2


def _make(name: str, seed: Any) -> Any:
    from privml.linear import (
        DPCDClassifier,
        DPCDRegressor,
        DPSGDClassifier,
        NonPrivateClassifier,
        ObjectivePerturbationClassifier,
        OutputPerturbationClassifier,
    )
    from privml.prediction import PredictionSensitivity, SubsampleAndAggregate
    from privml.selection import AccuracyFirstClassifier

    classes = [0, 1]
    if name == "nonprivate":
        return NonPrivateClassifier(classes=classes)
    if name == "output":
        return OutputPerturbationClassifier(epsilon=1.0, delta=1e-5, classes=classes, random_state=seed)
    if name == "objective":
        return ObjectivePerturbationClassifier(epsilon=1.0, classes=classes, random_state=seed)
    if name == "dpsgd":
        return DPSGDClassifier(epsilon=1.0, delta=1e-5, epochs=2, batch_size=20, classes=classes, random_state=seed)
    if name == "dpcd":
        return DPCDClassifier(epsilon=1.0, delta=1e-5, passes=2, feature_bounds=np.ones(D), classes=classes,
                              random_state=seed)
    if name == "dpcd-regressor":
        return DPCDRegressor(epsilon=1.0, delta=1e-5, passes=2, feature_bounds=np.ones(D), random_state=seed)
    if name == "accuracy-first":
        return AccuracyFirstClassifier(target=0.3, at_epsilon=1.0, classes=classes, random_state=seed)
    if name == "prediction-sensitivity":
        return PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=10, classes=classes, random_state=seed)
    if name == "subsample-aggregate":
        return SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=10, classes=classes, random_state=seed)
    if name == "dpsgd-cnn":
        from privml.torch import TorchClassifier

        return TorchClassifier(epsilon=8.0, input_shape=(1, 16, 16), classes=classes, epochs=2, batch_size=20,
                               learning_rate=0.5, clip_norm=1.0, random_state=seed)
    if name == "nonprivate-cnn":
        from privml.torch import TorchClassifier

        return TorchClassifier(epsilon=float("inf"), input_shape=(1, 16, 16), classes=classes, epochs=2,
                               batch_size=20, learning_rate=0.5, random_state=seed)
    if name in ("scatter-linear", "scatter-cnn"):
        from privml.torch._scatter_classifier import ScatterClassifier

        return ScatterClassifier(epsilon=8.0, head=name.removeprefix("scatter-"), input_shape=(1, 16, 16),
                                 classes=classes, epochs=2, batch_size=20, learning_rate=1.0, clip_norm=1.0,
                                 random_state=seed, device="cpu",
                                 # the linear head with its private feature mean released (the CNN's "auto" is
                                 # off at this n): both paths covered
                                 centering=5.0 if name == "scatter-linear" else "auto")
    raise AssertionError(f"no release-invariance case for method {name!r}: add one")


def _data_for(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if name in ("dpsgd-cnn", "nonprivate-cnn", "scatter-linear", "scatter-cnn"):
        pytest.importorskip("torch")
        return _images()
    return _neighbours(regression=name == "dpcd-regressor")


#: Methods whose model-file case is written above (the coverage test compares it with the registry).
MODEL_CASES = ("nonprivate", "output", "objective", "dpsgd", "dpcd", "dpcd-regressor", "accuracy-first",
               "prediction-sensitivity", "subsample-aggregate", "dpsgd-cnn", "nonprivate-cnn", "scatter-linear",
               "scatter-cnn")


# ----------------------------------------------------------------- the check
def file_fields(path: Path) -> dict[str, str]:
    """Every released field of a model file, as comparable text."""
    arrays, metadata = read_model_file(path)
    fields = {f"arrays/{name}": f"{a.dtype}{a.shape}{a.tobytes().hex()}" for name, a in arrays.items()}
    for key, value in metadata.items():
        if isinstance(value, dict):
            fields.update({f"{key}/{k}": json.dumps(v, sort_keys=True) for k, v in value.items()})
        else:
            fields[key] = json.dumps(value, sort_keys=True)
    return fields


def differing(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def violations(changed: set[str], allowed: set[str] | frozenset[str]) -> list[str]:
    """Changed fields that no pattern in ``allowed`` declares DP (or secret)."""
    return sorted(f for f in changed if not any(fnmatch.fnmatchcase(f, p) for p in allowed))


def stored_seeds(value: Any, path: str = "") -> list[str]:
    """Paths of non-null seed parameters anywhere in JSON metadata."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k in SEED_PARAMETERS and v is not None:
                found.append(f"{path}/{k}")
            found += stored_seeds(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += stored_seeds(v, f"{path}[{i}]")
    return found


def model_file_violations(name: str, tmp_path: Path) -> tuple[list[str], list[str]]:
    """(undeclared changed fields, stored seeds) of method ``name`` fitted on D and D' with one seed."""
    X, y, X2, y2 = _data_for(name)
    spec = registry.get_spec(name)
    paths = []
    for tag, (features, labels) in (("d", (X, y)), ("d2", (X2, y2))):
        model = _make(name, SEED).fit(features, labels)
        paths.append(save_model(model, tmp_path / f"{name}-{tag}.npz"))
    a, b = file_fields(paths[0]), file_fields(paths[1])
    _, metadata = read_model_file(paths[0])
    return violations(differing(a, b), spec.dp_fields | spec.secret_fields), stored_seeds(metadata)


# ----------------------------------------------------------------- model files
def test_every_registered_method_has_a_case() -> None:
    assert set(MODEL_CASES) == set(registry.METHODS), "add a release-invariance case for each new method"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", MODEL_CASES)
def test_model_files_release_only_declared_dp_fields(name: str, tmp_path: Path) -> None:
    undeclared, seeds = model_file_violations(name, tmp_path)
    assert undeclared == [], f"{name} writes data-dependent fields outside its DP outputs: {undeclared}"
    assert seeds == [], f"{name} stores a seed, which lets its noise be replayed: {seeds}"
    # Not vacuous: the replaced record reached the fit, so its DP (or secret) output tells D from D'.
    changed = differing(file_fields(tmp_path / f"{name}-d.npz"), file_fields(tmp_path / f"{name}-d2.npz"))
    assert changed, f"{name} wrote the same file for D and D': the neighbours never reached the fit"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_tf32_clipping_releases_only_declared_dp_fields(tmp_path: Path, monkeypatch) -> None:
    # clip_precision="tf32" clips over norms plus a data-dependent rounding bound: nothing of it may reach the file.
    make = _make
    monkeypatch.setattr(sys.modules[__name__], "_make",
                        lambda name, seed: make(name, seed).set_params(clip_precision="tf32"))
    undeclared, seeds = model_file_violations("dpsgd-cnn", tmp_path)
    assert undeclared == [] and seeds == []
    _, metadata = read_model_file(tmp_path / "dpsgd-cnn-d.npz")
    assert metadata["params"]["clip_precision"] == "tf32"


def test_reinserting_the_solver_fingerprint_fails_the_check(tmp_path: Path, monkeypatch) -> None:
    from privml.linear import OutputPerturbationClassifier

    leaky = OutputPerturbationClassifier.released_info | {"grad_norm", "iterations"}
    monkeypatch.setattr(OutputPerturbationClassifier, "released_info", leaky)
    undeclared, _ = model_file_violations("output", tmp_path)
    assert "fit_info/grad_norm" in undeclared


def test_reinserting_a_stored_seed_fails_the_check(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(io, "strip_seeds", lambda params: dict(params))
    _, seeds = model_file_violations("prediction-sensitivity", tmp_path)
    assert seeds == ["/params/random_state"]


def test_an_undeclared_fit_info_key_cannot_be_saved(tmp_path: Path) -> None:
    from privml.release import UndeclaredReleaseError

    X, y, _, _ = _neighbours()
    model = _make("output", SEED).fit(X, y)
    model.fit_info_["grad_norm"] = 1e-12  # as a careless subclass would
    with pytest.raises(UndeclaredReleaseError, match="grad_norm"):
        save_model(model, tmp_path / "leaky.npz")


@pytest.mark.parametrize("name", ["prediction-sensitivity", "subsample-aggregate"])
def test_a_loaded_predictor_draws_fresh_noise(name: str, tmp_path: Path) -> None:
    from privml.prediction import load_predictor

    X, y, _, _ = _neighbours()
    path = save_model(_make(name, SEED).fit(X, y), tmp_path / f"{name}.npz")
    query = np.tile(X[:1], (10, 1)) if name == "subsample-aggregate" else X[:3]
    answers = []
    for _ in range(4):
        predictor = load_predictor(path)  # what every restart of `privml serve` does
        answer = predictor.decision_function(query) if name == "prediction-sensitivity" else predictor.predict(query)
        answers.append(np.asarray(answer).tobytes())
    if name == "prediction-sensitivity":
        assert len(set(answers)) == 4, "a restarted server replayed its noise"
    else:
        # Labels are discrete: over 4 x 10 answers near the decision boundary some must differ.
        assert len(set(answers)) > 1


# ----------------------------------------------------------------- Accuracy First and study rows
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_accuracy_first_trace_releases_only_what_was_published() -> None:
    X, y, X2, y2 = _neighbours()
    traces = [_make("accuracy-first", SEED).fit(a, b).selection_.trace() for a, b in ((X, y), (X2, y2))]
    assert all("nonprivate_value" not in step for trace in traces for step in trace)
    # Levels and costs are public; whether each check passed is AboveThreshold's DP output.
    strip = [[{k: v for k, v in s.items() if k != "passed"} for s in t] for t in traces]
    shorter = min(len(strip[0]), len(strip[1]))
    assert strip[0][:shorter] == strip[1][:shorter]


def _study_row(selected: Any) -> dict[str, str]:
    """The fields the study store keeps for one run (privml.study._runner), as text."""
    r = selected.result
    fields = {"accuracy": r.accuracy, "epsilon": r.epsilon, "delta": r.delta, "mode": selected.mode,
              "chosen": selected.chosen, "candidates": selected.candidates, "leaky": selected.leaky,
              "note": selected.note}
    fields.update({f"info/{k}": v for k, v in r.info.items()})
    return {k: json.dumps(v, sort_keys=True, default=str) for k, v in fields.items()}


#: Study-row fields that are DP outputs: the test accuracy of the released model (on a
#: fixed evaluation split) and, in private mode, the choice and the chosen candidate's noisy score.
STUDY_DP_FIELDS = {"accuracy", "chosen", "candidates"}


def _study_rows(method: str, mode: str, neighbours: tuple[np.ndarray, ...], test: tuple[np.ndarray, ...],
                grids: dict[str, tuple[Any, ...]], params: dict[str, Any],
                image_shape: tuple[int, ...] | None = None) -> list[dict[str, str]]:
    """The study rows of ``method`` run on D and D' with one seed and one study (so one secret key)."""
    from privml.study._cache import StudyCache
    from privml.study._methods import get_method
    from privml.study._prepare import StudyData
    from privml.study._selection import PointSelection, select_and_run
    from privml.study._spec_parts import Selection

    # The same randomness for both: one study, so one secret key of private selection (StudyCache.selection_key).
    point = PointSelection(seed=SEED, key="point", cache=StudyCache(None))
    X, y, X2, y2 = neighbours
    selection = Selection(mode=mode, grids={method: grids} if grids else {})
    rows = []
    for features, labels in ((X, y), (X2, y2)):
        data = StudyData(features, labels, test[0], test[1], n_classes=2, steps=(), image_shape=image_shape)
        rows.append(_study_row(select_and_run(get_method(method), data, dict(params), seed=SEED,
                                              selection=selection, point=point)))
    assert violations(differing(*rows), STUDY_DP_FIELDS) == []
    if mode == "private" and get_method(method).kind == "training":
        # Liu & Talwar's theorem covers the chosen candidate (and its noisy score) only.
        for row in rows:
            kept = json.loads(row["candidates"])
            assert len(kept) == 1 and kept[0]["params"] == json.loads(row["chosen"])
    return rows


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("mode", ["public", "private"])
@pytest.mark.parametrize("method", ["output", "objective", "dpsgd", "prediction-sensitivity"])
def test_study_rows_release_only_dp_fields(mode: str, method: str) -> None:
    grids = {"l2": (1e-2, 1e-1)} if method != "dpsgd" else {}
    params = {"epsilon": 1.0, "delta": 1e-5, "l2": None, "budget": 10}
    _study_rows(method, mode, _neighbours(), _neighbours(seed=1), grids, params)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("method", "mode"), [("dpsgd-cnn", "public"), ("dpsgd-cnn", "private"),
                                              ("nonprivate-cnn", "public"), ("subsample-aggregate-cnn", "public")])
def test_cnn_study_rows_release_only_dp_fields(method: str, mode: str) -> None:
    # The torch methods, on 16x16 neighbouring images, one epoch (private selection sends the baseline to
    # validation tuning and a private predictor to public defaults, so their private rows are the public ones).
    pytest.importorskip("torch")
    # Private selection tunes the learning rate, which no info field states: every info field must then be
    # identical. (A clip-norm grid would let info/clip_norm differ with the choice, a function of a DP output.)
    grids = {"epochs": (1.0,), **({"learning_rate": (0.1, 0.5)} if mode == "private" else {})}
    params = {"epsilon": 8.0, "delta": 1e-5, "budget": 10, "m": 2}
    rows = _study_rows(method, mode, _images(), _images(seed=1)[:2], grids, params, image_shape=(16, 16))
    assert json.loads(rows[0]["mode"]) == mode
    assert "info/steps" in rows[0] or "info/n_models" in rows[0]


# ----------------------------------------------------------------- CLI subcommands
def _write_csv(path: Path, X: np.ndarray, y: np.ndarray) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f"x{i}" for i in range(X.shape[1])] + ["label"])
        for row, t in zip(X, y):
            writer.writerow([*row.tolist(), "yes" if t else "no"])
    return path


def _csv_pair(tmp_path: Path, n: int = 200) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = [2.5, -1.5, 0.7, 0.2], 1 - y[0]
    return _write_csv(tmp_path / "d.csv", X, y), _write_csv(tmp_path / "d2.csv", X2, y2)


def _cli_json(capsys, *argv: str) -> tuple[dict[str, str], str]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    flat = {k: json.dumps(v, sort_keys=True) for k, v in json.loads(out).items()}
    return flat, err


def _cli_violations(capsys, argv_for: Callable[[Path], list[str]], pair: tuple[Path, Path],
                    dp: set[str]) -> list[str]:
    (a, err_a), (b, err_b) = (_cli_json(capsys, *argv_for(path)) for path in pair)
    # Paths the user typed are public inputs: compare with the dataset's name normalised.
    a = {k: v.replace(str(pair[0]), "DATA") for k, v in a.items()}
    b = {k: v.replace(str(pair[1]), "DATA") for k, v in b.items()}
    assert err_a.replace(str(pair[0]), "DATA") == err_b.replace(str(pair[1]), "DATA"), "stderr differs"
    return violations(differing(a, b), dp)


@pytest.mark.parametrize("method", ["output", "objective", "dpsgd", "dpcd", "nonprivate"])
def test_cli_train(capsys, tmp_path: Path, method: str) -> None:
    pair = _csv_pair(tmp_path)
    privacy = [] if method == "nonprivate" else ["--epsilon", "1"]
    argv = lambda path: ["train", "--method", method, "--dataset", f"csv:{path}", "--classes", "no,yes",  # noqa: E731
                         "--bounds", "unit", "--seed", "0", *privacy]
    assert _cli_violations(capsys, argv, pair, set()) == []


@pytest.mark.parametrize("method", ["objective", "nonprivate"])
def test_cli_train_with_a_schema(capsys, tmp_path: Path, method: str) -> None:
    # The schema is a public input: the same file for both datasets, and the model file carries it unchanged.
    from privml.data._schema import Label, Numeric, Schema

    pair = _csv_pair(tmp_path)
    schema = Schema(columns=tuple(Numeric(name=f"x{i}", lower=-3, upper=3) for i in range(4)),
                    label=Label(column="label", classes=("no", "yes"))).save(tmp_path / "schema.toml")
    privacy = [] if method == "nonprivate" else ["--epsilon", "1"]
    argv = lambda path: ["train", "--method", method, "--dataset", f"csv:{path}", "--schema", str(schema),  # noqa: E731
                         "--seed", "0", "--out", f"{path}.npz", *privacy]
    assert _cli_violations(capsys, argv, pair, set()) == []
    extras = [read_model_file(f"{path}.npz")[1]["extra"] for path in pair]
    assert extras[0]["schema"] == extras[1]["schema"] == Schema.from_dict(extras[0]["schema"]).to_dict()


@pytest.mark.parametrize("method", ["objective", "dpsgd"])
def test_cli_train_with_private_bounds(capsys, tmp_path: Path, method: str) -> None:
    # The released ranges are the DP output of the quantile selections (privml.data._private_bounds): they, the
    # model's weights and the schema the file keeps of them may differ; the split, the total and stderr (the
    # rank-error warning reads n, d and epsilon only) may not.
    pair = _csv_pair(tmp_path)
    # A separate test file: every record of the pair is a training record, the replaced one included.
    rng = np.random.default_rng(5)
    held_out = _write_csv(tmp_path / "test.csv", rng.normal(size=(40, 4)), rng.integers(0, 2, 40))
    argv = lambda path: ["train", "--method", method, "--dataset", f"csv:{path}", "--classes", "no,yes",  # noqa: E731
                         "--test", str(held_out), "--bounds", "private", "--epsilon", "1", "--seed", "0",
                         "--out", f"{path}.npz"]
    assert _cli_violations(capsys, argv, pair, {"private_bounds"}) == []
    files = [{k: v.replace(str(path), "DATA") for k, v in file_fields(Path(f"{path}.npz")).items()} for path in pair]
    changed = differing(*files)
    assert violations(changed, {"arrays/weights", "extra/schema"}) == []
    assert "arrays/weights" in changed  # not vacuous: the replaced record reached the model


def test_cli_schema_suggest_prints_no_data_derived_value(capsys, tmp_path: Path) -> None:
    # Neighbouring files whose changed record moves x0's maximum: stdout and stderr stay the same (the draft file,
    # the stated exception, differs: it holds the data's own ranges and must be replaced before use).
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(50, 3)), rng.integers(0, 2, size=50)
    X2 = X.copy()
    X2[0, 0] = 99.0  # the neighbour's record sets x0's maximum
    pair = (_write_csv(tmp_path / "d.csv", X, y), _write_csv(tmp_path / "d2.csv", X2, y))
    outputs = []
    for path in pair:
        code, out, err = run(capsys, "schema", "suggest", str(path), "--out", f"{path}.toml", "--json")
        assert code == 0
        outputs.append((out.replace(str(path), "DATA"), err.replace(str(path), "DATA")))
    assert outputs[0] == outputs[1]
    drafts = [Path(f"{path}.toml").read_text() for path in pair]
    assert drafts[0] != drafts[1]  # not vacuous: the file holds data-derived values


#: Training records of the neighbouring MNIST-shaped caches below (all of them trained on: a subsample could drop
#: the replaced record and make the check vacuous).
N_IMAGES = 60


def _mnist_caches(tmp_path: Path, name: str = "mnist", shape: tuple[int, ...] = (28, 28)) -> tuple[Path, Path]:
    """Two ``$PRIVML_DATA`` folders whose ``name`` differs in training record 0 (pixels inverted, label moved)."""
    from privml.data._cache import cache_file, write_cache
    from privml.data._dataset import RawSplits

    rng = np.random.default_rng(4)
    X = rng.integers(0, 256, size=(N_IMAGES, *shape), dtype=np.uint8)
    y = np.arange(N_IMAGES, dtype=np.uint8) % 10
    X_test = rng.integers(0, 256, size=(40, *shape), dtype=np.uint8)
    y_test = np.arange(40, dtype=np.uint8) % 10
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = 255 - X[0], (y[0] + 3) % 10
    roots = []
    for tag, (images, labels) in (("d", (X, y)), ("d2", (X2, y2))):
        raw = RawSplits(X_train=images, y_train=labels, X_test=X_test, y_test=y_test,
                        source=f"synthetic {name}-shaped neighbours")
        write_cache(cache_file(tmp_path / tag, name), raw)
        roots.append(tmp_path / tag)
    return roots[0], roots[1]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("method", "dataset"), [("dpsgd-cnn", "mnist"), ("scatter-linear", "mnist"),
                                                 ("scatter-cnn", "cifar10")])
def test_cli_train_dpsgd_cnn(capsys, tmp_path: Path, monkeypatch, method: str, dataset: str) -> None:
    # stdout (--json), stderr and the model file of `privml train --method dpsgd-cnn` (or a scatter method, whose
    # features are cached beside the data) on neighbouring MNIST (CIFAR-10-shaped) caches with one seed: only the
    # test accuracy (on the published test split) and the weights may differ.
    pytest.importorskip("torch")
    released = []
    shape = (3, 32, 32) if dataset == "cifar10" else (28, 28)
    for cache in _mnist_caches(tmp_path, dataset, shape):
        monkeypatch.setenv("PRIVML_DATA", str(cache))
        out = cache / "model.npz"
        code, stdout, err = run(capsys, "train", "--method", method, "--dataset", dataset, "--epsilon", "4",
                                "--max-train", str(N_IMAGES), "--epochs", "1", "--batch-size", "20", "--seed", "0",
                                "--threads", "1", "--device", "cpu", "--no-progress", "--out", str(out), "--json")
        assert code == 0, err
        fields = {f"stdout/{k}": json.dumps(v, sort_keys=True).replace(str(cache), "CACHE")
                  for k, v in json.loads(stdout).items()}
        fields["stderr"] = err.replace(str(cache), "CACHE")
        fields.update({f"file/{k}": v for k, v in file_fields(out).items()})
        assert stored_seeds(read_model_file(out)[1]) == []
        released.append(fields)
    assert "stdout/model" in released[0] and "stdout/nonprivate" not in released[0]
    dp = {"stdout/test_accuracy"} | {f"file/{p}" for p in registry.get_spec(method).dp_fields}
    changed = differing(*released)
    assert violations(changed, dp) == []
    assert any(f.startswith("file/arrays/state.") for f in changed), "the replaced record was not trained on"


def test_cli_select(capsys, tmp_path: Path) -> None:
    pair = _csv_pair(tmp_path, n=400)
    argv = lambda path: ["select", "--dataset", f"csv:{path}", "--classes", "no,yes", "--bounds", "unit",  # noqa: E731
                         "--target-error", "0.3", "--at-epsilon", "1", "--seed", "0"]
    # Where the search stopped (and so what it published and cost) is AboveThreshold's DP output.
    dp = {"stopped_at", "met_target", "ex_post_epsilon", "ex_post_delta", "n_published", "trace"}
    assert _cli_violations(capsys, argv, pair, dp) == []


@functools.cache
def _fitted_pair(method: str) -> tuple[Any, Any]:
    """``method`` fitted on D and on D' with one seed, once per session (the CNN's fits dominate the suite)."""
    X, y, X2, y2 = _data_for(method)
    return _make(method, SEED).fit(X, y), _make(method, SEED).fit(X2, y2)


def _model_pair(tmp_path: Path, method: str) -> tuple[Path, Path]:
    models = _fitted_pair(method)
    return save_model(models[0], tmp_path / "d" / "model.npz"), save_model(models[1], tmp_path / "d2" / "model.npz")


#: Methods whose model file is a DP release: `predict` and `serve` answer from it without noise, budget or seed.
PRIVATE_FILES = ("output", "dpsgd-cnn", "scatter-linear")
#: Methods whose model files take raw 16x16 images (their features are recomputed from the pixels).
IMAGE_FILES = ("dpsgd-cnn", "scatter-linear")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("method", ["nonprivate", "prediction-sensitivity", "output", "dpsgd-cnn", "scatter-linear"])
def test_cli_predict(capsys, tmp_path: Path, method: str) -> None:
    pair = _model_pair(tmp_path, method)
    if method in IMAGE_FILES:  # 16x16 pixels, labels named as the file's classes (0, 1)
        X, y = _images(seed=2)[:2]
        rows = tmp_path / "rows.csv"
        with rows.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow([f"p{i}" for i in range(X.shape[1])] + ["label"])
            writer.writerows([*r.tolist(), int(t)] for r, t in zip(X[:10], y[:10]))
    else:
        rows = _write_csv(tmp_path / "rows.csv", *_neighbours(seed=2)[:2])
    private = ["--budget", "500"] + (["--epsilon", "1"] if method == "nonprivate" else [])
    private = [] if method in PRIVATE_FILES else private
    seed = [] if method in PRIVATE_FILES else ["--seed", "0"]
    proba = ["--proba"] if method in IMAGE_FILES else []
    argv = lambda path: ["predict", "--model", str(path), "--input", str(rows), "--label-column", "label",  # noqa: E731
                         *private, *seed, *proba]
    dp = {"labels", "probabilities", "accuracy"}  # the noisy answers, and their agreement with the querier's labels
    assert _cli_violations(capsys, argv, pair, dp) == []


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("method", ["prediction-sensitivity", "subsample-aggregate", "output", "dpsgd-cnn",
                                    "scatter-linear"])
def test_http_answers(tmp_path: Path, method: str) -> None:
    from privml.serve._model import ModelSpec, open_served_model
    from privml.serve._service import PredictionService

    pair = _model_pair(tmp_path, method)
    queries = _images(seed=2)[0] if method in IMAGE_FILES else _neighbours(seed=2)[0]
    body = json.dumps({"rows": queries[:5].tolist()}).encode()
    documents = []
    for path in pair:
        # A privately trained file takes no ledger; a seed is refused with one (it would replay the noise across
        # restarts), so these answers draw fresh noise: they are DP fields, allowed to differ anyway.
        ledger = None if method in PRIVATE_FILES else str(path.parent / "ledger.sqlite")
        served = open_served_model(ModelSpec(path, ledger=ledger))
        service = PredictionService(served.predictor, preprocess=served.preprocess, class_names=served.class_names)
        document = {"predict": service.predict(body), "budget": service.budget(), "health": service.health()}
        if served.ledger is not None:
            served.ledger.close()
            # The ledger is written by privml too, and may be shared: its rows must not tell the datasets apart
            # (it held the model file's SHA-256, a fingerprint of the training data, until a review found it).
            with sqlite3.connect(str(ledger)) as raw:
                rows = raw.execute("SELECT name, budget, context, spent FROM privml_budgets").fetchall()
            document["ledger"] = {"budgets": rows}
        documents.append(document)
    flat = [{f"{doc}/{k}": json.dumps(v, sort_keys=True) for doc, part in d.items() for k, v in part.items()}
            for d in documents]
    assert violations(differing(*flat), {"predict/labels", "predict/probabilities"}) == []


#: How each CLI subcommand is covered: a test above, or why it touches no private data.
CLI_COVERAGE = {
    "train": "test_cli_train, test_cli_train_dpsgd_cnn",
    "select": "test_cli_select",
    "predict": "test_cli_predict",
    "serve": "test_http_answers (the server's documents, in process)",
    "study": "test_study_rows_release_only_dp_fields (the rows the store keeps)",
    "account": "public inputs only: accounting takes numbers, never records",
    "datasets": "public inputs only: lists built-in datasets and the cache",
    "audit": "public data only: runs on built-in datasets (user data is refused) with a synthetic canary",
    "schema": "test_cli_schema_suggest_prints_no_data_derived_value (the draft file is the stated exception)",
}


def test_every_subcommand_is_covered() -> None:
    from privml.cli.main import build_parser

    parser = build_parser()
    names = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert names == set(CLI_COVERAGE), "add release-invariance coverage for each new subcommand"
    assert len(SUBCOMMANDS) == len(CLI_COVERAGE)
