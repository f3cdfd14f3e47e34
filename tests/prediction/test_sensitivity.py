"""PredictionSensitivity: privacy on worst-case neighbours, an enforced budget, validation, accuracy."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import privml.prediction._sensitivity as sensitivity_module
from privml.accounting._analytic_gaussian import gaussian_delta, gaussian_epsilon
from privml.audit import neighbour_distribution_test
from privml.exceptions import BudgetExhausted, PrivacyLeakWarning
from privml.ledger import MemoryLedger
from privml.ledger._base import key_label
from privml.linear import NonPrivateClassifier
from privml.linear._solvers import DEFAULT_TOL
from privml.prediction import PredictionSensitivity, logit_sensitivity

from .conftest import binary_problem, unit_rows

N_SAMPLES = 20_000


def test_logit_sensitivity_reference_values():
    assert logit_sensitivity(1.0, 1000, 0.01) == pytest.approx(0.2)
    assert logit_sensitivity(np.sqrt(2), 50_000, 1e-2) == pytest.approx(2 * np.sqrt(2) / 500)
    assert logit_sensitivity(1.0, 1000, 0.01, grad_tol=1e-6) == pytest.approx(0.2 + 2e-4)


# ------------------------------------------------------------------ privacy on neighbouring datasets
def worst_case_neighbours(n: int = 20, l2: float = 4.0):
    """Replace-one neighbours whose logits at a query differ by exactly the sensitivity bound.

    With the Huber hinge loss (h = 0.5), lambda = 4 and unit rows, every
    margin stays below 1 - h = 0.5 (||w|| <= 1/lambda), so each record's
    gradient is exactly -y x, of norm L = 1, and w = sum_i y_i x_i / (n lambda).
    Flipping the label of record 0 moves w by 2 x_0 / (n lambda) and the
    logit at x_0 by 2 / (n lambda): the bound 2L/(n lambda) is attained.
    """
    X = unit_rows(n, 3, seed=7)
    y = (np.arange(n) % 2).astype(int)
    y_neighbour = y.copy()
    y_neighbour[0] = 1 - y[0]
    return X, y, y_neighbour, l2


def noisy_logits_on_neighbours(**settings):
    X, y, y_neighbour, l2 = worst_case_neighbours()
    outputs = []
    for labels in (y, y_neighbour):
        model = PredictionSensitivity(
            budget=N_SAMPLES, l2=l2, loss="huber", classes=[0, 1], random_state=1, **settings
        ).fit(X, labels)
        outputs.append(model.decision_function(np.tile(X[0], (N_SAMPLES, 1))))
    return outputs, model


def test_the_neighbours_attain_the_sensitivity_bound():
    X, y, y_neighbour, l2 = worst_case_neighbours()
    fits = [PredictionSensitivity(epsilon=1.0, budget=1, l2=l2, loss="huber", classes=[0, 1]).fit(X, labels)
            for labels in (y, y_neighbour)]
    shift = abs((fits[0].weights_ - fits[1].weights_) @ X[0])
    assert shift == pytest.approx(2 / (20 * l2), rel=1e-6)
    assert shift <= fits[0].fit_info_["sensitivity"] == pytest.approx(2 / (20 * l2) + 2 * DEFAULT_TOL / l2)


def test_laplace_answers_respect_the_per_query_epsilon():
    # epsilon = B * 1 under basic composition: each answer is 1-DP.
    (a, b), model = noisy_logits_on_neighbours(epsilon=float(N_SAMPLES), delta=0.0)
    assert model.fit_info_["noise"] == "l2-laplace"
    result = neighbour_distribution_test(a, b, epsilon=1.0)
    assert not result.violated, result
    # The test is sharp here: the data certify a good part of the claimed loss.
    assert result.epsilon_lower_bound > 0.5


def test_laplace_with_half_the_sensitivity_is_caught(monkeypatch):
    real = sensitivity_module.logit_sensitivity
    monkeypatch.setattr(sensitivity_module, "logit_sensitivity", lambda *a, **k: real(*a, **k) / 2)
    (a, b), _ = noisy_logits_on_neighbours(epsilon=float(N_SAMPLES), delta=0.0)
    assert neighbour_distribution_test(a, b, epsilon=1.0).violated


def gaussian_settings() -> tuple[dict, float]:
    """GDP calibration for N answers whose per-answer noise multiplier is 1."""
    delta = 1e-5
    epsilon = gaussian_epsilon(delta, np.sqrt(N_SAMPLES))  # mu_total = sqrt(B) * mu_query, mu_query = 1
    return {"epsilon": epsilon, "delta": delta, "accountant": "gdp"}, gaussian_delta(1.0, 1.0)


def test_gaussian_answers_respect_the_per_query_guarantee():
    settings, per_query_delta = gaussian_settings()
    (a, b), model = noisy_logits_on_neighbours(**settings)
    assert model.fit_info_["noise_multiplier"] == pytest.approx(1.0, rel=1e-6)
    # One answer with noise multiplier 1 is (1, delta(1; mu = 1))-DP (Balle and Wang 2018, Thm 8).
    assert not neighbour_distribution_test(a, b, epsilon=1.0, delta=per_query_delta).violated


def test_gaussian_with_half_the_sensitivity_is_caught(monkeypatch):
    real = sensitivity_module.logit_sensitivity
    monkeypatch.setattr(sensitivity_module, "logit_sensitivity", lambda *a, **k: real(*a, **k) / 2)
    settings, per_query_delta = gaussian_settings()
    (a, b), _ = noisy_logits_on_neighbours(**settings)
    assert neighbour_distribution_test(a, b, epsilon=1.0, delta=per_query_delta).violated


# ------------------------------------------------------------------ the budget
@pytest.fixture
def small_model():
    X, y = binary_problem()
    return PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=10, classes=[0, 1], random_state=0).fit(X, y), X


def test_every_row_counts_and_query_b_plus_1_is_refused(small_model):
    model, X = small_model
    assert model.remaining() == 10
    assert model.predict(X[:4]).shape == (4,)
    assert model.predict_proba(X[:3]).shape == (3, 2)
    assert model.decision_function(X[:2]).shape == (2,)
    assert model.remaining() == 1
    model.predict(X[:1])
    with pytest.raises(BudgetExhausted, match="10 of 10"):
        model.predict(X[:1])
    assert model.ledger_.state().spent == 10


def test_a_refused_batch_answers_nothing_and_spends_nothing(small_model):
    model, X = small_model
    model.predict(X[:8])
    rng_state = model._rng.bit_generator.state
    with pytest.raises(BudgetExhausted, match="nothing was answered"):
        model.predict(X[:3])  # 3 > 2 left: all or nothing
    assert model.remaining() == 2
    assert model._rng.bit_generator.state == rng_state  # no noise was drawn
    assert model.predict(X[:2]).shape == (2,)


@pytest.mark.parametrize(
    ("X_bad", "message"),
    [
        (np.full((2, 3), np.nan), "NaN"),
        (np.ones((2, 4)), "features"),
        (np.ones(3), "dimension"),
        (np.ones((0, 3)), "no rows"),
    ],
)
def test_bad_queries_are_refused_before_spending(small_model, X_bad, message):
    model, _ = small_model
    with pytest.raises(ValueError, match=message):
        model.predict(X_bad)
    assert model.remaining() == 10


def test_api_key_quotas_are_enforced(small_model):
    model, X = small_model
    model.ledger_.set_quota("alice", 3)
    model.predict(X[:2], key="alice")
    with pytest.raises(BudgetExhausted, match=key_label("alice")):  # never the raw key: it is a credential
        model.predict(X[:2], key="alice")
    assert model.ledger_.remaining("alice") == 1 and model.remaining() == 8


def test_concurrent_queries_never_exceed_the_budget():
    X, y = binary_problem()
    model = PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=500, classes=[0, 1], random_state=0).fit(X, y)
    answered, refused = [], []
    lock = threading.Lock()

    def worker():
        for _ in range(100):
            try:
                model.predict(X[:1])
                with lock:
                    answered.append(1)
            except BudgetExhausted:
                with lock:
                    refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answered) == 500 and len(refused) == 300
    assert model.ledger_.state().spent == 500


def test_a_given_ledger_is_used_and_must_match_the_budget():
    X, y = binary_problem()
    ledger = MemoryLedger(7)
    model = PredictionSensitivity(epsilon=1.0, budget=7, classes=[0, 1], ledger=ledger).fit(X, y)
    model.predict(X[:5])
    assert model.ledger_ is ledger and ledger.remaining() == 2
    with pytest.raises(ValueError, match="budget"):
        PredictionSensitivity(epsilon=1.0, budget=8, classes=[0, 1], ledger=ledger).fit(X, y)


def test_fresh_noise_for_every_answer(small_model):
    model, X = small_model
    first, second = model.decision_function(X[:1]), model.decision_function(X[:1])
    assert first[0] != second[0]


# ------------------------------------------------------------------ settings and validation
def test_fit_info_and_guarantee():
    X, y = binary_problem(n=200)
    model = PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=100, l2=0.1, classes=[0, 1]).fit(X, y)
    info = model.fit_info_
    assert info["sensitivity"] == pytest.approx(2 / (200 * 0.1) + 2 * DEFAULT_TOL / 0.1)
    assert info["accountant"] == "gdp" and info["noise"] == "gaussian"
    assert info["noise_scale"] == pytest.approx(info["noise_multiplier"] * info["sensitivity"])
    assert info["noise_scales"]["gdp"] < min(info["noise_scales"]["basic"], info["noise_scales"]["advanced"])
    assert (model.privacy_.epsilon, model.privacy_.delta, model.privacy_.accountant) == (1.0, 1e-5, "gdp")
    assert model.privacy_.neighbouring.value == "replace-one"


def test_multiclass_uses_the_multinomial_lipschitz_constant(digits):
    model = PredictionSensitivity(epsilon=1.0, budget=5, l2=0.1, classes=range(10)).fit(
        digits.X_train, digits.y_train
    )
    n = digits.X_train.shape[0]
    assert model.fit_info_["lipschitz"] == pytest.approx(np.sqrt(2))
    assert model.fit_info_["sensitivity"] == pytest.approx(2 * np.sqrt(2) / (n * 0.1), rel=1e-6)
    assert model.decision_function(digits.X_test[:5]).shape == (5, 10)


def test_auto_l2_grows_with_the_noise():
    X, y = binary_problem(n=200)
    l2 = [PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=b, classes=[0, 1]).fit(X, y).fit_info_["l2"]
          for b in (1, 100)]
    assert l2[1] == pytest.approx(10 * l2[0])  # GDP noise grows like sqrt(B), lambda with it


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"epsilon": float("inf")}, ValueError, "epsilon"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"budget": 0}, ValueError, "budget"),
        ({"budget": 1.5}, TypeError, "budget"),
        ({"accountant": "zcdp"}, ValueError, "accountant must be"),
        ({"delta": 0.0, "accountant": "gdp"}, ValueError, "delta > 0"),
        ({"l2": -1.0}, ValueError, "l2"),
        ({"random_state": "seed"}, TypeError, "random_state"),
        ({"ledger": "ledger.db"}, TypeError, "ledger"),
    ],
)
def test_bad_settings_are_refused_at_fit(settings, error, message):
    X, y = binary_problem()
    kwargs = {"epsilon": 1.0, "delta": 1e-5, "budget": 10, "classes": [0, 1], **settings}
    with pytest.raises(error, match=message):
        PredictionSensitivity(**kwargs).fit(X, y)


def test_bad_training_data_is_refused():
    X, y = binary_problem()
    model = PredictionSensitivity(epsilon=1.0, budget=10, classes=[0, 1])
    with pytest.raises(ValueError, match="NaN"):
        model.fit(np.where(np.eye(40, 3) > 0, np.inf, X), y)
    with pytest.raises(ValueError, match="not in the public class set"):
        model.fit(X, y + 5)
    with pytest.warns(PrivacyLeakWarning):
        PredictionSensitivity(epsilon=1.0, budget=10).fit(X, y)


def test_from_model_matches_fit():
    X, y = binary_problem(n=100)
    base = NonPrivateClassifier(l2=0.05, classes=[0, 1]).fit(X, y)
    served = PredictionSensitivity.from_model(base, epsilon=1.0, delta=1e-5, budget=20, random_state=0)
    fitted = PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=20, l2=0.05, classes=[0, 1], random_state=0)
    fitted.fit(X, y)
    assert np.allclose(served.weights_, fitted.weights_)
    assert served.fit_info_["noise_scale"] == pytest.approx(fitted.fit_info_["noise_scale"])
    assert np.array_equal(served.decision_function(X[:5]), fitted.decision_function(X[:5]))
    assert served.remaining() == 15


def test_from_model_refuses_what_it_cannot_bound():
    X, y = binary_problem()
    with pytest.raises(TypeError, match="NonPrivateClassifier"):
        PredictionSensitivity.from_model(object(), epsilon=1.0, budget=5)
    with pytest.raises(ValueError, match="not fitted"):
        PredictionSensitivity.from_model(NonPrivateClassifier(), epsilon=1.0, budget=5)
    base = NonPrivateClassifier(classes=[0, 1]).fit(X, y)
    del base.fit_info_["n_train"]
    with pytest.raises(ValueError, match="n_train"):
        PredictionSensitivity.from_model(base, epsilon=1.0, budget=5)


# ------------------------------------------------------------------ utility
def test_accuracy_beats_chance_and_falls_with_epsilon(digits):
    budget = digits.X_test.shape[0]
    accuracy = {}
    for epsilon in (1e4, 30.0, 0.3):
        model = PredictionSensitivity(epsilon=epsilon, delta=1e-5, budget=budget, classes=range(10), random_state=0)
        accuracy[epsilon] = model.fit(digits.X_train, digits.y_train).score(digits.X_test, digits.y_test)
    assert accuracy[1e4] > 0.85  # chance is 0.1
    assert accuracy[1e4] > accuracy[30.0] + 0.2 > accuracy[0.3] + 0.2
