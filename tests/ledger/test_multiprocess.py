"""Several processes spending concurrently on one persistent ledger."""

from __future__ import annotations

import multiprocessing
import uuid

from privml.exceptions import BudgetExhausted
from privml.ledger import open_ledger

N_PROCESSES = 4
ATTEMPTS = 60
BUDGET = 150  # less than N_PROCESSES * ATTEMPTS, so some spends must be refused


def _spend_many(target: str, name: str, key: str, queue) -> None:
    granted = 0
    with open_ledger(target, budget=BUDGET, name=name, context={"test": "multiprocess"}) as ledger:
        for i in range(ATTEMPTS):
            try:
                ledger.spend(1 + i % 2, key=key)
            except BudgetExhausted:
                continue
            granted += 1 + i % 2
    queue.put(granted)


def _run(target: str) -> None:
    name = f"mp{uuid.uuid4().hex[:8]}"
    with open_ledger(target, budget=BUDGET, name=name, context={"test": "multiprocess"}) as ledger:
        for p in range(N_PROCESSES):
            ledger.set_quota(f"key-{p}", 70)
    ctx = multiprocessing.get_context("spawn")  # no inherited connections or locks
    queue = ctx.Queue()
    procs = [ctx.Process(target=_spend_many, args=(target, name, f"key-{p}", queue)) for p in range(N_PROCESSES)]
    for proc in procs:
        proc.start()
    granted = [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    with open_ledger(target, budget=BUDGET, name=name, context={"test": "multiprocess"}) as ledger:
        assert ledger.spent == sum(granted)  # every success counted, nothing else
        assert BUDGET - 1 <= ledger.spent <= BUDGET  # a spend of 2 may not fit the last slot
        per_key = ledger.keys()
        assert sum(s.spent for s in per_key.values()) == ledger.spent
        assert all(s.spent <= 70 for s in per_key.values())


def test_sqlite_processes_never_overspend(tmp_path):
    _run(str(tmp_path / "shared.sqlite"))


def test_postgres_processes_never_overspend(postgres_url):
    _run(postgres_url)
