"""AccuracyFirstClassifier and select_output_perturbation: the ex-post ledger, the failure
case, the searches, the checks, and validation before any noise."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from privml.linear._nonprivate import NonPrivateClassifier
from privml.linear._sensitivity import erm_sensitivity
from privml.selection import _accuracy_first as af_module
from privml.selection._accuracy_first import (
    AccuracyFirstClassifier,
    AccuracyFirstWarning,
    epsilon_grid,
    reference_epsilon,
    select_output_perturbation,
)
from privml.selection._doubling import doubling_grid
from privml.selection._queries import minimiser_radius

from ._data import blobs

X, Y = blobs()
BASE = {"classes": [0, 1], "l2": 0.01, "at_epsilon": 1.0, "epsilon_min": 0.01, "epsilon_max": 10.0, "n_steps": 30}


def fit(**kwargs) -> AccuracyFirstClassifier:
    settings = {**BASE, **kwargs}
    if settings.get("search") == "doubling":
        del settings["n_steps"]  # doubling has no grid: a set n_steps is refused
    return AccuracyFirstClassifier(**settings).fit(X, Y)


# ----------------------------------------------------------------- the ledger
@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_noise_reduction_charges_at_plus_the_level_reached(delta: float) -> None:
    model = fit(target=0.1, delta=delta, random_state=0)
    s = model.selection_
    grid = epsilon_grid(0.01, 10.0, 30)
    assert s.met_target and s.stopped_at == len(s.released) - 1
    assert 0 < s.stopped_at < len(grid) - 1  # a real search: neither the first nor the last level
    assert model.privacy_.epsilon == pytest.approx(1.0 + grid[s.stopped_at], rel=1e-12)
    assert (model.privacy_.delta, model.privacy_.accountant) == (delta, "ex-post")
    assert str(model.privacy_.neighbouring) == "replace-one"
    assert s.noise == ("gaussian" if delta else "laplace")
    assert [st.passed for st in s.steps] == [False] * s.stopped_at + [True]
    assert [st.epsilon for st in s.steps] == list(grid[: s.stopped_at + 1])
    assert np.array_equal(model.weights_, s.released[-1])
    assert model.score(X, Y) > 0.85


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_doubling_charges_the_sum_of_what_it_published(delta: float) -> None:
    model = fit(target=0.1, delta=delta, search="doubling", random_state=0)
    s = model.selection_
    grid = doubling_grid(0.01, 10.0)
    assert s.grid == grid and s.met_target
    k = s.stopped_at
    assert model.privacy_.epsilon == pytest.approx(1.0 + sum(grid[: k + 1]), rel=1e-12)
    assert model.privacy_.delta == pytest.approx((k + 1) * delta)
    assert s.noise == ("gaussian" if delta else "l2-laplace")


@pytest.mark.parametrize("search", ["noise-reduction", "doubling"])
def test_failure_publishes_everything_and_charges_for_it(search: str) -> None:
    # An error of 1e-4 on 400 validation records means no mistake at all: out of reach.
    with pytest.warns(AccuracyFirstWarning, match="no model met the target"):
        model = fit(target=1e-4, search=search, random_state=0)
    s = model.selection_
    assert s.stopped_at is None and not s.met_target
    assert len(s.released) == len(s.grid) and not any(st.passed for st in s.steps)
    full = s.grid[-1] if search == "noise-reduction" else sum(s.grid)
    assert model.privacy_.epsilon == pytest.approx(1.0 + full)  # never -1
    assert model.fit_info_["stopped_at"] is None


def test_the_passing_model_meets_the_target_when_the_check_is_sharp() -> None:
    model = fit(target=0.1, at_epsilon=1e4, random_state=1)
    steps = model.selection_.steps
    assert steps[-1].nonprivate_value >= 0.9 - 1e-3
    assert all(st.nonprivate_value < 0.9 + 1e-3 for st in steps[:-1])


def test_noise_reduction_is_cheaper_than_doubling() -> None:
    nr, dbl = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyFirstWarning)
        for seed in range(8):
            nr.append(fit(target=0.1, delta=1e-6, random_state=seed).privacy_.epsilon - 1.0)
            dbl.append(fit(target=0.1, delta=1e-6, search="doubling", random_state=seed).privacy_.epsilon - 1.0)
    assert np.median(nr) < 0.6 * np.median(dbl), (nr, dbl)


def test_stricter_targets_cost_more() -> None:
    loose = [fit(target=0.3, random_state=s).privacy_.epsilon for s in range(3)]
    strict = [fit(target=0.05, random_state=s).privacy_.epsilon for s in range(3)]
    assert max(loose) < min(strict)


def test_the_validation_split_and_sensitivities() -> None:
    model = fit(target=0.1, random_state=0, validation_fraction=0.25)
    info = model.fit_info_
    assert (info["n_train"], info["n_val"]) == (1500, 500)
    assert info["query_sensitivity"] == 1 / 500 and info["threshold"] == pytest.approx(0.9)
    assert info["sensitivity"] == erm_sensitivity(1.0, 1500, 0.01, grad_tol=1e-10)
    assert model.selection_.query_sensitivity == 1 / 500


def test_laplace_chain_uses_the_l1_sensitivity(monkeypatch) -> None:
    seen = {}
    real = af_module.laplace_noise_reduction

    def spy(value, **kwargs):
        seen.update(kwargs)
        return real(value, **kwargs)

    monkeypatch.setattr(af_module, "laplace_noise_reduction", spy)
    minimiser = np.zeros(9)
    select_output_perturbation(
        minimiser, sensitivity=0.5, query=lambda w: 1.0, query_sensitivity=0.01, threshold=0.0,
        epsilons=[1.0], at_epsilon=1.0, random_state=0,
    )
    assert seen["sensitivity"] == pytest.approx(3 * 0.5)  # sqrt(d) Delta_2


def test_excess_risk_target() -> None:
    model = fit(target=0.05, metric="excess_risk", at_epsilon=5.0, random_state=0)
    s, info = model.selection_, model.fit_info_
    radius = minimiser_radius(af_module.make_loss(2), 0.01)
    assert info["n_val"] == 0 and info["n_train"] == 2000
    assert info["query_sensitivity"] == pytest.approx(4 * radius / 2000)
    assert info["threshold"] == -0.05
    assert all(np.linalg.norm(w) <= radius * (1 + 1e-12) for w in s.released)
    assert s.met_target and -s.steps[-1].nonprivate_value < 0.05 + 0.05


def test_multiclass() -> None:
    X3, Y3 = blobs(n=3000, d=3, classes=3, seed=2, separation=0.6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyFirstWarning)
        model = AccuracyFirstClassifier(**{**BASE, "classes": [0, 1, 2]}, target=0.15, delta=1e-6, random_state=0)
        model.fit(X3, Y3)
    assert model.weights_.shape == (3, 3)
    assert model.selection_.met_target and model.score(X3, Y3) > 0.8


def test_seeded_fits_are_reproducible() -> None:
    a, b = fit(target=0.1, random_state=5), fit(target=0.1, random_state=5)
    assert a.selection_.stopped_at == b.selection_.stopped_at
    assert np.array_equal(a.weights_, b.weights_)


def test_auto_l2_is_public() -> None:
    model = fit(target=0.1, l2="auto", random_state=0)
    assert model.fit_info_["l2_rule"].startswith("auto")
    assert reference_epsilon(0.01, 10.0) == pytest.approx(0.01**0.25 * 10**0.75)


def test_grid() -> None:
    assert epsilon_grid(0.1, 10.0, 3) == (0.1, 1.0, 10.0)
    assert epsilon_grid(0.5, 0.5, 1) == (0.5,)
    for bad in [(1.0, 0.5, 3), (0.1, 1.0, 0), (0.5, 1.0, 1), (0.0, 1.0, 3)]:
        with pytest.raises(ValueError):
            epsilon_grid(*bad)


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs",
    [
        {"target": 0.0},
        {"target": 1.0},
        {"target": float("nan")},
        {"target": 0.1, "metric": "auc"},
        {"target": 0.1, "search": "binary"},
        {"target": 0.1, "margin": 0.1},
        {"target": 0.1, "margin": -0.01},
        {"target": 0.1, "at_epsilon": 0.0},
        {"target": 0.1, "delta": 1.0},
        {"target": 0.1, "epsilon_min": 20.0},
        {"target": 0.1, "n_steps": 0},
        {"target": 0.1, "n_steps": 10**9},  # a grid of 8 GB, refused up front (privml select's --steps too)
        {"target": 0.1, "validation_fraction": 1.0},
        {"target": 0.1, "l2": -1.0},
        {"target": 0.1, "tol": 0.0},
    ],
)
def test_bad_parameters_fail_before_any_noise(kwargs: dict) -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError):
        AccuracyFirstClassifier(**{**BASE, **kwargs, "random_state": rng}).fit(X, Y)
    assert rng.bit_generator.state == state


def test_keyword_only_and_sklearn_params() -> None:
    with pytest.raises(TypeError):
        AccuracyFirstClassifier(0.1)  # type: ignore[misc]
    params = AccuracyFirstClassifier(target=0.1).get_params()
    assert params["target"] == 0.1 and params["search"] == "noise-reduction"


def test_select_validates_before_noise() -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    good = {
        "sensitivity": 1.0, "query": lambda w: 0.0, "query_sensitivity": 1.0, "threshold": 0.0,
        "epsilons": [1.0, 2.0], "at_epsilon": 1.0, "random_state": rng,
    }
    for bad in [{"sensitivity": 0.0}, {"epsilons": [2.0, 1.0]}, {"threshold": math.inf}, {"search": "x"},
                {"delta": -1.0}, {"at_epsilon": 0.0}, {"query_sensitivity": 0.0}]:
        with pytest.raises(ValueError):
            select_output_perturbation(np.zeros(3), **{**good, **bad})
    assert rng.bit_generator.state == state


def test_nonprivate_minimiser_is_shared_with_the_baseline() -> None:
    # At a huge epsilon the published model is the non-private minimiser of the training
    # part (the split is the first draw of the seeded generator: a public permutation).
    model = fit(target=0.1, at_epsilon=1e4, epsilon_max=1e6, epsilon_min=1e5, n_steps=2, delta=1e-6, random_state=0)
    order = np.random.default_rng(0).permutation(len(Y))
    train = np.sort(order[model.fit_info_["n_val"]:])
    ref = NonPrivateClassifier(l2=0.01, classes=[0, 1]).fit(X[train], Y[train])
    assert np.allclose(model.weights_, ref.weights_, atol=1e-3)


def test_doubling_refuses_a_grid_size_it_would_ignore() -> None:
    # privml select refused --steps with --search doubling; the estimator fitted and ignored n_steps (a review).
    from privml.selection import AccuracyFirstClassifier

    X = np.random.default_rng(1).normal(size=(50, 2)) / 3
    rng = np.random.default_rng(0)
    before = str(rng.bit_generator.state)
    model = AccuracyFirstClassifier(target=0.3, metric="error", search="doubling", n_steps=5, classes=[0, 1],
                                    random_state=rng)
    with pytest.raises(ValueError, match="n_steps sets the noise-reduction grid"):
        model.fit(X, (X[:, 0] > 0).astype(int))
    assert str(rng.bit_generator.state) == before
