"""Findings, the trade-off table and recommendations on hand-made curves (their verdicts must flip)."""

from __future__ import annotations

import pytest

from privml.study.aggregate import Cell, Curve, StudyResults
from privml.study.findings import findings
from privml.study.recommend import recommend, recommendations
from privml.study.spec import spec_from_dict
from privml.study.summary import tradeoff_table, trend

BASE = {"epsilon": 1.0, "delta": 0.0, "budget": 100, "n": 1000, "d": 10, "k": 10}


def cell(value, accs, parameter, train=(1.0,), predict=(0.1,)):
    return Cell(value=value, setting={**BASE, parameter: value}, accuracies=tuple(accs),
                train_seconds=tuple(train) * len(accs), predict_seconds=tuple(predict) * len(accs),
                epsilons=(1.0,) * len(accs), deltas=(0.0,) * len(accs), selection_modes=("public",) * len(accs),
                chosen=({},) * len(accs))


def curve(method, kind, parameter, points):
    return Curve(method=method, label=method, kind=kind,
                 cells=tuple(cell(v, [a, a], parameter) for v, a in points))


def results(sweeps, curves):
    spec = spec_from_dict({"name": "t", "dataset": "digits", "methods": ["output", "objective", "subsample-aggregate",
                                                                           "nonprivate"],
                           "defaults": {"epsilon": 1.0, "delta": 0.0, "budget": 100}, "sweeps": sweeps})
    return StudyResults(spec=spec, spec_hash="x", curves=curves, notes=[], failures=[], n_runs=1)


def budget_study(saa_small, saa_large):
    sweeps = [{"name": "b", "parameter": "budget", "values": [1, 10000]}]
    curves = {"b": [curve("output", "training", "budget", [(1, 0.8), (10000, 0.8)]),
                    curve("subsample-aggregate", "prediction", "budget", [(1, saa_small), (10000, saa_large)])]}
    return results(sweeps, curves)


def verdicts(res, claim_start):
    return [f.status for f in findings(res) if f.claim.startswith(claim_start)]


def test_budget_findings_follow_the_numbers():
    paper_like = budget_study(saa_small=0.9, saa_large=0.3)
    assert verdicts(paper_like, "Private training beats") == ["holds"]
    assert verdicts(paper_like, "Subsample-and-aggregate is the best") == ["holds"]
    opposite = budget_study(saa_small=0.5, saa_large=0.95)
    assert verdicts(opposite, "Private training beats") == ["refuted"]
    assert verdicts(opposite, "Subsample-and-aggregate is the best") == ["refuted"]


def test_interior_optimum_finding():
    sweeps = [{"name": "l", "parameter": "l2", "values": [1e-4, 1e-2, 1.0], "methods": ["objective"]}]
    peaked = results(sweeps, {"l": [curve("objective", "training", "l2", [(1e-4, 0.5), (1e-2, 0.8), (1.0, 0.4)])]})
    assert verdicts(peaked, "Accuracy rises then falls with lambda") == ["holds"]
    rising = results(sweeps, {"l": [curve("objective", "training", "l2", [(1e-4, 0.5), (1e-2, 0.6), (1.0, 0.7)])]})
    assert verdicts(rising, "Accuracy rises then falls with lambda") == ["refuted"]


def test_missing_sweeps_give_no_findings_and_missing_methods_untested():
    sweeps = [{"name": "b", "parameter": "budget", "values": [1, 100]}]
    only_training = results(sweeps, {"b": [curve("output", "training", "budget", [(1, 0.8), (100, 0.8)])]})
    assert verdicts(only_training, "Private training beats") == ["untested"]
    assert verdicts(only_training, "Every method gets more accurate as epsilon") == []


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0.1, 0.5, 0.9], "up"), ([0.9, 0.5, 0.1], "down"), ([0.1, 0.9, 0.2], "up-down"),
     ([0.5, 0.503, 0.499], "flat"), ([0.5, 0.1, 0.9], "mixed")],
)
def test_trend(values, expected):
    assert trend(values, 0.01, relative=False) == expected


def test_tradeoff_table_reads_the_budget_column():
    table = dict(tradeoff_table(budget_study(saa_small=0.9, saa_large=0.3)))
    # COLUMNS order: n, k, d, budget, m, l2
    # Only private prediction depends on B: subsample-and-aggregate falls, the flat training curve is left out.
    assert table["accuracy"][3] == "↓ (1/1)"
    assert table["accuracy"][0] == "not swept"
    assert table["privacy loss (epsilon)"][3] == "held fixed"


def test_recommendations_pick_the_best_private_method_per_setting():
    res = budget_study(saa_small=0.9, saa_large=0.3)
    recs = recommendations(res)
    assert [(r.setting["budget"], r.method) for r in recs] == [(1, "subsample-aggregate"), (10000, "output")]
    best, distance = recommend(res, budget=3)
    assert best.method == "subsample-aggregate" and distance == pytest.approx(0.4771, abs=1e-3)
    best, distance = recommend(res, budget=10000, epsilon=1.0)
    assert best.method == "output" and distance == 0.0
    with pytest.raises(ValueError, match="unknown setting 'colour'"):
        recommend(res, colour=1)
