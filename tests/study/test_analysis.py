"""Findings, the trade-off table and recommendations on hand-made curves (their verdicts must flip)."""

from __future__ import annotations

import pytest

from privml.study._aggregate import StudyResults
from privml.study._cells import Cell, Curve
from privml.study._findings import findings
from privml.study._recommend import recommend, recommendations
from privml.study._spec import spec_from_dict
from privml.study._summary import tradeoff_table, trend

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


# ----------------------------------------------------------------------------- verdicts the repeats must support


def noisy_curve(method, kind, parameter, points, n_test=None):
    """A curve whose cells hold the given per-repeat accuracies (repeat r at index r of each list)."""
    cells = tuple(
        Cell(value=v, setting={**BASE, parameter: v}, accuracies=tuple(accs), train_seconds=(1.0,) * len(accs),
             predict_seconds=(0.1,) * len(accs), epsilons=(1.0,) * len(accs), deltas=(0.0,) * len(accs),
             selection_modes=("public",) * len(accs), chosen=({},) * len(accs), repeats=tuple(range(len(accs))),
             n_test=n_test)
        for v, accs in points
    )
    return Curve(method=method, label=method, kind=kind, cells=cells)


def epsilon_study(curves):
    sweeps = [{"name": "e", "parameter": "epsilon", "values": [0.1, 1.0, 10.0]}]
    return results(sweeps, {"e": curves})


def test_a_flat_method_does_not_count_as_getting_more_accurate():
    # The review's case: DP-CD at +0.0 points was counted as "more accurate"; flat is no gain.
    flat = noisy_curve("output", "training", "epsilon", [(0.1, [0.667, 0.667]), (1.0, [0.667, 0.667]),
                                                           (10.0, [0.667, 0.667])])
    rising = noisy_curve("objective", "training", "epsilon", [(0.1, [0.50, 0.52]), (1.0, [0.7, 0.7]),
                                                                (10.0, [0.90, 0.91])])
    assert verdicts(epsilon_study([rising]), "Every method gets more accurate as epsilon") == ["holds"]
    assert verdicts(epsilon_study([rising, flat]), "Every method gets more accurate as epsilon") == ["refuted"]


def test_two_noisy_repeats_on_a_small_test_split_are_inconclusive():
    # Spreads of tens of points over two repeats: the mean rises, the repeats do not support it.
    noisy = noisy_curve("output", "training", "epsilon", [(0.1, [0.40, 0.75]), (1.0, [0.6, 0.6]),
                                                          (10.0, [0.78, 0.70])], n_test=114)
    assert verdicts(epsilon_study([noisy]), "Every method gets more accurate as epsilon") == ["inconclusive"]
    one_repeat = noisy_curve("output", "training", "epsilon", [(0.1, [0.1]), (1.0, [0.5]), (10.0, [0.9])])
    assert verdicts(epsilon_study([one_repeat]), "Every method gets more accurate as epsilon") == ["inconclusive"]


def test_identical_small_gains_on_a_small_split_are_not_enough():
    # Both repeats +0.9 points (one row of 114): no spread between repeats, but the split itself is a sample.
    same = [(0.1, [0.500, 0.600]), (1.0, [0.505, 0.605]), (10.0, [0.5088, 0.6088])]
    assert verdicts(epsilon_study([noisy_curve("output", "training", "epsilon", same, n_test=114)]),
                    "Every method gets more accurate") == ["inconclusive"]
    # The same gain measured on 100,000 rows and ten repeats is confident.
    many = [(v, [a + 0.01 * r for r in range(10)]) for v, (a, _) in same]
    assert verdicts(epsilon_study([noisy_curve("output", "training", "epsilon", many, n_test=100_000)]),
                    "Every method gets more accurate") == ["holds"]


def test_a_plateau_is_not_rises_then_falls():
    # The review's lambda sweep: 55.3 / 57.5 / 66.7 / 66.7 was marked "rises then falls: holds".
    sweeps = [{"name": "l", "parameter": "l2", "values": [1e-4, 1e-3, 1e-2, 1e-1], "methods": ["objective"]}]
    plateau = noisy_curve("objective", "training", "l2", [(1e-4, [0.553, 0.553]), (1e-3, [0.575, 0.575]),
                                                          (1e-2, [0.667, 0.667]), (1e-1, [0.667, 0.667])])
    assert verdicts(results(sweeps, {"l": [plateau]}), "Accuracy rises then falls") != ["holds"]
