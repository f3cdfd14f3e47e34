"""The OpenAPI 3.1 description of the server, written by hand.

It is generated per server so the limits it states (rows per request, body
size, width, classes) are the ones enforced; ``tests/serve`` validates live
responses against it.
"""

from __future__ import annotations

from typing import Any

from privml import __version__
from privml.serve.service import PredictionService

__all__ = ["openapi_schema"]

_JSON = "application/json"


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _ok(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _label_schema(classes: list[Any]) -> dict[str, Any]:
    return {"enum": classes}


def openapi_schema(service: PredictionService) -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``service`` (a JSON-ready dict)."""
    limits = service.limits
    width = service.n_features if service.preprocess is None else None
    row: dict[str, Any] = {"type": "array", "items": {"type": "number"}, "minItems": 1}
    if width is not None:
        row.update(minItems=width, maxItems=width)
    count = {"type": "integer", "minimum": 0}
    nullable_count = {"type": ["integer", "null"], "minimum": 0}
    schemas: dict[str, Any] = {
        "PredictRequest": {
            "type": "object",
            "required": ["rows"],
            "additionalProperties": False,
            "properties": {
                "rows": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": limits.max_rows,
                    "items": row,
                    "description": (
                        "Rows to label, all of equal width; finite numbers only. Each row spends one answer "
                        "of the budget (when the model has one)."
                        + ("" if width is not None else " Rows are preprocessed as recorded in the model file.")
                    ),
                },
                "probabilities": {
                    "type": "boolean",
                    "default": False,
                    "description": "Also return class probabilities (same charge: one answer per row).",
                },
            },
        },
        "PredictResponse": {
            "type": "object",
            "required": ["labels"],
            "additionalProperties": False,
            "properties": {
                "labels": {"type": "array", "items": _label_schema(service.classes)},
                "probabilities": {
                    "type": "array",
                    "items": {
                        "type": "array",
                        "items": {"type": "number", "minimum": 0, "maximum": 1},
                        "minItems": len(service.classes),
                        "maxItems": len(service.classes),
                    },
                },
                "classes": {"type": "array", "items": _label_schema(service.classes)},
            },
        },
        "Budget": {
            "type": "object",
            "required": ["spent", "remaining", "budget", "epsilon", "delta", "neighbouring"],
            "additionalProperties": False,
            "properties": {
                "spent": {**count, "description": "Answers charged so far (0 for a privately trained model)."},
                "remaining": {**nullable_count, "description": "null when the model needs no budget."},
                "budget": {**nullable_count, "description": "null when the model needs no budget."},
                "epsilon": {"type": "number", "minimum": 0, "description": "Total epsilon over the whole budget."},
                "delta": {"type": "number", "minimum": 0, "maximum": 1},
                "neighbouring": {"type": "string"},
                "key": {
                    "type": "object",
                    "required": ["quota", "spent", "remaining"],
                    "additionalProperties": False,
                    "properties": {"quota": count, "spent": count, "remaining": count},
                },
            },
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "additionalProperties": False,
            "properties": {"status": {"enum": ["ok"]}},
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "additionalProperties": False,
            "properties": {"error": {"type": "string", "description": "One-line reason."}},
        },
    }
    security = [{"apiKey": []}] if service.requires_key else []
    keyed = {"security": security} if security else {}
    auth = {"401": _error("Missing or unknown X-API-Key.")} if service.requires_key else {}
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "privml prediction server",
            "version": __version__,
            "description": (
                "Differentially private predictions. Every answered row is charged to the privacy budget "
                "before it is computed; once the budget is spent, requests get 429 and nothing is answered."
            ),
        },
        "paths": {
            "/predict": {
                "post": {
                    "summary": "Label rows",
                    **keyed,
                    "requestBody": {
                        "required": True,
                        "content": {_JSON: {"schema": {"$ref": "#/components/schemas/PredictRequest"}}},
                    },
                    "responses": {
                        "200": _ok("Labels (and probabilities when asked).", "PredictResponse"),
                        "400": _error("Invalid Content-Length header."),
                        **auth,
                        "408": _error(f"Body not received within {limits.body_timeout:g} s."),
                        "411": _error("No Content-Length (chunked bodies are not accepted)."),
                        "413": _error(f"Body larger than {limits.max_body_bytes} bytes."),
                        "415": _error("Content-Type is not application/json."),
                        "422": _error("Malformed body: not JSON, wrong types or width, non-finite values, "
                                      f"no rows or more than {limits.max_rows} rows."),
                        "429": _error("Privacy budget (or the key's quota) spent: nothing was answered."),
                        "503": _error(
                            "Budget ledger unavailable, too many connections, or shutting down: nothing was answered."
                        ),
                        "500": _error("Internal error."),
                    },
                }
            },
            "/budget": {
                "get": {
                    "summary": "Privacy budget and guarantee",
                    **keyed,
                    "responses": {
                        "200": _ok("What has been spent and the guarantee it buys.", "Budget"),
                        **auth,
                        "503": _error("Budget ledger unavailable."),
                    },
                }
            },
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": _ok("Serving.", "Health")}}},
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.1 document.",
                                          "content": {_JSON: {"schema": {"type": "object"}}}}},
                }
            },
        },
        "components": {"schemas": schemas},
    }
    if service.requires_key:
        document["components"]["securitySchemes"] = {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
    return document
