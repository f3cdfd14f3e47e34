"""``privml serve``: private predictions over HTTP, with an enforced budget.

:func:`open_served_model` opens a model file under a :class:`ModelSpec`
(its settings and ledger); :class:`PredictionService` validates, charges the
ledger and answers, independent of HTTP; :class:`AsgiPredictionServer` serves
it: the ASGI application (FastAPI) on uvicorn, what ``privml serve`` runs,
with ``--workers`` processes sharing one ledger. The standard-library server
(``PredictionServer``, one thread per connection) is kept as the benchmarks'
baseline. Serving over HTTP needs the ``serve`` extra
(``pip install 'privml[serve]'``); the service itself does not.

>>> from privml.serve import ModelSpec, PredictionService, ServeLimits, open_served_model
"""

from typing import TYPE_CHECKING, Any

from privml.serve._keys import load_api_keys
from privml.serve._limits import ServeLimits
from privml.serve._model import ModelSpec, ServedModel, open_served_model
from privml.serve._openapi import openapi_schema
from privml.serve._requests import PredictRequest, RequestError, parse_predict_body
from privml.serve._service import PredictionService, Predictor

if TYPE_CHECKING:
    from privml.serve._asgi_server import AsgiPredictionServer


def __getattr__(name: str) -> Any:
    # The ASGI server needs the serve extra (FastAPI, uvicorn), which the service and `privml predict` do not:
    # imported on first use (PEP 562).
    if name == "AsgiPredictionServer":
        from privml.serve._asgi_server import AsgiPredictionServer  # lazy(extra): serve: fastapi, uvicorn

        return AsgiPredictionServer
    raise AttributeError(f"module 'privml.serve' has no attribute {name!r}")


__all__ = [
    "AsgiPredictionServer",
    "ModelSpec",
    "PredictRequest",
    "PredictionService",
    "Predictor",
    "RequestError",
    "ServeLimits",
    "ServedModel",
    "load_api_keys",
    "open_served_model",
    "openapi_schema",
    "parse_predict_body",
]
