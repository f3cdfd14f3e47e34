"""`privml train --bounds private[:FRACTION]`: ranges from DP quantiles, charged to --epsilon and stated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privml.io import read_model_file
from tests.cli_runner import run, run_json
from tests.data.raw_tables import write_raw_breast_cancer

COLUMNS = ("dose_mg", "weight_kg", "score")


def _write(path: Path, n: int, seed: int = 0) -> Path:
    """Numeric columns on very different scales (thousands, tens, below 1); the label depends on all three."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(2000.0, 400.0, n), rng.normal(70.0, 12.0, n), rng.uniform(0.0, 0.5, n)])
    z = (X[:, 0] - 2000.0) / 400.0 - (X[:, 1] - 70.0) / 12.0 + (X[:, 2] - 0.25) / 0.15
    lines = [",".join([*COLUMNS, "outcome"])]
    lines += [",".join([f"{v:.4f}" for v in row] + ["yes" if t > 0 else "no"]) for row, t in zip(X, z)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return _write(tmp_path / "d.csv", 4000)


def _train(capsys, data: Path, *extra: str) -> dict:
    return run_json(capsys, "train", "--method", "objective", "--dataset", f"csv:{data}", "--label-column",
                    "outcome", "--classes", "no,yes", "--seed", "0", *extra)


def test_the_total_and_the_split_are_stated_and_saved(capsys, table, tmp_path):
    model = tmp_path / "m.npz"
    r = _train(capsys, table, "--bounds", "private", "--epsilon", "4", "--out", str(model), "--show-nonprivate")
    assert r["epsilon"] == 4.0 and r["delta"] == 1e-5 and r["neighbouring"] == "replace-one"
    assert r["accountant"] == "basic(private bounds, single-release)"
    split = r["privacy_split"]
    assert split["bounds"]["epsilon"] == 1.0 and split["bounds"]["delta"] == 0.0  # the default quarter
    assert split["model"]["epsilon"] == 3.0 and "exponential-mechanism" in split["bounds"]["mechanism"]
    assert list(r["private_bounds"]) == list(COLUMNS)
    lower, upper = r["private_bounds"]["dose_mg"]
    assert 1000.0 < lower < 2000.0 < upper < 3000.0  # near the 5% and 95% quantiles (1342, 2658)
    # Far better than the majority class (about half): the columns were brought to one scale.
    assert r["nonprivate"]["test_accuracy"] > 0.75
    _, metadata = read_model_file(model)
    assert metadata["privacy"]["epsilon"] == 4.0
    assert metadata["extra"]["privacy_split"] == split
    saved = {c["name"]: [c["lower"], c["upper"]] for c in metadata["extra"]["schema"]["columns"]}
    assert saved == r["private_bounds"]  # predict and serve apply the released ranges
    code, out, err = run(capsys, "predict", "--model", str(model), "--input", str(table), "--json")
    assert code == 0, err


def test_the_fraction_is_the_users(capsys, table):
    r = _train(capsys, table, "--bounds", "private:0.5", "--epsilon", "2")
    assert (r["privacy_split"]["bounds"]["epsilon"], r["privacy_split"]["model"]["epsilon"]) == (1.0, 1.0)
    r = run_json(capsys, "train", "--method", "dpsgd", "--dataset", f"csv:{table}", "--label-column", "outcome",
                 "--classes", "no,yes", "--seed", "0", "--bounds", "private", "--epsilon", "2")
    assert r["neighbouring"] == "add/remove-one"  # the ranges hold under both relations: stated under the model's
    assert r["epsilon"] == pytest.approx(0.5 + r["privacy_split"]["model"]["epsilon"])


def test_too_few_rows_for_the_budget_warn_before_the_model(capsys, tmp_path):
    data = _write(tmp_path / "small.csv", 300)
    code, out, err = run(capsys, "train", "--method", "objective", "--dataset", f"csv:{data}", "--label-column",
                         "outcome", "--classes", "no,yes", "--bounds", "private", "--epsilon", "1", "--seed", "0")
    assert code == 0
    warning = [line for line in err.splitlines() if line.startswith("warning: private bounds")]
    assert len(warning) == 1 and "majority class" in warning[0] and "240 rows" in warning[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bounds", "private", "--method", "nonprivate"], "non-private baseline has none"),
        (["--bounds", "private:0", "--method", "objective", "--epsilon", "1"], "0 < FRACTION < 1"),
        (["--bounds", "private:1", "--method", "objective", "--epsilon", "1"], "0 < FRACTION < 1"),
        (["--bounds", "private:half", "--method", "objective", "--epsilon", "1"], "needs a number"),
        (["--bounds", "data", "--method", "objective", "--epsilon", "1"], "expected unit, private"),
    ],
)
def test_bad_requests_are_one_line_before_anything_is_read(capsys, tmp_path, argv, message):
    missing = tmp_path / "absent.csv"  # never opened: the options are refused first
    code, out, err = run(capsys, "train", "--dataset", f"csv:{missing}", "--classes", "no,yes", *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_npz_data_is_refused(capsys, tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, X=np.zeros((10, 2)), y=np.arange(10) % 2)
    code, _, err = run(capsys, "train", "--method", "objective", "--dataset", f"npz:{path}", "--bounds", "private",
                       "--epsilon", "1")
    assert code == 2 and "csv: datasets only" in err


def test_categorical_columns_still_need_public_levels(capsys, tmp_path):
    data = write_raw_breast_cancer(tmp_path / "patients.csv")  # has a categorical column, 'site'
    code, out, err = run(capsys, "train", "--method", "objective", "--dataset", f"csv:{data}", "--label-column",
                         "outcome", "--classes", "no,yes", "--bounds", "private", "--epsilon", "1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "is not a number" in err and "schema naming its public levels" in err


def test_select_refuses_them_in_one_line(capsys, table):
    code, out, err = run(capsys, "select", "--dataset", f"csv:{table}", "--label-column", "outcome", "--classes",
                         "no,yes", "--target-error", "0.2", "--bounds", "private")
    assert code == 2 and out == "" and "select needs --schema" in err and len(err.strip().splitlines()) == 1
