"""The values of a study spec, each parsed and checked alone (one-line errors naming the field).

Split from :mod:`privml.study._spec`, which assembles them into a
:class:`~privml.study.StudySpec`: the relation, the user data's schema
and bounds, the test fraction, the sizing rule, the device, and the plain
JSON shapes whose hashes address the study's runs.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from privml.data._registry import is_user_data
from privml.data._schema import load_schema
from privml.study._sizing import check_sizing

RELATIONS = ("replace-one", "add/remove-one", "mixed")


def parse_relation(raw: Any) -> str:
    if raw not in RELATIONS:
        raise ValueError(f"neighbouring must be one of {', '.join(RELATIONS)}, got {raw!r}")
    return str(raw)


def parse_schema(raw: Any, bounds: Any, dataset: str) -> tuple[str | None, str | None]:
    """The schema path and bounds of user data: a csv: dataset's schema (read and checked now), or bounds 'unit'."""
    if bounds is not None:
        if bounds != "unit":
            raise ValueError(f"bounds must be 'unit', got {bounds!r}")
        if not is_user_data(dataset):
            raise ValueError(f"bounds applies to csv:/npz: datasets only ({dataset}'s scale is public already)")
    if raw is None:
        return None, bounds
    path = parse_text(raw, "schema")
    if not dataset.startswith("csv:"):
        raise ValueError(f"schema applies to csv: datasets only, not {dataset}")
    if bounds is not None:
        raise ValueError("give schema or bounds, not both: the schema states each column's bounds")
    schema_digest(path)  # read and checked now (a draft is refused), before anything runs
    return path, None


def schema_digest(path: str) -> str:
    """The content hash of the schema file at ``path`` (read and checked: a draft or bad schema raises)."""
    schema = load_schema(path)
    schema.check_final(path)
    schema.require_label(path)
    return content_digest(schema.to_dict())[:16]


def parse_test_fraction(raw: Any, dataset: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {raw!r}")
    if not is_user_data(dataset):
        raise ValueError(f"test_fraction applies to csv:/npz: datasets only ({dataset} has its own test split)")
    return float(raw)


def parse_sizing(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    return check_sizing(raw)


def parse_device(raw: Any) -> str:
    """A device name's form (whether it exists here is checked when a study runs, by torch)."""
    if not isinstance(raw, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", raw):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {raw!r}")
    return raw


def parse_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list, got {type(value).__name__}")
    return list(value)


def parse_str_list(value: Any, where: str) -> list[str]:
    items = parse_list(value, where)
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{where} must be a list of strings, got {item!r}")
    return items


def parse_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {type(value).__name__}")
    return value


def parse_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be a positive integer, got {value!r}")
    return value


def json_shape(value: Any) -> Any:
    """Tuples to lists, recursively: the JSON shape, so hashes are stable."""
    if isinstance(value, dict):
        return {k: json_shape(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_shape(v) for v in value]
    return value


def content_digest(payload: Any) -> str:
    """SHA-256 of a JSON-ready payload, key order ignored: the study's content address."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, allow_nan=False).encode()).hexdigest()
