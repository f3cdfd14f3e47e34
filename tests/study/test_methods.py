from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from privml.study._methods import METHODS, Method, MethodUnavailable, _answer_in_budget_blocks, get_method
from privml.study._prepare import prepare


@pytest.fixture(scope="module")
def digits():
    return prepare("digits", n=400, d=10, k=None, public_size=200, seed=0)


def test_registry_has_every_method_of_the_paper():
    assert {"nonprivate", "output", "objective", "dpsgd", "dpcd", "prediction-sensitivity",
            "subsample-aggregate"} <= set(METHODS)
    assert {m.kind for m in METHODS.values()} == {"baseline", "training", "prediction"}


def test_unknown_method_lists_the_registry():
    with pytest.raises(ValueError, match="unknown method 'magic'; methods are nonprivate"):
        get_method("magic")


def test_missing_module_makes_a_method_unavailable_with_a_clear_error():
    ghost = Method("ghost", "a method not built yet", "prediction", "privml.not_there:Ghost", ("epsilon",), {},
                   True, lambda p, k, s, shape: {})
    reason = ghost.unavailable_reason()
    assert reason is not None and "privml.not_there" in reason and "ghost" in reason
    with pytest.raises(MethodUnavailable, match="module privml.not_there cannot be imported"):
        ghost.fit(np.zeros((2, 2)), np.zeros(2), params={}, n_classes=2, seed=0)
    missing_class = Method("ghost", "x", "training", "privml.linear:NoSuchClassifier", (), {}, True,
                           lambda p, k, s, shape: {})
    assert "has no NoSuchClassifier" in missing_class.unavailable_reason()


def test_relevant_settings_drop_what_a_method_ignores():
    setting = {"epsilon": 1.0, "delta": 0.0, "budget": 100, "n": 10, "d": 5, "k": 3, "l2": None, "m": 8}
    assert "budget" not in get_method("output").relevant(setting)
    assert "m" not in get_method("output").relevant(setting)
    assert get_method("subsample-aggregate").relevant(setting)["budget"] == 100
    assert get_method("nonprivate").relevant(setting).keys() == {"n", "d", "k", "l2"}


@pytest.mark.parametrize("name", ["output", "objective", "dpsgd", "dpcd"])
def test_private_training_adapters_report_the_target_guarantee(digits, name):
    r = get_method(name).run(digits.X_train, digits.y_train, digits.X_test, digits.y_test,
                             params={"epsilon": 4.0, "delta": 1e-5, "l2": None}, n_classes=10, seed=3)
    # Calibrated to the target (DP-SGD's bisection lands just below it).
    assert 4.0 * 0.99 <= r.epsilon <= 4.0 * (1 + 1e-9)
    assert r.delta <= 1e-5
    assert 0.2 < r.accuracy <= 1.0  # far above chance (0.1) at epsilon = 4
    assert r.train_seconds > 0


def test_baseline_reports_no_privacy(digits):
    r = get_method("nonprivate").run(digits.X_train, digits.y_train, digits.X_test, digits.y_test,
                                     params={"l2": None}, n_classes=10, seed=0)
    assert math.isinf(r.epsilon) and r.delta == 1.0
    assert r.accuracy > 0.8


def test_private_prediction_answers_in_blocks_that_never_exceed_the_budget(digits):
    method = get_method("prediction-sensitivity")
    fitted = method.fit(digits.X_train, digits.y_train, params={"epsilon": 1.0, "delta": 0.0, "budget": 7,
                                                               "l2": None}, n_classes=10, seed=0)
    assert fitted.budget == 7
    # The whole test set (360 queries >> B) is answered, yet the fitted model's own budget is untouched.
    accuracy, _ = method.evaluate(fitted, digits.X_test, digits.y_test)
    assert 0.0 <= accuracy <= 1.0
    assert fitted.model.remaining() == 7
    answers = _answer_in_budget_blocks(fitted.model, digits.X_test[:20], 7)
    assert answers.shape == (20,)


def test_one_call_evaluation_matches_block_by_block_deployments(digits):
    from privml.exceptions import BudgetExhausted
    from privml.ledger import MemoryLedger

    method = get_method("prediction-sensitivity")
    fitted = method.fit(digits.X_train, digits.y_train, params={"epsilon": 2.0, "delta": 0.0, "budget": 5,
                                                               "l2": None}, n_classes=10, seed=0)
    fast = np.mean(_answer_in_budget_blocks(fitted.model, digits.X_test, 5) == digits.y_test)
    slow = []
    for start in range(0, digits.X_test.shape[0], 5):
        deployment = copy.copy(fitted.model)
        deployment.ledger_ = MemoryLedger(5)
        block = digits.X_test[start : start + 5]
        slow.append(deployment.predict(block))
        if block.shape[0] == 5:
            with pytest.raises(BudgetExhausted):
                deployment.predict(digits.X_test[:1])  # a deployment never answers query B + 1
    slow_accuracy = np.mean(np.concatenate(slow) == digits.y_test)
    assert abs(fast - slow_accuracy) < 0.08  # same distribution; 359 queries each


def test_private_prediction_accuracy_falls_with_the_budget(digits):
    method = get_method("prediction-sensitivity")
    scores = []
    for budget in (1, 1000):
        r = method.run(digits.X_train, digits.y_train, digits.X_test, digits.y_test,
                       params={"epsilon": 3.0, "delta": 1e-5, "budget": budget, "l2": None}, n_classes=10, seed=0)
        scores.append(r.accuracy)
        assert r.epsilon <= 3.0 + 1e-9
    assert scores[0] > scores[1] + 0.1
