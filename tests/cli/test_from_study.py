"""From study to model (issue 32, item 3): recommend's recipe, train --from-study, train --neighbouring."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from privml.study import ResultStore, collect, load_spec, run_study
from privml.study._recommend import most_common_choice
from tests.cli_runner import run, run_json
from tests.data.raw_tables import breast_cancer_schema, write_raw_breast_cancer

SPEC = """name = "mine"
dataset = "csv:{csv}"
schema = "{schema}"
methods = [{methods}]
repeats = 3
public_size = 1
[defaults]
epsilon = 3.0
delta = 1e-5
budget = 10
[selection]
mode = "validation"
[selection.grids]
{grids}
[[sweeps]]
name = "epsilon"
parameter = "epsilon"
values = [3.0]
"""


GRIDS = {"dpsgd": "dpsgd = { clip_norm = [0.1, 0.5] }", "prediction-sensitivity":
         "prediction-sensitivity = { l2 = [1e-3, 1e-2] }"}


def _study(folder: Path, methods: str) -> Path:
    csv = write_raw_breast_cancer(folder / "patients.csv")
    schema = breast_cancer_schema().save(folder / "schema.toml")
    spec = folder / "mine.toml"
    spec.write_text(SPEC.format(csv=csv, schema=schema, methods=methods,
                                grids="\n".join(g for name, g in GRIDS.items() if f'"{name}"' in methods)))
    outcome = run_study(load_spec(spec), folder / "o", progress=False, report=False)
    assert outcome.failed == 0
    return folder / "o"


@pytest.fixture(scope="module")
def dpsgd_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the study's "do not publish" warning
        return _study(tmp_path_factory.mktemp("from-study"), '"nonprivate", "dpsgd"')


def test_recommend_gives_the_hyper_parameters_relation_and_commands(capsys, dpsgd_study):
    r = run_json(capsys, "study", "recommend", str(dpsgd_study), "--epsilon", "3")
    results = collect(ResultStore(dpsgd_study / "results.sqlite", read_only=True))
    cell = next(c for curve in results.curves["epsilon"] if curve.method == "dpsgd" for c in curve.cells)
    assert r["method"] == "dpsgd" and r["neighbouring"] == "replace-one"
    assert r["hyper_parameters"] == most_common_choice(cell.chosen) and set(r["hyper_parameters"]) == {"clip_norm"}
    assert r["command"] == f"privml train --from-study {dpsgd_study} --epsilon 3 --delta 1e-05 --out model.npz"
    assert "--method dpsgd" in r["explicit_command"] and "--neighbouring replace-one" in r["explicit_command"]
    assert f"--clip-norm {r['hyper_parameters']['clip_norm']:g}" in r["explicit_command"]
    assert "--schema" in r["explicit_command"]


def test_train_from_study_reproduces_the_studys_run_and_writes_a_model_predict_reads(capsys, dpsgd_study, tmp_path):
    store = ResultStore(dpsgd_study / "results.sqlite", read_only=True)
    runs = [r for r in store.records() if r["method"] == "dpsgd"]
    chosen = most_common_choice(tuple(r["selection"]["chosen"] for r in runs))
    same = next(r for r in runs if r["selection"]["chosen"] == chosen)
    model = tmp_path / "model.npz"
    code, out, err = run(capsys, "train", "--from-study", str(dpsgd_study), "--epsilon", "3", "--seed",
                         str(same["seed"]), "--out", str(model), "--json", "--show-nonprivate")
    assert code == 0, err
    r = json.loads(out)
    # The repeat's own seed, data and hyper-parameters: the study's run itself, under its relation.
    assert r["nonprivate"]["test_accuracy"] == same["accuracy"]
    assert r["neighbouring"] == "replace-one" and r["hyper_parameters"] == chosen
    assert abs(r["epsilon"] - 3.0) < 0.01 and "PrivacyLeakWarning" in err  # the leaky validation choice is said
    # Without --show-nonprivate no exact accuracy on the private test split is printed.
    quiet = run_json(capsys, "train", "--from-study", str(dpsgd_study), "--epsilon", "3", "--seed", "1")
    assert "test_accuracy" not in json.dumps(quiet) and "study_accuracy" not in json.dumps(quiet)
    patients = dpsgd_study.parent / "patients.csv"
    p = run_json(capsys, "predict", "--model", str(model), "--input", str(patients))
    assert p["n"] == 569 and set(p["labels"]) <= {"no", "yes"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "dpsgd"], "--method cannot be given with --from-study"),
        (["--l2", "0.1"], "--l2 cannot be given with --from-study"),
        ([], "needs --epsilon"),
        (["--epsilon", "1"], "the study measured no run at epsilon = 1"),
    ],
)
def test_from_study_refusals_are_one_line(capsys, dpsgd_study, extra, message):
    code, out, err = run(capsys, "train", "--from-study", str(dpsgd_study), *extra)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_a_private_prediction_method_is_served_not_trained(capsys, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = _study(tmp_path, '"prediction-sensitivity"')
    r = run_json(capsys, "study", "recommend", str(study), "--epsilon", "3")
    assert r["method"] == "prediction-sensitivity" and "command" not in r
    assert r["serve"][0].startswith("privml train --method nonprivate") and "--l2" in r["serve"][0]
    assert r["serve"][1].startswith("privml serve --model model.npz --method prediction-sensitivity --epsilon 3")
    code, out, err = run(capsys, "train", "--from-study", str(study), "--epsilon", "3")
    assert code == 2 and "does not write; serve it with: privml train --method nonprivate" in err


def test_train_states_dpsgds_relation(capsys, tmp_path):
    args = ["train", "--dataset", "breast_cancer", "--epsilon", "1", "--seed", "0"]
    assert run_json(capsys, *args, "--method", "dpsgd")["neighbouring"] == "add/remove-one"
    r = run_json(capsys, *args, "--method", "dpsgd", "--neighbouring", "replace-one", "--clip-norm", "0.5")
    assert r["neighbouring"] == "replace-one"
    code, _, err = run(capsys, *args, "--method", "objective", "--neighbouring", "replace-one")
    assert code == 2 and "--neighbouring applies to --method dpsgd only" in err
    code, _, err = run(capsys, *args, "--method", "objective", "--clip-norm", "0.5")
    assert code == 2 and "--clip-norm applies to --method dpsgd-cnn and the scatter-* methods only" in err


def test_select_out_saves_the_model_it_selected(capsys, tmp_path):
    patients = write_raw_breast_cancer(tmp_path / "patients.csv")
    schema = breast_cancer_schema().save(tmp_path / "schema.toml")
    model = tmp_path / "selected.npz"
    r = run_json(capsys, "select", "--dataset", f"csv:{patients}", "--schema", str(schema), "--target-error", "0.3",
                 "--at-epsilon", "1", "--seed", "0", "--out", str(model))
    assert r["model"] == str(model) and model.is_file()
    from privml.io import read_model_file

    _, metadata = read_model_file(model)
    assert "schema" in metadata["extra"] and metadata["method"] == "accuracy-first"
    p = run_json(capsys, "predict", "--model", str(model), "--input", str(patients))
    assert p["n"] == 569 and set(p["labels"]) <= {"no", "yes"}
    # The model file's guarantee is the search's ex-post one.
    served = run_json(capsys, "predict", "--model", str(model), "--input", str(patients))
    assert served["labels"] == p["labels"]  # a private model's predictions are post-processing: no fresh noise
    code, out, err = run(capsys, "select", "--dataset", "iris", "--target-error", "0.3", "--out", str(tmp_path))
    assert code == 2 and out == "" and "is a directory" in err
