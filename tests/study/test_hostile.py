"""A study refuses what cannot work before computing anything: a corrupt store, a busy folder, no scheduler."""

from __future__ import annotations

import time

import pytest

from privml.study._executors import DaskExecutor
from privml.study._runner import LOCK_FILE, folder_lock
from privml.study._store import ResultStore
from tests.cli_runner import run


def test_a_corrupt_results_store_is_one_line(tmp_path) -> None:
    (tmp_path / "results.sqlite").write_text("not a database")
    with pytest.raises(ValueError, match="is not a privml results store"):
        ResultStore(tmp_path / "results.sqlite")


def test_cli_study_on_a_corrupt_store_exits_2(capsys, tmp_path) -> None:
    (tmp_path / "results.sqlite").write_text("not a database")
    code, out, err = run(capsys, "study", "run", "quick-ci", "--out", str(tmp_path), "--no-progress")
    assert code == 2 and "is not a privml results store" in err and "Traceback" not in err


def test_a_busy_folder_is_refused(tmp_path) -> None:
    with folder_lock(tmp_path):
        with pytest.raises(ValueError, match="in use by another privml study run"):
            with folder_lock(tmp_path):
                pass
    with folder_lock(tmp_path):  # released
        pass
    assert (tmp_path / LOCK_FILE).exists()


def test_a_second_study_process_on_one_folder_exits_2(capsys, tmp_path) -> None:
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from privml.study._runner import folder_lock\n"
         f"with folder_lock(Path({str(tmp_path)!r})):\n    print('held', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = run(capsys, "study", "run", "quick-ci", "--out", str(tmp_path), "--no-progress")
        assert code == 2 and "in use by another privml study run" in err
        assert not (tmp_path / "results.sqlite").exists()
    finally:
        holder.kill()
        holder.wait()


def test_an_unreachable_scheduler_is_refused_quickly(monkeypatch) -> None:
    monkeypatch.setattr("privml.study._executors.CONNECT_TIMEOUT", 1)
    start = time.perf_counter()
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler at dask://127.0.0.1:9"):
        DaskExecutor("dask://127.0.0.1:9").check_reachable()
    assert time.perf_counter() - start < 20


def test_a_store_damaged_after_its_header_is_one_line(capsys, tmp_path) -> None:
    # A malformed page past an intact header passed the schema step and failed later with a traceback (a review).
    store = ResultStore(tmp_path / "results.sqlite")
    with store._connect() as db:
        db.execute("CREATE TABLE padding (x BLOB)")
        db.executemany("INSERT INTO padding VALUES (?)", [(b"x" * 4000,) for _ in range(20)])
    with open(tmp_path / "results.sqlite", "r+b") as handle:
        handle.seek(4096)
        handle.write(b"\xff" * 8192)
    code, out, err = run(capsys, "study", "status", str(tmp_path))
    assert code == 2 and "damaged" in err and "Traceback" not in err


def test_a_lock_held_for_an_instant_by_status_does_not_refuse_a_start(tmp_path) -> None:
    # `privml study status` takes the lock for an instant; a run starting then waits briefly instead of failing.
    import fcntl
    import threading

    tmp_path.mkdir(exist_ok=True)
    handle = (tmp_path / LOCK_FILE).open("a+")
    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    release = threading.Timer(0.2, lambda: fcntl.flock(handle, fcntl.LOCK_UN))
    release.start()
    try:
        with folder_lock(tmp_path):
            pass
    finally:
        release.join()
        handle.close()
