"""`privml predict`: input is read and checked before a ledger is opened; the label column is never dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from privml.cli.main import main
from privml.data import load_dataset
from privml.io import save_model
from privml.prediction import SubsampleAndAggregate
from tests.cli_runner import run, run_json

HEADER = "a,b,c,d,label\n"
GOOD = "5.1,3.5,1.4,0.2,0\n6.3,3.3,6.0,2.5,2\n"


def expect_error(capsys, *argv: str, match: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "Traceback" not in err and match in err, err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Iris model files as `privml train --out` writes them (raw columns in), and two good rows."""
    tmp = tmp_path_factory.mktemp("predict")
    out = {}
    for method in ("nonprivate", "output"):
        path = tmp / f"{method}.npz"
        extra = ["--epsilon", "1"] if method == "output" else []
        assert main(["train", "--method", method, "--dataset", "iris", "--seed", "0", *extra, "--out", str(path)]) == 0
        out[method] = str(path)
    data = load_dataset("iris", bias=0.5)
    sa = SubsampleAndAggregate(n_models=5, epsilon=1.0, budget=10, classes=range(3), random_state=0)
    extra = {"dataset": data.info.to_dict(), "bias": 0.5}
    out["sa"] = str(save_model(sa.fit(data.X_train, data.y_train), tmp / "sa.npz", extra=extra))
    good = tmp / "good.csv"
    good.write_text(HEADER + GOOD)
    out["good"] = str(good)
    return out


BAD_INPUT = {
    "missing": (None, "input file not found"),
    "wrong width": ("a,b,c,d,e,label\n1,2,3,4,5,0\n", "5 feature columns (a, b, c, d, e; no --label-column)"),
    "unknown label column": (HEADER + GOOD, "--label-column 'nosuch' is not a column"),
    "nan": (HEADER + "5.1,nan,1.4,0.2,0\n", "NaN or infinite"),
    "ragged": (HEADER + "5.1,3.5,1.4,0.2,0\n5.1,3.5\n", ":3: expected 5 cells, got 2"),
    # The column is named (never the cell); a label column is present, so no --label-column hint.
    "non-numeric": (HEADER + "5.1,x,1.4,0.2,0\n", ":2: column 'b' holds a value that is not a number\n"),
    # No label column: a text column may be the labels (a review: the message named neither column nor remedy).
    "labels elsewhere": ("a,b,c,d,my outcome\n5.1,3.5,1.4,0.2,setosa\n",
                         "column 'my outcome' holds a value that is not a number; if 'my outcome' holds the labels, "
                         "pass --label-column 'my outcome'"),  # quoted for the shell
    # An empty cell is a missing value, not labels; and its line is the file's (the blank line counted).
    "empty cell": (HEADER + "5.1,3.5,1.4,0.2,0\n\n5.1,,1.4,0.2,0\n", ":4: column 'b' has an empty cell (a missing value)\n"),
    "over the budget": (HEADER + GOOD * 3, "6 rows need 6 answers, more than the whole budget of 5"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_binds_no_budget_in_the_ledger(capsys, files, tmp_path, case):
    # Refused after the ledger was opened, a budget of 5 was bound for good and the corrected command refused.
    text, match = BAD_INPUT[case]
    rows = tmp_path / "rows.csv"
    if text is not None:
        rows.write_text(text)
    ledger = tmp_path / "bind.sqlite"
    private = ("--epsilon", "1", "--ledger", str(ledger))
    label = ["--label-column", "nosuch"] if case == "unknown label column" else []
    expect_error(capsys, "predict", "--model", files["nonprivate"], "--input", str(rows), *private, "--budget", "5",
                 *label, match=match)
    assert not ledger.exists()
    result = run_json(capsys, "predict", "--model", files["nonprivate"], "--input", files["good"], *private,
                      "--budget", "50")
    assert result["budget"] == {"budget": 50, "spent": 2, "remaining": 48}


def test_proba_of_a_labels_only_file_binds_no_budget(capsys, files, tmp_path):
    ledger = tmp_path / "sa.sqlite"
    expect_error(capsys, "predict", "--model", files["sa"], "--input", files["good"], "--proba", "--ledger",
                 str(ledger), match="--proba is not available: subsample-and-aggregate releases labels only")
    assert not ledger.exists()
    result = run_json(capsys, "predict", "--model", files["sa"], "--input", files["good"], "--ledger", str(ledger))
    assert result["budget"]["spent"] == 2


def test_a_row_shorter_than_the_label_column_is_one_line(capsys, files, tmp_path):
    # The label cell was indexed before the row's length was checked: an IndexError traceback.
    rows = tmp_path / "ragged.csv"
    rows.write_text(HEADER + "5.1,3.5,1.4,0.2,0\n5.1,3.5\n")
    expect_error(capsys, "predict", "--model", files["output"], "--input", str(rows), match=":3: expected 5 cells")


@pytest.mark.parametrize(("column", "match"), [
    ("nosuch", "--label-column 'nosuch' is not a column of"),
    ("", "--label-column must name a column"),
    # A feature named as the label leaves three feature columns for a four-column pipeline: said in one line.
    ("a", "gives 3 feature columns (b, c, d; --label-column 'a'), which the model's preprocessing does not accept"),
])
def test_a_label_column_that_cannot_be_used_is_an_error(capsys, files, tmp_path, column, match):
    rows = tmp_path / "features.csv"
    rows.write_text("a,b,c,d\n5.1,3.5,1.4,0.2\n")
    expect_error(capsys, "predict", "--model", files["output"], "--input", str(rows), "--label-column", column,
                 match=match)


def test_the_label_column_is_used_when_given_or_named_label(capsys, files, tmp_path):
    assert "accuracy" in run_json(capsys, "predict", "--model", files["output"], "--input", files["good"])
    rows = tmp_path / "truth.csv"
    rows.write_text(Path(files["good"]).read_text().replace("label", "truth"))
    given = run_json(capsys, "predict", "--model", files["output"], "--input", str(rows), "--label-column", "truth")
    assert "accuracy" in given and given["n"] == 2


def test_an_empty_ledger_name_is_refused_before_the_ledger_is_opened(capsys, files, tmp_path):
    # It was read as 'default', a budget the user did not name.
    ledger = tmp_path / "l.sqlite"
    expect_error(capsys, "predict", "--model", files["nonprivate"], "--input", files["good"], "--epsilon", "1",
                 "--budget", "5", "--ledger", str(ledger), "--ledger-name", "", match="ledger name must be a non-empty")
    assert not ledger.exists()


@pytest.mark.parametrize("ledger", [":memory:", "file:led.sqlite?nolock=1"])
def test_an_in_memory_or_uri_ledger_is_one_line(capsys, files, tmp_path, monkeypatch, ledger):
    # From a review: these opened an SQLite in-memory database (restarting at zero every run) or a URI without
    # locking, reported as a budget "shared across runs and servers".
    monkeypatch.chdir(tmp_path)
    expect_error(capsys, "predict", "--model", files["nonprivate"], "--input", files["good"], "--epsilon", "1",
                 "--budget", "5", "--ledger", ledger, match="--ledger")
    assert list(tmp_path.iterdir()) == []
