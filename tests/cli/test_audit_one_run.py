"""`privml audit --one-run`: JSON contract, user data, plot, one-line errors before any training."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli_runner import run


def test_one_run_prints_one_json_object(capsys):
    code, out, err = run(capsys, "audit", "--one-run", "--canaries", "100", "--method", "dpsgd", "--dataset",
                         "breast_cancer", "--epsilon", "2", "--seed", "0", "--json")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert r["audit"] == "one-run" and r["training_runs"] == 1 and r["m"] == 100
    assert r["neighbouring"] == "add/remove-one" and r["scores_from"] == "black-box"
    assert r["claimed_epsilon"] == pytest.approx(2.0, rel=1e-3) and not r["exceeds_claim"]
    assert r["n_train"] == r["n_real"] + 100
    assert "one training run" in err  # progress on stderr


def test_one_run_reads_user_files_and_plots(capsys, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (120, 3))
    path = tmp_path / "data.npz"
    np.savez(path, X=X, y=(X[:, 0] > 0).astype(int))
    plot = tmp_path / "scores.png"
    code, out, err = run(capsys, "audit", "--one-run", "--canaries", "50", "--method", "output", "--dataset",
                         f"npz:{path}", "--epsilon", "1", "--seed", "0", "--plot", str(plot), "--no-progress")
    assert code == 0, err
    assert "epsilon lower bound" in out and "replace-one" in out
    assert plot.stat().st_size > 0


def test_white_box_one_run_audits_dpsgd_with_dirac_canaries(capsys):
    code, out, err = run(capsys, "audit", "--one-run", "--white-box", "--canaries", "200", "--method", "dpsgd",
                         "--dataset", "digits", "--classes", "all", "--epsilon", "2", "--seed", "0", "--no-progress")
    assert code == 0, err
    assert "white-box: " in out and "dirac canaries" in out and "claimed curve (f-DP)" in out
    code, out, err = run(capsys, "audit", "--one-run", "--white-box", "--canaries", "200", "--method", "dpsgd",
                         "--dataset", "digits", "--classes", "all", "--epsilon", "2", "--seed", "0", "--json")
    r = json.loads(out)
    assert r["scores_from"] == "white-box" and r["canaries"] == "dirac" and r["m"] == 200
    assert r["claim_rejected"] is False and not r["exceeds_claim"] and r["steps"] >= 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--one-run", "--white-box", "--method", "dpsgd", "--epsilon", "1"], "need as many coordinates"),
        (["--one-run", "--white-box", "--method", "output", "--epsilon", "1"], "DP-SGD methods only"),
        (["--one-run", "--trials", "5", "--method", "output", "--epsilon", "1"], "--trials does not apply"),
        (["--canaries", "5", "--method", "output", "--epsilon", "1", "--trials", "5"], "one-run audits only"),
        (["--method", "output", "--epsilon", "1"], "--trials is required"),
        (["--one-run", "--canaries", "0", "--method", "output", "--epsilon", "1"], "--canaries must be >= 1"),
        (["--one-run", "--method", "output"], "--epsilon is required"),
        (["--one-run", "--method", "output", "--epsilon", "1", "--confidence", "1.5"], "--confidence"),
        (["--one-run", "--method", "output", "--epsilon", "1", "--plot", "x.nope"], "--plot"),
    ],
)
def test_one_run_bad_combinations_are_one_line_errors(capsys, extra, message):
    code, out, err = run(capsys, "audit", "--dataset", "breast_cancer", *extra)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
