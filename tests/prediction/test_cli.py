"""`privml predict` with private prediction: each row is one answer against the budget; errors exit 2."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from privml.cli.main import main
from privml.data import load_dataset
from privml.io import save_model
from privml.prediction import SubsampleAndAggregate
from tests.cli_runner import run, run_json


def expect_error(capsys, *argv: str, match: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and match in err, err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A non-private digits model trained by `privml train`, a subsample-and-aggregate file, and CSV rows."""
    tmp = tmp_path_factory.mktemp("cli")
    base = tmp / "base.npz"
    assert main(["train", "--method", "nonprivate", "--dataset", "digits", "--l2", "0.01", "--seed", "0",
                 "--out", str(base)]) == 0
    data = load_dataset("digits", bias=0.5)
    sa = SubsampleAndAggregate(n_models=5, epsilon=1.0, budget=10, classes=range(10), random_state=0)
    # The preprocessing travels with the model, as `privml train --out` records it.
    extra = {"dataset": data.info.to_dict(), "bias": 0.5}
    sa_path = save_model(sa.fit(data.X_train, data.y_train), tmp / "sa.npz", extra=extra)
    raw = load_dataset("digits", preprocess=False)
    rows = tmp / "rows.csv"
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f"x{i}" for i in range(64)] + ["label"])
        for x, y in zip(raw.X_test[:40], raw.y_test[:40]):
            writer.writerow([*x.tolist(), int(y)])
    return {"base": str(base), "sa": str(sa_path), "rows": str(rows)}


def test_prediction_sensitivity_charges_every_row(capsys, files):
    r = run_json(capsys, "predict", "--model", files["base"], "--input", files["rows"], "--method",
                 "prediction-sensitivity", "--epsilon", "1", "--delta", "1e-5", "--budget", "100", "--seed", "0")
    assert r["method"] == "prediction-sensitivity" and r["n"] == 40 and len(r["labels"]) == 40
    assert r["budget"] == {"budget": 100, "spent": 40, "remaining": 60}
    assert r["accountant"] == "gdp"
    assert r["privacy"] == {"epsilon": 1.0, "delta": 1e-5, "neighbouring": "replace-one", "accountant": "gdp",
                            "neighbouring_detail": "replace-one: same n, one record replaced by any other"}


def test_probabilities_come_from_the_same_answers(capsys, files):
    r = run_json(capsys, "predict", "--model", files["base"], "--input", files["rows"], "--epsilon", "1e6",
                 "--delta", "1e-5", "--budget", "40", "--proba", "--seed", "1")
    probs = np.asarray(r["probabilities"])
    assert probs.shape == (40, 10) and np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    # One charge per row although labels and probabilities are both released.
    assert r["budget"]["spent"] == 40
    assert [r["classes"][i] for i in probs.argmax(axis=1)] == r["labels"]
    assert r["accuracy"] > 0.8  # epsilon = 1e6: almost no noise


def test_a_batch_over_the_budget_is_refused_whole(capsys, files):
    err = expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], "--epsilon", "1",
                       "--budget", "39", match="budget exhausted")
    assert "nothing was answered" in err


def test_a_ledger_bounds_the_budget_across_runs(capsys, files, tmp_path):
    ledger = str(tmp_path / "budget.sqlite")
    argv = ("predict", "--model", files["base"], "--input", files["rows"], "--epsilon", "1", "--delta", "1e-5",
            "--budget", "100", "--ledger", ledger)
    assert run_json(capsys, *argv)["budget"] == {"budget": 100, "spent": 40, "remaining": 60}
    assert run_json(capsys, *argv)["budget"] == {"budget": 100, "spent": 80, "remaining": 20}
    # The third run of 40 rows would overspend the shared budget: refused whole.
    expect_error(capsys, *argv, match="budget exhausted")
    # The same ledger cannot be continued under another calibration.
    expect_error(capsys, *argv, "--epsilon", "2", match="ledger")


def test_a_seed_with_a_ledger_is_refused_before_anything_is_charged(capsys, files, tmp_path):
    # From a review: two seeded runs sharing a ledger drew the same noise, so the difference of their answers was
    # noise-free (a handful of runs recovered the non-private weights).
    ledger = tmp_path / "budget.sqlite"
    expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], "--epsilon", "1",
                 "--budget", "100", "--ledger", str(ledger), "--seed", "0", match="cannot be used with --ledger")
    assert not ledger.exists()


def test_subsample_and_aggregate_file(capsys, files):
    r = run_json(capsys, "predict", "--model", files["sa"], "--input", files["rows"], "--epsilon", "2",
                 "--budget", "50", "--seed", "0")
    assert r["method"] == "subsample-aggregate" and r["budget"]["spent"] == 40
    assert r["privacy"]["epsilon"] == 2.0
    expect_error(capsys, "predict", "--model", files["sa"], "--input", files["rows"], "--proba",
                 match="labels only")


def test_nonprivate_file_without_privacy_options_predicts_as_before(capsys, files):
    r = run_json(capsys, "predict", "--model", files["base"], "--input", files["rows"])
    assert r["method"] == "nonprivate" and "budget" not in r
    assert r["privacy"]["epsilon"] == "inf"


def test_private_models_refuse_a_budget(capsys, files, tmp_path):
    model = tmp_path / "output.npz"
    assert main(["train", "--method", "output", "--dataset", "digits", "--epsilon", "3", "--seed", "0",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    r = run_json(capsys, "predict", "--model", str(model), "--input", files["rows"])
    assert r["method"] == "output" and "budget" not in r
    expect_error(capsys, "predict", "--model", str(model), "--input", files["rows"], "--budget", "10",
                 match="cost no privacy")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--epsilon", "1"], "needs budget"),
        (["--budget", "10"], "needs epsilon"),
        (["--epsilon", "0", "--budget", "10"], "epsilon must be > 0"),
        (["--epsilon", "1", "--budget", "0"], "budget must be >= 1"),
        (["--epsilon", "1", "--budget", "10", "--delta", "1"], "delta must be in [0, 1)"),
        (["--epsilon", "1", "--budget", "10", "--accountant", "gdp"], "needs delta > 0"),
        (["--epsilon", "1", "--budget", "10", "--accountant", "magic"], "invalid choice"),
        (["--epsilon", "nan", "--budget", "10"], "not a finite number"),
        (["--epsilon", "1", "--budget", "2.5"], "not an integer"),
        (["--epsilon", "1", "--budget", "10", "--method", "subsample-aggregate"], "prediction-sensitivity only"),
        (["--epsilon", "1", "--budget", "10", "--method", "magic"], "invalid choice"),
    ],
)
def test_bad_private_options_exit_2_with_one_line(capsys, files, extra, match):
    expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], *extra, match=match)


def test_wrong_width_rows_are_refused_before_spending(capsys, files, tmp_path):
    rows = tmp_path / "narrow.csv"
    rows.write_text("a,b\n1,2\n")
    expect_error(capsys, "predict", "--model", files["sa"], "--input", str(rows), "--epsilon", "1",
                 "--budget", "5", match="features")


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_device_is_an_error_for_a_linear_file_before_any_ledger(capsys, files, tmp_path, device):
    # An option a method cannot use is an error, never dropped; refused before a ledger is opened.
    ledger = tmp_path / "l.sqlite"
    for private in ([], ["--epsilon", "1", "--budget", "10", "--ledger", str(ledger)]):
        expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], *private,
                     "--device", device, match="--device applies to CNN model files (dpsgd-cnn, scatter-*) only")
    expect_error(capsys, "predict", "--model", files["sa"], "--input", files["rows"], "--device", device,
                 match="holds a subsample-aggregate model")
    assert not ledger.exists()


def test_device_on_a_linear_file_does_not_import_torch(files):
    import subprocess
    import sys

    code = ("import sys; from privml.cli.main import main; "
            f"code = main(['predict', '--model', {files['base']!r}, '--input', {files['rows']!r}, '--device', 'cpu']); "
            "print(code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["2", "False"]


def test_help_lists_the_private_options(capsys):
    code, out, _ = run(capsys, "predict", "--help")
    assert code == 0
    for option in ("--method", "--epsilon", "--budget", "--accountant"):
        assert option in out
    assert "--accounting" not in out


def test_the_old_accounting_option_is_refused(capsys, files):
    expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], "--method",
                 "prediction-sensitivity", "--epsilon", "1", "--delta", "1e-5", "--budget", "100",
                 "--accounting", "basic", match="unrecognized arguments: --accounting")


def test_a_ledger_name_without_a_ledger_is_an_error(capsys, files):
    # Dropped, each run would count in a fresh in-memory budget under a name that suggests a shared one.
    expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], "--epsilon", "1",
                 "--budget", "100", "--ledger-name", "prod", match="--ledger-name names a budget inside --ledger")


@pytest.mark.parametrize("extra", [["--delta", "1e-5"], ["--accountant", "gdp"], ["--seed", "3"],
                                   ["--ledger-name", "prod"]])
def test_private_options_on_the_non_private_baseline_are_errors(capsys, files, extra):
    expect_error(capsys, "predict", "--model", files["base"], "--input", files["rows"], *extra, match=extra[0])


@pytest.mark.parametrize("extra", [["--seed", "3"], ["--delta", "0"], ["--accountant", "auto"]])
def test_private_options_on_a_privately_trained_file_are_errors(capsys, files, tmp_path, extra):
    model = tmp_path / "output.npz"
    assert main(["train", "--method", "output", "--dataset", "digits", "--epsilon", "3", "--seed", "0",
                 "--out", str(model)]) == 0
    capsys.readouterr()
    expect_error(capsys, "predict", "--model", str(model), "--input", files["rows"], *extra, match="cost no privacy")


def test_an_explicit_delta_0_asks_for_pure_dp(capsys, files, tmp_path):
    data = load_dataset("digits", bias=0.5)
    sa = SubsampleAndAggregate(n_models=5, epsilon=1.0, delta=1e-5, budget=50, classes=range(10), random_state=0)
    path = save_model(sa.fit(data.X_train, data.y_train), tmp_path / "sa-delta.npz",
                      extra={"dataset": data.info.to_dict(), "bias": 0.5})
    argv = ("predict", "--model", str(path), "--input", files["rows"], "--seed", "0")
    assert run_json(capsys, *argv)["privacy"]["delta"] == 1e-5  # not given: the file's
    r = run_json(capsys, *argv, "--delta", "0")
    assert r["privacy"]["delta"] == 0.0 and r["accountant"] == "basic"
    expect_error(capsys, *argv, "--delta", "0", "--accountant", "zcdp", match="delta")


def test_the_output_says_an_in_memory_budget_covers_this_run_only(capsys, files, tmp_path):
    argv = ("predict", "--model", files["base"], "--input", files["rows"], "--epsilon", "1", "--budget", "100")
    assert run_json(capsys, *argv)["budget_scope"].startswith("this run only")
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "this run only" in out
    shared = run_json(capsys, *argv, "--ledger", str(tmp_path / "l.sqlite"), "--ledger-name", "prod")
    assert shared["budget_scope"] == "ledger budget 'prod', shared across runs and servers"


def test_class_names_that_do_not_match_the_model_are_refused_before_any_answer_is_charged(capsys, files, tmp_path):
    # A file whose names list one class for a ten-class model: refused before the ledger is charged, not after.
    import sqlite3

    from privml.io import load_model, read_model_file

    model = load_model(files["base"])
    _, metadata = read_model_file(files["base"])
    extra = metadata["extra"]
    extra["dataset"]["classes"] = ["x"]
    crafted = save_model(model, tmp_path / "short-names.npz", extra=extra)
    ledger = tmp_path / "ledger.sqlite"
    expect_error(capsys, "predict", "--model", str(crafted), "--input", files["rows"], "--epsilon", "1", "--budget",
                 "100", "--ledger", str(ledger), match="names 1 classes but its model has 10")
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            tables = [name for (name,) in db.execute("select name from sqlite_master where type = 'table'")]
            for table in tables:
                assert "spent" not in [c[1] for c in db.execute(f"pragma table_info({table})")] or all(
                    row[0] in (0, None) for row in db.execute(f"select spent from {table}"))
