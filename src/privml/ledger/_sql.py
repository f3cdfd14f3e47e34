"""What the SQL ledgers (SQLite, PostgreSQL) share: the schema, the queries, reads and quotas.

Both keep one row per budget and one row per API key (its SHA-256 digest,
never the key). The backends differ only in how a transaction is run
(SQLite: ``BEGIN IMMEDIATE`` with retries and group commit; PostgreSQL: row
locks) and in the parameter placeholder, so the statements are written once
with ``?`` and translated for drivers that use ``%s``.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from privml._validation import check_count
from privml.ledger._base import BudgetLedger, LedgerState, key_digest, key_label

__all__ = ["SQLLedger", "check_ledger_name", "schema_statements"]

T = TypeVar("T")

SELECT_BUDGET = "SELECT budget, spent FROM privml_budgets WHERE name = ?"
SELECT_BINDING = "SELECT budget, context FROM privml_budgets WHERE name = ?"
#: Rewrites a stored context that held legacy keys (base.LEGACY_CONTEXT_KEYS) once it has been checked.
UPDATE_CONTEXT = "UPDATE privml_budgets SET context = ? WHERE name = ?"
SELECT_KEY = "SELECT quota, spent FROM privml_keys WHERE budget_name = ? AND key_sha256 = ?"
SELECT_KEYS = "SELECT key_sha256, quota, spent FROM privml_keys WHERE budget_name = ? ORDER BY key_sha256"
UPSERT_QUOTA = (
    "INSERT INTO privml_keys (budget_name, key_sha256, quota, spent) VALUES (?, ?, ?, 0) "
    "ON CONFLICT (budget_name, key_sha256) DO UPDATE SET quota = excluded.quota"
)


def schema_statements(integer: str) -> tuple[str, str]:
    """``CREATE TABLE IF NOT EXISTS`` statements with the backend's integer type."""
    return (
        f"""CREATE TABLE IF NOT EXISTS privml_budgets (
        name TEXT PRIMARY KEY,
        budget {integer} NOT NULL CHECK (budget >= 1),
        context TEXT NOT NULL,
        spent {integer} NOT NULL DEFAULT 0 CHECK (spent >= 0 AND spent <= budget)
    )""",
        f"""CREATE TABLE IF NOT EXISTS privml_keys (
        budget_name TEXT NOT NULL REFERENCES privml_budgets(name),
        key_sha256 TEXT NOT NULL,
        quota {integer} NOT NULL CHECK (quota >= 1),
        spent {integer} NOT NULL DEFAULT 0 CHECK (spent >= 0),
        PRIMARY KEY (budget_name, key_sha256)
    )""",
    )


def check_ledger_name(name: object) -> str:
    """The name of a budget inside a ledger store: a non-empty string."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    return name


class SQLLedger(BudgetLedger):
    """Reads and quotas of a ledger kept in SQL tables (see :func:`schema_statements`).

    Subclasses set ``name``, ``placeholder``, ``_lock`` (a lock) and ``_conn``
    (the connection, ``None`` once closed) and implement :meth:`_transaction`,
    which runs ``body(db)`` in one transaction where ``db.execute(sql, params)``
    returns a cursor.
    """

    name: str
    placeholder = "?"
    _lock: threading.Lock
    _conn: Any

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _sql(self, statement: str) -> str:
        return statement if self.placeholder == "?" else statement.replace("?", self.placeholder)

    @abstractmethod
    def _transaction(self, body: Callable[[Any], T]) -> T:
        """Run ``body(db)`` in one committed transaction and return its result."""

    def state(self, key: str | None = None) -> LedgerState:
        def body(db: Any) -> LedgerState:
            if key is None:
                return LedgerState(*db.execute(self._sql(SELECT_BUDGET), (self.name,)).fetchone())
            row = db.execute(self._sql(SELECT_KEY), (self.name, key_digest(key))).fetchone()
            if row is None:
                raise KeyError(f"unknown API key ({key_label(key)})")
            return LedgerState(*row)

        return self._transaction(body)

    def set_quota(self, key: str, quota: int) -> None:
        """Give ``key`` a quota of ``quota`` answers; what it already spent is kept."""
        quota = check_count(quota, "quota")
        digest = key_digest(key)
        self._transaction(lambda db: db.execute(self._sql(UPSERT_QUOTA), (self.name, digest, quota)))

    def keys(self) -> dict[str, LedgerState]:
        """Every key with a quota, by SHA-256 digest (raw keys are never stored)."""

        def body(db: Any) -> dict[str, LedgerState]:
            rows = db.execute(self._sql(SELECT_KEYS), (self.name,)).fetchall()
            return {digest: LedgerState(quota, spent) for digest, quota, spent in rows}

        return self._transaction(body)
