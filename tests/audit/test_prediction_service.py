"""The black-box audit of the prediction service: per-answer epsilon bounds, planted bugs caught, errors."""

from __future__ import annotations

import numpy as np
import pytest

from privml.audit._canaries import clipbkd_canary
from privml.audit._prediction_service import (
    PREDICTION_AUDIT_METHODS,
    audit_prediction_service,
    check_audit_settings,
    split_vote_query,
)
from privml.prediction._sensitivity import PredictionSensitivity
from privml.testing.prediction_controls import PREDICTION_CONTROLS, HalfSensitivityPredictionSensitivity

QUERIES = 2000


def _data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Binary records: one informative feature, a bias feature, and a direction no record uses (the canary's)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, n)
    X = np.column_stack([a * np.sqrt(0.75), np.full(n, 0.5), np.zeros(n)])
    y = (a + 0.3 * rng.standard_normal(n) > 0).astype(np.int64)
    return X, y


def _audit(method, epsilon=1.0, **kwargs):
    X, y = _data()
    return audit_prediction_service(method, X, y, epsilon_query=epsilon, queries=QUERIES, random_state=0, **kwargs)


@pytest.mark.parametrize("method", PREDICTION_AUDIT_METHODS)
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_correct_predictors_stay_below_their_per_answer_claim(method, epsilon):
    for seed in range(3):
        X, y = _data(seed=seed)
        result = audit_prediction_service(method, X, y, epsilon_query=epsilon, queries=QUERIES, random_state=seed)
        assert result.claimed.epsilon == pytest.approx(epsilon)
        assert not result.violated, (seed, result.bound.epsilon)
        # The audit is not vacuous: answers on D and D' differ visibly.
        assert result.bound.epsilon > 0.3 * epsilon
        assert result.auc > 0.55


@pytest.mark.parametrize("name", sorted(PREDICTION_CONTROLS))
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_planted_bugs_are_caught(name, epsilon):
    control = PREDICTION_CONTROLS[name]
    broken = _audit(control.broken, epsilon)
    correct = _audit(control.method, epsilon)
    assert broken.violated and broken.bound.epsilon > epsilon
    assert not correct.violated
    assert broken.details["estimator"] == control.broken.__name__
    assert broken.details["method"] == correct.details["method"] == control.method


def test_report_states_claim_query_and_ledger_charge():
    result = _audit("subsample-aggregate", 2.0)
    d = result.to_dict()
    assert d["claimed_epsilon"] == pytest.approx(2.0)
    assert d["delta"] == 0.0 and d["neighbouring"] == "replace-one"
    assert d["queries"] == d["ledger_budget"] == d["trials_per_world"] == QUERIES
    assert d["ledger_spent"] == [QUERIES, QUERIES]
    assert d["answer_after_budget"] == ["refused", "refused"]
    assert d["epsilon_total"] == pytest.approx(2.0 * QUERIES)
    assert d["query"] == "split vote" and d["n_models"] == 8
    assert d["n_train"] == 201 and d["canary"] == "clipbkd"
    assert set(np.unique(result.scores_out)) <= {0.0, 1.0}
    ps = _audit("prediction-sensitivity").to_dict()
    assert ps["query"] == "canary" and ps["statistic"] == "log-odds of the canary's class"


def test_query_choices():
    assert _audit("subsample-aggregate", query="canary").details["query"] == "canary"
    given = _audit("prediction-sensitivity", query=np.array([0.0, 0.5, 1.0]))
    assert given.details["query"] == "given"
    assert given.bound.epsilon <= 1.0


def test_params_reach_the_predictor():
    result = _audit("subsample-aggregate", params={"n_models": 5})
    assert result.details["n_models"] == 5
    logistic = _audit("prediction-sensitivity", params={"loss": "logistic"})
    # The logistic gradient at the canary is about half its Lipschitz bound: a looser audit than Huber's.
    assert logistic.bound.epsilon < _audit("prediction-sensitivity").bound.epsilon


def test_split_vote_query_needs_exactly_one_changed_teacher():
    X, y = _data()
    from privml.prediction._aggregate import SubsampleAndAggregate

    model = SubsampleAndAggregate(n_models=4, epsilon=1.0, budget=10, classes=(0, 1), random_state=0).fit(X, y)
    canary = clipbkd_canary(X, label=1, classes=(0, 1))
    assert split_vote_query(model, model, canary, X, y) is None


def test_clipbkd_canary_without_the_left_singular_vectors():
    # n >= d: the thin SVD gives the same right singular vectors as the full one.
    X = np.random.default_rng(1).standard_normal((300, 6))
    _, _, vt = np.linalg.svd(X, full_matrices=True)
    direction = clipbkd_canary(X, label=1, classes=(0, 1)).x
    assert abs(abs(direction @ vt[-1]) - 1.0) < 1e-12


def _dishonest(**settings):
    return PredictionSensitivity(**{**settings, "epsilon": 2.0 * settings["epsilon"]})


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"method": "output"}, ValueError, "method must be one of"),
        ({"method": 3}, TypeError, "method must be a method name or a callable"),
        ({"method": lambda **s: object()}, TypeError, "must return a private predictor"),
        ({"method": _dishonest}, ValueError, "must honour the settings"),
        ({"epsilon_query": 0.0}, ValueError, "epsilon_query must be > 0"),
        ({"queries": 3}, ValueError, "queries"),
        ({"confidence": 1.0}, ValueError, "confidence must be in"),
        ({"query": "middle"}, ValueError, "query must be one of"),
        ({"query": np.zeros(2)}, ValueError, "query has 2 features"),
        ({"params": {"budget": 5}}, ValueError, "params may not set budget"),
        ({"params": {"n_models": 5}}, ValueError, "n_models does not apply to prediction-sensitivity"),
        ({"rows_per_request": 0}, ValueError, "rows_per_request"),
        ({"canary": clipbkd_canary(_data(40)[0], label=2, classes=(0, 1, 2))}, ValueError, "not in the public class"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, error, message):
    X, y = _data(40)
    settings = {"method": "prediction-sensitivity", "epsilon_query": 1.0, "queries": 10, **kwargs}
    method = settings.pop("method")
    with pytest.raises(error, match=message) as info:
        audit_prediction_service(method, X, y, random_state=0, **settings)
    assert "\n" not in str(info.value)


def test_half_sensitivity_control_keeps_its_bug_through_the_model_file(tmp_path):
    from privml.io import save_model
    from privml.prediction._loading import load_predictor

    X, y = _data(50)
    model = HalfSensitivityPredictionSensitivity(epsilon=1.0, budget=5, classes=(0, 1), loss="huber").fit(X, y)
    correct = PredictionSensitivity(epsilon=1.0, budget=5, classes=(0, 1), loss="huber").fit(X, y)
    assert model.fit_info_["noise_scale"] == pytest.approx(correct.fit_info_["noise_scale"] / 2)
    assert model.privacy_ == correct.privacy_  # the false claim is the same claim
    # The file names the correct method: read back by load_predictor, the bug is gone (the audit reopens it itself).
    reread = load_predictor(save_model(model, tmp_path / "m.npz"))
    assert type(reread) is PredictionSensitivity
    assert reread.fit_info_["noise_scale"] == pytest.approx(correct.fit_info_["noise_scale"])


@pytest.mark.parametrize(
    ("method", "kwargs", "match"),
    [("subsample-aggregate", {"params": {"n_models": 0}}, "n_models must be >= 1"),
     ("subsample-aggregate", {"params": {"n_jobs": 0}}, "n_jobs must be"),
     ("prediction-sensitivity", {"params": {"l2": -1.0}}, "l2"),
     ("prediction-sensitivity", {"epsilon_query": 0.0}, "epsilon_query must be > 0"),
     ("prediction-sensitivity", {"queries": 3}, "queries must be >= 4"),
     ("prediction-sensitivity", {"confidence": 1.0}, "confidence must be in"),
     ("prediction-sensitivity", {"params": {"budget": 5}}, "params may not set budget")],
)
def test_the_settings_are_checked_without_data_by_the_check_the_audit_runs_first(method, kwargs, match):
    # privml audit --prediction-service runs it before reading any data; the audit itself runs it first, so an
    # audit given no data at all (None) is refused for its settings.
    settings = {"epsilon_query": 1.0, "queries": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        check_audit_settings(method, **settings)
    with pytest.raises(ValueError, match=match):
        audit_prediction_service(method, None, None, **settings)
