from __future__ import annotations

import math

import pytest

from privml.study.methods import get_method
from privml.study.prepare import prepare
from privml.study.selection import grid_for, private_candidate_budget, select_and_run
from privml.study.spec import Selection


@pytest.fixture(scope="module")
def digits():
    return prepare("digits", n=500, d=10, k=None, public_size=200, seed=0)


def test_grid_skips_hyper_parameters_fixed_by_the_point():
    method = get_method("objective")
    selection = Selection(grids={"objective": {"l2": (0.1, 0.01)}})
    assert grid_for(method, {"l2": None}, selection) == [{"l2": 0.1}, {"l2": 0.01}]
    assert grid_for(method, {"l2": 0.5}, selection) == []


@pytest.mark.parametrize(("epsilon", "delta", "gamma"), [(1.0, 0.0, 0.2), (1.0, 1e-5, 0.2), (0.3, 1e-6, 0.5)])
def test_private_selection_budget_totals_the_target(epsilon, delta, gamma):
    eps1, delta1, cap = private_candidate_budget(epsilon, delta, gamma)
    # Liu & Talwar (2019), Thm 3.4: (3 eps1 + 3 sqrt(2 delta1), sqrt(2 delta1) T / gamma + delta2).
    assert 3 * eps1 + 3 * math.sqrt(2 * delta1) == pytest.approx(epsilon, rel=1e-12)
    if delta == 0:
        assert (delta1, cap) == (0.0, None)
    else:
        assert math.sqrt(2 * delta1) * cap / gamma + delta / 2 == pytest.approx(delta, rel=1e-12)
        assert cap >= math.log(2 / delta) / gamma


def test_private_selection_refuses_a_vanishing_budget():
    with pytest.raises(ValueError, match="too small for a private selection"):
        private_candidate_budget(1e-9, 1e-5, 0.2)


def test_validation_mode_picks_on_validation_and_says_it_leaks(digits):
    selection = Selection(mode="validation", grids={"output": {"l2": (1e-4, 1e-2, 1.0)}})
    out = select_and_run(get_method("output"), digits, {"epsilon": 1.0, "delta": 0.0, "l2": None}, seed=0,
                         selection=selection)
    assert out.mode == "validation" and out.leaky
    scores = {c["params"]["l2"]: c["score"] for c in out.candidates}
    assert out.chosen["l2"] == max(scores, key=scores.get)
    assert out.result.epsilon == pytest.approx(1.0)


def test_private_mode_charges_the_selection(digits):
    selection = Selection(mode="private", stop_probability=0.5, grids={"output": {"l2": (1e-3, 1e-1)}})
    out = select_and_run(get_method("output"), digits, {"epsilon": 2.0, "delta": 0.0, "l2": None}, seed=1,
                         selection=selection)
    assert out.mode == "private" and not out.leaky
    # Reported guarantee is the whole selection (3 eps1 = epsilon), each candidate ran at epsilon / 3.
    assert out.result.epsilon == pytest.approx(2.0)
    assert out.result.info["candidate_epsilon"] == pytest.approx(2.0 / 3)
    assert out.result.info["runs"] >= 1
    # Only the released candidate (the best) and its noisy score are kept: the theorem covers nothing else.
    assert out.candidates == [{"params": out.chosen, "score": out.candidates[0]["score"]}]
    assert out.chosen in [{"l2": 1e-3}, {"l2": 1e-1}]


def test_private_mode_with_delta_stays_within_the_target(digits):
    selection = Selection(mode="private", stop_probability=0.5, grids={"objective": {"l2": (1e-3, 1e-2)}})
    out = select_and_run(get_method("objective"), digits, {"epsilon": 2.0, "delta": 1e-5, "l2": None}, seed=2,
                         selection=selection)
    assert out.result.epsilon <= 2.0 + 1e-12
    assert out.result.delta <= 1e-5 * (1 + 1e-12)
    assert out.result.info["candidate_delta"] < 1e-12


def test_private_prediction_falls_back_to_public_defaults_in_private_mode(digits):
    out = select_and_run(get_method("prediction-sensitivity"), digits,
                         {"epsilon": 1.0, "delta": 0.0, "budget": 10, "l2": None}, seed=0,
                         selection=Selection(mode="private"))
    assert out.mode == "public" and "public defaults" in out.note
