"""Budget ledgers: the enforced count of private answers released.

>>> import tempfile, os
>>> from privml.ledger import open_ledger
>>> ledger = open_ledger(os.path.join(tempfile.mkdtemp(), "b.sqlite"), budget=10)
>>> ledger.spend(3).remaining
7
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privml.ledger._base import (
    BudgetLedger,
    LedgerMismatch,
    LedgerState,
    MemoryLedger,
    calibration_context,
    canonical_context,
    key_digest,
)
from privml.ledger._postgres import PostgresLedger
from privml.ledger._sqlite import SQLiteLedger

__all__ = [
    "BudgetLedger",
    "LedgerMismatch",
    "LedgerState",
    "MemoryLedger",
    "PostgresLedger",
    "SQLiteLedger",
    "calibration_context",
    "canonical_context",
    "key_digest",
    "open_ledger",
]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_ledger(
    path_or_url: str | Path, *, budget: int, name: str = "default", context: dict[str, Any] | None = None
) -> BudgetLedger:
    """Open (or create) the persistent ledger at ``path_or_url``.

    A ``postgresql://`` (or ``postgres://``) URL opens a
    :class:`PostgresLedger`; anything else is the path of a
    :class:`SQLiteLedger` file.

    Parameters
    ----------
    path_or_url:
        SQLite file path or PostgreSQL URL.
    budget:
        Answers the guarantee was calibrated for.
    name:
        Which budget of the store to count.
    context:
        What the budget protects; reopening with another ``budget`` or
        ``context`` raises :class:`LedgerMismatch`.
    """
    if isinstance(path_or_url, str) and path_or_url.startswith(_POSTGRES_SCHEMES):
        return PostgresLedger(path_or_url, budget=budget, name=name, context=context)
    if not isinstance(path_or_url, str | Path):
        raise TypeError(f"path_or_url must be a file path or a postgresql:// URL, got {path_or_url!r}")
    if not str(path_or_url):
        raise ValueError("path_or_url is empty: give a file path or a postgresql:// URL")
    if isinstance(path_or_url, str) and "://" in path_or_url:
        raise ValueError(f"unsupported ledger URL {path_or_url!r}: use a file path or postgresql://")
    return SQLiteLedger(path_or_url, budget=budget, name=name, context=context)
