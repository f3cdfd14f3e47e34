"""``privml train --method dpsgd-cnn``: JSON output, guarantee, progress with epsilon, model file."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privml.cli.main import main  # noqa: E402


def test_train_dpsgd_cnn_json(image_cache, capsys, tmp_path):
    out = tmp_path / "cnn.npz"
    argv = ["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--max-train", "600",
            "--epochs", "1", "--batch-size", "100", "--seed", "0", "--threads", "1", "--out", str(out), "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["method"] == "dpsgd-cnn" and result["n_train"] == 600 and result["n_test"] == 200
    assert 0 < result["epsilon"] <= 2.0 and result["neighbouring"] == "add/remove-one"
    assert result["steps"] == 6 and result["expected_batch_size"] == 100
    assert 0.0 <= result["test_accuracy"] <= 1.0
    assert "eps=" in captured.err  # the progress bar reports the epsilon spent
    assert out.exists()
    # --no-progress: no bar, so no timing on stderr (docs/releases.md, "Timing").
    assert main([*argv[:-3], "--no-progress"]) == 0
    assert "eps=" not in capsys.readouterr().err


def test_dpsgd_cnn_rejects_tabular_data_and_missing_epsilon(capsys):
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "adult", "--epsilon", "1"]) != 0
    assert "mnist" in capsys.readouterr().err
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist"]) != 0
    assert "--epsilon" in capsys.readouterr().err


def test_core_cli_does_not_import_torch():
    # privml.cli must stay importable without torch: only the dpsgd-cnn branch imports it.
    import subprocess

    code = "import sys, privml, privml.cli.main, privml.io; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cnn_options_are_refused_for_linear_methods(capsys):
    assert main(["train", "--method", "dpsgd", "--dataset", "iris", "--epsilon", "1", "--epochs", "3"]) != 0
    assert "--epochs applies to --method dpsgd-cnn and the scatter-* methods only" in capsys.readouterr().err
    assert main(["train", "--method", "dpsgd", "--dataset", "iris", "--epsilon", "1", "--threads", "2",
                 "--architecture", "resnet"]) != 0
    assert "--threads, --architecture apply to --method dpsgd-cnn and the scatter-* methods only" in capsys.readouterr().err
    assert main(["train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--clip-precision",
                 "tf32"]) == 2
    assert "--clip-precision applies to --method dpsgd-cnn and the scatter-* methods only" in capsys.readouterr().err
    assert main(["train", "--method", "dpsgd", "--dataset", "iris", "--epsilon", "1", "--no-progress"]) == 2
    assert "--no-progress applies to --method dpsgd-cnn and the scatter-* methods only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--label-column", "y"], "--label-column and --classes do not apply"), (["--delta", "0"], "delta must be > 0")],
)
def test_cnn_options_it_cannot_use_are_refused_before_any_data_is_read(extra, message, capsys, monkeypatch):
    import privml.torch._data

    def no_read(*args, **kwargs):
        raise AssertionError("data read before the options were checked")

    monkeypatch.setattr(privml.torch._data, "load_images", no_read)
    argv = ["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_train_dpsgd_cnn_with_tf32_clipping(image_cache, capsys, tmp_path):
    out = tmp_path / "cnn.npz"
    argv = ["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--max-train", "300",
            "--epochs", "1", "--batch-size", "100", "--seed", "0", "--threads", "1", "--clip-precision", "tf32",
            "--out", str(out), "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["epsilon"] <= 2.0
    from privml.io import load_model

    assert load_model(out).clip_precision == "tf32"  # a public setting of the fit, kept with the model
    with pytest.raises(SystemExit) as stopped:  # argparse's own one-line usage error
        main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--clip-precision", "tf16"])
    assert stopped.value.code == 2 and "invalid choice: 'tf16'" in capsys.readouterr().err


def test_fashion_mnist_images_have_coded_labels(image_cache):
    from privml.data import load_dataset
    from privml.torch._data import NORMALISATION, load_images

    data = load_images("fashion-mnist", max_train=50, random_state=0)
    assert data.classes == tuple(range(10)) and data.class_names[9] == "Ankle boot"
    assert data.X_train.shape == (50, 1, 28, 28) and set(data.y_train.tolist()) <= set(data.classes)
    # Standardised by the published constants, not by statistics of these records.
    raw = load_dataset("fashion-mnist", preprocess=False, max_train=50, random_state=0).X_test
    mean, std = NORMALISATION["fashion-mnist"]
    expected = (np.asarray(raw, dtype=np.float32).reshape(-1, 1, 28, 28) / 255.0 - mean) / std
    np.testing.assert_allclose(data.X_test.numpy(), expected, rtol=1e-6)


def test_predict_with_a_cnn_model_file_reproduces_the_test_accuracy(image_cache, capsys, tmp_path):
    """`privml predict` applies the CNN's public pixel standardisation to raw CSV rows, at no privacy cost."""
    import csv

    from privml.data import load_dataset

    model = tmp_path / "cnn.npz"
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "fashion-mnist", "--epsilon", "2", "--max-train",
                 "600", "--epochs", "1", "--batch-size", "100", "--seed", "0", "--threads", "1", "--out", str(model),
                 "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    raw = load_dataset("fashion-mnist", preprocess=False)
    names = raw.info.classes
    rows = tmp_path / "rows.csv"
    with rows.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"p{j}" for j in range(784)] + ["label"])
        for image, code in zip(np.asarray(raw.X_test).reshape(-1, 784), raw.y_test):
            writer.writerow([int(v) for v in image] + [names[int(code)]])
    assert main(["predict", "--model", str(model), "--input", str(rows), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["method"] == "dpsgd-cnn" and result["n"] == 200
    assert set(result["labels"]) <= set(names)  # public class names, not codes
    assert result["accuracy"] == pytest.approx(trained["test_accuracy"])
    # Privacy options are refused: the CNN's release is already private.
    assert main(["predict", "--model", str(model), "--input", str(rows), "--epsilon", "1", "--budget", "5"]) == 2
    assert "privately trained model (dpsgd-cnn)" in capsys.readouterr().err
    # Images already standardised (negative values) or otherwise out of range are refused, not misread.
    bad = tmp_path / "standardised.csv"
    bad.write_text(",".join(f"p{j}" for j in range(784)) + ",label\n" + ",".join(["-0.42"] * 784) + ",x\n")
    assert main(["predict", "--model", str(model), "--input", str(bad)]) == 2
    assert "raw grey levels in [0, 255]" in capsys.readouterr().err


def test_device_and_precision_are_checked_before_any_data(capsys, monkeypatch):
    import privml.torch._data as image_data

    monkeypatch.setattr(image_data, "load_images", lambda *a, **k: pytest.fail("data read before the device check"))
    if not torch.cuda.is_available():
        assert main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert "no CUDA device" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", "--device", "tpu"]) == 2
    assert "device must be" in capsys.readouterr().err
    # Options a method cannot use are errors, never dropped.
    assert main(["train", "--method", "output", "--dataset", "mnist", "--epsilon", "1", "--device", "cpu"]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["train", "--method", "output", "--dataset", "mnist", "--epsilon", "1", "--precision", "bf16"]) == 2
    assert "--precision" in capsys.readouterr().err


def test_train_on_an_explicit_device_in_bf16(image_cache, capsys):
    argv = ["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--max-train", "300",
            "--epochs", "1", "--batch-size", "100", "--seed", "0", "--threads", "1", "--device", "cpu",
            "--precision", "bf16", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] == 3 and 0 < result["epsilon"] <= 2.0


def test_cli_architectures_are_the_image_models():
    from privml.cli._train import CNN_ARCHITECTURES
    from privml.torch.models import IMAGE_ARCHITECTURES

    assert CNN_ARCHITECTURES == IMAGE_ARCHITECTURES


def test_without_torch_a_cnn_model_file_is_refused_in_one_line(image_cache, capsys, tmp_path):
    # predict and serve of a dpsgd-cnn file in a core install (torch hidden by an import hook): one line
    # naming the torch extra, exit 2, before the model's arrays or any input row are read.
    from tests.cli.test_without_torch import EXTRA, cli_without_torch

    model = tmp_path / "cnn.npz"
    assert main(["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "2", "--max-train", "200",
                 "--epochs", "1", "--batch-size", "100", "--seed", "0", "--threads", "1", "--out", str(model)]) == 0
    capsys.readouterr()
    rows = tmp_path / "rows.csv"
    rows.write_text(",".join(f"p{j}" for j in range(784)) + "\n" + ",".join(["0"] * 784) + "\n")
    for command, extra in (("predict", ["--input", str(rows)]), ("serve", [])):
        result = cli_without_torch(command, "--model", str(model), *extra)
        assert result.returncode == 2, result.stderr
        assert result.stderr == (f"privml {command}: error: {model}, a CNN model file (dpsgd-cnn), needs PyTorch, "
                                 f"which the core install lacks: {EXTRA}\n")


def test_scatter_methods_check_their_options_before_any_data(capsys):
    base = ["train", "--epsilon", "3", "--no-progress"]
    assert main([*base, "--method", "scatter-linear", "--dataset", "adult"]) == 2
    assert "supports --dataset mnist, fashion-mnist, cifar10 or npz:PATH" in capsys.readouterr().err
    assert main([*base, "--method", "scatter-cnn", "--dataset", "mnist", "--architecture", "resnet"]) == 2
    assert "--architecture applies to --method dpsgd-cnn only" in capsys.readouterr().err
    assert main([*base, "--method", "scatter-linear", "--dataset", "mnist", "--classes", "0,1"]) == 2
    assert "on a built-in dataset" in capsys.readouterr().err
    assert main([*base, "--method", "dpsgd-cnn", "--dataset", "npz:x.npz"]) == 2
    assert "dpsgd-cnn supports --dataset mnist or fashion-mnist" in capsys.readouterr().err
    assert main(["train", "--method", "scatter-linear", "--dataset", "mnist"]) == 2
    assert "--epsilon is required" in capsys.readouterr().err


def test_scatter_on_user_images_not_images_is_refused(capsys, tmp_path):
    path = tmp_path / "rows.npz"
    np.savez(path, X=np.zeros((50, 6)), y=np.arange(50) % 2)
    code = main(["train", "--method", "scatter-linear", "--dataset", f"npz:{path}", "--classes", "0,1",
                 "--epsilon", "3", "--no-progress"])
    assert code == 2
    assert "need images, arrays of H x W or H x W x C" in capsys.readouterr().err
