"""Budget ledgers: the enforced count of private answers released."""

from privml.ledger.base import BudgetLedger, LedgerState, MemoryLedger, canonical_context

__all__ = ["BudgetLedger", "LedgerState", "MemoryLedger", "canonical_context"]
