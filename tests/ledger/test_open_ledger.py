from __future__ import annotations

import pytest

from privml.exceptions import LedgerUnavailable
from privml.ledger import PostgresLedger, SQLiteLedger, open_ledger


def test_a_path_opens_sqlite(tmp_path):
    ledger = open_ledger(tmp_path / "b.sqlite", budget=4, name="x", context={"m": 1})
    try:
        assert isinstance(ledger, SQLiteLedger)
        assert (ledger.budget, ledger.name) == (4, "x")
    finally:
        ledger.close()
    with open_ledger(str(tmp_path / "b.sqlite"), budget=4, name="x", context={"m": 1}) as again:
        assert again.spent == 0


def test_a_postgres_url_opens_postgres(postgres_url):
    with open_ledger(postgres_url, budget=4, name="open-ledger-test") as ledger:
        assert isinstance(ledger, PostgresLedger)
        assert "privml@" in repr(ledger)


def test_unreachable_postgres_is_one_clear_error():
    # LedgerUnavailable is a ValueError: the command line reports it in one line (exit 2).
    with pytest.raises(LedgerUnavailable, match="cannot connect to ledger database postgresql://u@127.0.0.1:9/db"):
        PostgresLedger("postgresql://u:hunter2@127.0.0.1:9/db", budget=1, connect_timeout=2)


def test_a_failed_reconnection_is_ledger_unavailable():
    # From a review: after a PostgreSQL restart the reconnection's failure was a plain ValueError, which the
    # server answered with 500 and a traceback instead of 503.
    import threading

    import psycopg

    class _Broken:
        broken = True

    ledger = PostgresLedger.__new__(PostgresLedger)
    ledger.url, ledger._dsn, ledger._psycopg = "postgresql://u@127.0.0.1:9/db", "postgresql://u@127.0.0.1:9/db", psycopg
    ledger._connect_timeout, ledger._lock, ledger._conn = 2, threading.Lock(), _Broken()
    with pytest.raises(LedgerUnavailable, match="cannot connect to ledger database"):
        ledger.spend(1)


@pytest.mark.parametrize(
    ("target", "error", "match"),
    [
        ("mysql://host/db", ValueError, "unsupported ledger URL"),
        ("", ValueError, "path_or_url is empty"),
        (42, TypeError, "file path or a postgresql:// URL"),
    ],
)
def test_bad_targets(target, error, match):
    with pytest.raises(error, match=match):
        open_ledger(target, budget=1)
