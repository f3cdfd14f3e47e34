"""`privml study`: list, run (preset, spec file, csv: data), report, recommend; JSON contract and errors."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from tests.cli_runner import run, run_json

SPEC = """
name = "cli"
dataset = "digits"
methods = ["nonprivate", "output", "prediction-sensitivity"]
repeats = 1
public_size = 200
selection = "public"

[defaults]
epsilon = 1.0
delta = 0.0
budget = 10
n = 300
d = 8

[[sweeps]]
name = "epsilon"
parameter = "epsilon"
values = [0.5, 20.0]
"""


def test_list_presets(capsys):
    r = run_json(capsys, "study", "list")
    names = {p["name"] for p in r["presets"]}
    assert {"quick", "quick-ci", "paper-mnist-linear", "paper-cnn"} <= names
    assert all(p["runs"] > 0 for p in r["presets"])


def test_run_a_spec_file_then_report_and_recommend(capsys, tmp_path):
    spec = tmp_path / "cli.toml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    r = run_json(capsys, "study", "run", str(spec), "--out", str(out), "--no-progress")
    assert r["study"] == "cli" and r["finished"] == r["planned"] == 5 and r["failed"] == 0
    assert (out / "results.sqlite").is_file() and r["results"] == str(out / "results.sqlite")
    assert r["report"] == str(out / "report" / "index.html")
    # Resumed: nothing left to do.
    again = run_json(capsys, "study", "run", str(spec), "--out", str(out), "--no-progress", "--no-report")
    assert (again["skipped"], again["finished"], again["report"]) == (5, 0, None)

    report = run_json(capsys, "study", "report", str(out / "results.sqlite"), "--out", str(tmp_path / "r"))
    assert "<img" in (tmp_path / "r" / "index.html").read_text() and report["report"].endswith("index.html")

    rec = run_json(capsys, "study", "recommend", str(out), "--epsilon", "15", "--budget", "10")
    assert rec["method"] in ("output", "prediction-sensitivity")
    assert rec["measured_setting"]["epsilon"] == 20.0
    code, text, _ = run(capsys, "study", "recommend", str(out), "--epsilon", "0.5")
    assert code == 0 and "best method" in text


def test_run_on_a_user_csv(capsys, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    path = tmp_path / "mine.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"x{j}" for j in range(5)] + ["target"])
        writer.writerows([[*map(float, row), int(t)] for row, t in zip(X, y)])
    spec = tmp_path / "cli.toml"
    spec.write_text(SPEC.replace("n = 300\nd = 8", "n = 300\nd = 4").replace('public_size = 200', 'public_size = 100'))
    code, out, err = run(capsys, "study", "run", str(spec), "--out", str(tmp_path / "o"), "--dataset",
                         f"csv:{path}", "--label-column", "target", "--no-progress", "--json")
    # A CSV without public bounds is refused, as train refuses it, before anything is written.
    assert code == 2 and out == "" and "--schema FILE" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
    code, out, err = run(capsys, "study", "run", str(spec), "--out", str(tmp_path / "o"), "--dataset",
                         f"csv:{path}", "--label-column", "target", "--bounds", "unit", "--no-progress", "--json")
    r = json.loads(out)
    assert code == 0 and r["dataset"] == f"csv:{path}" and r["failed"] == 0 and r["finished"] == 5
    # The release rule's stated exception is said at the start: the store is for the data owner.
    assert "PrivacyLeakWarning" in err and "do not publish" in err
    # No public class set: read from the private labels, said once on stderr and noted in the report.
    assert "warning: PrivacyLeakWarning" in err and "class" in err.split("do not publish")[0]
    from privml.study._store import ResultStore

    notes = ResultStore(tmp_path / "o" / "results.sqlite").notes(json.loads(out)["spec_hash"])
    assert any("read from its private labels" in note for note in notes)
    assert "Private data: do not publish this report" in (tmp_path / "o" / "report" / "index.html").read_text()
    code, out, err = run(capsys, "study", "recommend", str(tmp_path / "o"), "--epsilon", "1", "--json")
    assert code == 0 and json.loads(out)["private_data"] is True and "do not publish" in err
    code, out, err = run(capsys, "study", "run", str(spec), "--out", str(tmp_path / "o2"), "--dataset",
                         f"csv:{path}", "--label-column", "target", "--classes", "0,1", "--bounds", "unit",
                         "--no-progress", "--json")
    assert code == 0 and json.loads(out)["failed"] == 0
    assert "label" not in err.lower().split("do not publish")[0].replace("--label", "")  # no class-set warning
    code, _, err = run(capsys, "study", "run", str(spec), "--out", str(tmp_path / "o3"), "--classes", "0,1")
    assert code == 2 and "classes applies to csv:/npz: datasets only" in err


def test_run_only_some_sweeps_then_resume_the_rest(capsys, tmp_path):
    spec = tmp_path / "cli.toml"
    spec.write_text(SPEC + '\n[[sweeps]]\nname = "budget"\nparameter = "budget"\nvalues = [1, 100]\n')
    out = tmp_path / "o"
    part = run_json(capsys, "study", "run", str(spec), "--out", str(out), "--sweeps", "budget", "--no-progress",
                    "--no-report")
    # budget = 1 and 100: prediction sensitivity twice, the training methods once each (B does not matter).
    assert part["failed"] == 0 and part["finished"] == part["planned"] == 4
    full = run_json(capsys, "study", "run", str(spec), "--out", str(out), "--no-progress", "--no-report")
    assert full["skipped"] == 4 and full["finished"] == full["planned"] - 4
    code, _, err = run(capsys, "study", "run", str(spec), "--out", str(out), "--sweeps", "nope")
    assert code == 2 and "nope not in study cli (its sweeps: epsilon, budget)" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["study", "run", "no-such-preset", "--out", "x"], "neither a preset"),
        (["study", "run", "quick", "--out", "x", "--jobs", "0"], "--jobs must be >= 1"),
        (["study", "run", "quick", "--out", "x", "--executor", "ray://h"], "unknown executor"),
        (["study", "run", "quick", "--out", "x", "--label-column", "y"], "--label-column applies to"),
        (["study", "report", "/nonexistent/results.sqlite", "--out", "x"], "does not exist"),
        (["study", "run", "quick"], "the following arguments are required: --out"),
        (["study", "run", "quick", "--out", "x", "--device", "cpu"], "applies to the CNN methods"),
        (["study", "run", "quick", "--out", "x", "--device", "tpu"], "device must be 'auto', 'cpu'"),
    ],
)
def test_errors_are_one_line_with_status_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_readmes_own_data_command_runs_on_a_csv(capsys, tmp_path):
    # README and guide: `privml study run own-data --dataset csv:mydata.csv --schema schema.toml`.
    # Its earlier form with quick failed every run (quick's k = 10 is MNIST's); it is now refused in one line.
    from sklearn.datasets import load_breast_cancer

    from privml.data._bundled import BREAST_CANCER_BOUNDS
    from privml.data._schema import Label, Numeric, Schema

    data = load_breast_cancer()
    schema = Schema(columns=tuple(Numeric(name=f"f{i}", lower=lo, upper=hi)
                                  for i, (lo, hi) in enumerate(BREAST_CANCER_BOUNDS)),
                    label=Label(column="label", classes=("no", "yes"))).save(tmp_path / "schema.toml")
    path = tmp_path / "mydata.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f"f{i}" for i in range(data.data.shape[1])] + ["label"])
        for x, y in zip(data.data, data.target, strict=True):
            writer.writerow([*x.tolist(), ("no", "yes")[y]])
    common = ["--dataset", f"csv:{path}", "--schema", str(schema), "--no-progress"]
    code, _, err = run(capsys, "study", "run", "quick", *common, "--out", str(tmp_path / "quick"))
    assert code == 2 and "k = 10 classes, but the class set has 2" in err and "own-data" in err
    assert not (tmp_path / "quick").exists()
    r = run_json(capsys, "study", "run", "own-data", *common, "--repeats", "1", "--sweeps", "epsilon", "budget",
                 "--out", str(tmp_path / "mine"))
    assert r["failed"] == 0 and r["finished"] == r["planned"] > 0
