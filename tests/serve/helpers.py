"""Shared pieces of the server tests: a budgeted test double, a threaded
server, a raw HTTP client and a checker for the OpenAPI schemas."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression

from privml.data import project_to_unit_ball
from privml.guarantee import PrivacyGuarantee
from privml.ledger import BudgetLedger
from privml.serve import PredictionService, ServeLimits
from privml.serve._server import PredictionServer


def breast_cancer_rows() -> tuple[np.ndarray, np.ndarray]:
    """Breast-cancer features projected onto the unit ball (the library's convention)."""
    X, y = load_breast_cancer(return_X_y=True)
    X = X / X.max(axis=0)  # public per-feature bounds of this fixed dataset
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, y


class BudgetedDouble:
    """Follows the private-predictor interface with a real ledger: checks,
    charges ``len(X)`` first, then computes (with a plain logistic model)."""

    def __init__(self, ledger: BudgetLedger, *, epsilon: float = 1.0, delta: float = 1e-6) -> None:
        X, y = breast_cancer_rows()
        self._model = LogisticRegression(max_iter=500).fit(X, y)
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = X.shape[1]
        self.ledger_ = ledger
        self.privacy_ = PrivacyGuarantee(epsilon, delta, "replace-one", "gdp")
        self.computed = 0  # rows the model has computed on: must never exceed what was charged
        self._count_lock = threading.Lock()  # the server calls predict from many threads

    def _spend(self, X: np.ndarray, key: str | None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_ or not np.all(np.isfinite(X)):
            raise ValueError("bad rows")
        self.ledger_.spend(X.shape[0], key=key)
        with self._count_lock:
            self.computed += X.shape[0]
        return project_to_unit_ball(X)  # as the real predictors do

    def predict(self, X: Any, *, key: str | None = None) -> np.ndarray:
        return self._model.predict(self._spend(X, key))

    def predict_proba(self, X: Any, *, key: str | None = None) -> np.ndarray:
        return self._model.predict_proba(self._spend(X, key))


#: The transports the HTTP tests run against: the ASGI server (what ``privml serve`` runs) and
#: the standard-library server (the benchmarks' baseline).
TRANSPORTS = ("asgi", "stdlib")


@contextmanager
def running(service: PredictionService, transport: str = "asgi") -> Iterator[Any]:
    """``service`` served on a free loopback port in a background thread."""
    if transport == "asgi":
        from privml.serve._asgi_server import AsgiPredictionServer

        asgi = AsgiPredictionServer(service, host="127.0.0.1", port=0)
        asgi.start()
        try:
            yield asgi
        finally:
            asgi.stop()
        return
    assert transport == "stdlib", transport
    server = PredictionServer(service, host="127.0.0.1", port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def request(
    server: PredictionServer | str,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout: float = 20.0,
) -> tuple[int, Any]:
    """One request on a fresh connection; returns (status, decoded JSON body)."""
    url = server if isinstance(server, str) else server.url
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"Content-Type": "application/json"} if payload is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=payload, headers=hdrs)
        response = conn.getresponse()
        data = response.read()
        assert response.getheader("Content-Type") == "application/json", data[:200]
        return response.status, json.loads(data)
    finally:
        conn.close()


def raw_exchange(server: Any, data: bytes, *, shutdown_write: bool = True, timeout: float = 20.0) -> bytes:
    """Send raw bytes on a new socket and return everything the server answers."""
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(data)
        if shutdown_write:
            # A server refusing the connection (503 when busy) may have hung up already.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def small_limits(**overrides: Any) -> ServeLimits:
    settings: dict[str, Any] = {"max_rows": 50, "max_body_bytes": 64_000, "body_timeout": 1.0, "idle_timeout": 5.0}
    settings.update(overrides)
    return ServeLimits(**settings)


# -- a checker for the subset of JSON Schema the OpenAPI document uses --------


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _type_ok(value: Any, kind: str) -> bool:
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
    }[kind]


def validate(value: Any, schema: dict, root: dict, where: str = "$") -> None:
    """Raise AssertionError where ``value`` breaks ``schema``."""
    schema = _resolve(schema, root)
    unknown = set(schema) - {
        "type", "properties", "required", "additionalProperties", "items", "enum", "minimum", "maximum",
        "minItems", "maxItems", "description", "default", "title", "anyOf", "const",
    }
    assert not unknown, f"checker does not understand {unknown} at {where}"
    if "anyOf" in schema:
        failures = []
        for option in schema["anyOf"]:
            try:
                validate(value, option, root, where)
                break
            except AssertionError as exc:
                failures.append(str(exc))
        else:
            raise AssertionError(f"{where}: {value!r} matches none of anyOf: {failures}")
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} != {schema['const']!r}"
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert any(_type_ok(value, k) for k in kinds), f"{where}: {value!r} is not {kinds}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert value >= schema.get("minimum", -np.inf), f"{where}: {value} < minimum"
        assert value <= schema.get("maximum", np.inf), f"{where}: {value} > maximum"
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0), f"{where}: too few items"
        assert len(value) <= schema.get("maxItems", len(value)), f"{where}: too many items"
        for i, item in enumerate(value):
            if "items" in schema:
                validate(item, schema["items"], root, f"{where}[{i}]")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            assert name in value, f"{where}: missing {name!r}"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                validate(item, properties[name], root, f"{where}.{name}")
            else:
                assert schema.get("additionalProperties", True) is not False, f"{where}: unexpected {name!r}"


def check_response(document: dict, path: str, method: str, status: int, body: Any) -> None:
    """``body`` must match what ``document`` says ``method path`` returns with ``status``."""
    operation = document["paths"][path][method.lower()]
    assert str(status) in operation["responses"], f"{method} {path} -> {status} is not documented"
    schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
    validate(body, schema, document)
