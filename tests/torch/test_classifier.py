"""TorchClassifier: scikit-learn contract, privacy report, model files without pickle."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.base import clone  # noqa: E402

from privml.exceptions import PrivacyLeakWarning  # noqa: E402
from privml.io import load_model, save_model  # noqa: E402
from privml.torch import TorchClassifier  # noqa: E402


def blobs(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two classes of 16x16 images: a bright block top-left or bottom-right, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.normal(0, 0.3, (n, 1, 16, 16)).astype(np.float32)
    X[y == 0, :, :8, :8] += 1.5
    X[y == 1, :, 8:, 8:] += 1.5
    return X, np.where(y == 0, "a", "b")


def small(**kwargs) -> TorchClassifier:
    settings = dict(epsilon=8.0, input_shape=(1, 16, 16), classes=("a", "b"), epochs=6, batch_size=30,
                    learning_rate=0.5, clip_norm=1.0, random_state=0)
    settings.update(kwargs)
    return TorchClassifier(**settings)


@pytest.fixture(scope="module")
def fitted() -> tuple[TorchClassifier, np.ndarray, np.ndarray]:
    torch.set_num_threads(1)
    X, y = blobs()
    return small().fit(X, y), X, y


def test_fit_predict_and_guarantee(fitted):
    model, X, y = fitted
    assert model.privacy_.epsilon <= 8.0 and model.privacy_.neighbouring.value == "add/remove-one"
    assert model.fit_info_["steps"] == round(6 / (30 / 120))
    proba = model.predict_proba(X)
    assert proba.shape == (120, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    assert set(model.predict(X)) <= {"a", "b"}
    X_test, y_test = blobs(200, seed=1)
    assert model.score(X_test, y_test) > 0.8  # an easy task, learnt despite the noise


def test_flat_rows_are_accepted(fitted):
    model, X, _ = fitted
    np.testing.assert_allclose(model.predict_proba(X.reshape(120, -1)), model.predict_proba(X), rtol=1e-6)


def test_clone_and_params():
    estimator = small()
    copy = clone(estimator)
    assert copy.get_params() == estimator.get_params()
    with pytest.raises(TypeError):
        TorchClassifier(3.0)  # keyword-only


def test_predicting_before_fit_is_sklearns_not_fitted_error():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        small().predict(blobs(4)[0])


def test_classes_from_the_data_warn():
    X, y = blobs(40)
    with pytest.warns(PrivacyLeakWarning):
        small(classes=None, epochs=1).fit(X, y)


def test_unknown_label_and_bad_shape_are_refused():
    X, y = blobs(40)
    with pytest.raises(ValueError, match="not in the public class set"):
        small(classes=("a", "c"), epochs=1).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        small(classes=("a",), epochs=1).fit(X, y)
    with pytest.raises(ValueError, match="shape"):
        small(epochs=1).fit(X[:, :, :5, :5], y)


def test_nonprivate_baseline_reports_infinite_epsilon():
    X, y = blobs(60)
    model = small(epsilon=float("inf"), epochs=2).fit(X, y)
    assert model.privacy_.epsilon == float("inf")


def test_model_file_round_trip_without_pickle(fitted, tmp_path):
    model, X, _ = fitted
    path = save_model(model, tmp_path / "cnn.npz")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    assert "state.7.weight.npy" in names  # the state dict, one array per tensor
    loaded = load_model(path)
    np.testing.assert_allclose(loaded.predict_proba(X), model.predict_proba(X), rtol=1e-6)
    assert loaded.privacy_ == model.privacy_
    with np.load(path, allow_pickle=False) as f:
        meta = json.loads(f["__metadata__"].tobytes().decode()) if "__metadata__" in f.files else None
    if meta is not None:
        assert meta["params"]["model"] == "tramer-boneh"


def test_cnn_teachers_in_subsample_and_aggregate():
    aggregate = pytest.importorskip("privml.prediction._aggregate")
    X, y = blobs(160)
    teacher = TorchClassifier(epsilon=float("inf"), input_shape=(1, 16, 16), epochs=3, batch_size=20,
                              learning_rate=0.1, random_state=0)
    model = aggregate.SubsampleAndAggregate(estimator=teacher, n_models=2, epsilon=2.0, budget=10,
                                            classes=["a", "b"], random_state=0)
    model.fit(X.reshape(160, -1), y)
    assert all(isinstance(t, TorchClassifier) for t in model.teachers_)
    assert list(model.teachers_[0].classes_) == ["a", "b"]  # the public class set was passed in
    answers = model.predict(X[:4].reshape(4, -1))
    assert answers.shape == (4,) and set(answers) <= {"a", "b"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"batch_size": 10**12}, "exceeds the number of records"),  # was capped at n silently (q = 1)
     ({"batch_size": 1000, "epsilon": float("inf")}, "exceeds the number of records"),
     ({"epochs": 1e300}, "accountants compose")],  # an IndexError in the PLD convolution
)
def test_batch_and_steps_are_refused_before_the_model_is_built(kwargs, match, monkeypatch):
    import privml.torch._classifier as module

    X, y = blobs(n=40)
    monkeypatch.setattr(module, "build_model", lambda *a, **k: pytest.fail("model built before the check"))
    with pytest.raises(ValueError, match=match):
        small(**kwargs).fit(X, y)


def test_the_default_batch_is_capped_at_a_small_n_as_the_linear_estimators_is():
    # A study's CNN runs name no batch: with n < 512 (a subsample-and-aggregate teacher's share, a small
    # study) every run was refused once an explicit oversize batch was (the GPU study test caught it).
    X, y = blobs(n=40)
    model = small(batch_size=None, epochs=1).fit(X, y)
    assert model.fit_info_["expected_batch_size"] == pytest.approx(40.0)
    baseline = small(batch_size=None, epochs=1, epsilon=float("inf")).fit(X, y)
    assert baseline.predict(X[:2]).shape == (2,)
    assert TorchClassifier(epsilon=1.0).batch_size is None  # the default, a function of the public n at fit


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"learning_rate": 0.0}, "learning_rate must be > 0"),  # torch's SGD takes lr = 0: a run that never moves
     ({"momentum": -0.5}, "momentum must be >= 0"),
     ({"batch_size": 0}, "batch_size must be > 0"),
     ({"epochs": 0}, "epochs must be > 0"),
     ({"epochs": 1e300}, "accountants compose"),  # at least one step an epoch, whatever n is
     ({"delta": 0.0}, "delta must be > 0"),
     ({"delta": 1.0}, r"delta must be in \[0, 1\)"),
     ({"epsilon": -1.0}, "epsilon must be > 0"),
     ({"epsilon": None}, "give noise_multiplier, a target epsilon, or both"),
     ({"noise_multiplier": -1.0}, "noise_multiplier must be > 0"),
     ({"clip_norm": 0.0}, "clip_norm must be > 0"),
     ({"sampling": "fixed-size"}, "replace-one neighbours only"),
     ({"accountant": "moments"}, "accountant must be one of"),
     ({"precision": "fp8"}, "precision must be one of"),
     ({"threads": 0}, "threads must be None or a positive integer")],
)
def test_every_setting_that_needs_no_data_is_refused_before_the_data_are_read(kwargs, match):
    # fit checks them first, as `privml train` does on the estimator it builds before reading any data: the
    # data given here are no data at all, and are never looked at.
    model = small(**kwargs)
    with pytest.raises(ValueError, match=match):
        model._check_fit_settings()
    with pytest.raises(ValueError, match=match):
        model.fit(object(), object())


def test_the_baseline_takes_no_dp_sgd_settings():
    # epsilon = inf trains without noise or clipping: delta and the accountant's rules do not apply to it.
    small(epsilon=float("inf"), delta=0.0, clip_norm=0.0)._check_fit_settings()
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        small(epsilon=float("inf"), learning_rate=-1.0)._check_fit_settings()
