"""Model files of the ERM estimators: npz + JSON round trips, never pickle."""

from __future__ import annotations

import json
import math
import zipfile
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from privml.io import load_model, read_model_file, save_model
from privml.linear._nonprivate import NonPrivateClassifier
from privml.linear._objective_perturbation import ObjectivePerturbationClassifier
from privml.linear._output_perturbation import OutputPerturbationClassifier


def _data(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(41)
    X = rng.standard_normal((60, 3)) / 2
    labels = np.array(["cat", "dog", "eel"][:k])
    return X, labels[rng.integers(0, k, size=60)], labels


ESTIMATORS = [
    ("nonprivate", lambda classes: NonPrivateClassifier(classes=classes, l2=0.01)),
    ("output-laplace", lambda classes: OutputPerturbationClassifier(epsilon=2.0, classes=classes, random_state=1)),
    ("output-gaussian", lambda classes: OutputPerturbationClassifier(
        epsilon=2.0, delta=1e-6, l2=0.05, classes=classes, random_state=np.random.default_rng(2))),
    ("objective-kst12", lambda classes: ObjectivePerturbationClassifier(
        epsilon=1.5, delta=1e-5, classes=classes, random_state=3)),
    ("objective-cms11", lambda classes: ObjectivePerturbationClassifier(
        epsilon=1.5, variant="cms11", loss="huber", huber_width=0.25, classes=classes, random_state=4)),
]


# CMS11 Algorithm 2 is binary only (its refusal of 3 classes is an estimator test).
CASES = [(name, make, k) for name, make in ESTIMATORS for k in (2, 3) if not (name == "objective-cms11" and k == 3)]


@pytest.mark.parametrize("name, make, k", CASES, ids=[f"{name}-{k}" for name, _, k in CASES])
def test_round_trip(tmp_path: Path, name: str, make, k: int) -> None:
    X, y, classes = _data(k)
    model = make(list(classes)).fit(X, y)
    path = save_model(model, tmp_path / "model", extra={"dataset": "synthetic"})
    assert path.suffix == ".npz"
    loaded = load_model(path)
    assert type(loaded) is type(model)
    assert np.array_equal(loaded.predict(X), model.predict(X))
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert np.array_equal(loaded.classes_, model.classes_)
    assert loaded.privacy_ == model.privacy_
    assert loaded.fit_info_ == model.fit_info_
    # Neither a seed nor a live generator is stored: either would let the noise be replayed.
    params = model.get_params()
    if "random_state" in params:
        params["random_state"] = None
    assert loaded.get_params() == params
    assert loaded.nonprivate_diagnostics_ == {}
    assert loaded.model_metadata_["extra"] == {"dataset": "synthetic"}


def test_metadata_is_plain_json(tmp_path: Path) -> None:
    X, y, classes = _data(3)
    model = ObjectivePerturbationClassifier(epsilon=1.0, delta=1e-5, classes=list(classes), random_state=0).fit(X, y)
    path = save_model(model, tmp_path / "objective.npz")
    with np.load(path, allow_pickle=False) as archive:
        assert set(archive.files) == {"weights", "classes", "__metadata__"}
        metadata = json.loads(archive["__metadata__"].tobytes().decode("utf-8"))
    assert metadata["method"] == "objective"
    assert metadata["class"] == "ObjectivePerturbationClassifier"
    assert metadata["privacy"] == {"epsilon": 1.0, "delta": 1e-5, "neighbouring": "replace-one",
                                   "neighbouring_detail": "replace-one: same n, one record replaced by any other",
                                   "accountant": "single-release"}
    assert metadata["params"]["variant"] == "auto" and metadata["params"]["l2"] == "auto"
    assert metadata["fit_info"]["variant"] == "kst12"
    assert metadata["params"]["random_state"] is None
    # The solver's fingerprint stays in memory (privml.release), never in the file.
    assert "grad_norm" not in metadata["fit_info"] and "iterations" not in metadata["fit_info"]
    assert model.nonprivate_diagnostics_["grad_norm"] <= model.tol


def test_nonprivate_guarantee_survives_the_file(tmp_path: Path) -> None:
    X, y, classes = _data(2)
    path = save_model(NonPrivateClassifier(classes=list(classes)).fit(X, y), tmp_path / "baseline")
    _, metadata = read_model_file(path)
    # Strict JSON has no Infinity: the metadata spells it "inf", and loading restores the float.
    assert metadata["privacy"]["epsilon"] == "inf"
    assert load_model(path).privacy_.epsilon == math.inf


def test_pickled_object_array_is_refused(tmp_path: Path) -> None:
    X, y, classes = _data(2)
    path = save_model(OutputPerturbationClassifier(epsilon=1.0, classes=list(classes), random_state=0).fit(X, y),
                      tmp_path / "good.npz")
    # Rewrite the file with an object array smuggled in (np.savez pickles it).
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["weights"] = np.array([{"payload": "would run on load"}], dtype=object)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with zipfile.ZipFile(bad) as archive:
        assert "weights.npy" in archive.namelist()
    with pytest.raises(ValueError, match="pickle"):
        load_model(bad)


def test_saving_refuses_object_arrays_and_unfitted_models(tmp_path: Path) -> None:
    with pytest.raises(NotFittedError, match="not fitted"):
        save_model(OutputPerturbationClassifier(epsilon=1.0), tmp_path / "unfitted")
    # Labels that are Python objects make an object array of classes, which only pickle could store.
    X, _, _ = _data(2)
    labels = [Decimal("0.5"), Decimal("1.5")]
    y = np.array(labels * 30, dtype=object)
    model = OutputPerturbationClassifier(epsilon=1.0, classes=labels, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="dtype object"):
        save_model(model, tmp_path / "mixed")
    assert not list(tmp_path.iterdir())


def test_classes_given_as_a_range_are_saved(tmp_path: Path) -> None:
    # The README's example passes classes=range(10); the metadata encoder raised TypeError on it.
    X = np.random.default_rng(0).standard_normal((60, 3)) / 2
    y = np.arange(60) % 3
    model = OutputPerturbationClassifier(epsilon=1.0, classes=range(3), random_state=0).fit(X, y)
    loaded = load_model(save_model(model, tmp_path / "range"))
    assert loaded.classes == [0, 1, 2]
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_saving_refuses_non_finite_weights(tmp_path: Path) -> None:
    # Every reader refuses such a file (restore_model); the writer says why, and writes nothing.
    X, y, classes = _data(2)
    model = OutputPerturbationClassifier(epsilon=1.0, classes=list(classes), random_state=0).fit(X, y)
    model.weights_ = np.full_like(model.weights_, np.nan)
    with pytest.raises(ValueError, match="diverged"):
        save_model(model, tmp_path / "nan")
    assert not list(tmp_path.iterdir())
