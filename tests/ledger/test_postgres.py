"""PostgreSQL specifics: row locks, reconnection, no raw keys."""

from __future__ import annotations

import psycopg
import pytest

from privml.ledger import PostgresLedger


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
