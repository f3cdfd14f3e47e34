"""`privml audit --prediction-service`: JSON contract, text report, option errors."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import run, run_json

BASE = ("audit", "--prediction-service", "--dataset", "breast_cancer", "--epsilon", "1", "--queries", "400",
        "--seed", "0", "--no-progress")


@pytest.mark.parametrize("method", ["prediction-sensitivity", "subsample-aggregate"])
def test_audit_prints_one_json_object(capsys, method):
    r = run_json(capsys, *BASE, "--method", method)
    assert r["audit"] == "prediction-service" and r["method"] == method
    assert r["claimed_epsilon"] == 1.0 and r["delta"] == 0.0 and r["neighbouring"] == "replace-one"
    assert 0 <= r["epsilon_lower_bound"] < 1.0 and not r["violated"]
    assert r["queries"] == r["trials_per_world"] == r["ledger_budget"] == 400
    assert r["ledger_spent"] == [400, 400] and r["answer_after_budget"] == ["refused", "refused"]
    assert r["epsilon_total"] == pytest.approx(400.0)
    assert r["n_train"] == 456 and r["classes"] == ["malignant", "benign"]  # 455 records and the canary


def test_options_reach_the_audit_and_a_seed_reproduces_it(capsys):
    argv = (*BASE, "--method", "subsample-aggregate", "--n-models", "5", "--query", "canary", "--canary", "random")
    first, second = run_json(capsys, *argv), run_json(capsys, *argv)
    assert first["n_models"] == 5 and first["query"] == "canary" and first["canary"] == "random"
    assert first["epsilon_lower_bound"] == second["epsilon_lower_bound"] and first["auc"] == second["auc"]
    small = run_json(capsys, *BASE, "--method", "prediction-sensitivity", "--n-train", "50", "--classes", "all")
    assert small["n_train"] == 51


def test_text_output_states_the_verdict_and_the_ledger(capsys):
    code, out, err = run(capsys, *BASE, "--method", "prediction-sensitivity")
    assert code == 0, err
    assert "epsilon lower bound" in out and "consistent with the claim" in out
    assert "answer 401: refused in both worlds" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--method", "output", "--queries", "10"), "--queries applies to --prediction-service audits only"),
        (("--method", "output", "--n-models", "3"), "--n-models applies to --prediction-service"),
        (("--method", "prediction-sensitivity", "--trials", "10"), "audit it with --prediction-service"),
        (("--prediction-service", "--method", "output", "--queries", "10"), "not --method output"),
        (("--prediction-service", "--method", "prediction-sensitivity", "--queries", "10", "--delta", "1e-5"),
         "--delta does not apply to --prediction-service"),
        (("--prediction-service", "--method", "subsample-aggregate", "--queries", "10", "--trials", "5"),
         "--trials does not apply"),
        (("--prediction-service", "--method", "subsample-aggregate", "--queries", "10", "--one-run"),
         "--one-run does not apply"),
        (("--prediction-service", "--method", "subsample-aggregate", "--queries", "10", "--plot", "a.png"),
         "--plot does not apply"),
        (("--prediction-service", "--method", "prediction-sensitivity", "--queries", "10", "--n-models", "4"),
         "--n-models applies to --method subsample-aggregate only"),
        (("--prediction-service", "--method", "prediction-sensitivity", "--queries", "10", "--jobs", "2"),
         "--jobs applies to --method subsample-aggregate only"),
        (("--prediction-service", "--method", "prediction-sensitivity"), "--queries is required"),
        # The values: the audit's own check (check_audit_settings, its predictor's included), in its words.
        (("--prediction-service", "--method", "prediction-sensitivity", "--queries", "3"), "queries must be >= 4"),
        (("--prediction-service", "--method", "prediction-sensitivity", "--queries", "10", "--confidence", "1"),
         "confidence must be in (0, 1)"),
        (("--prediction-service", "--method", "subsample-aggregate", "--queries", "10", "--n-models", "0"),
         "n_models must be >= 1"),
        (("--prediction-service", "--method", "subsample-aggregate", "--queries", "10", "--jobs", "-1000"),
         "n_jobs must be a positive integer"),
        (("--prediction-service", "--method", "prediction-sensitivity", "--queries", "10", "--bounds", "private"),
         "--bounds"),
    ],
)
def test_options_that_do_not_apply_are_one_line_errors(capsys, argv, message):
    code, out, err = run(capsys, "audit", "--dataset", "breast_cancer", "--epsilon", "1", "--no-progress", *argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("epsilon", [("--epsilon", "0"), ()])
def test_epsilon_is_required_and_positive(capsys, epsilon):
    code, _, err = run(capsys, "audit", "--prediction-service", "--method", "prediction-sensitivity", "--dataset",
                       "breast_cancer", "--queries", "10", *epsilon)
    # "--epsilon (the per-answer epsilon to audit) is required", or the audit's check of its epsilon_query
    assert code == 2 and ("--epsilon" in err if not epsilon else "epsilon_query must be > 0" in err)
    assert len(err.strip().splitlines()) == 1


def test_json_is_parseable_with_a_record_canary(capsys):
    code, out, err = run(capsys, *BASE, "--method", "prediction-sensitivity", "--canary", "record", "--json")
    assert code == 0, err
    assert json.loads(out)["canary"] == "record"
