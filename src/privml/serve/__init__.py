"""``privml serve``: private predictions over HTTP, with an enforced budget.

The server is built on the standard library (:mod:`http.server`): no web
framework is needed to run it.

>>> from privml.serve import PredictionServer, PredictionService, ServeLimits
"""

from privml.serve.keys import load_api_keys
from privml.serve.limits import ServeLimits
from privml.serve.openapi import openapi_schema
from privml.serve.requests import PredictRequest, RequestError, parse_predict_body
from privml.serve.server import PredictionServer
from privml.serve.service import PredictionService, Predictor

__all__ = [
    "PredictRequest",
    "PredictionServer",
    "PredictionService",
    "Predictor",
    "RequestError",
    "ServeLimits",
    "load_api_keys",
    "openapi_schema",
    "parse_predict_body",
]
