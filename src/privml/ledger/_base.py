"""The budget ledger: how many private answers have been released.

A private-prediction model is calibrated for a budget of ``B`` queries: each
answer spends a fixed share of (epsilon, delta), and the guarantee holds only
if no more than ``B`` answers are ever released. The ledger is the record
that enforces it. Its one rule is *charge first, answer second*: a spend is
committed before the answer is computed, so a crash between the two can only
over-count what was released, never under-count it.

A ledger may also hold per-key quotas (for API keys): a key's quota caps what
that key may spend, always under the global budget.
"""

from __future__ import annotations

import hashlib
import json
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from privml._validation import MAX_BUDGET, check_count
from privml.exceptions import BudgetExhausted, PrivmlError

__all__ = [
    "BudgetLedger",
    "LedgerMismatch",
    "LedgerState",
    "MemoryLedger",
    "calibration_context",
    "canonical_context",
    "check_binding",
    "check_context",
    "key_digest",
    "key_label",
    "refusal_message",
    "unknown_key_message",
]


class LedgerMismatch(PrivmlError, ValueError):
    """A persistent ledger was reopened with another budget or context.

    One count must protect one guarantee: continuing a ledger written for a
    different budget or calibration would mix two guarantees.
    """


@dataclass(frozen=True)
class LedgerState:
    """A snapshot of a ledger (or of one key's quota)."""

    budget: int
    spent: int

    @property
    def remaining(self) -> int:
        return max(self.budget - self.spent, 0)

    def to_dict(self) -> dict[str, int]:
        return {"budget": self.budget, "spent": self.spent, "remaining": self.remaining}


#: Context keys earlier privml versions stored and this one drops: ``model_sha256`` was the SHA-256 of the model
#: file, a function of the training data (a prediction-sensitivity file holds non-private weights, and a retrained
#: file is byte for byte the same), so a shared ledger held a fingerprint of the data. A budget is bound to its
#: calibration instead; stored contexts holding these keys are compared without them and rewritten.
LEGACY_CONTEXT_KEYS: tuple[str, ...] = ("model_sha256",)


def canonical_context(context: dict[str, Any] | None) -> str:
    """The context a ledger is bound to, as canonical JSON (sorted keys).

    The context names the calibration the budget protects (method, epsilon,
    delta, accountant): reopening a ledger for another calibration would mix
    two guarantees in one count, so it is refused. It must hold public
    values only, since a ledger may be shared (a PostgreSQL database): no
    fingerprint of the model file or the data. Two models of one calibration
    may share a budget name; over-counting is the safe side.
    """
    return json.dumps(context or {}, sort_keys=True, separators=(",", ":"), allow_nan=False)


def calibration_context(method: str, epsilon: float, delta: float, accountant: str) -> dict[str, Any]:
    """The record a ledger is bound to: the calibration its budget protects (public values only).

    The one builder of it: ``privml serve``/``predict`` bind persistent
    ledgers with it and the predictors check an attached ledger against it,
    so the two can be compared (see :func:`check_context`).
    """
    return {"method": str(method), "epsilon": float(epsilon), "delta": float(delta), "accountant": str(accountant)}


def check_context(ledger: object, context: dict[str, Any]) -> None:
    """Refuse an open ``ledger`` bound to a calibration other than ``context``.

    Reopening a persistent ledger compares the contexts (:func:`check_binding`);
    a ledger object handed to a predictor is compared here. A ledger opened
    without a context (``{}``) names no calibration and is accepted; contexts
    holding :data:`LEGACY_CONTEXT_KEYS` are compared without them.
    """
    bound = getattr(ledger, "context", None)
    if not isinstance(bound, str):
        return
    bound = _without_legacy_keys(bound)
    wanted = canonical_context(context)
    if bound not in ("{}", wanted):
        raise LedgerMismatch(
            f"the ledger is bound to another calibration (context {bound}, the predictor's is {wanted}): "
            "refusing to mix two guarantees in one count"
        )


def _without_legacy_keys(context: str) -> str:
    """A stored context without :data:`LEGACY_CONTEXT_KEYS` (canonical), or as it is if it is not a JSON object."""
    try:
        parsed = json.loads(context)
    except ValueError:
        return context
    if not isinstance(parsed, dict) or not any(key in parsed for key in LEGACY_CONTEXT_KEYS):
        return context
    return canonical_context({k: v for k, v in parsed.items() if k not in LEGACY_CONTEXT_KEYS})


def key_digest(key: str) -> str:
    """The SHA-256 hex digest of an API key: what persistent ledgers store.

    Raw keys are credentials; a ledger file or table that leaks must not
    reveal them, so only their digests are ever written.
    """
    if not isinstance(key, str):
        raise TypeError(f"key must be a string, got {type(key).__name__}")
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_label(key: str) -> str:
    """How a key is named in messages: a digest prefix, never the key itself."""
    return f"sha256:{key_digest(key)[:12]}"


def unknown_key_message(key: str) -> str:
    """The one-line reason a spend by a key without a quota is refused (every backend; no raw key)."""
    return f"unknown API key ({key_label(key)}): it has no quota"


def check_binding(where: str, name: str, row: tuple[int, str], budget: int, context: str) -> bool:
    """Refuse to reopen budget ``name`` with another budget or context.

    ``row`` is the stored ``(budget, context)``; shared by the persistent
    ledgers. Returns whether the stored context holds legacy keys (see
    :data:`LEGACY_CONTEXT_KEYS`), which the caller then rewrites as ``context``.
    """
    stored_budget, raw_context = row
    stored_context = _without_legacy_keys(raw_context)
    if stored_budget != budget:
        raise LedgerMismatch(
            f"ledger {where} holds budget {name!r} of {stored_budget} answers, not {budget}: "
            "refusing to mix two guarantees (use another ledger or budget name)"
        )
    if stored_context != _without_legacy_keys(context):
        raise LedgerMismatch(
            f"ledger {where} holds budget {name!r} for another calibration "
            f"(stored context {stored_context}, requested {context}): refusing to mix two guarantees"
        )
    return stored_context != raw_context


class BudgetLedger(ABC):
    """Counts released answers against a budget of ``budget`` queries.

    Subclasses implement :meth:`_try_spend` atomically (one lock, one
    transaction or one row lock) and :meth:`state`.
    """

    budget: int

    def spend(self, count: int = 1, *, key: str | None = None) -> LedgerState:
        """Charge ``count`` answers before they are computed.

        All or nothing: when ``spent + count`` would exceed the budget (or the
        key's quota) nothing is charged and :class:`BudgetExhausted` is raised.
        Returns the global state after the charge.
        """
        count = check_count(count, "count")
        if key is not None and not isinstance(key, str):
            raise TypeError(f"key must be a string or None, got {type(key).__name__}")
        refusal = self._try_spend(count, key)
        if refusal is not None:
            raise BudgetExhausted(refusal)
        return self.state()

    @abstractmethod
    def _try_spend(self, count: int, key: str | None) -> str | None:
        """Atomically charge ``count``; return ``None`` on success or the
        refusal message (having charged nothing)."""

    @abstractmethod
    def state(self, key: str | None = None) -> LedgerState:
        """The global state, or the quota state of ``key``."""

    @abstractmethod
    def set_quota(self, key: str, quota: int) -> None:
        """Give ``key`` a quota of ``quota`` answers (what it already spent is kept)."""

    @abstractmethod
    def keys(self) -> dict[str, LedgerState]:
        """Every key with a quota, and its state."""

    def remaining(self, key: str | None = None) -> int:
        return self.state(key).remaining

    @property
    def spent(self) -> int:
        return self.state().spent

    def close(self) -> None:  # a hook with a default: in-memory ledgers hold nothing to release
        """Release resources (files, connections); the record itself persists."""
        return None

    def __enter__(self) -> BudgetLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def refusal_message(budget: int, spent: int, count: int, key: str | None = None) -> str:
    """The one-line reason a spend is refused (shared by every backend).

    ``key`` is the raw API key: it is named by :func:`key_label` here, so no
    backend can put a credential into a message (the server sends these in
    its 429 bodies).
    """
    who = "budget" if key is None else f"quota of key {key_label(key)!r}"
    return (
        f"privacy {who} exhausted: {spent} of {budget} answers already released, "
        f"{count} more requested; nothing was answered"
    )


class MemoryLedger(BudgetLedger):
    """An in-process ledger (thread-safe; forgotten when the process exits).

    The default of the private-prediction estimators. Use
    :class:`~privml.ledger.SQLiteLedger` (or PostgreSQL) when the count
    must survive restarts or be shared between processes.
    """

    def __init__(self, budget: int, *, context: dict[str, Any] | None = None) -> None:
        self.budget = check_count(budget, "budget", maximum=MAX_BUDGET)
        self.context = canonical_context(context)
        self._spent = 0
        self._quotas: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def _try_spend(self, count: int, key: str | None) -> str | None:
        with self._lock:
            if self._spent + count > self.budget:
                return refusal_message(self.budget, self._spent, count)
            if key is not None:
                if key not in self._quotas:
                    return unknown_key_message(key)
                quota, used = self._quotas[key]
                if used + count > quota:
                    return refusal_message(quota, used, count, key)
                self._quotas[key][1] = used + count
            self._spent += count
            return None

    def state(self, key: str | None = None) -> LedgerState:
        with self._lock:
            if key is None:
                return LedgerState(self.budget, self._spent)
            if key not in self._quotas:
                raise KeyError(f"unknown API key ({key_label(key)})")
            quota, used = self._quotas[key]
            return LedgerState(quota, used)

    def set_quota(self, key: str, quota: int) -> None:
        quota = check_count(quota, "quota")
        with self._lock:
            used = self._quotas.get(key, [0, 0])[1]
            self._quotas[key] = [quota, used]

    def keys(self) -> dict[str, LedgerState]:
        with self._lock:
            return {k: LedgerState(q, u) for k, (q, u) in self._quotas.items()}

    def __repr__(self) -> str:
        return f"MemoryLedger(budget={self.budget}, spent={self._spent})"
