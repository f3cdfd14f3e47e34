"""A predictor's budget cannot be reset by re-fitting it (issue 18: budget integrity beyond one object)."""

from __future__ import annotations

import numpy as np
import pytest

from privml.ledger import MemoryLedger
from privml.prediction import PredictionSensitivity, SubsampleAndAggregate


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3)) / 2
    return X, (X[:, 0] > 0).astype(int)


def _make(kind: str, **kwargs):
    # Seeded unless a persistent ledger is given (a seed with one warns: see the last test).
    kwargs.setdefault("random_state", 0 if isinstance(kwargs.get("ledger"), MemoryLedger | None) else None)
    if kind == "sensitivity":
        return PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=10, classes=[0, 1], **kwargs)
    return SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=10, classes=[0, 1], **kwargs)


@pytest.mark.parametrize("kind", ["sensitivity", "aggregate"])
def test_refit_after_answers_is_refused(kind: str) -> None:
    X, y = _data()
    model = _make(kind).fit(X, y)
    model.fit(X, y)  # nothing answered yet: re-fitting is harmless
    model.predict(X[:4])
    with pytest.raises(ValueError, match="already released 4 answers"):
        model.fit(X, y)
    assert model.remaining() == 6  # the count is untouched


@pytest.mark.parametrize("kind", ["sensitivity", "aggregate"])
def test_refit_with_a_shared_ledger_keeps_counting(kind: str) -> None:
    X, y = _data()
    ledger = MemoryLedger(10)
    model = _make(kind, ledger=ledger).fit(X, y)
    model.predict(X[:4])
    model.fit(X, y)
    assert model.remaining() == 6


@pytest.mark.parametrize("kind", ["sensitivity", "aggregate"])
def test_a_ledger_bound_to_another_calibration_is_refused(kind: str, tmp_path) -> None:
    # From a review: check_ledger compared only the budget, so a ledger privml serve had bound to epsilon=1 was
    # charged by a predictor calibrated for epsilon=50 (and the two sides built their records with other keys).
    from privml.ledger import LedgerMismatch, SQLiteLedger

    X, y = _data()
    fitted = _make(kind).fit(X, y)
    privacy = fitted.privacy_  # the record privml serve binds a ledger to
    same = {"method": fitted.method, "epsilon": privacy.epsilon, "delta": privacy.delta,
            "accountant": privacy.accountant}
    other = {**same, "epsilon": 50.0}
    with SQLiteLedger(tmp_path / "other.sqlite", budget=10, context=other) as ledger:
        with pytest.raises(LedgerMismatch, match="another calibration"):
            _make(kind, ledger=ledger).fit(X, y)
        assert ledger.spent == 0
    legacy = {**same, "model_sha256": "0" * 64}  # contexts of earlier versions still match without the old key
    for context in (same, legacy, None):
        with SQLiteLedger(tmp_path / f"{len(context or {})}.sqlite", budget=10, context=context) as ledger:
            _make(kind, ledger=ledger).fit(X, y).predict(X[:2])
            assert ledger.spent == 2


@pytest.mark.parametrize("kind", ["sensitivity", "aggregate"])
def test_a_seed_with_a_persistent_ledger_warns(kind: str, tmp_path) -> None:
    # The library's side of --seed with --ledger (refused on the command line): processes that reopen the budget
    # with one seed draw one noise, and the differences of their answers cancel it (a review).
    from privml.exceptions import PrivacyLeakWarning
    from privml.ledger import SQLiteLedger

    X, y = _data()
    with SQLiteLedger(tmp_path / "l.sqlite", budget=10) as ledger, pytest.warns(PrivacyLeakWarning, match="seed"):
        _make(kind, ledger=ledger, random_state=0).fit(X, y)
