"""A budget ledger in one SQLite file, shared by threads and processes.

Every spend runs in a ``BEGIN IMMEDIATE`` transaction that reads the
count, checks it against the budget (and the key's quota) and increments
it. The transaction is committed with ``synchronous=FULL`` (the write-ahead
log is fsynced) *before* the caller computes the answer, so a crash between
the charge and the answer can only over-count what was released. Spends
that arrive from several threads while a commit is in flight share the next
transaction (group commit), each still checked on its own; other processes
wait on SQLite's lock (busy timeout, then retries).

Schema (``PRAGMA user_version = 1``)::

    privml_budgets(name TEXT PRIMARY KEY, budget INTEGER, context TEXT, spent INTEGER)
    privml_keys(budget_name TEXT, key_sha256 TEXT, quota INTEGER, spent INTEGER)

API keys are stored as their SHA-256 digests, never in the clear.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from privml._validation import MAX_BUDGET, check_count, check_positive
from privml.exceptions import LedgerUnavailable
from privml.ledger import _sql as sql
from privml.ledger._base import canonical_context, check_binding, key_digest, refusal_message, unknown_key_message
from privml.ledger._sql import SQLLedger, check_ledger_name, schema_statements

__all__ = ["SQLiteLedger"]

SCHEMA_VERSION = 1
T = TypeVar("T")


class _Pending:
    """One spend waiting for a commit."""

    __slots__ = ("count", "key", "done", "refusal", "error")

    def __init__(self, count: int, key: str | None) -> None:
        self.count = count
        self.key = key
        self.done = False
        self.refusal: str | None = None
        self.error: BaseException | None = None


class _GroupCommit:
    """Group commit: spends that arrive while a commit is in flight share the next one.

    Each commit is an fsync (``synchronous=FULL``), which dominates the cost
    of a spend; concurrent requests would otherwise queue for one fsync each.
    Every spend still returns only after the transaction holding it has
    committed, and each is checked on its own (all or nothing, in arrival
    order), so the ledger's guarantees are those of one transaction per spend.
    """

    def __init__(self, commit: Callable[[list[_Pending]], list[str | None]]) -> None:
        self._commit = commit
        self._ready = threading.Condition()
        self._queue: list[_Pending] = []
        self._busy = False

    def submit(self, count: int, key: str | None) -> str | None:
        item = _Pending(count, key)
        with self._ready:
            self._queue.append(item)
            while self._busy and not item.done:
                self._ready.wait()
            if not item.done:  # lead: commit everything queued so far
                self._busy = True
                batch, self._queue = self._queue, []
        if not item.done:
            try:
                for pending, refusal in zip(batch, self._commit(batch), strict=True):
                    pending.refusal = refusal
            except BaseException as exc:  # nothing was committed: every spend of the batch fails
                for pending in batch:
                    pending.error = exc
            finally:
                with self._ready:
                    for pending in batch:
                        pending.done = True
                    self._busy = False
                    self._ready.notify_all()
        if item.error is not None:
            raise item.error
        return item.refusal



def _check_plain_path(text: str) -> None:
    """Refuse what SQLite would not read as a file: ``:memory:`` and ``file:`` URIs (with their parameters).

    An in-memory database restarts at zero in every process, and a URI may
    carry parameters such as ``nolock=1`` that turn off the locking between
    processes: either would let the answers exceed the budget.
    """
    if text == ":memory:" or text.lower().startswith("file:"):
        raise ValueError(
            f"ledger {text!r} (--ledger) is an SQLite in-memory name or URI, not a file path: a ledger must be a "
            "plain file path so that its count persists and is locked across processes"
        )


def _check_one_name(path: Path, identity: tuple[int, int] | None = None) -> tuple[int, int]:
    """Refuse a ledger file with more than one name (hard links); returns its (device, inode).

    SQLite names its write-ahead log and lock index (``-wal``, ``-shm``)
    after the path it opened, so two hard links to one file would be two
    ledgers that neither lock nor see each other: two budgets, one count.
    Symbolic links are safe (the path is resolved first). With ``identity``
    (the file's at opening), a file deleted, renamed or replaced since is
    refused too: whoever opens the path now counts in another file.
    """
    try:
        info = os.stat(path.resolve())
    except OSError as exc:
        raise LedgerUnavailable(f"ledger file {path} is gone since it was opened ({exc.strerror})") from None
    if identity is not None and (info.st_dev, info.st_ino) != identity:
        raise LedgerUnavailable(f"ledger file {path} was replaced since it was opened: reopen the ledger")
    links = info.st_nlink
    if links != 1:
        # LedgerUnavailable (a ValueError): one line at the command line, and 503 from a server whose file
        # gained a link while it ran (no answer until it has one name again), not a 500.
        raise LedgerUnavailable(
            f"ledger file {path} has {links} hard links: SQLite locks a ledger by the name it was opened by, so "
            "processes opening it by different names would each spend the whole budget; give it one name"
        )
    return info.st_dev, info.st_ino


def _file_uri(path: Path) -> str:
    """The read-write URI of ``path``, resolved and quoted, so nothing of the name reaches SQLite as a parameter."""
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=rwc"


class SQLiteLedger(SQLLedger):
    """A persistent ledger in the SQLite file ``path`` (created if missing).

    Parameters
    ----------
    path:
        The database file. One file may hold several budgets (by ``name``).
    budget:
        The number of answers the guarantee was calibrated for.
    name:
        Which budget in the file this ledger counts.
    context:
        The calibration the budget protects (method, epsilon, delta,
        accountant): public values only, stored as canonical JSON and
        compared on every reopen.
    timeout:
        Seconds to wait for another process's transaction before retrying.
    retries:
        How many times a spend is retried when the file stays locked past
        ``timeout`` (with a short back-off) before the error is raised.

    Raises
    ------
    LedgerMismatch
        When ``name`` already exists in the file with another budget or context.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "budget.sqlite")
    >>> with SQLiteLedger(path, budget=3) as ledger:
    ...     ledger.spend(2).remaining
    1
    >>> SQLiteLedger(path, budget=3).spent  # the count survives reopening
    2
    """

    def __init__(
        self,
        path: str | Path,
        *,
        budget: int,
        name: str = "default",
        context: dict[str, Any] | None = None,
        timeout: float = 30.0,
        retries: int = 5,
    ) -> None:
        self.path = Path(path)
        self.budget = check_count(budget, "budget", maximum=MAX_BUDGET)
        self.name = check_ledger_name(name)
        self.context = canonical_context(context)
        self.timeout = check_positive(timeout, "timeout")
        self.retries = check_count(retries, "retries", minimum=0)
        _check_plain_path(str(path))
        if self.path.is_dir():
            raise ValueError(f"ledger path {self.path} is a directory, expected a database file")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"directory of the ledger file does not exist: {self.path.parent}")
        # One connection guarded by a lock: spends are serialised by the
        # database anyway, and sqlite3 connections must not run two
        # transactions at once.
        self._lock = threading.Lock()
        self._group = _GroupCommit(self._commit_batch)
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                _file_uri(self.path), timeout=self.timeout, isolation_level=None, check_same_thread=False, uri=True
            )
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open ledger file {self.path}: {exc}") from None
        try:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                # WAL is what lets processes share the count safely; a database that cannot use it
                # (in memory, or a file system without shared memory) must not count a budget.
                raise ValueError(f"ledger file {self.path} cannot use write-ahead logging (journal mode {mode})")
            # FULL: the commit is on disk before spend() returns, so an answer
            # is never released on the strength of a charge a crash could undo.
            # Absolute now: re-resolved before each batch, a relative name would follow the process's chdir.
            self._absolute = Path(os.path.abspath(self.path))
            self._identity = _check_one_name(self._absolute)
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._transaction(self._bind)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise ValueError(f"{self.path} is not a usable privml ledger: {exc}") from None
        except BaseException:
            self.close()
            raise

    # -- transactions -------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"ledger {self.path} is closed")
        return self._conn

    def _transaction(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction, retrying when
        the database stays locked by another process past the busy timeout."""
        for attempt in range(self.retries + 1):
            with self._lock:
                conn = self._connection()
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        result = body(conn)
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
                    return result
                except sqlite3.OperationalError as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    locked = "locked" in str(exc) or "busy" in str(exc)
                    if not locked or attempt == self.retries:
                        raise
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise AssertionError("unreachable")  # pragma: no cover

    def _bind(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise ValueError(f"{self.path} has ledger schema version {version}; this privml reads {SCHEMA_VERSION}")
        for statement in schema_statements("INTEGER"):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        row = conn.execute(sql.SELECT_BINDING, (self.name,)).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO privml_budgets (name, budget, context, spent) VALUES (?, ?, ?, 0)",
                (self.name, self.budget, self.context),
            )
            return
        if check_binding(str(self.path), self.name, row, self.budget, self.context):
            conn.execute(sql.UPDATE_CONTEXT, (self.context, self.name))

    def _try_spend(self, count: int, key: str | None) -> str | None:
        return self._group.submit(count, key)

    def _commit_batch(self, batch: list[_Pending]) -> list[str | None]:
        """Charge a batch of spends in one transaction, each all or nothing, in arrival order."""

        def body(conn: sqlite3.Connection) -> list[str | None]:
            # One stat per batch (an fsync costs far more): a link made, or the file moved or replaced, since opening.
            _check_one_name(self._absolute, self._identity)
            budget, spent = conn.execute(sql.SELECT_BUDGET, (self.name,)).fetchone()
            quotas: dict[str, list[int] | None] = {}  # digest -> [quota, used], read once per batch
            charged: dict[str, int] = {}
            results: list[str | None] = []
            for item in batch:
                if spent + item.count > budget:
                    results.append(refusal_message(budget, spent, item.count))
                    continue
                if item.key is not None:
                    digest = key_digest(item.key)
                    if digest not in quotas:
                        row = conn.execute(sql.SELECT_KEY, (self.name, digest)).fetchone()
                        quotas[digest] = None if row is None else list(row)
                    state = quotas[digest]
                    if state is None:
                        results.append(unknown_key_message(item.key))
                        continue
                    if state[1] + item.count > state[0]:
                        results.append(refusal_message(state[0], state[1], item.count, item.key))
                        continue
                    state[1] += item.count
                    charged[digest] = charged.get(digest, 0) + item.count
                spent += item.count
                results.append(None)
            if any(refusal is None for refusal in results):
                conn.execute("UPDATE privml_budgets SET spent = ? WHERE name = ?", (spent, self.name))
            for digest in charged:
                conn.execute(
                    "UPDATE privml_keys SET spent = ? WHERE budget_name = ? AND key_sha256 = ?",
                    (quotas[digest][1], self.name, digest),  # type: ignore[index]
                )
            return results

        return self._transaction(body)

    def __repr__(self) -> str:
        return f"SQLiteLedger({str(self.path)!r}, budget={self.budget}, name={self.name!r})"

