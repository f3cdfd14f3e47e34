"""Validation of /predict bodies, before anything is charged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privml.serve import PredictRequest, RequestError, parse_predict_body


def parse(body: object, max_rows: int = 10) -> PredictRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_predict_body(raw, max_rows=max_rows)


def test_a_valid_body():
    request = parse({"rows": [[1, 2.5], [-3, 0]], "probabilities": True})
    np.testing.assert_array_equal(request.rows, [[1.0, 2.5], [-3.0, 0.0]])
    assert request.rows.dtype == np.float64
    assert request.probabilities is True
    assert parse({"rows": [[0.0]]}).probabilities is False


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"rows": [[NaN]]}', "NaN is not a JSON number"),
        (b'{"rows": [[Infinity]]}', "Infinity is not a JSON number"),
        (b'{"rows": [[1e999]]}', r"rows\[0\]\[0\] must be finite"),
        (b'{"rows": [[' + b"9" * 400 + b"]]}", "too large for a float"),
        (b'{"rows": [[' + b"9" * 5000 + b"]]}", "not valid JSON"),  # Python's int-digit limit
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ([[1.0]], "must be a JSON object, got list"),
        ({}, "missing field 'rows'"),
        ({"rows": [[1]], "extra": 1}, "unknown field"),
        ({"rows": "1,2"}, "'rows' must be a list"),
        ({"rows": []}, "'rows' is empty"),
        ({"rows": [[]]}, r"rows\[0\] is empty"),
        ({"rows": [1, 2]}, r"rows\[0\] must be a list"),
        ({"rows": [[1, 2], [3]]}, "equal width"),
        ({"rows": [[1, "2"]]}, r"rows\[0\]\[1\] must be a number, got str"),
        ({"rows": [[True]]}, "must be a number, got bool"),
        ({"rows": [[None]]}, "must be a number, got NoneType"),
        ({"rows": [[[1]]]}, "must be a number, got list"),
        ({"rows": [[1]], "probabilities": "yes"}, "'probabilities' must be true or false"),
        ({"rows": [[1]], "probabilities": 1}, "'probabilities' must be true or false"),
        ({"rows": [[1.0]] * 11}, "too many rows: 11 > 10"),
        # From a review: a repeated key was accepted and the last one won (a proxy may have checked the first).
        (b'{"rows": [[1]], "rows": [[2]]}', "duplicate key 'rows'"),
        (b'{"rows": [[1]], "probabilities": false, "probabilities": true}', "duplicate key 'probabilities'"),
    ],
)
def test_malformed_bodies_are_422(body, match):
    with pytest.raises(RequestError, match=match) as info:
        parse(body)
    assert info.value.status == 422
    assert "\n" not in info.value.message


finite = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**15), 10**15)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=10), st.booleans())
def test_well_formed_bodies_round_trip(rows, probabilities):
    request = parse({"rows": rows, "probabilities": probabilities})
    np.testing.assert_array_equal(request.rows, np.asarray(rows, dtype=np.float64))
    assert request.probabilities is probabilities


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.one_of(json_values, st.fixed_dictionaries({"rows": json_values}), st.binary(max_size=200)))
def test_anything_is_a_request_or_a_422(body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        request = parse_predict_body(raw, max_rows=10)
    except RequestError as exc:
        assert exc.status == 422
    else:
        assert request.rows.ndim == 2 and np.all(np.isfinite(request.rows))
