from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from privml.ledger import BudgetLedger, MemoryLedger, PostgresLedger, SQLiteLedger
from tests.ledger.postgres_cluster import postgres_url as _postgres_url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with _postgres_url() as (url, reason):
        if url is None:
            pytest.skip(reason)
        yield url


def _factory(request: pytest.FixtureRequest, backend: str, tmp_path) -> Iterator[Callable[..., BudgetLedger]]:
    """A factory ``make(budget, context=None)``; the persistent backends
    reopen the same store when called again."""
    opened: list[BudgetLedger] = []
    name = f"t{uuid.uuid4().hex[:12]}"  # one budget per test in a shared database
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else None

    def make(budget: int, context: dict | None = None) -> BudgetLedger:
        if backend == "memory":
            ledger: BudgetLedger = MemoryLedger(budget, context=context)
        elif backend == "sqlite":
            ledger = SQLiteLedger(tmp_path / "ledger.sqlite", budget=budget, name=name, context=context)
        else:
            ledger = PostgresLedger(url, budget=budget, name=name, context=context)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_ledger(request: pytest.FixtureRequest, tmp_path) -> Iterator[Callable[..., BudgetLedger]]:
    yield from _factory(request, request.param, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def make_persistent_ledger(request: pytest.FixtureRequest, tmp_path) -> Iterator[Callable[..., BudgetLedger]]:
    yield from _factory(request, request.param, tmp_path)
