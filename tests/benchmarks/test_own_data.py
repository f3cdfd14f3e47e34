"""benchmarks/own_data.py: the documented ranges it reads, and its BENCHMARKS.md section rendered from results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import own_data  # noqa: E402


def _results(**changes) -> dict:
    point = {
        "epsilon": 1.0,
        "method": "dpsgd",
        "label": "DP-SGD",
        "hyper_parameters": {"clip_norm": 0.1},
        "study_accuracy": 0.92,
        "study_std": 0.03,
        "nonprivate": 0.985,
        "command": "privml train --from-study results/own --epsilon 1 --delta 1e-05 --out model.npz",
        "explicit_command": "privml train --method dpsgd --epsilon 1",
        "train_accuracy": 0.9125,
        "train_std": 0.02,
        "train_runs": 40,
        "guarantee": [1.0, 1e-5, "replace-one"],
        "n_train": 368,
        "n_test": 200,
    }
    data = {
        "machine": {"cpu": "cpu", "cores": 2, "python": "3.11", "commit": "abc", "date": "2026-01-01"},
        "command": "python benchmarks/own_data.py --repeats 40 --seeds 40 --jobs 2",
        "load_average": [[1.0, 1.0, 1.0], [2.5, 2.0, 1.5]],
        "seconds": 300.0,
        "sklearn": {"mean": 0.979, "std": 0.012},
        "study": {"repeats": 40, "finished": 1000, "selection": "validation", "neighbouring": "replace-one"},
        "points": [point, {**point, "epsilon": 10.0, "study_accuracy": 0.96, "train_accuracy": 0.935}],
        "tolerance_points": 2.0,
    }
    data.update(changes)
    return data


def test_the_table_states_each_gap_against_the_tolerance():
    text = own_data.render(_results())
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1] == (
        "| non-private: the study's baseline vs scikit-learn LogisticRegression, standardised, 5-fold "
        "| 98.50% | 97.90% (folds +-1.20) | 0.60 (within 2) |"
    )
    assert rows[2].endswith("| 91.25% (+-2.00) | 92.00% (+-3.00) | 0.75 (within 2) |")
    assert "epsilon 1: `study recommend`'s command (DP-SGD, clip_norm 0.1), mean of 40 seeds" in rows[2]
    assert rows[3].endswith("| 93.50% (+-2.00) | 96.00% (+-3.00) | 2.50 (NOT within 2) |")
    assert "load average 1.0, 2.5 at start and end" in text
    assert "privml train --from-study results/own --epsilon 1" in text


def test_the_stored_results_render():
    path = BENCHMARKS / "results" / "own_data.json"
    if not path.exists():
        pytest.skip("no stored own_data results")
    data = json.loads(path.read_text())
    text = own_data.render(data)
    assert text.startswith("## Your own data end to end")
    assert sum(line.startswith("| epsilon ") for line in text.splitlines()) == len(data["points"])


def test_the_ranges_are_the_descr_table_the_bundled_data_uses():
    from privml.data._bundled import BREAST_CANCER_BOUNDS

    ranges = own_data.documented_ranges()
    assert [(lo, hi) for _, lo, hi in ranges] == list(BREAST_CANCER_BOUNDS)
    assert (
        ranges[0][0] == "mean radius" and ranges[10][0] == "radius error" and ranges[-1][0] == "worst fractal dimension"
    )
