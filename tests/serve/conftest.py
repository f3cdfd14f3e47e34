from __future__ import annotations

import pytest

from privml.linear._output_perturbation import OutputPerturbationClassifier
from tests.ledger.conftest import postgres_url  # noqa: F401 - the shared PostgreSQL fixture
from tests.serve.helpers import breast_cancer_rows


@pytest.fixture(scope="session")
def private_model() -> OutputPerturbationClassifier:
    """A privately trained model: served as is, no budget."""
    X, y = breast_cancer_rows()
    return OutputPerturbationClassifier(epsilon=1.0, classes=(0, 1), random_state=0).fit(X, y)


@pytest.fixture(scope="session")
def rows():
    return breast_cancer_rows()[0]
