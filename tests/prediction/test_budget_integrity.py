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
    if kind == "sensitivity":
        return PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=10, classes=[0, 1], random_state=0, **kwargs)
    return SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=10, classes=[0, 1], random_state=0, **kwargs)


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
