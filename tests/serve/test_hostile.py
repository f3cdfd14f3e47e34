"""Hostile input never produces a 500 and never spends budget."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privml.ledger import MemoryLedger
from privml.serve import PredictionService
from tests.serve.helpers import BudgetedDouble, raw_exchange, request, running, small_limits, status_of

WIDTH = 30
# One live server for the whole module (hence function-scoped fixture use); fixed examples.
LIVE = {"deadline": None, "derandomize": True, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@pytest.fixture(scope="module")
def live():
    double = BudgetedDouble(MemoryLedger(10**9))
    limits = small_limits(max_rows=20, body_timeout=0.5, max_body_bytes=200_000)
    with running(PredictionService(double, limits=limits)) as server:
        yield server, double


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=25,
)
numbers = st.integers(-(10**400), 10**400) | st.floats()
near_valid = st.fixed_dictionaries(
    {"rows": st.lists(st.lists(numbers | json_values, min_size=WIDTH - 1, max_size=WIDTH + 1), max_size=4)},
    optional={"probabilities": json_values},
)


def _valid_rows(body: object) -> int | None:
    """How many rows a 200 must have charged, or None when the body must be refused."""
    if not isinstance(body, dict) or set(body) - {"rows", "probabilities"} or "rows" not in body:
        return None
    rows = body["rows"]
    if not isinstance(body.get("probabilities", False), bool):
        return None
    if not isinstance(rows, list) or not 1 <= len(rows) <= 20:
        return None
    for row in rows:
        if not isinstance(row, list) or len(row) != WIDTH:
            return None
        for v in row:
            if isinstance(v, bool) or not isinstance(v, int | float):
                return None
            try:
                if not abs(float(v)) < float("inf"):
                    return None
            except OverflowError:
                return None
    return len(rows)


@settings(max_examples=100, **LIVE)
@given(st.one_of(json_values, near_valid))
def test_generated_json_bodies(live, body):
    server, double = live
    try:
        payload = json.dumps(body).encode()
    except (OverflowError, ValueError):
        return
    before = double.ledger_.spent
    status, out = request(server, "POST", "/predict", raw=payload)
    assert status != 500, out
    expected = _valid_rows(body)
    if status == 200:
        assert expected is not None and double.ledger_.spent - before == expected
    else:
        assert status == 422, (status, out)
        assert double.ledger_.spent == before


@settings(max_examples=80, **LIVE)
@given(st.binary(max_size=300), st.sampled_from(["application/json", "text/plain", "application/octet-stream", ""]))
def test_generated_bytes(live, payload, content_type):
    server, double = live
    before = double.ledger_.spent
    status, out = request(server, "POST", "/predict", raw=payload, headers={"Content-Type": content_type})
    assert status in (415, 422), (status, out)
    assert double.ledger_.spent == before


@settings(max_examples=60, **LIVE)
@given(st.binary(max_size=400))
def test_generated_raw_requests(live, data):
    server, double = live
    before = double.ledger_.spent
    response = raw_exchange(server, data)
    if response:  # the server may simply close on bytes that are not a request at all
        assert status_of(response) != 500, response[:200]
    assert double.ledger_.spent == before


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 50_000 + b"]" * 50_000,
        b'{"rows": ' + b"[" * 30_000 + b"]" * 30_000 + b"}",
        b'{"rows": [[' + b"1" * 60_000 + b"]]}",
        b'{"rows": [[1e308, 1e309]]}',
        b'{"rows": [[-Infinity]]}',
        b'{"rows": [[1, 2]], "rows": 5}',
        b'{"rows": [["\\ud800"]]}',
        b"\xef\xbb\xbf{}",
        b"\x00" * 1000,
        json.dumps({"rows": [[0.5] * WIDTH] * 21}).encode(),
        json.dumps({"rows": [[0.5] * 5000]}).encode(),
    ],
)
def test_known_hostile_bodies(live, payload):
    server, double = live
    before = double.ledger_.spent
    status, out = request(server, "POST", "/predict", raw=payload)
    assert status == 422, (status, out)
    assert double.ledger_.spent == before


def test_oversize_and_truncated_bodies(live):
    server, double = live
    before = double.ledger_.spent
    head = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    big = b'{"rows": [' + b"[0.1]," * 50_000 + b"[0.1]]}"
    assert status_of(raw_exchange(server, head + f"Content-Length: {len(big)}\r\n\r\n".encode() + big)) == 413
    body = json.dumps({"rows": [[0.1] * WIDTH]}).encode()
    for cut in (1, len(body) // 2, len(body) - 1):
        response = raw_exchange(server, head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:cut])
        assert status_of(response) == 400
    # Content-Length shorter than the body: the JSON is cut, so 422; the rest is never a second request.
    response = raw_exchange(server, head + f"Content-Length: {len(body) - 3}\r\n\r\n".encode() + body)
    assert status_of(response) == 422
    assert double.ledger_.spent == before


header_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=30)


@settings(max_examples=80, **LIVE)
@given(header_text, header_text, header_text, st.binary(max_size=60))
def test_generated_headers(live, length, content_type, key, body):
    server, double = live
    before = double.ledger_.spent
    head = (
        f"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\nContent-Type: {content_type}\r\n"
        f"X-API-Key: {key}\r\n\r\n"
    ).encode("latin-1")
    response = raw_exchange(server, head + body)
    assert response and status_of(response) != 500, response[:200]
    assert double.ledger_.spent == before
