"""The HTTP layer: routes, status codes, body limits, keep-alive, the OpenAPI document.

Every test runs against both transports (``transport``): the ASGI server that
``privml serve`` runs and the standard-library server kept as the baseline.
"""

from __future__ import annotations

import http.client
import json
import socket
import time

import numpy as np
import pytest

from privml.ledger import MemoryLedger
from privml.serve import PredictionService
from privml.serve._asgi import ROUTES
from privml.serve._server import PredictionHandler
from tests.serve.helpers import (
    TRANSPORTS,
    BudgetedDouble,
    check_response,
    raw_exchange,
    request,
    running,
    small_limits,
    status_of,
)


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture
def budgeted(transport):
    double = BudgetedDouble(MemoryLedger(20))
    service = PredictionService(double, limits=small_limits(), api_keys=None)
    with running(service, transport) as server:
        yield server, double


def test_endpoints_match_the_openapi_document(budgeted, rows):
    server, double = budgeted
    status, document = request(server, "GET", "/openapi.json")
    assert status == 200 and document["openapi"] == "3.1.0"
    assert document["components"]["schemas"]["PredictRequest"]["properties"]["rows"]["maxItems"] == 50
    exchanges = [
        ("GET", "/healthz", None),
        ("GET", "/budget", None),
        ("POST", "/predict", {"rows": rows[:3].tolist()}),
        ("POST", "/predict", {"rows": rows[:2].tolist(), "probabilities": True}),
        ("POST", "/predict", {"rows": rows[:2, :5].tolist()}),
        ("POST", "/predict", {"rows": [[1.0] * 30] * 51}),
        ("POST", "/predict", {"rows": rows[:20].tolist()}),  # over the remaining budget
        ("GET", "/budget", None),
    ]
    seen = []
    for method, path, body in exchanges:
        status, payload = request(server, method, path, body)
        check_response(document, path, method, status, payload)
        seen.append(status)
    assert seen == [200, 200, 200, 200, 422, 422, 429, 200]
    assert request(server, "GET", "/budget")[1]["spent"] == 5 == double.computed


def test_a_private_model_is_served_without_budget(private_model, rows, transport):
    with running(PredictionService(private_model, limits=small_limits()), transport) as server:
        _, document = request(server, "GET", "/openapi.json")
        status, out = request(server, "POST", "/predict", {"rows": rows[:4].tolist(), "probabilities": True})
        assert status == 200
        check_response(document, "/predict", "POST", status, out)
        assert out["labels"] == private_model.predict(rows[:4]).tolist()
        np.testing.assert_allclose(out["probabilities"], private_model.predict_proba(rows[:4]))
        status, budget = request(server, "GET", "/budget")
        check_response(document, "/budget", "GET", status, budget)
        assert budget["budget"] is None and budget["remaining"] is None and budget["epsilon"] == 1.0


def test_unknown_paths_and_methods(budgeted):
    server, double = budgeted
    assert request(server, "GET", "/nope") == (404, {"error": "no such endpoint: /nope"})
    status, out = request(server, "GET", "/predict")
    assert status == 405 and "use POST" in out["error"]
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        assert request(server, method, "/budget")[0] == 405
    assert request(server, "POST", "/budget", {"rows": [[0.0] * 30]})[0] == 405
    assert double.ledger_.spent == 0


def test_head_gets_a_status_without_body(budgeted):
    server, _ = budgeted
    response = raw_exchange(server, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(response) == 405 and response.endswith(b"\r\n\r\n")


def test_api_keys_over_http(rows, transport):
    double = BudgetedDouble(MemoryLedger(20))
    service = PredictionService(double, limits=small_limits(), api_keys={"alpha-key": 2, "beta-key": 10})
    body = {"rows": rows[:1].tolist()}
    with running(service, transport) as server:
        _, document = request(server, "GET", "/openapi.json")
        assert document["components"]["securitySchemes"]["apiKey"]["name"] == "X-API-Key"
        for headers, expected in [({}, 401), ({"X-API-Key": "wrong"}, 401), ({"X-API-Key": "alpha-key"}, 200),
                                  ({"X-API-Key": "alpha-key"}, 200), ({"X-API-Key": "alpha-key"}, 429),
                                  ({"X-API-Key": "beta-key"}, 200)]:
            status, out = request(server, "POST", "/predict", body, headers=headers)
            check_response(document, "/predict", "POST", status, out)
            assert status == expected, out
        assert request(server, "GET", "/budget")[0] == 401
        status, out = request(server, "GET", "/budget", headers={"X-API-Key": "alpha-key"})
        check_response(document, "/budget", "GET", status, out)
        assert out["key"] == {"quota": 2, "spent": 2, "remaining": 0} and out["spent"] == 3


def test_content_type_must_be_json(budgeted, rows):
    server, double = budgeted
    payload = json.dumps({"rows": rows[:1].tolist()}).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, out = request(server, "POST", "/predict", raw=payload, headers={"Content-Type": content_type})
        assert status == 415, out
    assert request(server, "POST", "/predict", raw=payload,
                   headers={"Content-Type": "application/json; charset=utf-8"})[0] == 200
    assert double.ledger_.spent == 1


def _post_head(length: str | None, extra: str = "") -> bytes:
    head = "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    return (head + extra + "\r\n").encode()


def test_length_problems(budgeted):
    server, double = budgeted
    # Oversize: refused from the header alone, before the body is read.
    assert status_of(raw_exchange(server, _post_head("10000000"), shutdown_write=False)) == 413
    assert status_of(raw_exchange(server, _post_head(None) + b'{"rows": [[1]]}')) == 411
    chunked = _post_head(None, "Transfer-Encoding: chunked\r\n") + b"5\r\nhello\r\n0\r\n\r\n"
    assert status_of(raw_exchange(server, chunked)) == 411
    for bad in ("-1", "abc", "1e3", "99999999999999999999999", "\u00b2", "+5", "5 5"):
        head = _post_head(None).replace(b"\r\n\r\n", f"\r\nContent-Length: {bad}\r\n\r\n".encode("latin-1"))
        assert status_of(raw_exchange(server, head + b"{}")) == 400, bad
    two = _post_head("2", "Content-Length: 3\r\n") + b"{}"
    assert status_of(raw_exchange(server, two)) == 400
    # Truncated: the client says 100 bytes, sends 10 and stops sending.
    assert status_of(raw_exchange(server, _post_head("100") + b'{"rows": [')) == 400
    assert double.ledger_.spent == 0


def test_a_slow_body_times_out(budgeted):
    server, double = budgeted
    host, port = server.server_address[:2]
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(_post_head("50") + b'{"rows"')
        for _ in range(3):  # trickle a byte at a time, then stall: the whole body is not there in time
            time.sleep(0.25)
            sock.sendall(b" ")
        response = sock.recv(65536)
    assert status_of(response) == 408
    assert time.monotonic() - start < 5
    assert double.ledger_.spent == 0


def test_keep_alive_serves_many_requests_on_one_connection(budgeted, rows):
    server, double = budgeted
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        for i in range(5):
            conn.request("POST", "/predict", body=json.dumps({"rows": rows[i : i + 1].tolist()}),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            assert response.status == 200 and response.getheader("Connection") is None
            response.read()
        conn.request("GET", "/budget")
        assert json.loads(conn.getresponse().read())["spent"] == 5
    finally:
        conn.close()


def test_connections_beyond_the_limit_get_503(rows, transport):
    double = BudgetedDouble(MemoryLedger(20))
    service = PredictionService(double, limits=small_limits(max_connections=2))
    with running(service, transport) as server:
        host, port = server.server_address[:2]
        holders = [socket.create_connection((host, port), timeout=10) for _ in range(2)]
        try:
            time.sleep(0.3)  # let the server accept both
            assert status_of(raw_exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")) == 503
        finally:
            for sock in holders:
                sock.close()
        deadline = time.monotonic() + 10
        while request(server, "GET", "/healthz")[0] != 200:  # slots come back when the holders leave
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_garbage_request_lines_get_json_errors(budgeted):
    server, _ = budgeted
    cases = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /healthz HTTP/9.9\r\n\r\n", 505),
        # HTTP/1.1 requires a Host header (RFC 9112, 3.2): the ASGI server's parser answers 400
        # without one before it looks at sizes, so these two carry one.
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 200 + b"\r\n", 431),
    ]
    for line, expected in cases:
        response = raw_exchange(server, line)
        assert status_of(response) == expected, response[:100]
        assert json.loads(response.split(b"\r\n\r\n", 1)[1])["error"]


class Exploding(BudgetedDouble):
    def predict(self, X, *, key=None):
        raise RuntimeError("a bug in the model")


def test_a_genuine_bug_is_a_json_500_and_the_server_keeps_serving(rows, capsys, transport):
    with running(PredictionService(Exploding(MemoryLedger(5)), limits=small_limits()), transport) as server:
        assert request(server, "POST", "/predict", {"rows": rows[:1].tolist()}) == (
            500, {"error": "internal server error"})
        assert request(server, "GET", "/healthz")[0] == 200
    assert "RuntimeError: a bug in the model" in capsys.readouterr().err


def test_requests_after_shutdown_began_get_503(budgeted, rows):
    server, double = budgeted
    server.stopping = True
    status, out = request(server, "POST", "/predict", {"rows": rows[:1].tolist()})
    assert status == 503 and "shutting down" in out["error"]
    assert double.ledger_.spent == 0


def test_expect_100_continue(budgeted, rows):
    server, double = budgeted
    big = _post_head("10000000", "Expect: 100-continue\r\n")
    response = raw_exchange(server, big, shutdown_write=False)
    assert status_of(response) == 413 and b"100 Continue" not in response
    body = json.dumps({"rows": rows[:1].tolist()}).encode()
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(_post_head(str(len(body)), "Expect: 100-continue\r\n"))
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        assert status_of(sock.recv(65536)) == 200
    assert double.ledger_.spent == 1


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_the_openapi_document_describes_every_route(budgeted):
    server, _ = budgeted
    _, document = request(server, "GET", "/openapi.json")
    documented = {path: {m.upper() for m in ops} for path, ops in document["paths"].items()}
    assert documented == {path: set(methods) for path, methods in PredictionHandler.ROUTES.items()}
    assert documented == {path: set(methods) for path, methods in ROUTES.items()}
    for ref in _refs(document):
        name = ref.removeprefix("#/components/schemas/")
        assert name in document["components"]["schemas"], ref
    for _path, operations in document["paths"].items():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                assert response["description"] and status.isdigit()



def test_a_client_that_asks_to_close_is_answered_and_closed(budgeted, rows):
    server, _ = budgeted
    body = json.dumps({"rows": rows[:1].tolist()}).encode()
    response = raw_exchange(server, _post_head(str(len(body)), "Connection: close\r\n") + body, shutdown_write=False)
    assert status_of(response) == 200 and b"Connection: close" in response
