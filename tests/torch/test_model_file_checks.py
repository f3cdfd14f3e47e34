"""CNN model files whose settings no prediction could use are refused at load, before any allocation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privml.guarantee import PrivacyGuarantee  # noqa: E402
from privml.io import load_model, read_model_file, save_model  # noqa: E402
from privml.neighbouring import Neighbouring  # noqa: E402
from privml.serve._model import ModelSpec, open_served_model  # noqa: E402
from privml.torch import TorchClassifier  # noqa: E402
from privml.torch.models import build_model  # noqa: E402


def _cnn_file(path: Path, *, input_shape: tuple[int, int, int] = (1, 16, 16), **params) -> Path:
    """A model file of an untrained CNN (no fit: these tests are about the file, not the weights)."""
    model = TorchClassifier(epsilon=1.0, input_shape=input_shape, classes=[0, 1], device="cpu", **params)
    model.module_ = build_model("tramer-boneh", in_channels=input_shape[0], n_classes=2, image_size=input_shape[-1])
    model.classes_ = np.array([0, 1])
    model.privacy_ = PrivacyGuarantee(1.0, 1e-5, Neighbouring.parse("add/remove-one"), "pld")
    model.fit_info_ = {}
    return save_model(model, path)


def _rewrite(path: Path, *, params=None, arrays=None) -> Path:
    old_arrays, metadata = read_model_file(path)
    metadata["params"].update(params or {})
    new_arrays = {**old_arrays, **(arrays or {})}
    np.savez(path, **new_arrays, __metadata__=np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8))
    return path


def _refused(path: Path, match: str) -> None:
    with pytest.raises(ValueError, match=match) as caught:
        load_model(path)
    assert "\n" not in str(caught.value)


def test_threads_zero_is_refused_at_load_and_by_serve(tmp_path: Path) -> None:
    # It loaded, then every prediction (every HTTP request of privml serve) failed in torch.set_num_threads.
    path = _rewrite(_cnn_file(tmp_path / "m.npz"), params={"threads": 0})
    _refused(path, "threads")
    with pytest.raises(ValueError, match="threads"):
        open_served_model(ModelSpec(path, device="cpu"))


def test_threads_zero_is_refused_before_fit() -> None:
    X = np.zeros((4, 1, 16, 16), np.float32)
    with pytest.raises(ValueError, match="threads"):
        TorchClassifier(epsilon=1.0, input_shape=(1, 16, 16), classes=[0, 1], threads=0, device="cpu").fit(X, [0, 1] * 2)


def test_consistent_non_square_input_shape_is_refused_at_load(tmp_path: Path) -> None:
    # Tensors built for 32 x 32 and input_shape (1, 16, 32) agree in width and pixel count: the file
    # loaded, then every prediction failed, as the network sizes its linear layer from the width alone.
    path = _rewrite(_cnn_file(tmp_path / "m.npz", input_shape=(1, 32, 32)), params={"input_shape": [1, 16, 32]})
    _refused(path, "square")


def test_shapes_are_checked_before_a_model_is_built(tmp_path: Path, monkeypatch) -> None:
    # Ten million classes (or a wide image) in the file allocated gigabytes before load_state_dict refused them.
    path = _rewrite(_cnn_file(tmp_path / "m.npz"), params={"classes": None},
                    arrays={"classes": np.zeros(10_000_000, np.int8)})
    built = []
    real_build = build_model
    monkeypatch.setattr("privml.torch._classifier.build_model",
                        lambda *a, **k: built.append(torch.empty(0).device.type) or real_build(*a, **k))
    _refused(path, "10000000 classes make it")
    assert built in ([], ["meta"])  # never a real model


@pytest.mark.parametrize("dtype", [np.complex64, np.bool_, np.int8])
def test_weights_that_are_not_real_floats_are_refused(tmp_path: Path, dtype) -> None:
    path = _cnn_file(tmp_path / "m.npz")
    bias = read_model_file(path)[0]["state.0.bias"]
    _refused(_rewrite(path, arrays={"state.0.bias": bias.astype(dtype)}), "real floats")


def test_a_good_file_still_loads(tmp_path: Path) -> None:
    model = load_model(_cnn_file(tmp_path / "m.npz", threads=1))
    assert model.predict(np.zeros((3, 256), np.float32)).shape == (3,)


def _baseline_file(path: Path) -> Path:
    X = np.random.default_rng(0).random((40, 256))
    y = np.arange(40) % 2
    model = TorchClassifier(epsilon=float("inf"), input_shape=(1, 16, 16), classes=[0, 1], epochs=1, batch_size=20,
                            device="cpu", random_state=0).fit(X, y)
    return save_model(model, path)


def test_the_non_private_cnn_is_saved_as_a_baseline_and_never_served_as_a_dp_release(tmp_path):
    from privml import registry

    path = _baseline_file(tmp_path / "baseline.npz")
    _, metadata = read_model_file(path)
    assert metadata["method"] == "nonprivate-cnn"
    assert registry.get_spec("nonprivate-cnn").kind is registry.Kind.BASELINE  # the release table: secret weights
    assert load_model(path).method == "nonprivate-cnn"
    with pytest.raises(ValueError, match="ledger"):
        open_served_model(ModelSpec(path))  # before: served free, with no ledger, as a DP release
    with pytest.raises(ValueError, match="non-private CNN"):
        open_served_model(ModelSpec(path, epsilon=1.0, budget=10, ledger=str(tmp_path / "ledger.sqlite")))


def test_a_baseline_cnn_file_relabelled_as_dp_sgd_is_refused(tmp_path):
    path = _baseline_file(tmp_path / "baseline.npz")
    arrays, metadata = read_model_file(path)
    metadata["method"] = "dpsgd-cnn"
    np.savez(path, **arrays, __metadata__=np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8))
    _refused(path, "settings make a 'nonprivate-cnn' model")


def test_cli_predict_answers_the_cnn_baseline_locally_with_a_warning_and_serve_refuses(tmp_path, capsys):
    from privml.cli.main import main

    path = _baseline_file(tmp_path / "baseline.npz")
    rows = tmp_path / "rows.csv"
    rows.write_text(",".join(f"p{i}" for i in range(256)) + "\n" + ",".join(["0.5"] * 256) + "\n")
    assert main(["predict", "--model", str(path), "--input", str(rows), "--json"]) == 0
    assert "non-private baseline" in capsys.readouterr().err
    assert main(["predict", "--model", str(path), "--input", str(rows), "--epsilon", "1", "--budget", "5"]) == 2
    assert "non-private CNN" in capsys.readouterr().err
