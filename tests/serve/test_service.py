"""The service layer: order of checks, labels, keys (no HTTP)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from privml.exceptions import LedgerUnavailable
from privml.ledger import MemoryLedger
from privml.serve import PredictionService, RequestError, ServeLimits
from tests.serve.helpers import BudgetedDouble


def body(rows, probabilities=False) -> bytes:
    return json.dumps({"rows": np.asarray(rows).tolist(), "probabilities": probabilities}).encode()


def test_a_private_model_is_served_without_budget(private_model, rows):
    service = PredictionService(private_model)
    out = service.predict(body(rows[:5]))
    assert out["labels"] == private_model.predict(rows[:5]).tolist()
    assert service.budget() == {
        "spent": 0,
        "remaining": None,
        "budget": None,
        "epsilon": 1.0,
        "delta": 0.0,
        "neighbouring": "replace-one",
        "neighbouring_detail": "replace-one: same n, one record replaced by any other",  # as train --json says it
    }


def test_probabilities_and_labels_agree_and_cost_one_charge(rows):
    double = BudgetedDouble(MemoryLedger(10))
    service = PredictionService(double)
    out = service.predict(body(rows[:3], probabilities=True))
    proba = np.asarray(out["probabilities"])
    assert proba.shape == (3, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert out["labels"] == np.argmax(proba, axis=1).tolist()
    assert out["classes"] == [0, 1]
    assert double.ledger_.spent == 3  # not 6: labels are read off the probabilities


def test_wrong_width_is_422_and_spends_nothing(rows):
    double = BudgetedDouble(MemoryLedger(10))
    service = PredictionService(double)
    with pytest.raises(RequestError, match="rows have 29 values; the model expects 30") as info:
        service.predict(body(rows[:2, :29]))
    assert info.value.status == 422
    assert double.ledger_.spent == 0 and double.computed == 0


@pytest.mark.parametrize("width", [28, 30, 31])
def test_a_width_error_names_the_raw_width_the_preprocessing_takes(rows, width):
    # The model sees 30 columns: 29 raw values and an appended bias. Clients send raw rows.
    double = BudgetedDouble(MemoryLedger(10))
    service = PredictionService(double, preprocess=lambda X: np.hstack([X, np.full((len(X), 1), 0.5)]))
    raw = np.zeros((2, width))
    with pytest.raises(RequestError) as info:
        service.predict(body(raw))
    assert info.value.status == 422
    assert info.value.message == f"rows have {width} values; the model expects 29 (30 after preprocessing)"
    assert double.ledger_.spent == 0 and double.computed == 0


@pytest.mark.parametrize("width", [28, 30])
def test_a_width_error_comes_before_a_per_column_preprocessing(rows, width):
    # From a review: a built-in dataset's preprocessing scales per column, so a wrong width failed inside it with
    # numpy's broadcast message; the raw width is now checked first.
    mean = np.linspace(-1.0, 1.0, 29)
    double = BudgetedDouble(MemoryLedger(10))
    service = PredictionService(double, preprocess=lambda X: np.hstack([X - mean, np.full((len(X), 1), 0.5)]))
    with pytest.raises(RequestError) as info:
        service.predict(body(np.zeros((2, width))))
    assert info.value.status == 422
    assert info.value.message == f"rows have {width} values; the model expects 29 (30 after preprocessing)"
    assert double.ledger_.spent == 0 and double.computed == 0


def test_exhausted_budget_is_429(rows):
    double = BudgetedDouble(MemoryLedger(3))
    service = PredictionService(double)
    service.predict(body(rows[:2]))
    with pytest.raises(RequestError, match="budget exhausted") as info:
        service.predict(body(rows[:2]))
    assert info.value.status == 429
    assert double.computed == 2


def test_too_many_rows_per_request(rows):
    double = BudgetedDouble(MemoryLedger(100))
    service = PredictionService(double, limits=ServeLimits(max_rows=4))
    with pytest.raises(RequestError, match="too many rows: 5 > 4"):
        service.predict(body(rows[:5]))
    assert double.ledger_.spent == 0


def drop_last_column(X: np.ndarray) -> np.ndarray:
    if X.shape[1] != 31:
        raise ValueError("need 31 columns")
    return X[:, :-1]


def test_class_names_and_preprocessing(private_model, rows):
    service = PredictionService(private_model, class_names=["malignant", "benign"], preprocess=drop_last_column)
    padded = np.column_stack([rows[:4], np.zeros(4)])
    out = service.predict(body(padded, probabilities=True))
    expected = np.array(["malignant", "benign"])[private_model.predict(rows[:4])]
    assert out["labels"] == expected.tolist()
    assert out["classes"] == ["malignant", "benign"]
    # The raw width is checked before the preprocessing runs (its own message would be less clear).
    with pytest.raises(RequestError, match=r"rows have 30 values; the model expects 31 \(30 after preprocessing\)"):
        service.predict(body(rows[:4]))
    with pytest.raises(ValueError, match="class_names has 3 names for 2 classes"):
        PredictionService(private_model, class_names=["a", "b", "c"])


def test_api_keys_authenticate_and_get_quotas(rows):
    ledger = MemoryLedger(100)
    service = PredictionService(BudgetedDouble(ledger), api_keys={"alpha-key": 3})
    assert service.requires_key
    for header, match in [(None, "missing X-API-Key"), ("", "missing X-API-Key"), ("guess", "unknown API key")]:
        with pytest.raises(RequestError, match=match) as info:
            service.authenticate(header)
        assert info.value.status == 401
    key = service.authenticate("alpha-key")
    service.predict(body(rows[:2]), key)
    with pytest.raises(RequestError, match="quota of key") as info:
        service.predict(body(rows[:2]), key)
    assert info.value.status == 429
    assert service.budget(key)["key"] == {"quota": 3, "spent": 2, "remaining": 1}
    assert ledger.spent == 2


def test_api_keys_need_a_budget(private_model):
    with pytest.raises(ValueError, match="privately trained and has no budget"):
        PredictionService(private_model, api_keys={"alpha-key": 3})


def test_without_keys_the_header_is_ignored(rows):
    service = PredictionService(BudgetedDouble(MemoryLedger(5)))
    assert service.authenticate("anything") is None
    assert not service.requires_key


class FailingLedger(MemoryLedger):
    """A ledger whose store fails with ``error``: a full disk, a dropped connection, a database that stays down."""

    def __init__(self, budget, error):
        super().__init__(budget)
        self.error = error

    def _try_spend(self, count, key):
        raise self.error

    def state(self, key=None):
        raise self.error


@pytest.mark.parametrize("error", [
    sqlite3.OperationalError("disk I/O error"),
    # From a review: PostgresLedger's failed reconnection was a ValueError, which the server answered with 500.
    LedgerUnavailable("cannot connect to ledger database postgresql://u@db/x: connection refused"),
])
def test_a_failing_ledger_is_503_and_nothing_is_computed(rows, error):
    double = BudgetedDouble(FailingLedger(10, error))
    service = PredictionService(double)
    with pytest.raises(RequestError, match="ledger is unavailable; nothing was answered") as info:
        service.predict(body(rows[:2]))
    assert info.value.status == 503 and double.computed == 0
    with pytest.raises(RequestError, match="ledger is unavailable") as info:
        service.budget()
    assert info.value.status == 503


def test_values_that_overflow_the_preprocessing_are_422(private_model):
    service = PredictionService(private_model, preprocess=lambda X: X * 1e300)
    with pytest.raises(RequestError, match="too large for the model's preprocessing") as info:
        service.predict(body(np.full((1, 30), 1e300)))
    assert info.value.status == 422


def test_only_classifiers_are_served():
    class Regressor:
        n_features_in_ = 3

    with pytest.raises(ValueError, match="Regressor has no classes_: only classifiers can be served"):
        PredictionService(Regressor())


def test_the_docs_say_the_ledger_is_bound_to_the_calibration_only():
    # From a review: these still said the ledger was bound to the model file's SHA-256 (and refused a worker whose
    # model differs); since the hash was dropped (LEGACY_CONTEXT_KEYS) it records the calibration only.
    import privml.ledger._base
    import privml.serve._workers
    from privml.serve._model import ModelSpec

    for doc in (ModelSpec.__doc__, privml.serve._workers.__doc__, privml.ledger._base.LedgerMismatch.__doc__):
        assert "SHA-256" not in doc and "model or calibration" not in doc and "model differs" not in doc
        assert "calibration" in doc
