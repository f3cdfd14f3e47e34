"""``--device`` of ``privml predict``, ``privml serve`` and ``privml study run`` (CNN files and methods only)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from privml.cli.main import main
from privml.io import load_model, read_model_file, save_model
from privml.serve._model import ModelSpec, open_served_model

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where no CUDA device exists")


@pytest.fixture
def cnn_file(image_cache, tmp_path):
    """A tiny dpsgd-cnn file written by ``privml train`` and 20 raw image rows."""
    folder = tmp_path
    model = folder / "cnn.npz"
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--max-train", "200",
                 "--epochs", "1", "--batch-size", "100", "--seed", "0", "--threads", "1", "--device", "cpu",
                 "--out", str(model)]) == 0
    rows = folder / "rows.csv"
    pixels = np.random.default_rng(0).integers(0, 256, size=(20, 784))
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f"p{j}" for j in range(784)])
        writer.writerows(pixels.tolist())
    return {"model": str(model), "rows": str(rows), "folder": folder}


def _one_line_error(capsys, argv: list[str], match: str) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and match in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err


def test_predict_runs_a_cnn_file_on_the_device_asked(cnn_file, capsys):
    capsys.readouterr()
    argv = ["predict", "--model", cnn_file["model"], "--input", cnn_file["rows"], "--json"]
    assert main([*argv, "--device", "cpu"]) == 0
    on_cpu = json.loads(capsys.readouterr().out)
    assert on_cpu["n"] == 20 and "device" not in on_cpu  # the device is no part of the answer
    assert main(argv) == 0  # default: auto (the CPU here)
    assert json.loads(capsys.readouterr().out)["labels"] == on_cpu["labels"]


@pytest.mark.parametrize("command", ["predict", "serve"])
def test_a_bad_device_is_one_line_for_a_cnn_file(cnn_file, capsys, command):
    capsys.readouterr()
    argv = ["predict", "--model", cnn_file["model"], "--input", cnn_file["rows"]] if command == "predict" else \
        ["serve", "--model", cnn_file["model"], "--port", "0"]
    _one_line_error(capsys, [*argv, "--device", "tpu"], "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'")


@NO_CUDA
@pytest.mark.parametrize("command", ["predict", "serve"])
def test_cuda_without_a_cuda_device_is_one_line(cnn_file, capsys, command):
    capsys.readouterr()
    argv = ["predict", "--model", cnn_file["model"], "--input", cnn_file["rows"]] if command == "predict" else \
        ["serve", "--model", cnn_file["model"], "--port", "0"]
    _one_line_error(capsys, [*argv, "--device", "cuda"], "no CUDA device")


def test_a_served_cnn_runs_where_asked_not_where_it_was_trained(cnn_file, tmp_path):
    # A model trained on a GPU is stored with device="auto" (the machine, not the model, decides), so it loads
    # and predicts here, and is served on "auto" unless told otherwise.
    _, metadata = read_model_file(cnn_file["model"])
    served = open_served_model(ModelSpec(cnn_file["model"]))
    model = served.predictor
    model.set_params(device="cuda")
    moved = save_model(model, tmp_path / "trained-on-gpu.npz", extra=metadata["extra"])
    assert read_model_file(moved)[1]["params"]["device"] == "auto"
    assert load_model(moved).predict(np.zeros((2, 1, 28, 28), dtype=np.float32)).shape == (2,)
    assert open_served_model(ModelSpec(moved)).predictor.device == "auto"
    placed = open_served_model(ModelSpec(moved, device="cpu")).predictor
    assert placed.device == "cpu" and placed.predict(np.zeros((2, 1, 28, 28), dtype=np.float32)).shape == (2,)


def _jobs(**changes):
    from privml.study import plan, spec_from_dict
    from tests.study.conftest import tiny_spec_dict

    methods = ["output", "dpsgd", "nonprivate-cnn", "dpsgd-cnn", "subsample-aggregate-cnn"]
    raw = tiny_spec_dict(dataset="mnist", methods=methods,
                         defaults={"epsilon": 1.0, "delta": 1e-5, "budget": 10, "n": 400, "k": 10, "m": 8}, **changes)
    return {job.key: job for job in plan(spec_from_dict(raw))[0]}


def test_a_cnn_run_key_holds_its_device_and_a_linear_run_key_never_does():
    from privml.study._methods import get_method

    by_device = {device: _jobs(device=device) for device in ("auto", "cpu", "cuda", "cuda:1")}
    for device, jobs in by_device.items():
        for job in jobs.values():
            if get_method(job.method).inputs == "features":
                # Linear runs: the same keys (and stored results) whatever the device.
                assert "device" not in job.params and job.key in {j.key for j in by_device["auto"].values()}
            elif device in ("auto", "cpu"):
                # A CNN run without a device ran on the CPU: the keys of CPU runs are the keys they always had.
                assert "device" not in job.params
            else:
                assert job.params["device"] == device
    assert {j.key for j in by_device["auto"].values()} == {j.key for j in by_device["cpu"].values()}
    cnn_keys = {name: {j.key for j in by_device[name].values() if get_method(j.method).inputs == "images"}
                for name in by_device}
    assert cnn_keys["cpu"] and not cnn_keys["cpu"] & cnn_keys["cuda"] and not cnn_keys["cuda"] & cnn_keys["cuda:1"]
    assert len({len(jobs) for jobs in by_device.values()}) == 1  # the same plan on every device


def test_the_cnn_adapters_pass_the_device_to_every_torch_classifier():
    from privml.study._methods import get_method

    for name in ("nonprivate-cnn", "dpsgd-cnn"):
        method = get_method(name)
        params = {"epsilon": 1.0, "delta": 1e-5}
        assert method.kwargs({**params, "device": "cuda:1"}, 10, 0, (28, 28))["device"] == "cuda:1"
        assert method.kwargs(params, 10, 0, (28, 28))["device"] == "cpu"  # no device in the key: the CPU
    teacher = get_method("subsample-aggregate-cnn").kwargs(
        {"epsilon": 1.0, "delta": 0.0, "budget": 5, "device": "cuda"}, 10, 0, (28, 28))["estimator"]
    assert teacher.device == "cuda"


def test_study_run_resolves_and_checks_the_device_before_any_run(tmp_path, capsys):
    from privml.study import load_preset
    from privml.study._runner import place_study

    spec = load_preset("paper-cnn")
    placed = place_study(spec)
    assert placed.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert "device" in placed.to_dict() and "device" not in spec.to_dict()  # stored: status plans its keys
    assert place_study(spec.with_overrides(device="cpu")).device == "cpu"
    out = tmp_path / "out"
    _one_line_error(capsys, ["study", "run", "paper-cnn", "--out", str(out), "--device", "tpu"], "device must be")
    if not torch.cuda.is_available():
        _one_line_error(capsys, ["study", "run", "paper-cnn", "--out", str(out), "--device", "cuda"],
                        "no CUDA device")
        with pytest.raises(ValueError, match="no CUDA device"):
            place_study(spec.with_overrides(device="cuda"))
    assert not out.exists()


# ------------------------------------------------------------------ end to end on each device (CUDA: gpu marker)
ON_EACH_DEVICE = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])


@ON_EACH_DEVICE
def test_a_cnn_file_trains_predicts_and_serves_over_http_on_the_device(image_cache, tmp_path, capsys, device):
    from tests.serve.cli_process import start_server, stop
    from tests.serve.helpers import request

    model = tmp_path / "cnn.npz"
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--max-train", "400",
                 "--epochs", "1", "--batch-size", "100", "--seed", "0", "--device", device, "--out",
                 str(model)]) == 0
    pixels = np.random.default_rng(1).integers(0, 256, size=(3, 784))
    rows = tmp_path / "rows.csv"
    rows.write_text("\n".join(",".join(map(str, r)) for r in [[f"p{j}" for j in range(784)], *pixels.tolist()]))
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--input", str(rows), "--device", device, "--proba", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    # The standard-library server: the GPU machine has no fastapi or uvicorn, and the device path is the same.
    proc, started = start_server("--model", str(model), "--device", device, "--server", "stdlib", timeout=180)
    try:
        status, body = request(started["url"], "POST", "/predict", {"rows": pixels.tolist(), "probabilities": True})
    finally:
        stop(proc)
    assert status == 200, body
    assert status == 200, body
    # The same file answers the same over HTTP as on the command line, on the same device.
    assert body["labels"] == predicted["labels"]
    np.testing.assert_allclose(body["probabilities"], predicted["probabilities"], rtol=1e-5, atol=1e-7)


# The CPU run is the default suite's copy: the CUDA one alone left a refusal of every small run (a batch of 512
# against a 100-record teacher) to be found on a GPU machine.
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_study_of_the_cnn_methods_runs_on_the_device(device, image_cache, tmp_path, capsys):
    from tests.study.conftest import tiny_spec_dict

    raw = tiny_spec_dict(
        dataset="mnist", methods=["nonprivate-cnn", "dpsgd-cnn", "subsample-aggregate-cnn"], repeats=1,
        defaults={"epsilon": 1.0, "delta": 1e-5, "budget": 10, "n": 400, "k": 10, "m": 4},
        selection={"mode": "public", "grids": {"dpsgd-cnn": {"epochs": [1.0]}, "nonprivate-cnn": {"epochs": [2.0]},
                                               "subsample-aggregate-cnn": {"epochs": [1.0]}}},
        sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [1.0, 8.0], "title": "accuracy vs epsilon"}],
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(raw))  # JSON is YAML
    capsys.readouterr()
    code = main(["study", "run", str(spec), "--out", str(tmp_path / "out"), "--device", device, "--json",
                 "--no-progress", "--no-report"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result
    assert result["failed"] == 0 and result["finished"] == result["planned"] == 5, result  # nonprivate-cnn: one run for both epsilons
