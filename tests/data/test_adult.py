from __future__ import annotations

import io
import math

import numpy as np
import pytest

from privml.data import _adult as adult
from privml.data import load_dataset
from tests.data.builders import ADULT_TEST, ADULT_TRAIN, ADULT_WHEEL, write_adult_wheel


def _parse(text: str, what: str = "adult.data") -> tuple[np.ndarray, np.ndarray]:
    return adult.parse_records(io.StringIO(text), what=what)


def test_parse_codes_categories_by_the_fixed_lists():
    X, y = _parse(ADULT_TRAIN)
    assert X.shape == (5, 14)
    assert y.tolist() == [0, 0, 1, 1, 1]
    col = {name: j for j, name in enumerate(adult.COLUMNS)}
    assert X[0, col["age"]] == 39 and X[0, col["fnlwgt"]] == 77516
    assert X[0, col["workclass"]] == adult.CATEGORIES["workclass"].index("State-gov")
    assert X[2, col["sex"]] == adult.CATEGORIES["sex"].index("Female")
    # "?" is missing: code -1.
    assert X[3, col["workclass"]] == -1 and X[3, col["occupation"]] == -1
    assert X[3, col["native-country"]] == adult.CATEGORIES["native-country"].index("South")


def test_test_file_header_and_trailing_dot():
    X, y = _parse(ADULT_TEST, "adult.test")
    assert X.shape == (2, 14) and y.tolist() == [0, 1]


def test_featurize_uses_public_ranges_one_hot_and_norm_bound():
    X, _ = _parse(ADULT_TRAIN)
    F, steps = adult.featurize(X)
    assert F.shape == (5, adult.N_FEATURES) == (5, 104)
    assert np.all(np.linalg.norm(F, axis=1) <= 1)
    bound = math.sqrt(13)
    unscaled = F * bound
    # Numeric block: age 39 in [17, 90]; capital-gain 2174 via log1p over [0, 99999].
    assert unscaled[0, 0] == pytest.approx((39 - 17) / 73)
    assert unscaled[0, 2] == pytest.approx(math.log1p(2174) / math.log1p(99999))
    assert unscaled[4, 0] == pytest.approx(1.0)  # age 90: top of the public range
    # Each one-hot block has exactly one 1, except missing values.
    start = len(adult.NUMERIC_BOUNDS)
    for column, values in adult.CATEGORIES.items():
        block = unscaled[:, start : start + len(values)]
        start += len(values)
        expected = [0.0 if column in ("workclass", "occupation") and i == 3 else 1.0 for i in range(5)]
        np.testing.assert_allclose(block.sum(axis=1), expected, err_msg=column)
    assert any("drop fnlwgt" in s for s in steps)
    assert steps[-1].startswith("project each row onto the unit L2 ball")


def test_featurize_is_per_record():
    # Scaling uses public constants only: adding records never changes the others' features.
    X, _ = _parse(ADULT_TRAIN)
    alone = adult.featurize(X[:2])[0]
    together = adult.featurize(X)[0][:2]
    np.testing.assert_array_equal(alone, together)


def test_out_of_range_values_are_clipped():
    row = ADULT_TRAIN.splitlines()[0].replace("39,", "120,", 1)
    X, _ = _parse(row + "\n")
    F, _ = adult.featurize(X)
    assert F[0, 0] * math.sqrt(13) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 0, 0, 40, "
         "Atlantis, <=50K", "line 1: native-country value 'Atlantis' is not in the adult.names list"),
        ("x, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 0, 0, 40, "
         "Cuba, <=50K", "line 1: age value 'x' is not a number"),
        ("39, State-gov, 77516", "line 1: expected 15 fields, got 3"),
        ("39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 0, 0, 40, "
         "Cuba, rich", "line 1: label 'rich' is not one of"),
        ("", "contains no records"),
    ],
)  # fmt: skip
def test_malformed_records(line, message):
    with pytest.raises(ValueError, match=message):
        _parse(line + "\n")


def test_load_from_wheel(cache_dir):
    cache_dir.mkdir()
    write_adult_wheel(cache_dir / ADULT_WHEEL)
    data = load_dataset("adult")
    assert (data.info.n_train, data.info.n_test, data.info.n_features) == (5, 2, 104)
    assert data.info.classes == ("<=50K", ">50K")
    assert data.y_train.tolist() == [0, 0, 1, 1, 1]
    assert ADULT_WHEEL in data.info.source
    assert (cache_dir / "adult.npz").is_file()
    raw = load_dataset("adult", preprocess=False)
    assert raw.X_train.shape == (5, 14)
    assert raw.info.source.startswith(str(cache_dir / "adult.npz"))


def test_load_from_raw_files(cache_dir):
    (cache_dir / "adult").mkdir(parents=True)
    (cache_dir / "adult" / "adult.data").write_text(ADULT_TRAIN)
    (cache_dir / "adult" / "adult.test").write_text(ADULT_TEST)
    data = load_dataset("adult", bias=True)
    assert data.info.n_features == 105
    assert np.all(np.linalg.norm(data.X_train, axis=1) <= 1)
