"""`privml audit`: JSON contract, plot, validation errors."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import run

KEYS = {"claimed_epsilon", "epsilon_lower_bound", "confidence", "auc", "membership_auc", "membership_advantage"}


def test_audit_prints_one_json_object(capsys):
    code, out, err = run(
        capsys, "audit", "--method", "output", "--dataset", "breast_cancer", "--epsilon", "1", "--trials", "10",
        "--n-train", "40", "--seed", "0", "--no-progress", "--json",
    )
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert KEYS <= set(r)
    assert r["claimed_epsilon"] == 1.0 and r["confidence"] == 0.95
    assert 0 <= r["epsilon_lower_bound"] < 1.0 and not r["violated"]
    assert r["neighbouring"] == "replace-one" and r["canary"] == "clipbkd"
    assert r["n_train"] == 41 and r["trials_per_world"] == 10  # 40 records and the canary (or its mirror)
    assert r["classes"] == ["malignant", "benign"]


def test_audit_is_reproducible_with_a_seed(capsys):
    argv = ("audit", "--method", "dpcd", "--dataset", "iris", "--epsilon", "4", "--trials", "6", "--n-train", "30",
            "--seed", "3", "--no-progress", "--json")
    first = json.loads(run(capsys, *argv)[1])
    second = json.loads(run(capsys, *argv)[1])
    for key in ("epsilon_lower_bound", "auc", "membership_auc", "threshold"):
        assert first[key] == second[key]


def test_nonprivate_needs_no_epsilon_and_writes_a_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "new folder" / "roc.png"  # made: the trials are not lost to a missing folder
    code, out, err = run(
        capsys, "audit", "--method", "nonprivate", "--dataset", "digits", "--classes", "3,8", "--trials", "20",
        "--n-train", "30", "--seed", "0", "--plot", str(path), "--no-progress", "--json",
    )
    assert code == 0, err
    r = json.loads(out)
    assert r["claimed_epsilon"] == "inf" and r["auc"] == 1.0 and r["epsilon_lower_bound"] > 0.5
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_output_states_the_verdict(capsys):
    code, out, err = run(
        capsys, "audit", "--method", "objective", "--dataset", "iris", "--epsilon", "1", "--trials", "4",
        "--n-train", "20", "--seed", "0", "--no-progress",
    )
    assert code == 0, err
    assert "epsilon lower bound" in out and "consistent with the claim" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--method", "output", "--dataset", "iris", "--trials", "10"], "--epsilon is required"),
        (["--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "3"], "--trials must be >= 4"),
        (["--method", "output", "--dataset", "iris", "--epsilon", "-1", "--trials", "10"], "epsilon must be > 0"),
        (["--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "10", "--classes", "rose,tulip"],
         "not a class of iris"),
        (["--method", "output", "--dataset", "csv:x.csv", "--epsilon", "1", "--trials", "10"], "has no public bounds"),
        (["--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "10", "--confidence", "1"],
         "--confidence"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, "audit", *argv, "--no-progress")
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_privacy_options_for_the_nonprivate_baseline_are_refused(capsys):
    # As privml train refuses them: they were accepted and ignored.
    for extra in (("--epsilon", "1"), ("--delta", "0.3")):
        code, out, err = run(capsys, "audit", "--method", "nonprivate", "--dataset", "iris", "--trials", "4", *extra)
        assert code == 2 and out == "" and "do not apply to --method nonprivate" in err


def test_an_unwritable_plot_format_is_refused_before_any_training(capsys, monkeypatch, tmp_path):
    # From a review: --plot x.txt was refused by savefig only after all 2 x trials models were trained.
    import privml.cli._audit as audit_cli

    def no_training(*args, **kwargs):
        raise AssertionError("the audit ran before --plot was checked")

    monkeypatch.setattr(audit_cli, "audit_epsilon", no_training)
    code, out, err = run(
        capsys, "audit", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "10",
        "--plot", str(tmp_path / "x.txt"), "--no-progress",
    )
    assert code == 2 and out == ""
    assert "--plot: format 'txt'" in err and "png" in err and len(err.strip().splitlines()) == 1


def test_plot_formats_without_matplotlib_is_a_fixed_list(monkeypatch):
    import importlib.util

    from privml.audit import _plotting as plotting

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert plotting.plot_formats() == plotting.BASIC_FORMATS
    with pytest.raises(ValueError, match="format 'txt'"):
        plotting.check_plot_path("roc.txt")
    plotting.check_plot_path("roc.PDF")
    plotting.check_plot_path("roc")  # no suffix: matplotlib's default format


def test_audit_reads_a_csv_through_its_schema(capsys, tmp_path):
    from tests.data.raw_tables import breast_cancer_schema, write_raw_breast_cancer

    patients = write_raw_breast_cancer(tmp_path / "patients.csv")
    schema = breast_cancer_schema().save(tmp_path / "schema.toml")
    code, out, err = run(capsys, "audit", "--method", "objective", "--dataset", f"csv:{patients}", "--schema",
                         str(schema), "--epsilon", "1", "--trials", "4", "--n-train", "30", "--seed", "0",
                         "--no-progress", "--json")
    assert code == 0, err
    assert json.loads(out)["n_train"] >= 30
    assert "PrivacyLeakWarning" in err and "do not publish" in err
    code, _, err = run(capsys, "audit", "--method", "objective", "--dataset", f"csv:{patients}", "--schema",
                       str(schema), "--epsilon", "1", "--trials", "4", "--classes", "no,yes")
    assert code == 2 and "--classes applies to built-in datasets" in err
