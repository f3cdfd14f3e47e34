"""train, select and audit refuse bad options before any data is read (from a review): each error is one line,
exit 2, and no loader runs; settings a method cannot use are refused, never dropped. The values the estimators
check (epsilon, delta, l2, the DP-SGD settings) are checked by them alone, on the estimator the CLI builds from
its options before it reads the data (issue 33, Build 6)."""

from __future__ import annotations

import pytest

import privml.cli._audit_model
import privml.cli._audit_prediction
import privml.cli._select
import privml.cli._train
from tests.cli_runner import run


@pytest.fixture
def no_data(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("data read before the options were checked")

    # audit_model loads the audit's data, audit_prediction the prediction-service audit's
    for module in (privml.cli._train, privml.cli._select, privml.cli._audit_model, privml.cli._audit_prediction):
        monkeypatch.setattr(module, "load_dataset", refuse)
    return refuse


@pytest.fixture
def no_images(monkeypatch, no_data):
    """no_data, and no images read by the torch methods either (privml.torch._data.load_images' loader)."""
    pytest.importorskip("torch")
    import privml.torch._data

    monkeypatch.setattr(privml.torch._data, "load_dataset", no_data)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # --delta defaulted to 1e-5, so a given one could not be told apart and was ignored for the baseline.
        (["train", "--method", "nonprivate", "--dataset", "iris", "--delta", "1e-6"], "do not apply"),
        (["train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--seed", "-1"], "--seed"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--seed", "-1"], "--seed"),
        (["audit", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "4", "--seed", "-1"],
         "--seed"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--max-train", "1"], "--max-train must be >= 3"),
        (["audit", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "4", "--jobs", "-100"],
         "--jobs"),
        (["train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--out", ""], "--out is empty"),
    ],
)
def test_bad_options_are_refused_before_any_data_is_read(capsys, no_data, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


LINEAR = ["--dataset", "iris", "--epsilon", "1"]
TRAIN_CNN = ["train", "--dataset", "mnist", "--epsilon", "1", "--device", "cpu"]
AUDIT_CNN = ["audit", "--one-run", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", "--device", "cpu"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # Each was checked by the CLI too, before it built the estimator after the data: one check each now.
        (["train", "--method", "output", "--dataset", "iris", "--epsilon", "-1"], "epsilon must be > 0, got -1.0"),
        (["train", "--method", "output", "--bounds", "private", "--dataset", "csv:x.csv", "--epsilon", "-1"],
         "epsilon must be > 0, got -1.0"),  # --epsilon's value, before --bounds private splits it
        (["train", "--method", "output", *LINEAR, "--delta", "1"], "delta must be in [0, 1), got 1.0"),
        (["train", "--method", "dpsgd", *LINEAR, "--delta", "0"], "delta must be > 0"),
        (["train", "--method", "dpcd", *LINEAR, "--delta", "0"], "needs delta > 0, got 0"),
        (["train", "--method", "objective", *LINEAR, "--l2", "0"], "l2 must be > 0, got 0.0"),
        (["train", "--method", "dpsgd", *LINEAR, "--l2", "-1"], "l2 must be >= 0, got -1.0"),
        (["train", "--method", "dpsgd", *LINEAR, "--clip-norm", "0"], "clip_norm must be > 0"),
        (["train", "--method", "dpcd", *LINEAR, "--clip-norm", "-1"], "clip_norm must be > 0"),
        (["train", "--method", "dpsgd", *LINEAR, "--learning-rate", "0"], "learning_rate must be > 0"),
        (["audit", "--method", "dpsgd", *LINEAR, "--delta", "0", "--trials", "4"], "delta must be > 0"),
        (["audit", "--method", "output", *LINEAR, "--delta", "1", "--trials", "4"], "delta must be in [0, 1)"),
        (["audit", "--method", "dpsgd", *LINEAR, "--clip-norm", "0", "--trials", "4"], "clip_norm must be > 0"),
        (["audit", "--method", "dpsgd", *LINEAR, "--one-run", "--learning-rate", "-1"], "learning_rate must be > 0"),
        (["audit", "--method", "dpcd", *LINEAR, "--one-run", "--delta", "0"], "needs delta > 0"),
        (["audit", "--prediction-service", "--method", "prediction-sensitivity", *LINEAR, "--epsilon", "-1",
          "--queries", "10"], "epsilon_query must be > 0"),
        (["audit", "--prediction-service", "--method", "prediction-sensitivity", *LINEAR, "--queries", "2"],
         "queries must be >= 4"),
        (["audit", "--prediction-service", "--method", "subsample-aggregate", *LINEAR, "--queries", "10",
          "--n-models", "0"], "n_models must be >= 1"),
        (["audit", "--prediction-service", "--method", "subsample-aggregate", *LINEAR, "--queries", "10",
          "--jobs", "0"], "n_jobs must be a positive integer"),
        (["select", "--dataset", "iris", "--target-error", "2"], "target (a maximal error rate) must be in (0, 1)"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--min-epsilon", "-1"], "epsilon_min must be > 0"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--max-epsilon", "0.001"],
         "epsilon_max must be > epsilon_min"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--steps", "20000"], "n_steps must be <= 10,000"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--at-epsilon", "1e-320"], "too small"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--delta", "-1"], "delta must be in [0, 1)"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--l2", "-1"], "l2 must be > 0"),
    ],
)
def test_the_estimator_refuses_bad_values_before_any_data_is_read(capsys, no_data, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--epochs", "1e300"], "epochs=1e+300 gives at least"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--epochs", "0"], "epochs must be > 0"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--batch-size", "0"], "batch_size must be > 0"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--threads", "0"], "threads must be None or a positive integer"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--learning-rate", "-1"], "learning_rate must be > 0"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--clip-norm", "0"], "clip_norm must be > 0"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--delta", "0"], "delta must be > 0"),
        ([*TRAIN_CNN, "--method", "dpsgd-cnn", "--epsilon", "-2"], "epsilon must be > 0, got -2.0"),
        ([*TRAIN_CNN, "--method", "scatter-linear", "--epochs", "0"], "epochs must be > 0"),
        ([*TRAIN_CNN, "--method", "scatter-cnn", "--delta", "0"], "delta must be > 0"),
        ([*TRAIN_CNN, "--method", "scatter-linear", "--batch-size", "-3"], "batch_size must be > 0"),
        ([*AUDIT_CNN, "--epochs", "0"], "epochs must be > 0"),
        ([*AUDIT_CNN, "--batch-size", "0"], "batch_size must be > 0"),
        ([*AUDIT_CNN, "--threads", "0"], "threads must be None or a positive integer"),
        ([*AUDIT_CNN, "--delta", "0"], "delta must be > 0"),
    ],
)
def test_the_torch_estimator_refuses_bad_values_before_any_data_is_read(capsys, no_images, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_private_methods_still_default_delta(capsys):
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--seed", "0",
                         "--json")
    assert code == 0, err
    assert '"delta": 1e-05' in out


@pytest.mark.parametrize("command", ["train", "select"])
def test_a_leak_warning_is_printed_when_loading_then_fails(capsys, tmp_path, command):
    # The class set read from the labels warned, but the warning was dropped when loading failed, and the
    # error printed the inferred (private) class.
    data = tmp_path / "one.csv"
    data.write_text("x,label\n" + "".join(f"{i / 10},secretlabel\n" for i in range(10)))
    argv = ["--dataset", f"csv:{data}"]
    argv += ["--bounds", "unit"]
    argv += (["--method", "output", "--epsilon", "1"] if command == "train" else ["--target-error", "0.5"])
    code, out, err = run(capsys, command, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert lines[0].startswith("warning: PrivacyLeakWarning: ")
    assert "at least 2 classes, got 1" in lines[-1] and "secretlabel" not in lines[-1]


def test_an_npz_dataset_with_a_csv_test_file_says_what_is_wrong(capsys, tmp_path):
    import numpy as np

    np.savez(tmp_path / "d.npz", X=np.zeros((20, 2)), y=np.arange(20) % 2)
    (tmp_path / "t.csv").write_text("x0,x1,label\n0,0,1\n")
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", f"npz:{tmp_path / 'd.npz'}",
                         "--test", str(tmp_path / "t.csv"), "--epsilon", "1", "--classes", "0,1")
    assert code == 2 and out == ""
    assert "t.csv is not an .npz file" in err and "pickle" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [
    [*TRAIN_CNN, "--method", "dpsgd-cnn"],
    [*TRAIN_CNN, "--method", "scatter-linear"],
    [*AUDIT_CNN],
])
def test_the_torch_methods_max_train_is_refused_by_the_loader_alone(capsys, monkeypatch, argv):
    # The CLI's copy (check_cnn_settings) is gone: load_dataset checks it first, under load_images too.
    pytest.importorskip("torch")
    from privml.data import _loaders as loaders

    read = []
    monkeypatch.setattr(loaders, "_load_builtin", lambda *a, **k: read.append(a))
    code, out, err = run(capsys, *argv, "--max-train", "0")
    assert code == 2 and out == "" and read == []
    assert "max_train must be >= 1, got 0" in err and len(err.strip().splitlines()) == 1
