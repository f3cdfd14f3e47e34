"""The ASGI application: a thin HTTP transport over :class:`PredictionService` (FastAPI).

The service validates, charges and answers; this module only moves bytes and
states in its request and response models what the service accepts and
returns, from which FastAPI generates the OpenAPI document. Bodies are read
here, not by FastAPI: the checks that need no reading (key, type, length)
come first, the body is read within ``body_timeout``, and only then does the
service see it. The service's work (parsing, the ledger charge, the model)
runs in a bounded thread pool, so the event loop never waits on it; beyond
``max_in_flight`` requests a request gets 503 at once.

Needs the ``serve`` extra (``pip install 'privml[serve]'``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal, TypeAlias

from fastapi import FastAPI, Request, Security
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from privml import __version__
from privml.serve._requests import RequestError, content_length
from privml.serve._service import PredictionService

__all__ = ["PEER_KEY", "ROUTES", "create_app", "openapi_document", "service_models"]

#: path -> allowed methods (the standard-library handler routes the same).
ROUTES: dict[str, tuple[str, ...]] = {
    "/predict": ("POST",),
    "/budget": ("GET",),
    "/healthz": ("GET",),
    "/openapi.json": ("GET",),
}
#: Scope key under which the HTTP protocol (privml.serve._asgi_server) puts its
#: connection, so a body reader can tell a client that stopped sending.
PEER_KEY = "privml.connection"
_JSON = "application/json"


# -- the models the OpenAPI document is generated from ---------------------------


class Error(BaseModel):
    """Every non-200 answer."""

    model_config = ConfigDict(extra="forbid")
    error: str = Field(description="One-line reason.")


class Health(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["ok"]


class KeyBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    quota: int = Field(ge=0)
    spent: int = Field(ge=0)
    remaining: int = Field(ge=0)


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spent: int = Field(ge=0, description="Answers charged so far (0 for a privately trained model).")
    remaining: int | None = Field(ge=0, description="null when the model needs no budget.")
    budget: int | None = Field(ge=0, description="null when the model needs no budget.")
    epsilon: float = Field(ge=0, description="Total epsilon over the whole budget.")
    delta: float = Field(ge=0, le=1)
    neighbouring: str
    neighbouring_detail: str = Field(description="The relation stated exactly (as in privml train --json).")
    key: KeyBudget | SkipJsonSchema[None] = Field(
        default=None, description="The quota of the request's X-API-Key (when keys are in use)."
    )


# Field types of the request and response models. The row width and the class set are known only at run
# time: the types made from them (row, label) are values to mypy, so the few places that put one inside
# another type (list[row], list[label]) carry a targeted ignore.
_Number = Annotated[float, Field(allow_inf_nan=False, strict=True)]
_Probability = Annotated[float, Field(ge=0, le=1)]
_Omitted: TypeAlias = SkipJsonSchema[None]  # may be null, which the schema does not mention


def _label_type(classes: list[Any]) -> Any:
    """A class label: one of ``classes`` (a Literal where typing allows one)."""
    if all(isinstance(c, str | int) for c in classes):
        return Literal[tuple(classes)]
    return Annotated[Any, WithJsonSchema({"enum": classes})]


def service_models(service: PredictionService) -> tuple[type[BaseModel], type[BaseModel]]:
    """``(PredictRequest, PredictResponse)`` for ``service``: its row width, row limit and classes.

    The service's own validator (:func:`privml.serve.parse_predict_body`)
    decides what is accepted; these models state it for the schema, and the
    tests check that the two agree.
    """
    limits = service.limits
    width = service.n_features if service.preprocess is None else None
    row = (Annotated[list[_Number], Field(min_length=width, max_length=width)] if width is not None
           else Annotated[list[_Number], Field(min_length=1)])
    rows = Annotated[list[row], Field(min_length=1, max_length=limits.max_rows)]  # type: ignore[valid-type]
    label = _label_type(service.classes)
    k = len(service.classes)
    request = create_model(
        "PredictRequest",
        __config__=ConfigDict(extra="forbid"),
        rows=(
            rows,
            Field(description=(
                "Rows to label, all of equal width; finite numbers only. Each row spends one answer of the budget "
                "(when the model has one)."
                + ("" if width is not None else " Rows are preprocessed as recorded in the model file.")
            )),
        ),
        probabilities=(Annotated[bool, Field(strict=True)], Field(default=False, description=(
            "Also return class probabilities (same charge: one answer per row)."))),
    )
    response = create_model(
        "PredictResponse",
        __config__=ConfigDict(extra="forbid"),
        labels=(list[label], ...),  # type: ignore[valid-type]
        probabilities=(
            list[Annotated[list[_Probability], Field(min_length=k, max_length=k)]] | _Omitted,
            Field(default=None, description="With probabilities asked for: one row of class probabilities per row."),
        ),
        classes=(list[label] | _Omitted,  # type: ignore[valid-type]
                 Field(default=None, description="The class of each probability column (with probabilities).")),
    )
    return request, response


# -- the transport ---------------------------------------------------------------


class _Transport:
    """What every request handler shares: the service, its thread pool, the in-flight count."""

    def __init__(self, service: PredictionService) -> None:
        self.service = service
        self.limits = service.limits
        self.executor = ThreadPoolExecutor(max_workers=self.limits.threads, thread_name_prefix="privml-serve")
        self.in_flight = 0
        self.stopping = False
        self.openapi = b""

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the thread pool, or 503 at once when ``max_in_flight`` are already there."""
        if self.in_flight >= self.limits.max_in_flight:
            raise _Busy(f"the server is busy ({self.in_flight} requests in progress); nothing was answered")
        self.in_flight += 1  # only the event loop's thread touches the count
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        finally:
            self.in_flight -= 1


class _Busy(RequestError):
    def __init__(self, message: str) -> None:
        super().__init__(503, message)


def _json(status: int, payload: Any, *, close: bool = False, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(payload, allow_nan=False).encode("utf-8")
    out = {"Cache-Control": "no-store"}
    if close:
        out["Connection"] = "close"
    out.update(headers or {})
    return Response(body, status_code=status, headers=out, media_type=_JSON)


def _fail(exc: RequestError, *, close: bool = False) -> Response:
    extra = {"Retry-After": "1"} if isinstance(exc, _Busy) else None
    return _json(exc.status, {"error": exc.message}, close=close, headers=extra)


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return request.headers.get("transfer-encoding") is not None or (length is not None and length.strip() != "0")


def _content_length(request: Request) -> int | None:
    """The declared body length: 411 for chunked bodies, 400 for a malformed header."""
    return content_length(request.headers.getlist("content-length"), request.headers.get("transfer-encoding"))


async def _read_body(request: Request, length: int, timeout: float) -> bytes:
    """Exactly ``length`` bytes within ``timeout`` seconds, however the client paces them (else 408)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    peer = request.scope.get(PEER_KEY)
    chunks: list[bytes] = []
    received = 0
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise RequestError(408, f"body not received within {timeout:g} s")
        try:
            message = await asyncio.wait_for(request.receive(), left)
        except TimeoutError:
            raise RequestError(408, f"body not received within {timeout:g} s") from None
        if message["type"] == "http.disconnect":
            raise RequestError(400, f"body ended after {received} of {length} bytes")
        chunk = message.get("body", b"")
        if chunk:
            chunks.append(chunk)
            received += len(chunk)
        if not message.get("more_body", False):
            break
        if peer is not None and peer.peer_eof:
            raise RequestError(400, f"body ended after {received} of {length} bytes")
    if received != length:  # the HTTP parser frames bodies by Content-Length; never expected
        raise RequestError(400, f"body ended after {received} of {length} bytes")
    return b"".join(chunks)


def _internal_error(request: Request) -> Response:
    sys.stderr.write(
        f"privml serve: internal error on {request.method} {request.url.path}\n{traceback.format_exc()}"
    )
    return _json(500, {"error": "internal server error"})


def create_app(service: PredictionService) -> FastAPI:
    """The FastAPI application serving ``service``: the four routes of :data:`ROUTES`."""
    # long-function: the route handlers (four routes and the routing-error handler) are closures over the shared
    # transport and limits; splitting them out would need that state passed around for no gain in clarity.
    transport = _Transport(service)
    limits = service.limits
    request_model, response_model = service_models(service)
    app = FastAPI(
        title="privml prediction server",
        version=__version__,
        description=(
            "Differentially private predictions. Every answered row is charged to the privacy budget before it "
            "is computed; once the budget is spent, requests get 429 and nothing is answered."
        ),
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,
        separate_input_output_schemas=False,
    )
    app.state.transport = transport
    keyed = service.requires_key
    security = [Security(APIKeyHeader(name="X-API-Key", scheme_name="apiKey", auto_error=False))] if keyed else []
    auth: dict[int | str, dict[str, Any]] = (
        {401: {"model": Error, "description": "Missing or unknown X-API-Key."}} if keyed else {}
    )
    busy = "the server is busy, the budget ledger is unavailable, or it is shutting down: nothing was answered."

    @app.post(
        "/predict",
        summary="Label rows",
        response_model=response_model,
        response_description="Labels (and probabilities when asked).",
        dependencies=security,
        openapi_extra={"requestBody": {
            "required": True,
            "content": {_JSON: {"schema": {"$ref": "#/components/schemas/PredictRequest"}}},
        }},
        responses={
            400: {"model": Error, "description": "Invalid Content-Length header, or a body cut short."},
            **auth,
            408: {"model": Error, "description": f"Body not received within {limits.body_timeout:g} s."},
            411: {"model": Error, "description": "No Content-Length (chunked bodies are not accepted)."},
            413: {"model": Error, "description": f"Body larger than {limits.max_body_bytes} bytes."},
            415: {"model": Error, "description": "Content-Type is not application/json."},
            422: {"model": Error, "description": (
                "Malformed body: not JSON, wrong types or width, non-finite values, no rows or more than "
                f"{limits.max_rows} rows.")},
            429: {"model": Error, "description": "Privacy budget (or the key's quota) spent: nothing was answered."},
            503: {"model": Error, "description": busy[0].upper() + busy[1:]},
            500: {"model": Error, "description": "Internal error."},
        },
    )
    async def predict(request: Request) -> Response:
        # A refusal before the body is read leaves it unread, so the connection
        # cannot be reused: the next "request" would be the rest of this body.
        close = True
        try:
            if transport.stopping:
                raise RequestError(503, "the server is shutting down; nothing was answered")
            key = service.authenticate(request.headers.get("x-api-key"))
            content_type = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
            if content_type != _JSON:
                raise RequestError(415, f"Content-Type must be application/json, got {content_type[:80] or 'none'!r}")
            length = _content_length(request)
            if length is None:
                raise RequestError(411, "missing Content-Length header")
            if length > limits.max_body_bytes:
                raise RequestError(
                    413, f"body of {length} bytes is larger than the limit of {limits.max_body_bytes} bytes"
                )
            body = await _read_body(request, length, limits.body_timeout)
            close = False
            return _json(200, await transport.run(service.predict, body, key))
        except RequestError as exc:
            return _fail(exc, close=close or exc.status == 408)
        except Exception:  # a bug, not the client's fault: say so, keep serving
            return _internal_error(request)

    @app.get(
        "/budget",
        summary="Privacy budget and guarantee",
        response_model=Budget,
        response_description="What has been spent and the guarantee it buys.",
        dependencies=security,
        responses={**auth, 503: {"model": Error, "description": "Budget ledger unavailable or server busy."}},
    )
    async def budget(request: Request) -> Response:
        close = _has_body(request)
        try:
            if transport.stopping:
                raise RequestError(503, "the server is shutting down")
            key = service.authenticate(request.headers.get("x-api-key"))
            return _json(200, await transport.run(service.budget, key), close=close)
        except RequestError as exc:
            return _fail(exc, close=close)
        except Exception:
            return _internal_error(request)

    @app.get("/healthz", summary="Liveness", response_model=Health, response_description="Serving.")
    async def healthz(request: Request) -> Response:
        return _json(200, service.health(), close=_has_body(request))

    @app.get("/openapi.json", summary="This document", response_model=dict[str, Any],
             response_description="OpenAPI 3.1 document.")
    async def openapi(request: Request) -> Response:
        headers = {"Connection": "close"} if _has_body(request) else {}
        return Response(transport.openapi, media_type=_JSON, headers={"Cache-Control": "no-store", **headers})

    @app.exception_handler(StarletteHTTPException)
    async def routing_error(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
        if exc.status_code == 405:
            allowed = ROUTES.get(request.url.path, ())
            return _json(405, {"error": f"{request.method[:20]} is not allowed on {request.url.path}; "
                                        f"use {', '.join(allowed)}"},
                         close=True, headers={"Allow": ", ".join(allowed)})
        if exc.status_code == 404:
            return _json(404, {"error": f"no such endpoint: {path[:100]}"}, close=_has_body(request))
        return _json(exc.status_code, {"error": str(exc.detail)[:200]}, close=True)

    document = _generate_openapi(app, request_model)
    transport.openapi = json.dumps(document, allow_nan=False).encode("utf-8")
    app.state.openapi = document
    return app


def _generate_openapi(app: FastAPI, request_model: type[BaseModel]) -> dict[str, Any]:
    """FastAPI's document, plus the request-body model (read by the service, not by FastAPI)."""
    document = app.openapi()
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schema = request_model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas["PredictRequest"] = schema
    return document


def openapi_document(service: PredictionService) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``service``, generated from the models above."""
    app = create_app(service)
    app.state.transport.executor.shutdown(wait=False)
    return app.state.openapi
