"""`privml audit --one-run --method dpsgd-cnn`: the run privml train makes, one-line refusals, no torch."""

from __future__ import annotations

import pytest

from tests.cli.conftest import CNN_OPTIONS
from tests.cli.test_without_torch import EXTRA, cli_without_torch
from tests.cli_runner import run, run_json

#: The smallest run: 96 training images of 16 x 16 plus 24 canary slots, batches of 20, one epoch (6 steps).
TINY = ("--epochs", "1", "--batch-size", "20", "--canaries", "24", "--threads", "1", "--device", "cpu", "--seed", "0")


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def spy(monkeypatch):
    """Records the estimator and arguments each torch one-run audit is given, then runs it."""
    from privml.audit import _one_run_torch as one_run_torch
    from privml.cli import _audit_torch as audit_torch

    calls: list[dict] = []
    real = one_run_torch.torch_classifier_one_run_audit

    def recording(estimator, X, y, **kwargs):
        calls.append({"estimator": estimator, "X": X, "y": y, **kwargs})
        return real(estimator, X, y, **kwargs)

    monkeypatch.setattr(audit_torch, "torch_classifier_one_run_audit", recording)
    return calls


def test_black_box_audit_of_user_images(torch, tiny_images, capsys):
    r = run_json(
        capsys,
        "audit",
        "--one-run",
        "--method",
        "dpsgd-cnn",
        "--dataset",
        tiny_images,
        "--epsilon",
        "2",
        "--no-progress",
        *TINY,
    )
    assert r["method"] == "dpsgd-cnn" and r["estimator"] == "TorchClassifier" and r["architecture"] == "tramer-boneh"
    assert r["audit"] == "one-run" and r["training_runs"] == 1 and r["scores_from"] == "black-box"
    assert r["canaries"] == "records" and r["m"] == 24 and (r["n_real"], r["n_train"]) == (96, 120)
    # --epochs 1 with batches of 20 out of the 120 slots: 6 steps at sample rate 1/6, as privml train runs them
    assert r["steps"] == 6 and r["sample_rate"] == pytest.approx(20 / 120)
    assert r["neighbouring"] == "add/remove-one" and 0 < r["claimed_epsilon"] <= 2.0
    assert not r["exceeds_claim"]
    assert "model_file" not in r


def test_white_box_audit_prints_a_table_and_plots(torch, tiny_images, capsys, tmp_path):
    plot = tmp_path / "scores.png"
    code, out, err = run(
        capsys,
        "audit",
        "--one-run",
        "--white-box",
        "--method",
        "dpsgd-cnn",
        "--dataset",
        tiny_images,
        "--epsilon",
        "2",
        "--plot",
        str(plot),
        *TINY,
    )
    assert code == 0, err
    assert "dirac, scored white-box" in out and "add/remove-one" in out and "6 steps" in out
    assert "one training run" in err and "do not publish" in err  # progress, and the user-data warning
    assert plot.stat().st_size > 0


def test_the_audited_run_is_the_one_privml_train_makes(torch, cnn_file, spy, capsys):
    trained = cnn_file.report
    r = run_json(
        capsys, "audit", "--one-run", "--method", "dpsgd-cnn", "--dataset", "mnist", "--canaries", "20", *CNN_OPTIONS
    )
    from privml.io import load_model

    params = load_model(trained["model"]).get_params()
    audited = spy[0]["estimator"].get_params()
    machine = {"random_state", "device", "progress"}  # the seed is never stored; the file says device "auto"
    assert {k: v for k, v in audited.items() if k not in machine} == {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items() if k not in machine
    }
    assert spy[0]["X"].shape == (100, 1, 28, 28) and spy[0]["m"] == 20
    assert r["n_real"] == 100 and r["delta"] == 1e-6 and r["dataset"] == "mnist"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "scatter-linear", "--trials", "4"], "audited with --one-run only"),
        (["--method", "scatter-linear", "--one-run", "--architecture", "resnet"], "--architecture applies to"),
        (["--method", "scatter-cnn", "--one-run", "--dataset", "iris"], "audits --dataset mnist, fashion-mnist, cifar10"),
        (["--method", "dpsgd-cnn", "--trials", "4"], "audited with --one-run only"),
        (["--method", "dpsgd-cnn", "--one-run", "--trials", "4"], "--trials does not apply to --one-run"),
        (["--method", "dpsgd-cnn", "--one-run", "--classes", "0,1"], "--classes does not apply to --method dpsgd-cnn"),
        (["--method", "dpsgd-cnn", "--one-run", "--bounds", "unit"], "--schema and --bounds do not apply"),
        (["--method", "dpsgd-cnn", "--one-run", "--epochs", "0"], "epochs must be > 0"),
        (["--method", "dpsgd-cnn", "--one-run", "--canaries", "0"], "--canaries must be >= 1"),
        (["--method", "dpsgd-cnn", "--one-run", "--confidence", "2"], "--confidence"),
        (["--method", "dpsgd-cnn", "--one-run", "--plot", "x.nope"], "--plot"),
        (["--method", "dpsgd-cnn", "--one-run", "--dataset", "iris"], "audits --dataset mnist, fashion-mnist or npz"),
        (["--method", "output", "--one-run", "--epochs", "2"], "--epochs applies to --method dpsgd-cnn only"),
        (["--method", "output", "--one-run", "--clip-norm", "2"], "also dpsgd; --clip-norm: dpcd"),
        (
            ["--method", "dpsgd", "--one-run", "--device", "cpu", "--architecture", "resnet"],
            "--device, --architecture apply to --method dpsgd-cnn only",
        ),
        (["--method", "dpsgd", "--one-run", "--learning-rate", "-1"], "learning_rate must be > 0"),
        (["--method", "output", "--trials", "4", "--max-train", "50"], "--max-train applies to --one-run"),
        (["--method", "output", "--one-run", "--jobs", "2"], "--jobs applies to the multi-run audit"),
        (["--method", "dpsgd-cnn", "--one-run", "--jobs", "2"], "--jobs applies to the multi-run audit"),
    ],
)
def test_refusals_are_one_line_before_anything_runs(capsys, extra, message):
    code, out, err = run(capsys, "audit", "--dataset", "mnist", "--epsilon", "1", *extra)  # a later --dataset wins
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_without_torch_the_audit_is_one_line_naming_the_extra(tmp_path):
    result = cli_without_torch(
        "audit", "--one-run", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", "--offline"
    )
    assert result.returncode == 2
    assert (
        result.stderr
        == f"privml audit: error: --method dpsgd-cnn needs PyTorch, which the core install lacks: {EXTRA}\n"
    )


def _tiny_cnn_file(path, **params) -> str:
    """A dpsgd-cnn model file fitted on 40 random 16 x 16 images of two classes: one epoch of batches of 20."""
    import numpy as np

    from privml.io import save_model
    from privml.torch._classifier import TorchClassifier

    rng = np.random.default_rng(0)
    model = TorchClassifier(
        **params, input_shape=(1, 16, 16), classes=(0, 1), epochs=1, batch_size=20, random_state=0, device="cpu"
    )
    return str(save_model(model.fit(rng.standard_normal((40, 256)).astype(np.float32), np.arange(40) % 2), path))


def test_without_torch_a_cnn_model_file_is_one_line_naming_the_extra(torch, tiny_images, tmp_path):
    path = _tiny_cnn_file(tmp_path / "cnn.npz", epsilon=2.0)
    result = cli_without_torch("audit", "--one-run", "--model", str(path), "--dataset", tiny_images, "--offline")
    assert result.returncode == 2
    assert result.stderr == (
        f"privml audit: error: auditing {path} (dpsgd-cnn) needs PyTorch, which the core install lacks: {EXTRA}\n"
    )


def test_help_lists_the_training_options(capsys):
    code, out, _ = run(capsys, "audit", "--help")
    assert code == 0
    for option in ("--model FILE", "--max-train", "--epochs", "--architecture", "--clip-precision", "dpsgd-cnn"):
        assert option in out


def test_a_cnn_file_set_by_its_noise_multiplier_is_audited_against_its_own_claim(torch, tiny_images, capsys, tmp_path):
    path = _tiny_cnn_file(tmp_path / "sigma.npz", epsilon=None, noise_multiplier=1.5)
    r = run_json(
        capsys,
        "audit",
        "--one-run",
        "--model",
        path,
        "--dataset",
        tiny_images,
        "--canaries",
        "24",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--seed",
        "0",
        "--no-progress",
    )
    assert r["noise_multiplier"] == 1.5 and r["model_file"] == path and r["steps"] == 6
    assert r["claimed_epsilon"] > 0 and not r["exceeds_claim"]
