"""The results store: one SQLite row per run, so a study resumes where it stopped.

Only the coordinating process writes (workers return records), so SQLite's
single-writer model is never contended. A run is identified by its job key
(:func:`privml.study._spec.job_key`); a finished key (status ``ok``) is
skipped on the next run, a failed one is retried.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from privml.exceptions import PrivmlError
from privml.io import json_safe

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    spec_hash TEXT NOT NULL,
    method TEXT NOT NULL,
    params TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL,
    accuracy REAL,
    epsilon REAL,
    delta REAL,
    train_seconds REAL,
    predict_seconds REAL,
    wall_seconds REAL,
    selection TEXT,
    info TEXT,
    error TEXT,
    version TEXT NOT NULL,
    finished TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS specs (
    spec_hash TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    saved TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS notes (
    spec_hash TEXT NOT NULL,
    note TEXT NOT NULL,
    UNIQUE (spec_hash, note)
);
"""
_COLUMNS = ("key", "spec_hash", "method", "params", "repeat", "seed", "status", "accuracy", "epsilon", "delta",
            "train_seconds", "predict_seconds", "wall_seconds", "selection", "info", "error", "version", "finished")
_JSON_COLUMNS = ("params", "selection", "info")


class _DamagedStore(PrivmlError, ValueError):
    """A store that sqlite cannot read (a one-line error for the CLI, exit 2)."""


class ResultStore:
    """A SQLite file of runs, specs and notes.

    Parameters
    ----------
    path : path
        The database file (created with its folder if missing).
    read_only : bool
        Open an existing store for reading only (``status``, ``report``,
        ``recommend``): nothing is created, neither the folder nor the file
        nor its tables, and nothing can be written; a file without the
        store's tables is refused (it is someone else's database, or empty).

    Examples
    --------
    >>> import tempfile, os
    >>> store = ResultStore(os.path.join(tempfile.mkdtemp(), "results.sqlite"))
    >>> store.finished_keys()
    set()
    """

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.is_file():
            raise FileNotFoundError(f"results store {self.path} does not exist")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._connect() as db:
                if not read_only:
                    db.executescript(_SCHEMA)
                    return
                # Read-only: the commands that only read must leave a foreign or empty file as they found it.
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"runs", "specs", "notes"} <= tables:
                raise ValueError(f"{self.path} holds no study (it is not a privml results store)")
        except sqlite3.OperationalError as exc:  # locked, read-only, full: the file is fine, say what is wrong
            raise ValueError(f"{self.path}: {exc}") from None
        except (sqlite3.DatabaseError, _DamagedStore) as exc:  # a corrupt or foreign file: one line, not a traceback
            cause = exc.__cause__ if isinstance(exc, _DamagedStore) else exc
            raise ValueError(
                f"{self.path} is not a privml results store ({cause}); move it away or use another folder"
            ) from None

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # A fresh connection per operation, committed and closed: the store may be used from
        # several threads (dask's callbacks) and must never keep the file open between runs.
        if self.read_only:
            # mode=ro: SQLite itself refuses any write (and never creates the file). A run killed inside a
            # transaction leaves a hot journal that only a writable connection can roll back: then mode=rw, which
            # still never creates the file (this object only reads; the rollback restores the last commit).
            hot = Path(f"{self.path}-journal")
            mode = "rw" if hot.is_file() and hot.stat().st_size > 0 else "ro"
            db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode={mode}", timeout=60, uri=True)
        else:
            db = sqlite3.connect(self.path, timeout=60)
        try:
            with db:
                yield db
        except sqlite3.OperationalError:
            raise  # locked, read-only, full: the file is fine and the message says what is wrong
        except sqlite3.DatabaseError as exc:  # damaged after it opened (a malformed page): one line, not a traceback
            raise _DamagedStore(f"{self.path}: the results store is damaged ({exc}); move it away or use another "
                                "folder (finished runs in it are lost)") from exc
        finally:
            db.close()

    def save_spec(self, spec_hash: str, spec: dict[str, Any], saved: str) -> None:
        """Record the spec a set of runs came from."""
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO specs VALUES (?, ?, ?)", (spec_hash, json.dumps(spec), saved))

    def specs(self) -> dict[str, dict[str, Any]]:
        """Every spec stored, by hash."""
        with self._connect() as db:
            return {h: json.loads(s) for h, s in db.execute("SELECT spec_hash, spec FROM specs ORDER BY saved")}

    def add_notes(self, spec_hash: str, notes: Iterable[str]) -> None:
        """Attach notes (e.g. an unavailable method) to a spec; duplicates are ignored."""
        with self._connect() as db:
            db.executemany("INSERT OR IGNORE INTO notes VALUES (?, ?)", [(spec_hash, n) for n in notes])

    def notes(self, spec_hash: str | None = None) -> list[str]:
        """Notes of one spec, or of all."""
        with self._connect() as db:
            if spec_hash is None:
                rows = db.execute("SELECT DISTINCT note FROM notes ORDER BY rowid")
            else:
                rows = db.execute("SELECT note FROM notes WHERE spec_hash = ? ORDER BY rowid", (spec_hash,))
            return [r[0] for r in rows]

    def finished_keys(self) -> set[str]:
        """Keys of the runs that finished successfully."""
        with self._connect() as db:
            return {r[0] for r in db.execute("SELECT key FROM runs WHERE status = 'ok'")}

    def put(self, record: dict[str, Any]) -> None:
        """Insert or replace one run (a dict with the store's columns)."""
        missing = [c for c in _COLUMNS if c not in record]
        if missing:
            raise ValueError(f"run record lacks {missing[0]!r}")
        row = [json.dumps(json_safe(record[c])) if c in _JSON_COLUMNS else record[c] for c in _COLUMNS]
        with self._connect() as db:
            db.execute(f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' * len(_COLUMNS))})", row)

    def records(self, *, spec_hash: str | None = None, status: str | None = "ok") -> list[dict[str, Any]]:
        """Runs as dicts (JSON columns decoded), optionally of one spec and one status."""
        query, args = "SELECT * FROM runs WHERE 1 = 1", []
        if spec_hash is not None:
            query += " AND spec_hash = ?"
            args.append(spec_hash)
        if status is not None:
            query += " AND status = ?"
            args.append(status)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY rowid", args).fetchall()
        out = []
        for row in rows:
            record = dict(zip(_COLUMNS, row))
            for c in _JSON_COLUMNS:
                record[c] = None if record[c] is None else json.loads(record[c])
            out.append(record)
        return out

    def counts(self) -> dict[str, int]:
        """Number of runs by status."""
        with self._connect() as db:
            return dict(db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
