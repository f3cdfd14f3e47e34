"""ScatterClassifier (scatter-linear, scatter-cnn): fit/predict, model files, settings refused before any work."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privml.io import load_model, read_model_file, save_model  # noqa: E402
from privml.torch._scatter import Scattering2D  # noqa: E402
from privml.torch._scatter_classifier import ScatterClassifier, build_head  # noqa: E402


def blobs(n: int = 200, seed: int = 0, channels: int = 1, side: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Two classes: a bright block top-left or bottom-right, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.normal(0, 0.3, (n, channels, side, side)).astype(np.float32)
    half = side // 2
    X[y == 0, :, :half, :half] += 1.5
    X[y == 1, :, half:, half:] += 1.5
    return X, y


def small(**kwargs) -> ScatterClassifier:
    settings = {"epsilon": 8.0, "input_shape": (1, 16, 16), "classes": [0, 1], "epochs": 4, "batch_size": 50,
                "learning_rate": 2.0, "clip_norm": 1.0, "random_state": 0, "device": "cpu", "threads": 1}
    return ScatterClassifier(**{**settings, **kwargs})


@pytest.mark.parametrize("head", ["linear", "cnn"])
def test_fit_predict_and_model_file(head, tmp_path):
    X, y = blobs()
    X_test, y_test = blobs(100, seed=1)
    model = small(head=head).fit(X, y)
    assert model.method == f"scatter-{head}"
    assert model.privacy_.epsilon <= 8.0 + 1e-9
    assert np.mean(model.predict(X_test) == y_test) >= 0.9
    path = save_model(model, tmp_path / "m.npz")
    arrays, metadata = read_model_file(path)
    # the file holds the head's weights and the settings that rebuild the features, never the features or filters
    assert all(name == "classes" or name.startswith("state.") for name in arrays)
    assert metadata["method"] == f"scatter-{head}" and metadata["params"]["J"] == 2
    loaded = load_model(path)
    assert isinstance(loaded, ScatterClassifier)
    np.testing.assert_allclose(loaded.predict_proba(X_test), model.predict_proba(X_test), rtol=1e-5, atol=1e-7)


def test_predictions_are_the_head_on_normalised_features():
    X, y = blobs(120)
    model = small(epochs=1).fit(X, y)
    features = Scattering2D((16, 16))(torch.from_numpy(X))
    normalised = torch.nn.functional.group_norm(features, 27)
    # each group of 3 channels of one image has mean 0 and variance 1: normalisation uses no other image
    grouped = normalised.reshape(len(X), 27, -1)
    assert torch.allclose(grouped.mean(-1), torch.zeros(1), atol=1e-4)
    assert torch.allclose(model.transform(X), normalised, rtol=1e-4, atol=1e-5)
    logits = model.module_(normalised)
    np.testing.assert_allclose(model.predict_proba(X), torch.softmax(logits, 1).detach().numpy(), rtol=1e-4,
                               atol=1e-6)


def test_colour_images_and_flat_rows():
    X, y = blobs(60, channels=3, side=32)
    model = small(input_shape=(3, 32, 32), head="cnn", epochs=1, batch_size=20).fit(X.reshape(60, -1), y)
    assert model.transform(X[:2]).shape == (2, 243, 8, 8)
    assert model.predict(X[:5]).shape == (5,)


def test_head_shapes():
    assert sum(p.numel() for p in build_head("linear", channels=81, side=(7, 7), n_classes=10).parameters()) == \
        81 * 49 * 10 + 10
    cnn = build_head("cnn", channels=81, side=(7, 7), n_classes=10)
    assert tuple(cnn(torch.zeros(2, 81, 7, 7)).shape) == (2, 10)


@pytest.mark.parametrize(("settings", "message"), [
    ({"head": "mlp"}, "head must be one of"),
    ({"epsilon": float("inf")}, "not offered on features"),
    ({"groups": 10}, "must divide the 81"),
    ({"J": 0}, "J must be a positive integer"),
    ({"input_shape": (1, 6, 16)}, "at least 8 pixels"),
    ({"input_shape": (28, 28)}, "three positive integers"),
    ({"centering": 0.0}, "centering must be 'auto', a positive noise multiplier or None"),
    ({"centering": "yes"}, "centering must be 'auto'"),
    ({"centering": 5.0, "neighbouring": "replace-one", "replace_one_bound": "group"}, "tight replace-one bound only"),
    # DP-SGD's settings that need no data (TorchClassifier._check_fit_settings), the head's defaults included
    ({"epochs": 0}, "epochs must be > 0"),
    ({"learning_rate": -1.0}, "learning_rate must be > 0"),
    ({"delta": 0.0}, "delta must be > 0"),
    ({"batch_size": 0}, "batch_size must be > 0"),
])
def test_bad_settings_are_refused_before_fitting(settings, message):
    X, y = blobs(40)
    with pytest.raises(ValueError, match=message):
        small(**settings).fit(X, y)


def test_batch_larger_than_n_is_refused():
    X, y = blobs(40)
    with pytest.raises(ValueError, match="exceeds the number of records"):
        small(batch_size=41).fit(X, y)


def test_feature_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path))
    X, y = blobs(60)
    first = small(cache_features=True, epochs=1).fit(X, y)
    assert len(list((tmp_path / "features").glob("*.npy"))) == 1
    again = small(cache_features=True, epochs=1).fit(X, y)
    # the same seed on the same (cached) features: the same weights
    for a, b in zip(first.module_.parameters(), again.module_.parameters(), strict=True):
        assert torch.equal(a, b)


def test_weight_averaging_is_the_warmed_up_ema_of_the_iterates():
    from privml.torch._scatter_classifier import _WeightAverage

    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    average = _WeightAverage(module, optimizer, 0.6)
    expected = [p.detach().clone() for p in module.parameters()]
    for t in range(15):
        for p in module.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
        rate = min(0.6, (1 + t) / (10 + t))
        expected = [rate * e + (1 - rate) * p.detach() for e, p in zip(expected, module.parameters(), strict=True)]
    average.apply()
    for e, p in zip(expected, module.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), e, rtol=1e-6, atol=1e-7)


def test_weight_averaging_in_fit():
    X, y = blobs(100)
    last = small(epochs=2, random_state=3, averaging=0.0).fit(X, y)
    averaged = small(epochs=2, random_state=3, averaging=0.9).fit(X, y)
    default = small(epochs=2, random_state=3).fit(X, y)  # the linear head averages by default (HEAD_DEFAULTS)
    assert not torch.equal(last.module_[-1].weight, default.module_[-1].weight)
    assert not torch.equal(last.module_[-1].weight, averaged.module_[-1].weight)
    assert np.mean(averaged.predict(X) == y) >= 0.9
    with pytest.raises(ValueError, match="averaging must be a decay"):
        small(averaging=1.0).fit(X, y)


def test_an_active_budget_is_charged_the_fit_before_it_runs():
    # The fit runs through TorchClassifier's, which charges the planned guarantee; ScatterClassifier's own copy of
    # that fit did not, so a budget's total left out every ScatterNet model.
    from privml.budget import BudgetAccountant
    from privml.exceptions import BudgetExhausted

    X, y = blobs(100)
    model = small(delta=1e-5)
    with BudgetAccountant(epsilon=30.0, delta=1e-3, neighbouring="add/remove-one") as budget:
        model.fit(X, y)
    assert [charge.what for charge in budget.charges] == ["fitting ScatterClassifier"]
    assert model.privacy_.epsilon <= budget.charges[0].epsilon * (1 + 1e-9)
    with BudgetAccountant(epsilon=1.0, delta=1e-3, neighbouring="add/remove-one"), pytest.raises(BudgetExhausted):
        small(delta=1e-5).fit(X, y)  # epsilon 8 does not fit in 1: refused before any step


def test_centering_auto_centres_large_sets_only_and_the_head_holds_the_released_mean(tmp_path):
    from privml.torch._feature_mean import FeatureCentre, feature_mean_event

    model = small()
    # "auto": s = 25 where its expected error norm s d / n is at most sqrt(d) / 4, i.e. n >= 100 sqrt(d) = 3600
    # (16 x 16 grey images: d = 81 channels of 4 x 4 = 1296)
    assert model._centering(3599) is None and model._centering(3600) == 25.0
    assert model._preceding_event(3600) == feature_mean_event(25.0, "add/remove-one")
    assert small(centering=None)._centering(10**6) is None and small(centering=3)._centering(10) == 3.0
    # replace-one by group privacy converts the steps' add/remove guarantee alone: "auto" does not centre there
    assert small(neighbouring="replace-one", replace_one_bound="group")._centering(10**6) is None

    X, y = blobs()
    plain = small(centering=None).fit(X, y)
    assert not any(isinstance(m, FeatureCentre) for m in plain.module_.modules())
    auto = small().fit(X, y)  # n = 200: not centred, the mean stays zero
    assert torch.equal(auto.module_[0].mean, torch.zeros(81, 4, 4))
    centred = small(centering=2.0).fit(X, y)
    mean = centred.module_[0].mean
    features = centred.transform(X)
    # the released mean is near the exact one (noise s R / n = 2 * 36 / 200 per coordinate)
    assert 0 < float((mean - features.mean(0)).std()) < 3 * 2 * 36 / 200
    # the guarantee composes the mean with the steps: the steps' noise is higher than without it
    assert centred.privacy_.epsilon <= 8.0 + 1e-9
    assert centred.fit_info_["noise_multiplier"] > plain.fit_info_["noise_multiplier"]
    # the model file carries the mean (a DP output) and the reloaded model predicts the same
    path = save_model(centred, tmp_path / "c.npz")
    again = load_model(path)
    assert torch.equal(again.module_[0].mean, mean)
    np.testing.assert_array_equal(again.predict(X), centred.predict(X))
