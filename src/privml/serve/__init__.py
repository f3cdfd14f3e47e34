"""``privml serve``: private predictions over HTTP, with an enforced budget.

:class:`PredictionService` validates, charges the ledger and answers,
independent of HTTP. Two transports serve it: the ASGI application
(:mod:`privml.serve.asgi`, FastAPI) on uvicorn
(:class:`~privml.serve.asgi_server.AsgiPredictionServer`, what ``privml
serve`` runs, with ``--workers`` processes sharing one ledger), and the
standard-library :class:`PredictionServer` (one thread per connection, kept as
the benchmarks' baseline). Serving needs the ``serve`` extra
(``pip install 'privml[serve]'``); the service itself does not.

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
