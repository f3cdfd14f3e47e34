from __future__ import annotations

import pytest

from privml.selection import RandomStopping
from privml.study._methods import Method, get_method
from privml.study._prepare import prepare
from privml.study._selection import grid_for, select_and_run
from privml.study._spec_parts import Selection


@pytest.fixture(scope="module")
def digits():
    return prepare("digits", n=500, d=10, k=None, public_size=200, seed=0)


def test_grid_skips_hyper_parameters_fixed_by_the_point():
    method = get_method("objective")
    selection = Selection(grids={"objective": {"l2": (0.1, 0.01)}})
    assert grid_for(method, {"l2": None}, selection) == [{"l2": 0.1}, {"l2": 0.01}]
    assert grid_for(method, {"l2": 0.5}, selection) == []


def test_private_selection_refuses_a_vanishing_budget_before_any_candidate_trains(digits, monkeypatch):
    def fit(*args, **kwargs):
        raise AssertionError("a candidate trained")

    monkeypatch.setattr(Method, "fit", fit)
    selection = Selection(mode="private", grids={"output": {"l2": (1e-3, 1e-1)}})
    with pytest.raises(ValueError, match="too small for a private selection"):
        select_and_run(get_method("output"), digits, {"epsilon": 1e-9, "delta": 1e-5, "l2": None}, seed=0,
                       selection=selection)


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
    stopping = RandomStopping(2.0, 0.0, stop_probability=0.5)
    assert (out.result.epsilon, out.result.delta) == (stopping.privacy.epsilon, stopping.privacy.delta)
    assert out.result.info["neighbouring"] == "replace-one"
    # The number of candidate runs is not kept: the theorem's bound is for a hidden stopping time.
    assert "runs" not in out.result.info and "runs" not in out.note
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


@pytest.mark.parametrize(("relation", "expected"), [("replace-one", "replace-one"), ("mixed", "add/remove-one")])
def test_private_selection_is_stated_under_the_candidates_relation(digits, relation, expected):
    selection = Selection(mode="private", stop_probability=1.0, grids={"dpsgd": {"clip_norm": (0.1, 1.0)}})
    out = select_and_run(get_method("dpsgd"), digits, {"epsilon": 2.0, "delta": 1e-5, "neighbouring": relation},
                         seed=0, selection=selection)
    assert out.result.info["neighbouring"] == expected


def test_private_selection_noise_cannot_be_replayed_from_the_stored_seed(digits, tmp_path):
    # Same seed, same secret key (one cache folder): the same outcome; a new key (a cleared cache): new noise.
    from privml.study._cache import StudyCache
    from privml.study._selection import PointSelection

    selection = Selection(mode="private", stop_probability=1.0, grids={"output": {"l2": (1e-3, 1e-1)}})

    def score(root):
        root.mkdir(exist_ok=True)
        point = PointSelection(seed=0, key="k", cache=StudyCache(root))
        out = select_and_run(get_method("output"), digits, {"epsilon": 2.0, "delta": 0.0, "l2": None}, seed=1,
                             selection=selection, point=point)
        return out.candidates[0]["score"]

    first, again, other = score(tmp_path / "a"), score(tmp_path / "a"), score(tmp_path / "b")
    assert first == again and first != other
    assert len((tmp_path / "a" / ".selection-key").read_text().strip()) == 64


def test_a_damaged_selection_key_is_refused_not_used(tmp_path):
    # An empty key would leave private selection's noise a function of the public seeds alone (a review).
    from privml.study._cache import StudyCache

    (tmp_path / ".selection-key").write_text("")
    with pytest.raises(ValueError, match="selection-key is damaged"):
        StudyCache(tmp_path).selection_key()
