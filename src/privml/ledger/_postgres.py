"""A budget ledger in PostgreSQL, shared by any number of servers.

Same schema and semantics as :class:`~privml.ledger.SQLiteLedger`:
each spend is one transaction that locks the budget row (and the key's row)
with ``SELECT ... FOR UPDATE``, checks and increments the counts and commits
before the caller computes the answer. PostgreSQL commits are durable by
default (``synchronous_commit=on``, which this ledger sets on every session
it opens, reconnections included), so a crash can only over-count. Needs ``psycopg`` 3
(``pip install 'privml[postgres]'``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote

from privml._validation import MAX_BUDGET, check_count
from privml.exceptions import LedgerUnavailable
from privml.ledger import _sql as sql
from privml.ledger._base import canonical_context, check_binding, key_digest, refusal_message, unknown_key_message
from privml.ledger._sql import SQLLedger, check_ledger_name, schema_statements

__all__ = ["PostgresLedger"]

# Serialises schema creation between processes: concurrent CREATE TABLE IF NOT
# EXISTS can otherwise fail on PostgreSQL's catalog unique index.
_SCHEMA_LOCK_ID = 0x70726976  # "priv"

T = TypeVar("T")


def _split(url: str) -> tuple[str, str | None, str, list[str]]:
    """``url`` as (scheme://, userinfo or None, host and path, query pairs), cut where libpq cuts it.

    libpq ends the userinfo at the first ``@`` seen before any ``/`` (so a
    password may hold an unencoded ``?``), and the query at the first ``?`` after it.
    """
    scheme, sep, rest = url.partition("://")
    at, slash = rest.find("@"), rest.find("/")
    userinfo = None
    if at >= 0 and (slash < 0 or at < slash):
        userinfo, rest = rest[:at], rest[at + 1 :]
    where, _, query = rest.partition("?")
    return scheme + sep, userinfo, where, [pair for pair in query.split("&") if pair]


def _is_password(pair: str) -> bool:
    return unquote(pair.partition("=")[0]).strip() == "password"


def _redact(url: str) -> str:
    """The URL without its password, for messages and the server's start-up line.

    libpq takes a password from the userinfo (``user:password@``) or from a
    ``password=`` query parameter; both are dropped, everything else is kept.
    """
    scheme, userinfo, where, pairs = _split(url)
    user = "" if userinfo is None else userinfo.split(":", 1)[0] + "@"
    kept = [pair for pair in pairs if not _is_password(pair)]
    return f"{scheme}{user}{where}" + ("?" + "&".join(kept) if kept else "")


def _passwords(url: str) -> list[str]:
    """Every spelling of the password(s) in ``url`` (raw and decoded), to scrub from driver messages."""
    _, userinfo, _, pairs = _split(url)
    raw = [pair.partition("=")[2] for pair in pairs if _is_password(pair)]
    if userinfo is not None and ":" in userinfo:
        raw.append(userinfo.split(":", 1)[1])
    found = {spelling for value in raw for spelling in (value, unquote(value)) if spelling}
    return sorted(found, key=len, reverse=True)  # longest first: no partial replacement leaves a remainder


class PostgresLedger(SQLLedger):
    """A persistent ledger in the PostgreSQL database at ``url``.

    Parameters
    ----------
    url:
        A libpq connection URL, ``postgresql://user:password@host:port/db``.
    budget, name, context:
        As for :class:`~privml.ledger.SQLiteLedger`: the budget is
        bound to ``(name, budget, context)`` and reopening it with another
        budget or context raises :class:`~privml.ledger.LedgerMismatch`.
    connect_timeout:
        Seconds to wait for the server when connecting.
    """

    placeholder = "%s"

    def __init__(
        self,
        url: str,
        *,
        budget: int,
        name: str = "default",
        context: dict[str, Any] | None = None,
        connect_timeout: int = 10,
    ) -> None:
        try:
            import psycopg  # lazy(extra): psycopg (postgres)
        except ImportError:  # pragma: no cover - psycopg is a dev dependency
            raise ValueError("the PostgreSQL ledger needs psycopg 3: pip install 'privml[postgres]'") from None
        if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"url must start with postgresql://, got {url!r}")
        self.url = _redact(url)
        self.budget = check_count(budget, "budget", maximum=MAX_BUDGET)
        self.name = check_ledger_name(name)
        self.context = canonical_context(context)
        self._psycopg = psycopg
        self._dsn = url
        self._connect_timeout = check_count(connect_timeout, "connect_timeout")
        self._lock = threading.Lock()
        self._conn: Any = None
        self._conn = self._connect()
        try:
            self._transaction(self._bind)
        except BaseException:
            self.close()
            raise

    def _connect(self) -> Any:
        """A new session with durable commits.

        ``synchronous_commit = on`` is set on every session, the reconnections
        of :meth:`_transaction` included: a role or database default of
        ``off`` would otherwise let a charge be acknowledged (and the answer
        released) before it is on disk, and a crash would then under-count.
        """
        try:
            conn = self._psycopg.connect(self._dsn, connect_timeout=self._connect_timeout)
        except self._psycopg.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            for secret in _passwords(self._dsn):  # a malformed URL is quoted back by the driver
                first = first.replace(secret, "***")
            raise LedgerUnavailable(f"cannot connect to ledger database {self.url}: {first}") from None
        try:
            conn.execute("SET synchronous_commit = on")
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def _transaction(self, body: Callable[[Any], T]) -> T:
        with self._lock:
            if self._conn is None:
                raise ValueError(f"ledger {self.url} is closed")
            if self._conn.broken:
                # The server restarted or the network dropped: the failed
                # transaction already raised to its caller (which answered
                # nothing); start afresh for this one.
                self._conn = self._connect()
            with self._conn.transaction():
                with self._conn.cursor() as cur:
                    return body(cur)

    def _bind(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_ID,))
        for statement in schema_statements("BIGINT"):
            cur.execute(statement)
        cur.execute(
            "INSERT INTO privml_budgets (name, budget, context, spent) VALUES (%s, %s, %s, 0) "
            "ON CONFLICT (name) DO NOTHING",
            (self.name, self.budget, self.context),
        )
        cur.execute(self._sql(sql.SELECT_BINDING), (self.name,))
        if check_binding(self.url, self.name, cur.fetchone(), self.budget, self.context):
            cur.execute(self._sql(sql.UPDATE_CONTEXT), (self.context, self.name))

    def _try_spend(self, count: int, key: str | None) -> str | None:
        def body(cur: Any) -> str | None:
            # Row locks, budget row first: every spend takes them in the same
            # order, so concurrent spends queue instead of deadlocking.
            cur.execute(self._sql(sql.SELECT_BUDGET) + " FOR UPDATE", (self.name,))
            budget, spent = cur.fetchone()
            if spent + count > budget:
                return refusal_message(budget, spent, count)
            if key is not None:
                digest = key_digest(key)
                cur.execute(self._sql(sql.SELECT_KEY) + " FOR UPDATE", (self.name, digest))
                row = cur.fetchone()
                if row is None:
                    return unknown_key_message(key)
                quota, used = row
                if used + count > quota:
                    return refusal_message(quota, used, count, key)
                cur.execute(
                    "UPDATE privml_keys SET spent = spent + %s WHERE budget_name = %s AND key_sha256 = %s",
                    (count, self.name, digest),
                )
            cur.execute("UPDATE privml_budgets SET spent = spent + %s WHERE name = %s", (count, self.name))
            return None

        return self._transaction(body)

    def __repr__(self) -> str:
        return f"PostgresLedger({self.url!r}, budget={self.budget}, name={self.name!r})"
