"""PostgreSQL specifics: row locks, reconnection, no raw keys."""

from __future__ import annotations

import contextlib
import threading
import types

import psycopg
import pytest

from privml.ledger import PostgresLedger
from privml.ledger._postgres import _redact


def test_a_dropped_connection_fails_one_spend_then_reconnects(postgres_url):
    ledger = PostgresLedger(postgres_url, budget=10, name="reconnect")
    ledger.spend(2)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (ledger._conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        ledger.spend(1)  # the server side is gone: refused, nothing answered
    assert ledger.spend(1).spent == 3  # the failed spend was not charged
    ledger.close()


def test_raw_keys_never_reach_the_database(postgres_url):
    with PostgresLedger(postgres_url, budget=5, name="digests") as ledger:
        ledger.set_quota("very-secret-api-key", 1)
    with psycopg.connect(postgres_url) as conn:
        dump = str(conn.execute("SELECT * FROM privml_keys").fetchall())
    assert "very-secret-api-key" not in dump


def test_the_password_is_not_in_messages_or_repr():
    with pytest.raises(ValueError) as info:
        PostgresLedger("postgresql://user:hunter2@127.0.0.1:9/db", budget=1, connect_timeout=1)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "url, redacted",
    [
        ("postgresql://alice:hunter2@db.example/privml", "postgresql://alice@db.example/privml"),
        ("postgresql://alice@db.example/privml?password=hunter2", "postgresql://alice@db.example/privml"),
        ("postgresql:///privml?host=db.example&password=hunter2&user=alice",
         "postgresql:///privml?host=db.example&user=alice"),
        ("postgresql://alice:hunter2@h1,h2/privml", "postgresql://alice@h1,h2/privml"),
        ("postgres://alice:hun?ter2@h/db?pass%77ord=hunter2&sslmode=require", "postgres://alice@h/db?sslmode=require"),
    ],
)
def test_a_password_is_redacted_wherever_the_url_gives_it(url, redacted):
    assert _redact(url) == redacted


@pytest.mark.parametrize("url", ["postgresql://alice@127.0.0.1:9/db?password=hunter2&connect_timeout=1",
                                 "postgresql://alice:hun ter2@127.0.0.1:9/db"])
def test_a_query_or_malformed_password_is_not_in_the_connection_error(url):
    with pytest.raises(ValueError) as info:
        PostgresLedger(url, budget=1, connect_timeout=1)
    assert "hun" not in str(info.value) and "ter2" not in str(info.value)


class _FakeSession:
    """Records what a ledger runs on a session (no server needed)."""

    def __init__(self, log: list[str], broken: bool = False) -> None:
        self.log, self.broken = log, broken

    def execute(self, sql: str) -> None:
        self.log.append(sql)

    def commit(self) -> None:
        self.log.append("COMMIT")

    def transaction(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    def cursor(self) -> contextlib.nullcontext:
        return contextlib.nullcontext(self)


def test_a_reconnection_sets_durable_commits_again_without_a_server():
    log: list[str] = []
    ledger = PostgresLedger.__new__(PostgresLedger)
    ledger.url, ledger._dsn, ledger._connect_timeout, ledger._lock = "postgresql://h/db", "postgresql://h/db", 1, \
        threading.Lock()
    ledger._psycopg = types.SimpleNamespace(connect=lambda dsn, connect_timeout: _FakeSession(log), Error=Exception)
    ledger._conn = _FakeSession(log, broken=True)  # the server dropped the session
    ledger._transaction(lambda cur: cur.execute("SELECT 1"))
    assert log == ["SET synchronous_commit = on", "COMMIT", "SELECT 1"]


def test_every_session_commits_synchronously_even_when_the_role_defaults_to_off(postgres_url):
    def setting() -> str:
        return ledger._transaction(lambda cur: cur.execute("SHOW synchronous_commit").fetchone()[0])

    with psycopg.connect(postgres_url, autocommit=True) as admin:  # a DBA's default: asynchronous commits
        admin.execute("ALTER ROLE CURRENT_USER SET synchronous_commit = off")
    try:
        ledger = PostgresLedger(postgres_url, budget=10, name="synchronous")
        assert setting() == "on"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (ledger._conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            ledger.spend(1)
        assert ledger.spend(1).spent == 1
        assert setting() == "on"  # the reconnected session too
        ledger.close()
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("ALTER ROLE CURRENT_USER RESET synchronous_commit")
