"""A tiny study on scikit-learn's digits, run once per session and shared by the report tests."""

from __future__ import annotations

from typing import Any

import pytest

from privml.study import run_study, spec_from_dict


def tiny_spec_dict(**changes: Any) -> dict[str, Any]:
    """Two sweeps, four methods, 2 repeats on 400 digits records of 10 PCA dimensions: seconds to run."""
    raw: dict[str, Any] = {
        "name": "tiny",
        "description": "test study",
        "dataset": "digits",
        "methods": ["nonprivate", "output", "objective", "prediction-sensitivity"],
        "repeats": 2,
        "seed": 0,
        "public_size": 200,
        "defaults": {"epsilon": 1.0, "delta": 0.0, "budget": 10, "n": 400, "d": 10, "k": 10},
        "selection": {"mode": "public"},
        "sweeps": [
            {"name": "epsilon", "parameter": "epsilon", "values": [0.3, 30.0], "title": "accuracy vs epsilon"},
            {"name": "budget", "parameter": "budget", "values": [1, 1000], "title": "accuracy vs budget"},
        ],
    }
    raw.update(changes)
    return raw


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory: pytest.TempPathFactory):
    """(spec, StudyRun, out folder) of the tiny study, run serially once."""
    spec = spec_from_dict(tiny_spec_dict())
    out = tmp_path_factory.mktemp("tiny-study")
    outcome = run_study(spec, out, jobs=1, progress=False)
    return spec, outcome, out
