"""Every ledger backend honours the same contract (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import threading

import pytest

from privml.exceptions import BudgetExhausted
from privml.ledger import LedgerMismatch, LedgerState, key_digest


def test_spend_counts_and_returns_state(make_ledger):
    ledger = make_ledger(10)
    assert ledger.spend(3) == LedgerState(10, 3)
    assert ledger.spend(1).remaining == 6
    assert ledger.spent == 4
    assert ledger.remaining() == 6


def test_spend_is_all_or_nothing(make_ledger):
    ledger = make_ledger(5)
    ledger.spend(4)
    with pytest.raises(BudgetExhausted, match="4 of 5 answers already released, 2 more requested"):
        ledger.spend(2)
    assert ledger.spent == 4  # the refused spend charged nothing
    ledger.spend(1)
    with pytest.raises(BudgetExhausted):
        ledger.spend(1)
    assert ledger.state() == LedgerState(5, 5)


@pytest.mark.parametrize("count", [0, -1])
def test_spend_rejects_non_positive_counts(make_ledger, count):
    ledger = make_ledger(5)
    with pytest.raises(ValueError, match="count must be >= 1"):
        ledger.spend(count)
    assert ledger.spent == 0


def test_key_quota_caps_the_key_under_the_global_budget(make_ledger):
    ledger = make_ledger(10)
    ledger.set_quota("alice", 3)
    ledger.set_quota("bob", 20)
    ledger.spend(2, key="alice")
    with pytest.raises(BudgetExhausted, match="quota of key"):
        ledger.spend(2, key="alice")
    assert ledger.state("alice") == LedgerState(3, 2)
    # bob's quota is larger than the budget: the global budget still binds
    ledger.spend(8, key="bob")
    with pytest.raises(BudgetExhausted, match="privacy budget exhausted"):
        ledger.spend(1, key="alice")
    assert ledger.state("alice").spent == 2
    assert ledger.spent == 10


def test_unknown_key_is_refused_and_charges_nothing(make_ledger):
    ledger = make_ledger(10)
    with pytest.raises(BudgetExhausted, match="unknown API key"):
        ledger.spend(1, key="mallory")
    assert ledger.spent == 0
    with pytest.raises(KeyError):
        ledger.state("mallory")


def test_set_quota_keeps_what_was_spent(make_ledger):
    ledger = make_ledger(10)
    ledger.set_quota("alice", 2)
    ledger.spend(2, key="alice")
    ledger.set_quota("alice", 5)
    assert ledger.state("alice") == LedgerState(5, 2)
    assert len(ledger.keys()) == 1


def test_threads_never_overspend(make_ledger):
    ledger = make_ledger(100)
    granted = []
    lock = threading.Lock()

    def worker():
        for _ in range(40):
            try:
                ledger.spend(1)
            except BudgetExhausted:
                continue
            with lock:
                granted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(granted) == 100
    assert ledger.spent == 100


def test_persistent_ledgers_survive_reopening(make_persistent_ledger):
    first = make_persistent_ledger(10, {"model": "abc"})
    first.set_quota("alice", 4)
    first.spend(3, key="alice")
    first.close()
    again = make_persistent_ledger(10, {"model": "abc"})
    assert again.state() == LedgerState(10, 3)
    assert again.state("alice") == LedgerState(4, 3)


def test_a_ledger_bound_with_a_model_hash_reopens_without_it(make_persistent_ledger):
    # Earlier versions stored the model file's SHA-256 in the context, a fingerprint of the training data in a
    # ledger that may be shared: it is compared without that key, so the count carries over.
    make_persistent_ledger(10, {"model_sha256": "f0bde005", "epsilon": 1.0}).spend(2)
    assert make_persistent_ledger(10, {"epsilon": 1.0}).spent == 2
    with pytest.raises(LedgerMismatch, match="another calibration") as refused:
        make_persistent_ledger(10, {"epsilon": 2.0})
    assert "f0bde005" not in str(refused.value) and "model_sha256" not in str(refused.value)


def test_reopening_with_another_guarantee_is_refused(make_persistent_ledger):
    make_persistent_ledger(10, {"model": "abc", "epsilon": 1.0}).spend(1)
    with pytest.raises(LedgerMismatch, match="of 10 answers, not 11"):
        make_persistent_ledger(11, {"model": "abc", "epsilon": 1.0})
    with pytest.raises(LedgerMismatch, match="another calibration"):
        make_persistent_ledger(10, {"model": "abc", "epsilon": 2.0})
    assert make_persistent_ledger(10, {"epsilon": 1.0, "model": "abc"}).spent == 1  # key order is irrelevant


def test_keys_are_stored_as_digests(make_persistent_ledger):
    ledger = make_persistent_ledger(10)
    ledger.set_quota("s3cret-key", 2)
    assert list(ledger.keys()) == [key_digest("s3cret-key")]
    with pytest.raises(BudgetExhausted) as info:
        ledger.spend(3, key="s3cret-key")
    assert "s3cret-key" not in str(info.value)


def test_no_backend_puts_a_raw_key_in_its_messages(make_ledger):
    # The server sends refusals in its 429 bodies: a key is named by its digest label only.
    secret = "sk-live-SECRET-123"
    ledger = make_ledger(10)
    ledger.set_quota(secret, 1)
    messages = []
    for key, count in ((secret, 2), ("sk-unknown-SECRET-456", 1)):
        with pytest.raises(BudgetExhausted) as info:
            ledger.spend(count, key=key)
        messages.append(str(info.value))
    with pytest.raises(KeyError) as missing:
        ledger.state("sk-unknown-SECRET-456")
    messages.append(str(missing.value))
    assert all("SECRET" not in message for message in messages), messages
    assert "sha256:" in messages[0] and "sha256:" in messages[1]
