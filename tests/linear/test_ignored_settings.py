"""Settings the chosen configuration would ignore are refused at fit, before any randomness (from a review)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from privml.linear._dpcd import DPCDClassifier, DPCDRegressor
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._dpsgd_steps import DEFAULT_EMA_DECAY, DEFAULT_TAIL_FRACTION
from privml.linear._objective_perturbation import ObjectivePerturbationClassifier
from privml.linear._output_perturbation import OutputPerturbationClassifier
from privml.prediction._sensitivity import PredictionSensitivity

X = np.random.default_rng(1).normal(size=(200, 3)) / 3
Y = (X[:, 0] > 0).astype(int)


def _fit_refused(model, match):
    rng = np.random.default_rng(0)
    before = str(rng.bit_generator.state)
    model.set_params(random_state=rng)
    with pytest.raises(ValueError, match=match):
        model.fit(X, Y)
    assert str(rng.bit_generator.state) == before  # refused before any randomness


@pytest.mark.parametrize("cls", [OutputPerturbationClassifier, ObjectivePerturbationClassifier])
def test_huber_width_with_another_loss_is_refused(cls):
    _fit_refused(cls(epsilon=1, huber_width=0.9, classes=[0, 1]), "huber_width applies to loss='huber'")
    cls(epsilon=1, loss="huber", huber_width=0.9, classes=[0, 1], random_state=0).fit(X, Y)  # used: fine


def test_prediction_sensitivity_refuses_an_ignored_huber_width():
    _fit_refused(PredictionSensitivity(epsilon=1, budget=10, huber_width=0.9, classes=[0, 1]), "huber_width")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"averaging": "tail", "ema_decay": 0.5}, "ema_decay applies"),
     ({"averaging": "ema", "tail_fraction": 0.3}, "tail_fraction applies"),
     ({"averaging": "uniform", "tail_fraction": 0.3}, "tail_fraction applies")],
)
def test_dpsgd_refuses_averaging_settings_it_ignores(kwargs, match):
    _fit_refused(DPSGDClassifier(epsilon=1, classes=[0, 1], **kwargs), match)


def test_dpsgd_averaging_defaults_are_the_constants():
    params = inspect.signature(DPSGDClassifier).parameters
    assert params["tail_fraction"].default == DEFAULT_TAIL_FRACTION
    assert params["ema_decay"].default == DEFAULT_EMA_DECAY


@pytest.mark.parametrize("kwargs", [{"epochs": 1e300}, {"steps": 10**12}, {"epochs": 1e8, "batch_size": 10}])
def test_dpsgd_caps_the_steps_the_accountants_compose(kwargs):
    # epochs=1e300 failed with an IndexError inside the PLD convolution; steps=10**12 allocated terabytes.
    _fit_refused(DPSGDClassifier(epsilon=1, classes=[0, 1], **kwargs), "accountants compose")


@pytest.mark.parametrize("cls", [DPCDClassifier, DPCDRegressor])
def test_dpcd_clips_features_to_the_public_bounds(cls):
    # Out-of-bound features are clipped (never a data-dependent error): training on X equals training on X
    # clipped to the bounds beforehand.
    inside = X / np.linalg.norm(X, axis=1).max()  # in the unit ball: the projection does nothing
    y = Y if cls is DPCDClassifier else inside[:, 0]
    extra = {"classes": [0, 1]} if cls is DPCDClassifier else {}
    bounds = [0.05, 0.05, 0.05]
    assert np.abs(inside).max() > 0.05
    a = cls(epsilon=1, feature_bounds=bounds, random_state=0, **extra).fit(inside, y)
    b = cls(epsilon=1, feature_bounds=bounds, random_state=0, **extra).fit(np.clip(inside, -0.05, 0.05), y)
    np.testing.assert_array_equal(a.weights_, b.weights_)


def test_dpcd_predicts_on_rows_clipped_as_its_training_rows_were(tmp_path):
    # DP-CD clips features to the public bounds before training; predictions must see the same map, also after a
    # model file round trip (a review measured 0.33 against 0.92 accuracy on iris when they did not).
    from sklearn.datasets import load_iris

    from privml.data._preprocessing import project_to_unit_ball
    from privml.io import load_model, save_model

    X, y = load_iris(return_X_y=True)
    X = X / np.abs(X).max()
    model = DPCDClassifier(epsilon=50.0, feature_bounds=[0.2] * 4, classes=[0, 1, 2], random_state=0).fit(X, y)
    clipped = np.clip(project_to_unit_ball(X), -0.2, 0.2)
    np.testing.assert_allclose(model.decision_function(X), clipped @ model.weights_)
    loaded = load_model(save_model(model, tmp_path / "dpcd.npz"))
    np.testing.assert_allclose(loaded.decision_function(X), model.decision_function(X))


def test_the_default_averaging_settings_in_another_precision_are_not_settings_of_their_own():
    # np.float32(0.99) is the default ema_decay as float32 stores it (a review found it refused).
    X = np.random.default_rng(0).normal(size=(40, 3)) / 3
    y = (X[:, 0] > 0).astype(int)
    DPSGDClassifier(epsilon=1.0, ema_decay=np.float32(DEFAULT_EMA_DECAY), tail_fraction=np.float32(0.5),
                    classes=[0, 1], random_state=0).fit(X, y)
