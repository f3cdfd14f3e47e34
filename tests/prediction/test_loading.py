"""Model files and load_predictor: round trips, the serving contract, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.dummy import DummyClassifier

from privml.io import load_model, read_model_file, save_model
from privml.ledger import MemoryLedger
from privml.linear import NonPrivateClassifier, OutputPerturbationClassifier
from privml.prediction import PredictionSensitivity, SubsampleAndAggregate, load_predictor

from .conftest import binary_problem


@pytest.fixture
def data():
    return binary_problem(n=120, d=4)


def test_prediction_sensitivity_round_trip(tmp_path, data):
    X, y = data
    model = PredictionSensitivity(epsilon=2.0, delta=1e-5, budget=50, l2=0.05, classes=[0, 1], random_state=4)
    model.fit(X, y).predict(X[:10])
    path = save_model(model, tmp_path / "ps")
    arrays, metadata = read_model_file(path)
    assert metadata["method"] == "prediction-sensitivity" and metadata["params"]["ledger"] is None
    assert set(arrays) == {"weights", "classes"}
    loaded = load_model(path)
    assert isinstance(loaded, PredictionSensitivity)
    assert np.array_equal(loaded.weights_, model.weights_) and np.array_equal(loaded.classes_, model.classes_)
    for key in ("sensitivity", "noise_scale", "accountant", "n_train", "l2"):
        assert loaded.fit_info_[key] == model.fit_info_[key]
    assert loaded.privacy_ == model.privacy_
    # The ledger is not in the file: a load starts a fresh count (see load_predictor's docstring).
    assert loaded.remaining() == 50


def test_subsample_and_aggregate_round_trip(tmp_path, data):
    X, y = data
    model = SubsampleAndAggregate(n_models=4, epsilon=1.0, budget=30, classes=[0, 1], random_state=0).fit(X, y)
    path = save_model(model, tmp_path / "sa.npz")
    arrays, metadata = read_model_file(path)
    assert arrays["teacher_weights"].shape == (4, 4)
    assert metadata["params"]["estimator"] is None
    loaded = load_model(path)
    assert np.array_equal(loaded._votes(X), model._votes(X))
    assert loaded.fit_info_["beta"] == model.fit_info_["beta"] and loaded.privacy_ == model.privacy_
    assert loaded.predict(X[:5]).shape == (5,) and loaded.remaining() == 25


def test_teachers_that_are_not_privml_models_are_not_pickled(tmp_path, data):
    X, y = data
    model = SubsampleAndAggregate(estimator=DummyClassifier(), n_models=3, epsilon=1.0, budget=5, classes=[0, 1])
    with pytest.raises(ValueError, match="never pickled"):
        save_model(model.fit(X, y), tmp_path / "dummy.npz")
    assert not (tmp_path / "dummy.npz").exists()


# ------------------------------------------------------------------ load_predictor
@pytest.fixture
def nonprivate_file(tmp_path, data):
    X, y = data
    return save_model(NonPrivateClassifier(l2=0.05, classes=[0, 1]).fit(X, y), tmp_path / "base.npz")


def test_a_nonprivate_file_is_served_by_prediction_sensitivity(nonprivate_file, data):
    X, _ = data
    served = load_predictor(nonprivate_file, epsilon=1.0, delta=1e-5, budget=20, random_state=0)
    assert isinstance(served, PredictionSensitivity)
    assert served.fit_info_["n_train"] == 120 and served.fit_info_["l2"] == 0.05
    assert served.privacy_.epsilon == 1.0 and served.privacy_.accountant == "gdp"
    # The serving contract.
    assert served.predict(X[:3], key=None).shape == (3,)
    assert served.predict_proba(X[:2], key=None).shape == (2, 2)
    assert served.ledger_.state().spent == 5
    assert served.n_features_in_ == 4 and served.classes_.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"budget": 20}, "needs epsilon"),
        ({"epsilon": 1.0}, "needs budget"),
        ({}, "epsilon and budget"),
        ({"epsilon": 1.0, "budget": 20, "method": "subsample-aggregate"}, "prediction-sensitivity only"),
        ({"epsilon": 1.0, "budget": 20, "ledger": MemoryLedger(21)}, "budget"),
        ({"epsilon": 1.0, "budget": 20, "accountant": "zcdp"}, "accountant must be"),
    ],
)
def test_a_nonprivate_file_needs_a_valid_guarantee(nonprivate_file, settings, message):
    with pytest.raises(ValueError, match=message):
        load_predictor(nonprivate_file, **settings)


def test_a_nonprivate_file_without_n_train_is_refused(tmp_path, data):
    X, y = data
    model = NonPrivateClassifier(classes=[0, 1]).fit(X, y)
    del model.fit_info_["n_train"]
    path = save_model(model, tmp_path / "old.npz")
    with pytest.raises(ValueError, match="n_train"):
        load_predictor(path, epsilon=1.0, budget=5)


def test_a_privately_trained_model_is_returned_as_is(tmp_path, data):
    X, y = data
    model = OutputPerturbationClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y)
    path = save_model(model, tmp_path / "private.npz")
    served = load_predictor(path)
    assert isinstance(served, OutputPerturbationClassifier) and served.ledger_ is None
    assert np.array_equal(served.predict(X), model.predict(X))
    for settings in ({"budget": 10}, {"epsilon": 1.0}, {"method": "prediction-sensitivity"}, {"delta": 1e-5}):
        with pytest.raises(ValueError, match="cost no privacy"):
            load_predictor(path, **settings)


def test_saved_predictors_load_with_their_settings_or_given_ones(tmp_path, data):
    X, y = data
    sa = SubsampleAndAggregate(n_models=4, epsilon=1.0, budget=30, classes=[0, 1], random_state=0).fit(X, y)
    path = save_model(sa, tmp_path / "sa.npz")
    same = load_predictor(path)
    assert (same.budget, same.privacy_.epsilon, same.remaining()) == (30, 1.0, 30)
    other = load_predictor(path, epsilon=3.0, delta=1e-5, budget=100, ledger=MemoryLedger(100))
    assert (other.privacy_.epsilon, other.privacy_.delta, other.remaining()) == (3.0, 1e-5, 100)
    assert other.fit_info_["accountant"] == "zcdp"
    assert np.array_equal(other._votes(X), sa._votes(X))
    with pytest.raises(ValueError, match="not 'prediction-sensitivity'"):
        load_predictor(path, method="prediction-sensitivity")


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_predictor(tmp_path / "missing.npz", epsilon=1.0, budget=5)
    np.savez(tmp_path / "plain.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a privml model file"):
        load_predictor(tmp_path / "plain.npz", epsilon=1.0, budget=5)
