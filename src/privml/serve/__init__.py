"""``privml serve``: private predictions over HTTP, with an enforced budget.

:func:`open_served_model` opens a model file under a :class:`ModelSpec`
(its settings and ledger); :class:`PredictionService` validates, charges the
ledger and answers, independent of HTTP; :class:`AsgiPredictionServer` serves
it: the ASGI application (:mod:`privml.serve.asgi`, FastAPI) on uvicorn, what
``privml serve`` runs, with ``--workers`` processes sharing one ledger
(:mod:`privml.serve.workers`). The standard-library server
(:class:`privml.serve.server.PredictionServer`, one thread per connection) is
kept as the benchmarks' baseline. Serving over HTTP needs the ``serve`` extra
(``pip install 'privml[serve]'``); the service itself does not.

>>> from privml.serve import ModelSpec, PredictionService, ServeLimits, open_served_model
"""

# Names are imported on first use (PEP 562): the ASGI server needs the serve extra (FastAPI, uvicorn), which
# `privml predict` and the service do not, and the model module loads the ledgers and the data schema.
import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {
    "AsgiPredictionServer": "privml.serve.asgi_server",
    "ModelSpec": "privml.serve.model",
    "PredictRequest": "privml.serve.requests",
    "PredictionService": "privml.serve.service",
    "Predictor": "privml.serve.service",
    "RequestError": "privml.serve.requests",
    "ServeLimits": "privml.serve.limits",
    "ServedModel": "privml.serve.model",
    "load_api_keys": "privml.serve.keys",
    "open_served_model": "privml.serve.model",
    "openapi_schema": "privml.serve.openapi",
    "parse_predict_body": "privml.serve.requests",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'privml.serve' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from privml.serve.asgi_server import AsgiPredictionServer
    from privml.serve.keys import load_api_keys
    from privml.serve.limits import ServeLimits
    from privml.serve.model import ModelSpec, ServedModel, open_served_model
    from privml.serve.openapi import openapi_schema
    from privml.serve.requests import PredictRequest, RequestError, parse_predict_body
    from privml.serve.service import PredictionService, Predictor

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
