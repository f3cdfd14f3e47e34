"""`privml schema suggest`, and `--schema` through train, predict and serve, on breast_cancer in raw units."""

from __future__ import annotations

import csv
import json
import stat
from pathlib import Path

import pytest

from privml.io import read_model_file
from privml.serve._model import ModelSpec, open_served_model
from privml.serve._requests import RequestError
from privml.serve._service import PredictionService
from tests.cli_runner import run, run_json
from tests.data.raw_tables import breast_cancer_schema, write_raw_breast_cancer


@pytest.fixture
def patients(tmp_path: Path) -> Path:
    return write_raw_breast_cancer(tmp_path / "patients.csv")


def test_suggest_writes_the_data_derived_values_to_the_file_only(capsys, patients, tmp_path):
    out = tmp_path / "draft.toml"
    code, stdout, stderr = run(capsys, "schema", "suggest", str(patients), "--label-column", "outcome",
                               "--out", str(out), "--json")
    assert code == 0
    r = json.loads(stdout)
    assert set(r) == {"schema", "draft", "label_column", "columns", "next"}
    assert {"name": "site", "kind": "categorical"} in r["columns"] and len(r["columns"]) == 31
    # The data's own minimum and maximum of 'mean area', and the levels seen, are in the file only.
    for value in ("143.5", "2501.0", "east"):
        assert value not in stdout and value not in stderr
        assert value in out.read_text()
    assert stderr.startswith("warning: PrivacyLeakWarning: ") and len(stderr.strip().splitlines()) == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # as private as the data
    text = run(capsys, "schema", "suggest", str(patients), "--label-column", "outcome")[1]
    assert "patients.schema.toml" in text and "143.5" not in text  # the default path, beside the data
    # Never overwritten; a draft is refused by train until its values are replaced.
    code, _, err = run(capsys, "schema", "suggest", str(patients), "--label-column", "outcome", "--out", str(out))
    assert code == 2 and "exists" in err
    code, _, err = run(capsys, "train", "--method", "objective", "--dataset", f"csv:{patients}", "--schema",
                       str(out), "--epsilon", "1")
    assert code == 2 and "is a draft" in err and len(err.strip().splitlines()) == 1


def test_a_csv_without_bounds_is_refused_in_one_line(capsys, patients):
    code, out, err = run(capsys, "train", "--method", "objective", "--dataset", f"csv:{patients}", "--label-column",
                         "outcome", "--classes", "no,yes", "--epsilon", "1")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--schema FILE" in err and "privml schema suggest" in err and "--bounds unit" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bounds", "unit"], "give --schema or --bounds, not both"),
        (["--classes", "yes,no"], "differ from the schema's"),
        (["--label-column", "site"], "differs from the schema's 'outcome'"),
    ],
)
def test_schema_conflicts_are_refused(capsys, patients, tmp_path, extra, message):
    schema = breast_cancer_schema().save(tmp_path / "schema.toml")
    code, out, err = run(capsys, "train", "--method", "objective", "--dataset", f"csv:{patients}", "--schema",
                         str(schema), "--epsilon", "1", *extra)
    assert code == 2 and out == "" and message in err


def test_train_predict_and_serve_apply_the_schema(capsys, patients, tmp_path):
    schema = breast_cancer_schema().save(tmp_path / "schema.toml")
    model = tmp_path / "model.npz"
    r = run_json(capsys, "train", "--method", "objective", "--dataset", f"csv:{patients}", "--schema", str(schema),
                 "--epsilon", "5", "--l2", "0.01", "--seed", "0", "--out", str(model))
    assert r["n_features"] == 64 and r["epsilon"] == 5
    _, metadata = read_model_file(model)
    assert metadata["format_version"] == 2  # an older privml refuses it instead of ignoring the schema
    assert metadata["extra"]["schema"] == breast_cancer_schema().to_dict()

    # predict reads the raw CSV (label column from the schema, empty cells, an unseen site) through the schema.
    p = run_json(capsys, "predict", "--model", str(model), "--input", str(patients))
    assert p["n"] == 569 and set(p["labels"]) <= {"no", "yes"} and p["accuracy"] > 0.8

    refused = tmp_path / "refused.csv"
    rows = list(csv.reader(patients.open()))
    rows[3][rows[0].index("mean area")] = "huge"
    with refused.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    code, out, err = run(capsys, "predict", "--model", str(model), "--input", str(refused))
    assert code == 2 and out == ""
    assert "line 4, column 'mean area': the cell is not a number" in err and "huge" not in err

    served = open_served_model(ModelSpec(model))
    service = PredictionService(served.predictor, preprocess=served.preprocess, class_names=served.class_names)
    row = rows[1][:30] + ["south"]
    answer = service.predict(json.dumps({"rows": [row, [None] * 30 + ["west"]]}).encode())
    assert len(answer["labels"]) == 2 and set(answer["labels"]) <= {"no", "yes"}
    with pytest.raises(RequestError, match="rows have 3 values; the model expects 31"):
        service.predict(json.dumps({"rows": [[1, 2, "north"]]}).encode())
    strict = breast_cancer_schema(missing="refuse", unseen="refuse")
    metadata_free = PredictionService(served.predictor, preprocess=type(served.preprocess)(schema=strict, bias=0.5))
    with pytest.raises(RequestError, match="row 1, column 'site': the cell is not one of the schema's levels"):
        metadata_free.predict(json.dumps({"rows": [rows[1][:30] + ["west"]]}).encode())


def test_select_reads_a_csv_through_the_schema_or_refuses_it(capsys, patients, tmp_path):
    code, out, err = run(capsys, "select", "--dataset", f"csv:{patients}", "--target-error", "0.2")
    assert code == 2 and out == "" and "--schema FILE" in err
    schema = breast_cancer_schema().save(tmp_path / "schema.json")
    r = run_json(capsys, "select", "--dataset", f"csv:{patients}", "--schema", str(schema), "--target-error", "0.3",
                 "--at-epsilon", "1", "--seed", "0")
    assert r["n_train"] + r["n_validation"] == 455
