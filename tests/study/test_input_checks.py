"""Bad input to ``privml study`` is one line and exit 2, before anything is written (defects from a review)."""

from __future__ import annotations

import sqlite3

import pytest

from privml.study import ResultStore, spec_from_dict
from privml.study._runner import check_dataset
from tests.cli_runner import run

from .conftest import tiny_spec_dict

TINY = """
name = "tiny"
dataset = "digits"
methods = ["nonprivate", "output"]
repeats = 1
public_size = {public}
selection = "public"
{top}
[defaults]
epsilon = 1.0
delta = 0.0
budget = 10
n = 300
d = 8
{defaults}
[[sweeps]]
name = "eps"
parameter = "{parameter}"
values = {values}
{sweep}
"""


def _spec(tmp_path, top="", defaults="", parameter="epsilon", values="[0.5, 1.0]", sweep="", public=200):
    path = tmp_path / "s.toml"
    path.write_text(TINY.format(top=top, defaults=defaults, parameter=parameter, values=values, sweep=sweep,
                                public=public))
    return path


def _refused(capsys, tmp_path, *args):
    code, _, stderr = run(capsys, "study", *args)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    return stderr


@pytest.mark.parametrize("change, message", [
    ({"defaults": "k = 1"}, "k must be at least 2"),
    ({}, None),
    ({"top": 'label_column = "y"'}, "label_column applies to csv: datasets only"),
    ({"parameter": "m", "values": "[4, 8]"}, "sweep 'eps' sweeps m, which none of its methods"),
    ({"sweep": "fixed = { epsilon = 2.0 }"}, "sweep 'eps' fixes epsilon"),
    ({"public": 4}, "d = 8 needs at least 8 public records"),
    ({"defaults": "k = 30"}, "k = 30 classes requested"),
    ({"parameter": "n", "values": "[100000]"}, "n = 100000 training records requested"),
    ({"parameter": "d", "values": "[100]"}, "d = 100 dimensions requested"),
])
def test_a_spec_that_cannot_work_is_refused_before_anything_is_written(capsys, tmp_path, change, message):
    if message is None:  # a grid value no method can use (l2 < 0): in the selection table
        path = tmp_path / "s.toml"
        path.write_text(TINY.format(top="", defaults="", parameter="epsilon", values="[0.5]", sweep="", public=200)
                        .replace('selection = "public"', "") + '\n[selection]\nmode = "validation"\n'
                        "[selection.grids]\noutput = { l2 = [-1.0] }\n")
        message = "l2 must be > 0"
    else:
        path = _spec(tmp_path, **change)
    stderr = _refused(capsys, tmp_path, "run", str(path), "--out", str(tmp_path / "o"), "--no-progress")
    assert message in stderr
    assert not (tmp_path / "o").exists()


def test_a_user_csv_size_is_not_checked_in_advance(tmp_path):
    # Its size is private: n larger than the rows is left to the runs (which fail with their error).
    csv = tmp_path / "d.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
    spec = spec_from_dict(tiny_spec_dict(dataset=f"csv:{csv}", public_size=5, classes=["0", "1"],
                                         defaults={"epsilon": 1.0, "delta": 0.0, "budget": 10, "n": 100000},
                                         methods=["nonprivate", "prediction-sensitivity"]))
    check_dataset(spec)


def test_repeats_have_a_cap(capsys, tmp_path):
    stderr = _refused(capsys, tmp_path, "run", str(_spec(tmp_path)), "--out", str(tmp_path / "o"),
                      "--repeats", "1e9")
    assert "repeats must be at most 1000" in stderr and not (tmp_path / "o").exists()


def test_a_spec_directory_or_binary_file_is_named(capsys, tmp_path):
    assert "is a directory" in _refused(capsys, tmp_path, "run", str(tmp_path), "--out", str(tmp_path / "o"))
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    assert f"{binary}: not a text file" in _refused(capsys, tmp_path, "run", str(binary), "--out",
                                                    str(tmp_path / "o"))


def test_out_that_is_a_file_or_empty_is_refused_up_front(capsys, tmp_path, tiny_study):
    _, _, out = tiny_study
    existing = tmp_path / "good.csv"
    existing.write_text("x\n")
    assert "is a file" in _refused(capsys, tmp_path, "run", str(_spec(tmp_path)), "--out", str(existing))
    assert "is a file" in _refused(capsys, tmp_path, "report", str(out), "--out", str(existing))
    assert "empty path" in _refused(capsys, tmp_path, "report", str(out), "--out", "")
    assert existing.read_text() == "x\n"


def test_an_os_error_is_one_line(capsys, tmp_path, monkeypatch, tiny_study):
    # The backstop in main: any OSError a handler raises is one line and exit 2.
    import privml.study

    def fail(*args, **kwargs):
        raise IsADirectoryError("[Errno 21] Is a directory: 'x'")

    monkeypatch.setattr(privml.study, "write_report", fail)
    stderr = _refused(capsys, tmp_path, "report", str(tiny_study[2]), "--out", str(tmp_path / "r"))
    assert "Is a directory" in stderr


def test_reading_commands_never_write_to_a_foreign_or_empty_file(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.sqlite").touch()
    foreign = tmp_path / "other.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE x (a)")
    for args in (["status", str(empty)], ["status", str(foreign)], ["recommend", str(foreign)],
                 ["report", str(foreign), "--out", str(tmp_path / "r")]):
        assert "holds no study" in _refused(capsys, tmp_path, *args)
    assert (empty / "results.sqlite").stat().st_size == 0
    with sqlite3.connect(foreign) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["x"]
    assert not (tmp_path / "r").exists()
    _refused(capsys, tmp_path, "status", str(tmp_path / "no" / "where"))
    assert not (tmp_path / "no").exists()


def test_a_read_only_store_cannot_write(tmp_path):
    ResultStore(tmp_path / "results.sqlite").save_spec("h", {}, "1")
    store = ResultStore(tmp_path / "results.sqlite", read_only=True)
    assert list(store.specs()) == ["h"]
    with pytest.raises(sqlite3.OperationalError):
        store.save_spec("g", {}, "2")


@pytest.mark.parametrize("option, value, message", [
    ("--epsilon", "-1", "--epsilon must be > 0"), ("--epsilon", "0", "--epsilon must be > 0"),
    ("--delta", "-0.5", "--delta must be in [0, 1)"), ("--delta", "1", "--delta must be in [0, 1)"),
    ("--budget", "0", "--budget must be >= 1"), ("--d", "-5", "--d must be >= 1"),
    ("--n", "0", "--n must be >= 1"), ("--k", "1", "--k must be >= 2"),
])
def test_recommend_checks_its_options(capsys, tmp_path, tiny_study, option, value, message):
    assert message in _refused(capsys, tmp_path, "recommend", str(tiny_study[2]), option, value)


def test_a_read_only_store_recovers_from_a_run_killed_inside_a_transaction(tmp_path):
    # A writer killed mid-transaction leaves a hot journal that a mode=ro connection cannot roll back ("attempt to
    # write a readonly database", reported as "not a privml results store ... move it away", which would lose the
    # journal): status, report and recommend must still read the last committed state.
    import subprocess
    import sys

    path = tmp_path / "results.sqlite"
    ResultStore(path)
    crash = (
        "import sqlite3, os\n"
        f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "c.execute('pragma cache_size=1'); c.execute('BEGIN IMMEDIATE'); c.execute('CREATE TABLE junk(x)')\n"
        "for i in range(2000): c.execute('INSERT INTO junk VALUES (?)', ('x' * 1000,))\n"
        "os._exit(9)\n"
    )
    subprocess.run([sys.executable, "-c", crash], check=False, timeout=60)
    assert (tmp_path / "results.sqlite-journal").stat().st_size > 0  # the hot journal the crash left
    assert ResultStore(path, read_only=True).finished_keys() == set()


def test_status_of_a_missing_results_file_names_that_file(capsys, tmp_path):
    # It said ".../results.sqlite/results.sqlite does not exist" (a review).
    code, _, err = run(capsys, "study", "status", str(tmp_path / "none" / "results.sqlite"))
    assert code == 2 and "results.sqlite/results.sqlite" not in err and "no study has run in" in err
