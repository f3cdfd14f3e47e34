"""Model files that are broken or lie: one-line errors (CLI: exit 2), never a traceback or an answer."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from privml.io import load_model, read_model_file, save_model
from privml.linear import NonPrivateClassifier, OutputPerturbationClassifier
from privml.prediction import PredictionSensitivity, load_predictor
from privml.serve._model import ModelSpec, open_served_model
from tests.cli_runner import run


def _data(k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)) / 2
    return X, rng.integers(0, k, 60)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("good")
    X, y = _data()
    return {
        "output": save_model(OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y),
                             folder / "output.npz"),
        "nonprivate": save_model(NonPrivateClassifier(classes=[0, 1]).fit(X, y), folder / "nonprivate.npz"),
        "prediction-sensitivity": save_model(
            PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=10, classes=[0, 1]).fit(X, y),
            folder / "ps.npz"),
    }


def _rewrite(source: Path, target: Path, *, metadata=None, arrays=None) -> Path:
    old_arrays, old_metadata = read_model_file(source)
    arrays = old_arrays if arrays is None else arrays(dict(old_arrays))
    metadata = old_metadata if metadata is None else metadata(copy.deepcopy(old_metadata))
    blob = json.dumps(metadata).encode()
    np.savez(target, **arrays, __metadata__=np.frombuffer(blob, dtype=np.uint8))
    return target


def _set(path: list, value):
    def change(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return m
    return change


def _drop(path: list):
    def change(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return m
    return change


LIES = {
    "method unknown": _set(["method"], "bogus"),
    "method not a string": _set(["method"], ["output"]),
    "params not an object": _set(["params"], [1, 2]),
    "params unknown keyword": _set(["params", "bogus"], 1),
    "epsilon a string": _set(["params", "epsilon"], "one"),
    "epsilon negative": _set(["params", "epsilon"], -1),
    "l2 a list": _set(["params", "l2"], [1]),
    "privacy missing": _drop(["privacy"]),
    "privacy not an object": _set(["privacy"], "x"),
    "privacy epsilon missing": _drop(["privacy", "epsilon"]),
    "privacy epsilon a word": _set(["privacy", "epsilon"], "lots"),
    "privacy relation unknown": _set(["privacy", "neighbouring"], "sideways"),
    "privacy delta above one": _set(["privacy", "delta"], 3),
    "fit_info not an object": _set(["fit_info"], 7),
    "format wrong": _set(["format"], "other"),
    "format version a string": _set(["format_version"], "1"),
    "format version from the future": _set(["format_version"], 99),
    "metadata a list": lambda m: [m],
    "params classes not the classes array": _set(["params", "classes"], [0, 5]),
}
#: metadata read by predict and serve beside the model (privml.serve._model.model_pipeline)
PIPELINE_LIES = {
    "dataset a number": _set(["extra", "dataset"], 5),
    "dataset a list": _set(["extra", "dataset"], ["mnist"]),
    "dataset name a number": _set(["extra", "dataset"], {"name": 5}),
    "class names an object": _set(["extra", "dataset"], {"name": "digits", "classes": {"x": 1}}),
}
PS_LIES = {
    "n_train missing": _drop(["fit_info", "n_train"]),
    "n_train zero": _set(["fit_info", "n_train"], 0),
    "n_train a string": _set(["fit_info", "n_train"], "many"),
    "l2 missing": _drop(["fit_info", "l2"]),
    "l2 negative": _set(["fit_info", "l2"], -1.0),
    "budget a string": _set(["params", "budget"], "ten"),
    "budget absurd": _set(["params", "budget"], 10**19),
    "accountant unknown": _set(["params", "accountant"], "vibes"),
}
ARRAY_LIES = {
    "weights NaN": lambda a: {**a, "weights": np.full_like(a["weights"], np.nan)},
    "weights inf": lambda a: {**a, "weights": np.full_like(a["weights"], np.inf)},
    "weights a matrix for two classes": lambda a: {**a, "weights": np.zeros((3, 2))},
    "weights missing": lambda a: {k: v for k, v in a.items() if k != "weights"},
    "classes missing": lambda a: {k: v for k, v in a.items() if k != "classes"},
    "one class": lambda a: {**a, "classes": np.array([0])},
    "three classes for a vector": lambda a: {**a, "classes": np.array([0, 1, 2])},
    "empty weights": lambda a: {**a, "weights": np.zeros(0)},
    # Cast on load into another model (complex with its imaginary part dropped): privml writes real floats.
    "weights bool": lambda a: {**a, "weights": np.ones(a["weights"].shape, bool)},
    "weights int8": lambda a: {**a, "weights": np.ones(a["weights"].shape, np.int8)},
    "weights complex": lambda a: {**a, "weights": a["weights"] + 1j},
    # privml never writes it: refused before it is decompressed (an unused member was a zip bomb).
    "an unused array": lambda a: {**a, "junk": np.zeros(10)},
}


def _refused(path: Path) -> None:
    with pytest.raises((ValueError, FileNotFoundError)) as caught:
        load_model(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("lie", LIES)
def test_lying_metadata_is_refused(good, tmp_path: Path, lie: str) -> None:
    _refused(_rewrite(good["output"], tmp_path / "lie.npz", metadata=LIES[lie]))


@pytest.mark.parametrize("lie", PS_LIES)
def test_lying_predictor_metadata_is_refused_before_serving(good, tmp_path: Path, lie: str) -> None:
    path = _rewrite(good["prediction-sensitivity"], tmp_path / "lie.npz", metadata=PS_LIES[lie])
    with pytest.raises(ValueError) as caught:
        load_predictor(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("lie", ARRAY_LIES)
def test_lying_arrays_are_refused(good, tmp_path: Path, lie: str) -> None:
    for name in ("output", "prediction-sensitivity"):
        _refused(_rewrite(good[name], tmp_path / f"{name}.npz", arrays=ARRAY_LIES[lie]))


@pytest.mark.parametrize("lie", PIPELINE_LIES)
def test_lying_dataset_metadata_is_refused_before_serving(good, tmp_path: Path, lie: str) -> None:
    path = _rewrite(good["output"], tmp_path / "lie.npz", metadata=PIPELINE_LIES[lie])
    with pytest.raises(ValueError, match="extra.dataset") as caught:
        open_served_model(ModelSpec(path))
    assert "\n" not in str(caught.value)


def _broken_files(tmp_path: Path, good: Path) -> dict[str, Path]:
    blob = good.read_bytes()
    files = {"empty": b"", "truncated": blob[: len(blob) // 2], "text": b"hello", "one byte short": blob[:-1],
             "zip of nothing": b"PK\x05\x06" + b"\x00" * 18}
    out = {}
    for name, content in files.items():
        out[name] = tmp_path / f"{name.replace(' ', '-')}.npz"
        out[name].write_bytes(content)
    out["directory"] = tmp_path / "folder.npz"
    out["directory"].mkdir()
    np.save(tmp_path / "bare.npy", np.zeros(3))
    out["bare array"] = tmp_path / "bare.npy"
    np.savez(tmp_path / "no-metadata.npz", weights=np.zeros(3))
    out["no metadata"] = tmp_path / "no-metadata.npz"
    np.savez(tmp_path / "bad-json.npz", __metadata__=np.frombuffer(b"{not json", dtype=np.uint8))
    out["metadata not JSON"] = tmp_path / "bad-json.npz"
    np.savez(tmp_path / "bad-utf8.npz", __metadata__=np.frombuffer(b"\xff\xfe", dtype=np.uint8))
    out["metadata not UTF-8"] = tmp_path / "bad-utf8.npz"
    deep = b'{"format": "privml-model", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    np.savez(tmp_path / "deep.npz", __metadata__=np.frombuffer(deep, dtype=np.uint8))
    out["metadata nested 100k deep"] = tmp_path / "deep.npz"
    out["a header claiming 4 TB"] = _huge_header(good, tmp_path / "huge.npz")
    return out


def _huge_header(good: Path, target: Path) -> Path:
    """A good file plus an array whose npy header declares 10^12 floats over 16 bytes of data."""
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(target, "w") as archive:
        for info in source.infolist():
            archive.writestr(info.filename, source.read(info))
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
        archive.writestr("state.big.npy", header.getvalue() + b"\0" * 16)
    return target


def test_broken_files_are_refused(good, tmp_path: Path) -> None:
    for name, path in _broken_files(tmp_path, good["output"]).items():
        with pytest.raises((ValueError, FileNotFoundError)) as caught:
            load_model(path)
        assert "\n" not in str(caught.value), name


def test_cli_predict_exits_2_on_every_bad_file(capsys, good, tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b,c\n0.1,0.2,0.3\n")
    bad = _broken_files(tmp_path, good["output"])
    bad.update({lie: _rewrite(good["output"], tmp_path / f"lie-{i}.npz", metadata=change)
                for i, (lie, change) in enumerate(LIES.items())})
    bad.update({lie: _rewrite(good["prediction-sensitivity"], tmp_path / f"ps-{i}.npz", metadata=change)
                for i, (lie, change) in enumerate(PS_LIES.items())})
    bad.update({lie: _rewrite(good["output"], tmp_path / f"arr-{i}.npz", arrays=change)
                for i, (lie, change) in enumerate(ARRAY_LIES.items())})
    bad.update({lie: _rewrite(good["output"], tmp_path / f"pipe-{i}.npz", metadata=change)
                for i, (lie, change) in enumerate(PIPELINE_LIES.items())})
    for name, path in bad.items():
        code, out, err = run(capsys, "predict", "--model", str(path), "--input", str(rows), "--json")
        assert code == 2, f"{name}: exit {code}, {err}"
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err, f"{name}: {err}"


def test_complex_and_non_numeric_rows_are_refused() -> None:
    X, y = _data()
    model = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0)
    with pytest.raises(ValueError, match="real-valued"):
        model.fit(X.astype(complex), y)
    with pytest.raises(ValueError, match="hold numbers"):
        model.fit(np.array([["a", "b", "c"]] * 60), y)


def test_arrays_over_the_size_cap_are_refused_before_decompressing(good, tmp_path: Path, monkeypatch) -> None:
    # The zip directory's sizes are checked first: a 1.5 MB file with 1.5 GB of zeros reached 6.5 GB RSS.
    big = _rewrite(good["output"], tmp_path / "big.npz", arrays=lambda a: {**a, "weights": np.zeros(1000)})
    monkeypatch.setattr("privml.io.MAX_MODEL_BYTES", 4096)
    read_model_file(good["output"])  # a file under the cap reads as before
    with pytest.raises(ValueError, match="over the 4096 cap"):
        read_model_file(big)
