"""SubsampleAndAggregate: the vote law, privacy on neighbours (and the missing factor 2 caught), the budget."""

from __future__ import annotations

import warnings

import joblib
import numpy as np
import pytest
from scipy import stats
from scipy.special import softmax
from sklearn.dummy import DummyClassifier
from sklearn.neighbors import KNeighborsClassifier

from privml.audit import neighbour_distribution_test
from privml.exceptions import BudgetExhausted, PrivacyLeakWarning
from privml.linear import NonPrivateClassifier
from privml.mechanisms._exponential import ExponentialMechanism
from privml.prediction import SubsampleAndAggregate
from privml.prediction._aggregate import random_partition

from .conftest import binary_problem

N_SAMPLES = 10_000


class ForgetsTheFactorTwo(SubsampleAndAggregate):
    """The reference code's bug: P(c) proportional to exp(epsilon_q votes_c), i.e. beta = epsilon_q."""

    def _mechanism(self, epsilon_query, rng):
        return ExponentialMechanism(epsilon=epsilon_query, sensitivity=1.0, monotonic=True, random_state=rng)


def one_record_teachers(labels, cls=SubsampleAndAggregate, **settings):
    """One teacher per record, each predicting its record's label: the votes are the label counts."""
    labels = np.asarray(labels)
    X = np.zeros((labels.size, 2))
    return cls(estimator=DummyClassifier(strategy="most_frequent"), n_models=labels.size,
               classes=sorted(set(labels.tolist()) | {0, 1, 2}), random_state=3, **settings).fit(X, labels)


def answers(model, n: int = N_SAMPLES) -> np.ndarray:
    return model.predict(np.zeros((n, 2)))


def per_query(epsilon_query: float) -> dict:
    """Settings whose per-answer epsilon is ``epsilon_query`` (basic composition over N answers)."""
    return {"epsilon": epsilon_query * N_SAMPLES, "budget": N_SAMPLES}


# ------------------------------------------------------------------ the vote law
def test_votes_are_the_teachers_predictions():
    model = one_record_teachers([0] * 6 + [1] * 3 + [2], **per_query(1.0))
    assert model._votes(np.zeros((2, 2))).tolist() == [[6, 3, 1], [6, 3, 1]]
    assert model.fit_info_["beta"] == pytest.approx(0.5)  # epsilon_q / 2


def test_answers_follow_exp_beta_votes():
    model = one_record_teachers([0] * 6 + [1] * 3 + [2], **per_query(1.0))
    counts = np.bincount(answers(model), minlength=3)
    expected = N_SAMPLES * softmax(0.5 * np.array([6, 3, 1]))
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_the_chi_square_test_sees_a_missing_factor_two():
    model = one_record_teachers([0] * 6 + [1] * 3 + [2], cls=ForgetsTheFactorTwo, **per_query(1.0))
    counts = np.bincount(answers(model), minlength=3)
    expected = N_SAMPLES * softmax(0.5 * np.array([6, 3, 1]))
    assert stats.chisquare(counts, expected).pvalue < 1e-10


# ------------------------------------------------------------------ privacy on neighbouring datasets
NEIGHBOURS = ([0] * 5 + [1] * 5, [1] + [0] * 4 + [1] * 5)  # replace one record: votes (5, 5) -> (4, 6)


def test_answers_respect_the_per_query_epsilon():
    a, b = (answers(one_record_teachers(labels, **per_query(1.0))) for labels in NEIGHBOURS)
    result = neighbour_distribution_test(a, b, epsilon=1.0)
    assert not result.violated, result
    assert result.epsilon_lower_bound > 0.4  # the pair is close to the worst case: 0.5 / sigmoid(-1)


def test_votes_without_the_factor_two_are_caught():
    a, b = (answers(one_record_teachers(labels, cls=ForgetsTheFactorTwo, **per_query(1.0))) for labels in NEIGHBOURS)
    assert neighbour_distribution_test(a, b, epsilon=1.0).violated


# ------------------------------------------------------------------ the budget
@pytest.fixture
def small_model():
    X, y = binary_problem(n=60)
    return SubsampleAndAggregate(n_models=6, epsilon=1.0, budget=10, classes=[0, 1], random_state=0).fit(X, y), X


def test_every_row_counts_and_query_b_plus_1_is_refused(small_model):
    model, X = small_model
    assert model.predict(X[:6]).shape == (6,)
    rng_state = model._vote_mechanism._rng.bit_generator.state
    with pytest.raises(BudgetExhausted, match="nothing was answered"):
        model.predict(X[:5])
    assert model._vote_mechanism._rng.bit_generator.state == rng_state
    model.predict(X[:4])
    with pytest.raises(BudgetExhausted):
        model.predict(X[:1])


def test_probabilities_are_refused_without_spending(small_model):
    model, X = small_model
    with pytest.raises(NotImplementedError, match="labels only"):
        model.predict_proba(X[:2])
    assert model.remaining() == 10


def test_bad_queries_are_refused_before_spending(small_model):
    model, X = small_model
    for bad in (np.full((2, 3), np.nan), np.ones((2, 5))):
        with pytest.raises(ValueError):
            model.predict(bad)
    assert model.remaining() == 10


# ------------------------------------------------------------------ partition, teachers, settings
def test_partition_is_disjoint_covering_and_balanced():
    parts = random_partition(103, 10, np.random.default_rng(0))
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(103))
    assert {p.size for p in parts} == {10, 11}
    with pytest.raises(ValueError, match="exceeds"):
        random_partition(5, 6, np.random.default_rng(0))


def test_teachers_receive_the_public_class_set():
    X, y = binary_problem(n=60)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model = SubsampleAndAggregate(estimator=NonPrivateClassifier(l2=0.1), n_models=3, epsilon=1.0, budget=5,
                                      classes=[0, 1], random_state=0).fit(X, y)
    assert all(t.classes == (0, 1) for t in model.teachers_)
    assert model.fit_info_["part_sizes"] == [20, 20]


def test_parallel_training_gives_the_same_teachers():
    X, y = binary_problem(n=60)
    settings = {"n_models": 4, "epsilon": 1.0, "budget": 5, "classes": [0, 1], "random_state": 0}
    serial = SubsampleAndAggregate(**settings).fit(X, y)
    with joblib.parallel_config(backend="threading"):  # the joblib path, without process start-up costs
        parallel = SubsampleAndAggregate(n_jobs=2, **settings).fit(X, y)
    assert all(np.array_equal(a.weights_, b.weights_) for a, b in zip(serial.teachers_, parallel.teachers_))


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"n_models": 0}, ValueError, "n_models"),
        ({"n_models": 61}, ValueError, "exceeds"),
        ({"epsilon": -1.0}, ValueError, "epsilon"),
        ({"budget": 0}, ValueError, "budget"),
        ({"delta": 0.0, "accountant": "zcdp"}, ValueError, "delta > 0"),
        ({"accountant": "gdp"}, ValueError, "accountant must be"),
        ({"estimator": "logistic"}, TypeError, "estimator"),
    ],
)
def test_bad_settings_are_refused(settings, error, message):
    X, y = binary_problem(n=60)
    kwargs = {"n_models": 3, "epsilon": 1.0, "delta": 1e-5, "budget": 5, "classes": [0, 1], **settings}
    with pytest.raises(error, match=message):
        SubsampleAndAggregate(**kwargs).fit(X, y)


def test_labels_and_classes_are_checked():
    X, y = binary_problem(n=60)
    with pytest.raises(ValueError, match="not in the public class set"):
        SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=5, classes=[0, 1]).fit(X, y + 1)
    with pytest.warns(PrivacyLeakWarning):
        SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=5).fit(X, y)


def test_guarantee_and_fit_info():
    X, y = binary_problem(n=60)
    model = SubsampleAndAggregate(n_models=3, epsilon=1.0, delta=1e-5, budget=100, classes=[0, 1]).fit(X, y)
    assert (model.privacy_.epsilon, model.privacy_.delta, model.privacy_.accountant) == (1.0, 1e-5, "zcdp")
    assert model.privacy_.neighbouring.value == "replace-one"
    info = model.fit_info_
    assert info["beta"] == pytest.approx(info["epsilon_query"] / 2)
    assert info["epsilon_query"] == max(info["epsilon_queries"].values())


# ------------------------------------------------------------------ utility
def test_accuracy_beats_chance_and_falls_with_epsilon(digits):
    # Any classifier can be a teacher (the guarantee treats them as black boxes); 1-NN trains instantly.
    budget = digits.X_test.shape[0]
    accuracy = {}
    for epsilon in (1e4, 15.0, 0.3):
        model = SubsampleAndAggregate(estimator=KNeighborsClassifier(n_neighbors=1), n_models=20, epsilon=epsilon,
                                      delta=1e-5, budget=budget, classes=range(10), random_state=0)
        accuracy[epsilon] = model.fit(digits.X_train, digits.y_train).score(digits.X_test, digits.y_test)
    assert accuracy[1e4] > 0.9  # chance is 0.1
    assert accuracy[1e4] > accuracy[15.0] + 0.2 > accuracy[0.3] + 0.2


def test_a_teacher_that_cannot_fit_one_class_is_refused_before_the_partition(monkeypatch):
    # From a review: with scikit-learn's LogisticRegression as teacher, fit succeeded on a dataset and raised on
    # its neighbour (one part left holding a single class), naming the class. Now refused from public inputs.
    from sklearn.linear_model import LogisticRegression

    import privml.prediction._aggregate as module

    X, y = binary_problem(200)
    monkeypatch.setattr(module, "random_partition", lambda *a, **k: pytest.fail("partitioned before the check"))
    model = SubsampleAndAggregate(estimator=LogisticRegression(), n_models=4, epsilon=1.0, budget=5, classes=[0, 1],
                                  random_state=0)
    with pytest.raises(ValueError, match="cannot fit a part holding class 0 alone"):
        model.fit(X, y)
    monkeypatch.undo()
    # The default teacher, and one with the public class set, take a one-class part.
    SubsampleAndAggregate(n_models=4, epsilon=1.0, budget=5, classes=[0, 1], random_state=0).fit(X, y)


def test_the_probe_tries_each_class_alone_and_keeps_the_global_random_state():
    # A second review: a class_weight naming class 0 only fitted a part of 0s and raised on a part of 1s, which the
    # probe (class 0 only) missed; an all-zero probe refused a VarianceThreshold pipeline that fits every part.
    from sklearn.feature_selection import VarianceThreshold
    from sklearn.pipeline import make_pipeline
    from sklearn.tree import DecisionTreeClassifier

    X, y = binary_problem(200)
    with pytest.raises(ValueError, match="holding class 1 alone"):
        SubsampleAndAggregate(estimator=DecisionTreeClassifier(class_weight={0: 3.0}), n_models=4, epsilon=1.0,
                              budget=5, classes=[0, 1], random_state=0).fit(X, y)
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    pipeline = make_pipeline(VarianceThreshold(), DecisionTreeClassifier(random_state=0))
    SubsampleAndAggregate(estimator=pipeline, n_models=4, epsilon=1.0, budget=5, classes=[0, 1],
                          random_state=0).fit(X, y)
    assert np.array_equal(np.random.get_state()[1], before)  # unseeded teachers draw as without the probe


def test_a_foreign_teachers_failure_is_said_without_its_message():
    class Fails(DummyClassifier):
        def fit(self, X, y, sample_weight=None):
            if np.all(y == 1) and np.all(np.linalg.norm(X, axis=1) <= 1):  # unit rows fail; the probe's pass
                raise ValueError("only class 1 here: secret")
            return super().fit(X, y)

    X, y = binary_problem(40)
    y[:] = 1
    with pytest.raises(ValueError, match=r"failed to fit its part \(ValueError\)") as info:
        SubsampleAndAggregate(estimator=Fails(), n_models=2, epsilon=1.0, budget=5, classes=[0, 1],
                              random_state=0).fit(X, y)
    assert "secret" not in str(info.value)
