"""SQLite specifics: the file format, durability settings, hostile files."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from privml.exceptions import BudgetExhausted, LedgerUnavailable
from privml.ledger import SQLiteLedger


def test_file_uses_wal_and_the_documented_schema(tmp_path):
    path = tmp_path / "b.sqlite"
    with SQLiteLedger(path, budget=7, context={"model": "m"}) as ledger:
        assert ledger._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        ledger.set_quota("k", 3)
        ledger.spend(2, key="k")
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT name, budget, context, spent FROM privml_budgets").fetchall() == [
            ("default", 7, '{"model":"m"}', 2)
        ]
        (row,) = raw.execute("SELECT budget_name, key_sha256, quota, spent FROM privml_keys").fetchall()
        assert row[0] == "default" and len(row[1]) == 64 and row[2:] == (3, 2)
    finally:
        raw.close()


def test_a_spend_is_committed_before_it_returns(tmp_path):
    # Charge first: another connection (another process, or the same file
    # after a crash) already sees the charge when spend() returns.
    path = tmp_path / "b.sqlite"
    ledger = SQLiteLedger(path, budget=7)
    ledger.spend(3)
    other = sqlite3.connect(path)
    try:
        assert other.execute("SELECT spent FROM privml_budgets").fetchone()[0] == 3
    finally:
        other.close()
        ledger.close()


def test_raw_keys_never_reach_the_file(tmp_path):
    path = tmp_path / "b.sqlite"
    with SQLiteLedger(path, budget=5) as ledger:
        ledger.set_quota("very-secret-api-key", 1)
        ledger.spend(1, key="very-secret-api-key")
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"very-secret-api-key" not in blob


def test_several_budgets_share_one_file(tmp_path):
    path = tmp_path / "b.sqlite"
    with SQLiteLedger(path, budget=5, name="a") as a, SQLiteLedger(path, budget=9, name="b") as b:
        a.spend(5)
        with pytest.raises(BudgetExhausted):
            a.spend(1)
        assert b.spend(1).remaining == 8


def test_a_file_that_is_not_a_ledger_is_refused(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00not a database" * 200)
    with pytest.raises(ValueError, match="not a usable privml ledger"):
        SQLiteLedger(junk, budget=5)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "b.sqlite"
    SQLiteLedger(path, budget=5).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(ValueError, match="schema version 99"):
        SQLiteLedger(path, budget=5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"budget": 0}, ValueError, "budget must be >= 1"),
        ({"budget": 2.5}, TypeError, "budget must be an integer"),
        ({"budget": 5, "name": ""}, ValueError, "name must be a non-empty string"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        SQLiteLedger(tmp_path / "b.sqlite", **kwargs)


def test_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        SQLiteLedger(tmp_path, budget=5)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SQLiteLedger(tmp_path / "missing" / "b.sqlite", budget=5)


def test_a_closed_ledger_refuses_to_spend(tmp_path):
    ledger = SQLiteLedger(tmp_path / "b.sqlite", budget=5)
    ledger.close()
    with pytest.raises(ValueError, match="is closed"):
        ledger.spend(1)


def test_a_locked_file_is_retried_then_reported(tmp_path):
    path = tmp_path / "b.sqlite"
    ledger = SQLiteLedger(path, budget=5, timeout=0.05, retries=1)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            ledger.spend(1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert ledger.spend(1).spent == 1
    ledger.close()


def test_group_commit_keeps_quotas_exact_under_threads(tmp_path):
    ledger = SQLiteLedger(tmp_path / "b.sqlite", budget=1000)
    ledger.set_quota("a", 37)
    ledger.set_quota("b", 500)
    granted = {"a": 0, "b": 0, "unknown": 0}
    lock = threading.Lock()

    def worker(key):
        for _ in range(30):
            try:
                ledger.spend(2, key=key)
            except BudgetExhausted:
                continue
            with lock:
                granted[key] += 2

    threads = [threading.Thread(target=worker, args=(k,)) for k in ("a", "a", "b", "b", "unknown", "a")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert granted["a"] == 36 and granted["unknown"] == 0 and granted["b"] == 120
    assert ledger.state("a").spent == 36 and ledger.state("b").spent == 120
    assert ledger.spent == 156
    ledger.close()


def test_a_failed_batch_charges_nothing_and_fails_every_spend(tmp_path):
    path = tmp_path / "b.sqlite"
    ledger = SQLiteLedger(path, budget=5, timeout=0.05, retries=0)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    errors = []

    def worker():
        try:
            ledger.spend(1)
        except sqlite3.OperationalError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert len(errors) == 3 and ledger.spent == 0
    ledger.close()


def test_a_stored_model_hash_is_rewritten_out_of_the_file(tmp_path):
    # Contexts of earlier versions held the model file's SHA-256 (a fingerprint of the training data): reopening
    # checks the rest and stores the context without it.
    path = tmp_path / "b.sqlite"
    with SQLiteLedger(path, budget=7, context={"model_sha256": "f0bde005", "epsilon": 1.0}) as ledger:
        ledger.spend(1)
    with SQLiteLedger(path, budget=7, context={"epsilon": 1.0}) as ledger:
        assert ledger.spent == 1
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT context FROM privml_budgets").fetchall() == [('{"epsilon":1.0}',)]
    finally:
        raw.close()


@pytest.mark.parametrize("name", [":memory:", "file::memory:", "file:x?mode=memory", "FILE:led.sqlite?nolock=1"])
def test_in_memory_names_and_uris_are_refused(tmp_path, monkeypatch, name):
    # From a review: ":memory:" and file: URIs reached sqlite3.connect, so a "persistent" ledger restarted at
    # zero in every process (or ran with nolock=1, without locking between processes).
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"--ledger.*not a file path"):
        SQLiteLedger(name, budget=3)
    assert list(tmp_path.iterdir()) == []


def test_uri_characters_in_a_file_name_are_not_parameters(tmp_path):
    # From a review: the name is opened as a quoted file URI, so "?" and "#" are part of the file name.
    path = tmp_path / "led?nolock=1#x.sqlite"
    with SQLiteLedger(path, budget=3) as ledger:
        ledger.spend(2)
    assert path.is_file()
    with SQLiteLedger(path, budget=3) as again:
        assert again.spent == 2


def test_a_database_without_wal_is_refused(tmp_path, monkeypatch):
    # From a review: journal_mode=WAL was set without checking that SQLite kept it (an in-memory database answers
    # "memory"); a ledger whose journal is not WAL is refused.
    import privml.ledger._sqlite as module

    real = module.sqlite3.connect

    class _NoWal:
        def __init__(self, conn):
            self._conn = conn

        def execute(self, sql, *args):
            if sql.upper().startswith("PRAGMA JOURNAL_MODE"):
                return self._conn.execute("SELECT 'delete'")
            return self._conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._conn, name)

    monkeypatch.setattr(module.sqlite3, "connect", lambda *a, **k: _NoWal(real(*a, **k)))
    with pytest.raises(ValueError, match="cannot use write-ahead logging"):
        SQLiteLedger(tmp_path / "b.sqlite", budget=3)


def test_a_hard_linked_ledger_is_refused(tmp_path):
    # From a review: SQLite names -wal/-shm after the opened path, so two hard links to one ledger were two
    # unlocked budgets (240 answers for a budget of 120). A file with more than one name is refused on open.
    path = tmp_path / "a.sqlite"
    SQLiteLedger(path, budget=3).close()
    os.link(path, tmp_path / "b.sqlite")
    for name in ("a.sqlite", "b.sqlite"):
        with pytest.raises(ValueError, match="2 hard links"):
            SQLiteLedger(tmp_path / name, budget=3)


def test_a_hard_link_made_after_opening_stops_spending(tmp_path):
    path = tmp_path / "a.sqlite"
    with SQLiteLedger(path, budget=3) as ledger:
        ledger.spend(1)
        os.link(path, tmp_path / "b.sqlite")
        with pytest.raises(LedgerUnavailable, match="hard links"):  # a server answers 503 until it is fixed
            ledger.spend(1)
        os.unlink(tmp_path / "b.sqlite")
        assert ledger.spend(1).spent == 2


@pytest.mark.parametrize("change", ["delete", "rename", "replace"])
def test_a_ledger_file_moved_away_while_open_stops_spending(tmp_path, change):
    # A server whose ledger file was deleted or renamed answered 500 (FileNotFoundError) on every /predict, and
    # one whose file was replaced would have checked the new file's links but counted in the old (a review).
    path = tmp_path / "a.sqlite"
    with SQLiteLedger(path, budget=3) as ledger:
        ledger.spend(1)
        if change == "delete":
            path.unlink()
        elif change == "rename":
            path.rename(tmp_path / "b.sqlite")
        else:
            path.rename(tmp_path / "b.sqlite")
            SQLiteLedger(path, budget=3).close()  # a fresh ledger file under the old name
        with pytest.raises(LedgerUnavailable, match="since it was opened"):
            ledger.spend(1)


def test_a_ledger_opened_by_a_relative_name_survives_a_chdir(tmp_path, monkeypatch):
    # A second review: re-resolved before each batch, the relative name followed the process's chdir (a notebook's
    # %cd) and every spend said the file was gone.
    monkeypatch.chdir(tmp_path)
    with SQLiteLedger("budget.sqlite", budget=3) as ledger:
        ledger.spend(1)
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")
        assert ledger.spend(1).spent == 2
