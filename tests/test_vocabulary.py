"""One constructor vocabulary, one validation module and one label module across the numpy estimators."""

from __future__ import annotations

import inspect
import json
import warnings

import numpy as np
import pytest
from scipy import sparse
from sklearn.exceptions import DataConversionWarning

from privml import registry
from privml._validation import check_X, check_y
from privml.data._labels import fit_classes, label_codes
from privml.exceptions import PrivacyLeakWarning
from privml.io import _METADATA_KEY, load_model, read_model_file, save_model
from privml.linear._dpcd import DPCDClassifier
from privml.linear._nonprivate import NonPrivateClassifier
from privml.prediction import PredictionSensitivity, SubsampleAndAggregate
from tests.test_sklearn_checks import NOT_APPLICABLE

#: Names of privml 0.1, replaced by the shared vocabulary (refused).
OLD_NAMES = {"clip", "penalty", "alpha", "accounting"}
#: Kinds whose estimators take a single privacy budget epsilon.
PRIVATE = (registry.Kind.PRIVATE_TRAINING, registry.Kind.PRIVATE_PREDICTION)


def _data(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) / 3
    return X, (X[:, 0] > 0).astype(int)


@pytest.mark.parametrize("name", [n for n in registry.METHODS if n not in NOT_APPLICABLE])
def test_every_estimator_speaks_the_vocabulary(name: str) -> None:
    cls = registry.estimator_class(name)
    params = inspect.signature(cls).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert not OLD_NAMES & set(params)
    assert "classes" in params or name == "dpcd-regressor"  # a regressor has no class set
    assert "random_state" in params or name == "nonprivate"  # the baseline draws nothing
    if registry.METHODS[name].kind in PRIVATE:
        assert params["epsilon"].default is inspect.Parameter.empty  # required, no default
        assert "delta" in params


@pytest.mark.parametrize(
    ("make", "old"),
    [
        (lambda **kw: DPCDClassifier(epsilon=1.0, **kw), {"clip": 0.3}),
        (lambda **kw: PredictionSensitivity(epsilon=1.0, budget=5, **kw), {"accounting": "basic"}),
        (lambda **kw: SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=5, **kw), {"accounting": "basic"}),
    ],
)
def test_the_names_of_privml_0_1_are_refused(make, old) -> None:
    with pytest.raises(TypeError, match="unexpected keyword"):
        make(**old)


def test_model_files_with_the_old_names_are_refused(tmp_path) -> None:
    X, y = _data()
    model = SubsampleAndAggregate(n_models=3, epsilon=1.0, budget=5, accountant="basic", classes=[0, 1]).fit(X, y)
    path = save_model(model, tmp_path / "model.npz")
    arrays, metadata = read_model_file(path)
    metadata["params"]["accounting"] = metadata["params"].pop("accountant")
    blob = np.frombuffer(json.dumps(metadata).encode("utf-8"), dtype=np.uint8)
    np.savez(path, **arrays, **{_METADATA_KEY: blob})
    with pytest.raises(ValueError, match="accounting"):
        load_model(path)
    assert model.fit_info_["accountant"] == "basic"


# ----------------------------------------------------------------- the label module
def test_public_classes_keep_their_order_and_refuse_outsiders() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classes, codes = fit_classes(np.array(["b", "a", "b"]), ["b", "a"], owner="M")
    assert classes.tolist() == ["b", "a"] and codes.tolist() == [0, 1, 0]
    # Numbers and numeric text are one label (a CSV cell "1" is the class 1).
    assert label_codes(["1", 0, 1.0], classes=[0, 1]).tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="the label at row 2 is not in the public class set"):
        fit_classes(np.array(["a", "b", "c"]), ["a", "b"], owner="M")
    with pytest.raises(ValueError, match="1 class"):
        fit_classes(np.ones(4), [1], owner="M")


def test_classes_read_from_the_labels_warn_and_real_targets_are_refused() -> None:
    with pytest.warns(PrivacyLeakWarning, match="read from the labels"):
        classes, codes = fit_classes(np.array([2.0, 0.0, 2.0]), None, owner="M")
    assert classes.tolist() == [0, 2] and codes.tolist() == [1, 0, 1]
    with pytest.warns(PrivacyLeakWarning):  # classes read from labels keep the labels' dtype
        assert fit_classes(np.array([True, False]), None, owner="M")[0].tolist() == [False, True]
        X, y = _data()
        assert set(NonPrivateClassifier().fit(X, y > 0).predict(X)) <= {False, True}
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        fit_classes(np.array([0.5, 1.5]), None, owner="M")
    # Given as public classes, the same values are labels.
    assert fit_classes(np.array([0.5, 1.5]), [0.5, 1.5], owner="M")[1].tolist() == [0, 1]


# ----------------------------------------------------------------- the validation module
@pytest.mark.parametrize(
    ("X", "error", "message"),
    [
        (np.zeros(3), ValueError, "Reshape your data"),
        (np.zeros((0, 2)), ValueError, "no rows"),
        (np.zeros((2, 0)), ValueError, r"0 feature\(s\)"),
        (np.array([[1.0, np.nan]]), ValueError, "NaN or infinite"),
        (np.array([[1j, 0]]), ValueError, "Complex data not supported"),
        (np.array([[{}, 0]], dtype=object), TypeError, "must hold numbers"),
        (sparse.csr_matrix(np.eye(2)), TypeError, "sparse"),
    ],
)
def test_bad_rows_get_one_line_errors(X, error, message) -> None:
    with pytest.raises(error, match=message) as caught:
        check_X(X)
    assert "\n" not in str(caught.value)


def test_rows_of_the_wrong_width_and_targets() -> None:
    with pytest.raises(ValueError, match="X has 2 features, but M is expecting 3 features as input"):
        check_X(np.zeros((1, 2)), n_features=3, owner="M")
    with pytest.warns(DataConversionWarning, match="column-vector"):
        assert check_y(np.zeros((4, 1)), 4).shape == (4,)
    with pytest.raises(ValueError, match="requires y to be passed"):
        check_y(None, 4)
    with pytest.raises(ValueError, match=r"one target per row"):
        check_y(np.zeros(3), 4)
    with pytest.raises(ValueError, match="NaN"):
        check_y(np.array([0.0, np.inf]), 2, numeric=True)
