"""The CNN adapters (privml.torch DP-SGD, subsample-and-aggregate over CNN teachers) on a slice of MNIST."""

from __future__ import annotations

import math

import pytest

from privml.study._methods import get_method
from privml.study._prepare import prepare
from privml.study._selection import select_and_run
from privml.study._spec_parts import Selection

pytestmark = pytest.mark.slow

ONE_EPOCH = Selection(mode="public", grids={"dpsgd-cnn": {"epochs": (1.0,)}, "nonprivate-cnn": {"epochs": (15.0,)},
                                             "subsample-aggregate-cnn": {"epochs": (1.0,)}})


@pytest.fixture(scope="module")
def images():
    return prepare("mnist", n=600, d=None, k=None, public_size=100, seed=0, images=True)


def test_images_are_pixels_in_unit_range(images):
    assert images.image_shape == (28, 28)
    assert images.X_train.shape == (600, 784)
    assert 0.0 <= images.X_train.min() and images.X_train.max() <= 1.0


def test_dpsgd_cnn_reports_its_guarantee(images):
    out = select_and_run(get_method("dpsgd-cnn"), images, {"epsilon": 3.0, "delta": 1e-5}, seed=0,
                         selection=ONE_EPOCH)
    assert out.chosen == {"epochs": 1.0}
    assert out.result.epsilon <= 3.0 + 1e-9 and out.result.delta <= 1e-5
    assert 0.0 <= out.result.accuracy <= 1.0


def test_nonprivate_cnn_learns(images):
    out = select_and_run(get_method("nonprivate-cnn"), images, {}, seed=0, selection=ONE_EPOCH)
    assert math.isinf(out.result.epsilon)
    assert out.result.accuracy > 0.3  # 15 epochs (about 18 steps) on 600 digits: well above chance (0.1)


def test_subsample_aggregate_over_cnn_teachers(images):
    out = select_and_run(get_method("subsample-aggregate-cnn"), images,
                         {"epsilon": 1.0, "delta": 0.0, "budget": 100, "m": 2}, seed=0, selection=ONE_EPOCH)
    assert out.result.epsilon <= 1.0 + 1e-9
    assert 0.0 <= out.result.accuracy <= 1.0


@pytest.mark.parametrize("name", ["scatter-linear", "scatter-cnn"])
def test_scatter_methods_in_the_study(images, name, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path))  # the features' cache: kept out of the user's
    selection = Selection(mode="public", grids={name: {"epochs": (2.0,)}})
    out = select_and_run(get_method(name), images, {"epsilon": 3.0, "delta": 1e-5}, seed=0, selection=selection)
    assert out.result.epsilon <= 3.0 + 1e-9 and out.result.delta <= 1e-5
    if name == "scatter-linear":  # two steps of the CNN head (batch n) learn little; the linear head's do
        assert out.result.accuracy > 0.3  # two epochs on 600 digits' features: well above chance (0.1)
