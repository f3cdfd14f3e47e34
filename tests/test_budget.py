"""privml.budget: cross-validation and grid search over private estimators charge one stated budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score

from privml.budget import BudgetAccountant, active_budget
from privml.exceptions import BudgetExhausted
from privml.linear import (
    DPSGDClassifier,
    NonPrivateClassifier,
    ObjectivePerturbationClassifier,
    OutputPerturbationClassifier,
)
from privml.prediction import PredictionSensitivity, SubsampleAndAggregate
from privml.selection import AccuracyFirstClassifier


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5)) / 3
    y = (X[:, 0] + 0.1 * rng.normal(size=300) > 0).astype(int)
    return X, y


def test_grid_search_charges_every_fit_and_stops_at_the_budget(data):
    X, y = data
    grid = {"l2": [1e-2, 1e-1]}
    search = GridSearchCV(OutputPerturbationClassifier(epsilon=0.5, classes=[0, 1], random_state=0), grid, cv=3)
    with BudgetAccountant(epsilon=4.0) as budget:
        search.fit(X, y)
    # 2 candidates x 3 folds + the refit: 7 fits of epsilon 0.5, composed
    assert len(budget.charges) == 7 and budget.spent.epsilon == pytest.approx(3.5)
    assert budget.remaining == (pytest.approx(0.5), 0.0)
    with BudgetAccountant(epsilon=3.0) as small, pytest.raises(BudgetExhausted, match="nothing was spent"):
        GridSearchCV(OutputPerturbationClassifier(epsilon=0.5, classes=[0, 1], random_state=0), grid, cv=3,
                     error_score="raise").fit(X, y)
    assert len(small.charges) == 6  # the seventh fit was refused before its noise


def test_a_refused_fit_draws_nothing_and_leaves_the_estimator_unfitted(data):
    X, y = data
    model = ObjectivePerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0)
    with BudgetAccountant(epsilon=0.5) as budget, pytest.raises(BudgetExhausted):
        model.fit(X, y)
    assert not hasattr(model, "weights_") and budget.charges == []


def test_no_budget_no_charge_and_the_context_ends(data):
    X, y = data
    budget = BudgetAccountant(epsilon=1.0)
    with budget:
        assert active_budget() is budget
    assert active_budget() is None
    OutputPerturbationClassifier(epsilon=5.0, classes=[0, 1], random_state=0).fit(X, y)
    assert budget.charges == []


def test_cross_val_score_charges_each_fold(data):
    X, y = data
    with BudgetAccountant(epsilon=10.0, delta=1e-4) as budget:
        cross_val_score(ObjectivePerturbationClassifier(epsilon=1.0, delta=1e-5, classes=[0, 1], random_state=0),
                        X, y, cv=4)
    assert budget.spent.epsilon == pytest.approx(4.0) and budget.spent.delta == pytest.approx(4e-5)


def test_an_add_remove_fit_is_converted_to_a_replace_one_budget_and_refused_the_other_way(data):
    X, y = data
    dpsgd = DPSGDClassifier(epsilon=1.0, delta=1e-6, epochs=1, batch_size=50, classes=[0, 1], random_state=0)
    with BudgetAccountant(epsilon=3.0, delta=1e-5) as budget:
        dpsgd.fit(X, y)
    charge = budget.charges[0]
    assert str(charge.stated.neighbouring) == "add/remove-one"
    assert charge.epsilon == pytest.approx(2 * charge.stated.epsilon)
    assert charge.delta == pytest.approx((1 + math.exp(charge.stated.epsilon)) * charge.stated.delta)
    assert dpsgd.privacy_.epsilon <= charge.stated.epsilon * (1 + 1e-9)
    with BudgetAccountant(epsilon=3.0, neighbouring="add/remove-one"), pytest.raises(ValueError, match="replace-one"):
        OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y)


def test_a_non_private_fit_is_refused_but_a_predictor_charges_its_whole_answer_budget(data):
    X, y = data
    with BudgetAccountant(epsilon=5.0, delta=1e-5) as budget:
        with pytest.raises(ValueError, match="not private"):
            NonPrivateClassifier(classes=[0, 1]).fit(X, y)
        # Its non-private model inside is covered by the predictor's own charge, not refused.
        PredictionSensitivity(epsilon=1.0, delta=1e-6, budget=10, classes=[0, 1], random_state=0).fit(X, y)
        SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=10, classes=[0, 1], random_state=0).fit(X, y)
    assert [c.epsilon for c in budget.charges] == [1.0, 1.0]


def test_accuracy_first_is_charged_its_worst_case_and_stays_within_it(data):
    X, y = data
    model = AccuracyFirstClassifier(target=0.3, at_epsilon=0.5, epsilon_max=2.0, classes=[0, 1], random_state=0)
    with BudgetAccountant(epsilon=3.0) as budget:
        model.fit(X, y)
    assert budget.charges[0].epsilon == pytest.approx(2.5)  # at_epsilon + the grid's last level (noise reduction)
    assert model.privacy_.epsilon <= 2.5


def test_a_plan_that_understates_the_fit_is_caught(data, monkeypatch):
    # The planted fault: a fit charged half of what it spends would make the budget's total wrong.
    X, y = data
    original = OutputPerturbationClassifier._planned_guarantee

    def halved(self, n):
        planned = original(self, n)
        return type(planned)(planned.epsilon / 2, planned.delta, planned.neighbouring, "planned")

    monkeypatch.setattr(OutputPerturbationClassifier, "_planned_guarantee", halved)
    with BudgetAccountant(epsilon=5.0), pytest.raises(RuntimeError, match="exceeds"):
        OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y)


def test_torch_fits_are_charged_and_the_baseline_refused():
    torch = pytest.importorskip("torch")  # noqa: F841
    from privml.torch import TorchClassifier

    rng = np.random.default_rng(1)
    X, y = rng.random((40, 256)), np.arange(40) % 2
    settings = dict(input_shape=(1, 16, 16), classes=[0, 1], epochs=1, batch_size=20, random_state=0, device="cpu")
    with BudgetAccountant(epsilon=10.0, delta=1e-4) as budget:
        model = TorchClassifier(epsilon=2.0, delta=1e-5, **settings).fit(X, y)
        with pytest.raises(ValueError, match="not private"):
            TorchClassifier(epsilon=float("inf"), **settings).fit(X, y)
    assert len(budget.charges) == 1 and budget.charges[0].stated.epsilon <= 2.0
    assert model.privacy_.epsilon <= budget.charges[0].stated.epsilon * (1 + 1e-9)


@pytest.mark.parametrize(("epsilon", "delta"), [(-1.0, 0.0), (1.0, 2.0), (float("nan"), 0.0)])
def test_bad_budgets_are_refused(epsilon, delta):
    with pytest.raises(ValueError):
        BudgetAccountant(epsilon=epsilon, delta=delta)
