"""`privml audit --model FILE`: train -> file -> audit runs the file's settings; what it cannot audit is one line.

Also the data of the options' run: a raw CSV is audited through --schema / --bounds as train reads it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from privml.cli._common import BIAS
from privml.io import load_model, read_model_metadata
from tests.cli_runner import TrainedFile, run, run_json, train
from tests.data.raw_tables import breast_cancer_schema, write_raw_breast_cancer

#: Settings that are not the method's: the seed (never stored in a file) and where a CNN runs.
MACHINE = {"random_state", "device", "progress", "threads"}


def plain(params: dict) -> dict:
    """Settings compared across a file and an estimator: lists (JSON) as tuples, machine settings left out."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items() if k not in MACHINE}


@pytest.fixture
def spy(monkeypatch):
    """Records the estimator and data each audit is given (linear one-run, multi-run, torch one-run), then runs it."""
    from privml.audit import _one_run_linear as one_run_linear
    from privml.audit import _one_run_torch as one_run_torch
    from privml.cli import _audit as audit
    from privml.cli import _audit_torch as audit_torch

    calls: list[dict] = []

    def recording(real):
        def call(estimator, X, y, **kwargs):
            calls.append({"estimator": estimator, "X": X, "y": y, **kwargs})
            return real(estimator, X, y, **kwargs)

        return call

    monkeypatch.setattr(audit, "linear_one_run_audit", recording(one_run_linear.linear_one_run_audit))
    monkeypatch.setattr(
        audit_torch, "torch_classifier_one_run_audit", recording(one_run_torch.torch_classifier_one_run_audit)
    )
    monkeypatch.setattr(audit, "audit_epsilon", recording(audit.audit_epsilon))
    return calls


@pytest.fixture(scope="module")
def patients(tmp_path_factory):
    """A raw-unit CSV (labels no/yes, a categorical column, empty cells) and its public schema."""
    folder = tmp_path_factory.mktemp("patients")
    return write_raw_breast_cancer(folder / "patients.csv"), breast_cancer_schema().save(folder / "schema.toml")


def test_a_dpsgd_file_is_audited_with_its_settings_relation_and_schema(capsys, spy, patients, train_file):
    csv, schema = patients
    model = train_file(
        "--method", "dpsgd", "--dataset", f"csv:{csv}", "--schema", str(schema), "--epsilon", "2", "--delta", "1e-6",
        "--clip-norm", "0.5", "--learning-rate", "0.3", "--neighbouring", "replace-one", "--seed", "0",
    )
    trained = model.report
    r = model.audit(capsys, "--dataset", f"csv:{csv}", "--one-run", "--canaries", "50", "--seed", "1")
    audited = spy[0]["estimator"]
    assert plain(audited.get_params()) == plain(load_model(trained["model"]).get_params())
    assert audited.clip_norm == 0.5 and audited.neighbouring == "replace-one"
    assert r["neighbouring"] == "replace-one" and r["delta"] == 1e-6 and r["method"] == "dpsgd"
    assert r["claimed_epsilon"] == pytest.approx(trained["epsilon"], rel=1e-2)
    assert r["model_file"] == trained["model"]
    # The rows went through the file's schema and bias, as training's did.
    from privml.data._loaders import load_dataset

    expected = load_dataset(f"csv:{csv}", schema=str(schema), bias=BIAS).X_train
    np.testing.assert_array_equal(spy[0]["X"], expected)
    # The multi-run audit takes the same settings.
    r = model.audit(
        capsys, "--dataset", f"csv:{csv}", "--trials", "4", "--n-train", "30", "--seed", "1", "--no-progress"
    )
    assert plain(spy[1]["estimator"].get_params()) == plain(audited.get_params())
    assert r["neighbouring"] == "replace-one"


@pytest.fixture(scope="module")
def iris_file(tmp_path_factory) -> TrainedFile:
    """An output-perturbation model of iris; the tests only read it, so they share one."""
    options = ("--method", "output", "--dataset", "iris", "--epsilon", "1.5", "--l2", "0.05", "--seed", "0")
    return train(tmp_path_factory.mktemp("iris") / "iris.npz", *options)


def test_a_built_in_file_is_audited_on_the_classes_it_was_trained_on(capsys, spy, iris_file):
    r = iris_file.audit(capsys, "--dataset", "iris", "--one-run", "--canaries", "30", "--seed", "0")
    assert spy[0]["estimator"].l2 == 0.05 and r["claimed_epsilon"] == 1.5 and r["neighbouring"] == "replace-one"
    assert sorted(set(spy[0]["y"].tolist())) == [0, 1, 2]  # every class, not the multi-run default of two
    r = iris_file.audit(capsys, "--dataset", "iris", "--trials", "4", "--seed", "0", "--no-progress")
    assert r["classes"] == read_model_metadata(iris_file.path)["extra"]["dataset"]["classes"]


def test_a_file_with_private_bounds_claims_the_model_s_part(capsys, spy, tmp_path, train_file):
    rng = np.random.default_rng(0)
    rows = rng.uniform([0, 1000], [50, 9000], size=(300, 2))
    csv = tmp_path / "measurements.csv"
    csv.write_text("a,b,label\n" + "".join(f"{a},{b},{'yes' if b > 5000 else 'no'}\n" for a, b in rows))
    model = train_file(
        "--method", "objective", "--dataset", f"csv:{csv}", "--bounds", "private", "--classes", "no,yes",
        "--epsilon", "2", "--seed", "0",
    )
    assert model.report["privacy_split"]["model"]["epsilon"] == pytest.approx(1.5)
    r = model.audit(capsys, "--dataset", f"csv:{csv}", "--one-run", "--canaries", "40", "--seed", "0")
    assert r["claimed_epsilon"] == pytest.approx(1.5)  # the run audited is the model's; the ranges are released
    assert np.all(np.linalg.norm(spy[0]["X"], axis=1) <= 1 + 1e-12)


def test_a_cnn_file_is_audited_with_its_settings(capsys, spy, cnn_file):
    trained = cnn_file.report
    r = cnn_file.audit(
        capsys, "--dataset", "mnist", "--one-run", "--max-train", "100", "--canaries", "20", "--threads", "1",
        "--device", "cpu", "--seed", "0", "--no-progress",
    )
    audited = spy[0]["estimator"]
    assert plain(audited.get_params()) == plain(load_model(trained["model"]).get_params())
    assert audited.threads == 1 and audited.device == "cpu"
    assert r["method"] == "dpsgd-cnn" and r["n_real"] == 100 and r["model_file"] == trained["model"]
    code, _, err = run(capsys, "audit", "--model", trained["model"], "--dataset", "mnist", "--trials", "4")
    assert code == 2 and "audit it with --one-run" in err


def _metadata_file(path, method: str, extra: dict | None = None, classes: list | None = None) -> str:
    """A model file holding metadata only: what the audit reads before it refuses (or audits) a file."""
    params = {"epsilon": 1.0} if classes is None else {"epsilon": 1.0, "classes": classes}
    metadata = {
        "format": "privml-model",
        "format_version": 1,
        "method": method,
        "params": params,
        "privacy": {},
        "fit_info": {},
        "extra": extra or {},
    }
    np.savez(path, __metadata__=np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8))
    return str(path)


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ("prediction-sensitivity", "a private prediction method"),
        ("subsample-aggregate", "a private prediction method"),
        ("nonprivate", "the non-private baseline (nonprivate)"),
        ("nonprivate-cnn", "the non-private baseline (nonprivate-cnn)"),
        ("accuracy-first", "an Accuracy First model"),
        ("dpcd-regressor", "is a regressor"),
        ("no-such-method", "unknown method"),
    ],
)
def test_files_it_cannot_audit_are_refused_in_one_line(capsys, tmp_path, method, message):
    path = _metadata_file(tmp_path / "m.npz", method)
    code, out, err = run(capsys, "audit", "--model", path, "--dataset", "iris", "--one-run")
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_real_baseline_file_is_refused(capsys, train_file):
    baseline = train_file("--method", "nonprivate", "--dataset", "iris")
    code, _, err = run(capsys, "audit", "--model", baseline.path, "--dataset", "iris", "--trials", "4")
    assert code == 2 and "claims no guarantee to audit" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--epsilon", "3"], "--epsilon cannot be given with --model: the model file fixes it"),
        (["--method", "output", "--delta", "0.1"], "--method, --delta cannot be given with --model"),
        (["--classes", "all"], "--classes cannot be given"),
        (["--bounds", "unit"], "--bounds cannot be given"),
        (["--clip-norm", "1", "--epochs", "2"], "--epochs, --clip-norm cannot be given with --model"),
        (["--device", "cpu"], "--device applies to --method dpsgd-cnn only"),
        (["--dataset", "wine"], "was trained on the classes ['setosa', 'versicolor', 'virginica']"),
        (["--dataset", "breast_cancer"], "--dataset has ['malignant', 'benign']"),
    ],
)
def test_options_the_file_fixes_and_other_data_are_refused(capsys, iris_file, extra, message):
    code, out, err = run(capsys, "audit", "--model", iris_file.path, "--dataset", "iris", "--one-run", *extra)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_features_and_preprocessing_must_match_the_file(capsys, tmp_path, patients):
    csv, schema = patients
    names = ["setosa", "versicolor", "virginica"]
    wide = _metadata_file(
        tmp_path / "wide.npz", "output", {"dataset": {"classes": names, "n_features": 65}, "bias": BIAS}
    )
    code, _, err = run(capsys, "audit", "--model", wide, "--dataset", "iris", "--one-run")
    assert code == 2 and "was trained on 65 features; --dataset gives 5" in err
    code, _, err = run(capsys, "audit", "--model", wide, "--dataset", "iris", "--max-train", "50", "--trials", "4")
    assert code == 2 and "--max-train applies to --one-run" in err
    unnamed = _metadata_file(tmp_path / "unnamed.npz", "output", {"dataset": {}, "bias": BIAS}, classes=[0, 1, 2, 3])
    code, _, err = run(capsys, "audit", "--model", unnamed, "--dataset", "iris", "--one-run")
    assert code == 2 and "was trained on 4 classes; --dataset has 3" in err
    bare = _metadata_file(tmp_path / "bare.npz", "output")
    code, _, err = run(capsys, "audit", "--model", bare, "--dataset", "iris", "--one-run")
    assert code == 2 and "does not record the data it was trained on" in err
    schema_file = _metadata_file(
        tmp_path / "s.npz", "output", {"dataset": {}, "schema": breast_cancer_schema().to_dict()}
    )
    code, _, err = run(capsys, "audit", "--model", schema_file, "--dataset", "iris", "--one-run")
    assert code == 2 and "give --dataset csv:PATH" in err
    code, _, err = run(capsys, "audit", "--model", wide, "--dataset", f"csv:{csv}", "--one-run")
    assert code == 2 and "was not trained through a schema or bounds" in err
    code, _, err = run(capsys, "audit", "--model", str(csv), "--dataset", "iris", "--one-run")
    assert code == 2 and "is not a privml model file" in err


# ------------------------------------------------------------------ the options' run reads a CSV as train does


def test_a_one_run_audit_reads_a_raw_csv_through_its_schema(capsys, spy, patients):
    csv, schema = patients
    r = run_json(
        capsys,
        "audit",
        "--one-run",
        "--method",
        "output",
        "--dataset",
        f"csv:{csv}",
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--canaries",
        "40",
        "--seed",
        "0",
    )
    from privml.data._loaders import load_dataset

    expected = load_dataset(f"csv:{csv}", schema=str(schema), bias=BIAS)
    np.testing.assert_array_equal(spy[0]["X"], expected.X_train)  # the rows train would fit on
    np.testing.assert_array_equal(spy[0]["y"], expected.y_train)
    assert r["n_real"] == expected.info.n_train and "model_file" not in r


def test_a_one_run_audit_of_unit_scaled_rows_and_what_it_refuses(capsys, spy, tmp_path, patients):
    rng = np.random.default_rng(1)
    rows = rng.uniform(-1, 1, size=(80, 3))
    csv = tmp_path / "unit.csv"
    csv.write_text("a,b,c,label\n" + "".join(f"{a},{b},{c},{int(a > 0)}\n" for a, b, c in rows))
    run_json(
        capsys,
        "audit",
        "--one-run",
        "--method",
        "dpsgd",
        "--dataset",
        f"csv:{csv}",
        "--bounds",
        "unit",
        "--epsilon",
        "1",
        "--clip-norm",
        "0.7",
        "--canaries",
        "20",
        "--seed",
        "0",
    )
    assert spy[0]["estimator"].clip_norm == 0.7  # train's --clip-norm, applied
    code, _, err = run(capsys, "audit", "--one-run", "--method", "dpsgd", "--dataset", f"csv:{csv}", "--epsilon", "1")
    assert code == 2 and "--schema FILE" in err and "--bounds unit" in err and "private" not in err
    code, _, err = run(
        capsys,
        "audit",
        "--one-run",
        "--method",
        "dpsgd",
        "--dataset",
        f"csv:{csv}",
        "--bounds",
        "private",
        "--epsilon",
        "1",
    )
    assert code == 2 and "--bounds private spends a part of epsilon" in err
    csv_file, schema = patients
    code, _, err = run(
        capsys,
        "audit",
        "--one-run",
        "--method",
        "output",
        "--dataset",
        f"csv:{csv_file}",
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--classes",
        "no,yes",
    )
    assert code == 2 and "--classes applies to built-in datasets" in err
