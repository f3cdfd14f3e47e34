"""The OpenAPI document is generated from models that state exactly what the service does.

The service's own validator decides what a ``/predict`` body may be; the
request model only describes it. These tests hold the two to each other:
any body the model accepts the service answers (and charges), any body it
refuses the service refuses with 422; every answer fits the response models.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from privml.ledger import MemoryLedger
from privml.serve import PredictionService, RequestError
from privml.serve._asgi import Budget, Health, openapi_document, service_models
from tests.serve.helpers import BudgetedDouble, small_limits
from tests.serve.test_hostile import json_values, near_valid

WIDTH = 30


@pytest.fixture(scope="module")
def service():
    return PredictionService(BudgetedDouble(MemoryLedger(10**9)), limits=small_limits(max_rows=20))


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(json_values, near_valid))
def test_the_request_model_accepts_exactly_what_the_service_answers(service, body):
    try:
        payload = json.dumps(body).encode()
    except (OverflowError, ValueError):
        return
    request_model, response_model = service_models(service)
    try:
        request_model.model_validate_json(payload)
        described = True
    except ValidationError:
        described = False
    before = service.ledger.spent
    try:
        out = service.predict(payload)
    except RequestError as exc:
        assert exc.status == 422
        assert not described, (body, exc.message)
        assert service.ledger.spent == before
    else:
        assert described, body
        response_model.model_validate(out)
        assert service.ledger.spent - before == len(body["rows"])


def test_answers_fit_the_response_models(service, private_model, rows):
    _, response_model = service_models(service)
    response_model.model_validate(service.predict(json.dumps({"rows": rows[:3].tolist()}).encode()))
    response_model.model_validate(service.predict(json.dumps({"rows": rows[:3].tolist(),
                                                              "probabilities": True}).encode()))
    Budget.model_validate(service.budget())
    Health.model_validate(service.health())
    keyed = PredictionService(BudgetedDouble(MemoryLedger(10)), api_keys={"alpha-key": 5})
    Budget.model_validate(keyed.budget("alpha-key"))
    free = PredictionService(private_model, class_names=["malignant", "benign"])
    _, free_response = service_models(free)
    out = free.predict(json.dumps({"rows": rows[:2].tolist(), "probabilities": True}).encode())
    free_response.model_validate(out)
    Budget.model_validate(free.budget())
    with pytest.raises(ValidationError):  # the label enum is the model's class set
        free_response.model_validate({"labels": ["neither"]})


def test_the_document_states_the_enforced_limits_and_the_key_scheme(service):
    document = openapi_document(service)
    assert document["openapi"].startswith("3.1")
    rows = document["components"]["schemas"]["PredictRequest"]["properties"]["rows"]
    assert rows["maxItems"] == 20 and rows["items"]["minItems"] == rows["items"]["maxItems"] == WIDTH
    assert "securitySchemes" not in document["components"]
    assert "401" not in document["paths"]["/predict"]["post"]["responses"]
    keyed = openapi_document(PredictionService(BudgetedDouble(MemoryLedger(10)), api_keys={"alpha-key": 5}))
    assert keyed["components"]["securitySchemes"] == {
        "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
    for path in ("/predict", "/budget"):
        operation = next(iter(keyed["paths"][path].values()))
        assert operation["security"] == [{"apiKey": []}] and "401" in operation["responses"]
