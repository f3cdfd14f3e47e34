"""`privml train` and `privml predict`: JSON contract, model files, user CSVs, errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from privml.data import load_dataset
from privml.io import read_model_file
from tests.cli_runner import run, run_json

KEYS = {"method", "dataset", "n_train", "n_test", "test_accuracy", "epsilon", "delta", "neighbouring"}


@pytest.mark.parametrize("method", ["output", "objective", "dpsgd", "dpcd"])
def test_train_on_digits_reports_the_contract(capsys, method):
    r = run_json(capsys, "train", "--method", method, "--dataset", "digits", "--epsilon", "10", "--delta", "1e-5",
                 "--seed", "0")
    assert KEYS <= set(r)
    assert r["method"] == method and r["dataset"] == "digits"
    assert r["n_train"] + r["n_test"] == 1797
    assert r["epsilon"] <= 10 + 1e-9 and r["delta"] <= 1e-5
    assert r["test_accuracy"] > 0.5  # chance is 0.1


@pytest.mark.parametrize(("method", "relation"), [("dpsgd", "zero-out"), ("output", "replace-one")])
def test_train_states_its_neighbouring_relation_exactly(capsys, method, relation):
    # DP-SGD's add/remove-one keeps n public (zero-out view) while n and the split are printed: the guarantee
    # is stated with the relation's exact wording, in JSON and in text (a review found only the short name).
    r = run_json(capsys, "train", "--method", method, "--dataset", "digits", "--epsilon", "3", "--seed", "0")
    assert relation in r["neighbouring_detail"]
    code, out, _ = run(capsys, "train", "--method", method, "--dataset", "digits", "--epsilon", "3", "--seed", "0")
    assert code == 0 and r["neighbouring_detail"] in out


def test_nonprivate_needs_no_epsilon(capsys):
    r = run_json(capsys, "train", "--method", "nonprivate", "--dataset", "digits")
    assert r["epsilon"] == "inf"  # JSON has no infinity: spelt as a string
    assert r["test_accuracy"] > 0.9


def test_model_file_round_trip_and_predict(capsys, tmp_path):
    model = tmp_path / "model.npz"
    r = run_json(capsys, "train", "--method", "dpsgd", "--dataset", "digits", "--epsilon", "3", "--seed", "1",
                 "--out", str(model))
    assert Path(r["model"]).exists()
    raw = load_dataset("digits", preprocess=False)
    rows = tmp_path / "rows.csv"
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f"x{i}" for i in range(64)] + ["label"])
        for x, y in zip(raw.X_test, raw.y_test):
            writer.writerow([*x.tolist(), int(y)])
    p = run_json(capsys, "predict", "--model", str(model), "--input", str(rows), "--proba")
    assert p["n"] == raw.X_test.shape[0]
    # The predictions reproduce the accuracy measured at training time.
    assert p["accuracy"] == pytest.approx(r["test_accuracy"], abs=1e-9)
    probs = np.asarray(p["probabilities"])
    assert probs.shape == (raw.X_test.shape[0], 10)
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert p["privacy"]["epsilon"] == pytest.approx(r["epsilon"])


def _write_csv(path: Path, n: int = 300, label: str = "label", seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b", "c", "d", label])
        for row, t in zip(X, y):
            writer.writerow([*row.tolist(), "yes" if t else "no"])


def test_train_on_user_csv_with_public_classes(capsys, tmp_path):
    data = tmp_path / "data.csv"
    _write_csv(data, label="outcome")
    r = run_json(capsys, "train", "--method", "objective", "--dataset", f"csv:{data}", "--bounds", "unit", "--label-column", "outcome",
                 "--classes", "no,yes", "--epsilon", "5", "--seed", "0")
    assert r["n_train"] == 240 and r["n_test"] == 60  # 80/20 split
    # The held-out rows of the user's data are private: their exact accuracy is not printed by default.
    assert "test_accuracy" not in r and "nonprivate" not in r


def test_show_nonprivate_prints_diagnostics_with_a_warning(capsys, tmp_path):
    data = tmp_path / "data.csv"
    _write_csv(data, label="outcome")
    code, out, err = run(capsys, "train", "--method", "objective", "--dataset", f"csv:{data}", "--bounds", "unit", "--label-column",
                         "outcome", "--classes", "no,yes", "--epsilon", "5", "--seed", "0", "--show-nonprivate",
                         "--json")
    assert code == 0
    r = json.loads(out)
    shown = r["nonprivate"]
    assert shown["test_accuracy"] > 0.7
    assert {"grad_norm", "iterations", "train_seconds"} <= set(shown)
    assert "test_accuracy" not in r  # only under "nonprivate"
    assert "NOT covered by the privacy guarantee" in err


def test_options_a_method_cannot_use_are_errors(capsys):
    code, _, err = run(capsys, "train", "--method", "nonprivate", "--dataset", "digits", "--epsilon", "1")
    assert code == 2 and "--epsilon and --delta do not apply" in err  # one message, as privml audit's


def test_dpcd_uses_the_l2_it_is_given(capsys, tmp_path):
    # DP-CD's ridge strength is l2 like every other method's (it was alpha, and --l2 was refused).
    out = tmp_path / "dpcd.npz"
    code, _, err = run(capsys, "train", "--method", "dpcd", "--dataset", "digits", "--epsilon", "1", "--l2", "0.5",
                       "--max-train", "300", "--seed", "0", "--out", str(out))
    assert code == 0, err
    _, metadata = read_model_file(out)
    assert metadata["params"]["l2"] == 0.5 and metadata["fit_info"]["l2"] == 0.5


def test_inferred_classes_warn_on_stderr(capsys, tmp_path):
    data = tmp_path / "data.csv"
    _write_csv(data)
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", f"csv:{data}", "--bounds", "unit", "--epsilon", "5",
                         "--json")
    assert code == 0
    assert "warning" in err.lower() and "classes" in err.lower()
    assert len(out.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ("--method", "output", "--dataset", "digits"),  # no epsilon
        ("--method", "output", "--dataset", "digits", "--epsilon", "0"),
        ("--method", "output", "--dataset", "digits", "--epsilon", "1", "--delta", "1"),
        ("--method", "output", "--dataset", "digits", "--epsilon", "nan"),
        ("--method", "magic", "--dataset", "digits", "--epsilon", "1"),
        ("--method", "output", "--dataset", "no-such-dataset", "--epsilon", "1"),
        ("--method", "output", "--dataset", "digits", "--epsilon", "1", "--label-column", "y"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv):
    code, out, err = run(capsys, "train", *argv, "--json")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_csv_without_the_label_column_is_a_clear_error(capsys, tmp_path):
    data = tmp_path / "data.csv"
    _write_csv(data, label="target")
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", f"csv:{data}", "--bounds", "unit", "--epsilon", "1",
                         "--classes", "no,yes", "--json")
    assert code == 2 and out == ""
    assert "label" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_bad_max_train_is_refused_by_the_loader_before_any_data_is_read(capsys, monkeypatch, value):
    # One layer checks it: load_dataset, first thing (the CLI has no copy); nothing is read, fitted or printed.
    from privml.data import _loaders as loaders

    read = []
    monkeypatch.setattr(loaders, "_load_builtin", lambda *a, **k: read.append(a))
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", "iris", "--epsilon", "1",
                         "--max-train", value)
    assert code == 2 and out == "" and read == []
    assert err == f"privml train: error: max_train must be >= 1, got {value}\n"


def test_missing_builtin_dataset_names_the_fix(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path))
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", "mnist", "--epsilon", "1", "--json")
    assert code == 2 and out == ""
    assert "privml datasets --fetch mnist" in err


@pytest.mark.parametrize("classes", ["", ",", "no,", "no,no", "yes"])
def test_bad_class_lists_are_refused_before_training(capsys, tmp_path, classes):
    data = tmp_path / "data.csv"
    _write_csv(data)
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", f"csv:{data}", "--bounds", "unit", "--classes", classes,
                         "--epsilon", "1")
    assert code == 2 and "--classes" in err and out == ""


def test_an_output_path_that_is_a_directory_is_refused_before_training(capsys, tmp_path):
    (tmp_path / "model.npz").mkdir()
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", "digits", "--epsilon", "1",
                         "--out", str(tmp_path / "model"))
    assert code == 2 and "is a directory" in err and "training" not in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, "train", "--method", "output", "--dataset", "digits", "--epsilon", "1",
                       "--out", str(blocker / "model.npz"))
    assert code == 2 and "is not a directory" in err


def test_an_out_path_that_is_a_directory_is_refused_before_training(capsys, tmp_path):
    # Checked before the .npz suffix is added: DIR would otherwise be written as DIR.npz.
    folder = tmp_path / "models"
    folder.mkdir()
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--out",
                         str(folder))
    assert code == 2 and "is a directory" in err and not (tmp_path / "models.npz").exists()
