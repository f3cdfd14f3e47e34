"""The OpenAPI 3.1 description of the server, generated from its request and response models.

The models live with the ASGI application (:mod:`privml.serve._asgi`) and are
built per server, so the limits they state (rows per request, row width,
classes) are the ones enforced; FastAPI generates the document from them.
Both transports serve this document; ``tests/serve`` validates live responses
against it and checks that the models accept what the service accepts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privml.serve._service import PredictionService

__all__ = ["openapi_schema"]


def openapi_schema(service: PredictionService) -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``service`` (a JSON-ready dict; needs ``privml[serve]``)."""
    from privml.serve._asgi import openapi_document  # lazy(extra): serve: fastapi

    return openapi_document(service)
