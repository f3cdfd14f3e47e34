from __future__ import annotations

import gzip

import numpy as np
import pytest

from privml.data import DatasetNotAvailable, load_dataset
from privml.data import _fashion_mnist as fashion_mnist
from privml.data._idx import read_idx
from tests.data.builders import idx_bytes, write_idx_dir


def _tiny(seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8),
        np.array([0, 9, 4, 4, 1], dtype=np.uint8),
        rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8),
        np.array([7, 2, 0], dtype=np.uint8),
    )


def test_loads_idx_files_from_the_cache_directory(cache_dir):
    X_train, y_train, X_test, y_test = _tiny()
    write_idx_dir(cache_dir / "fashion-mnist", X_train, y_train, X_test, y_test)
    data = load_dataset("fashion-mnist", preprocess=False)
    np.testing.assert_array_equal(data.X_train, X_train)
    np.testing.assert_array_equal(data.y_train, y_train)
    np.testing.assert_array_equal(data.X_test, X_test)
    assert data.info.classes[0] == "T-shirt/top" and data.info.classes[9] == "Ankle boot"
    assert (cache_dir / "fashion-mnist.npz").is_file()


def test_loads_from_the_debian_directory(cache_dir, tmp_path, monkeypatch):
    system = write_idx_dir(tmp_path / "usr-share-datasets-fashion-mnist", *_tiny(seed=3))
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", (system,))
    data = load_dataset("fashion-mnist")
    assert data.info.n_train == 5 and data.info.n_features == 784
    assert str(system) in data.info.source
    assert np.all(np.linalg.norm(data.X_test, axis=1) <= 1)


def test_not_available_names_the_debian_package(cache_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", (tmp_path / "absent",))
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset("Fashion_MNIST")
    message = str(err.value)
    assert message.startswith(f"Fashion-MNIST not found in {cache_dir} or {tmp_path / 'absent'}; ")
    assert "apt-get install dataset-fashion-mnist" in message


def test_read_idx_checks_header_and_length(tmp_path):
    good = np.arange(6, dtype=np.uint8).reshape(2, 3)
    (tmp_path / "ok.gz").write_bytes(gzip.compress(idx_bytes(good)))
    np.testing.assert_array_equal(read_idx(tmp_path / "ok.gz"), good)
    (tmp_path / "plain").write_bytes(idx_bytes(good))
    np.testing.assert_array_equal(read_idx(tmp_path / "plain"), good)

    (tmp_path / "short").write_bytes(idx_bytes(good)[:-1])
    with pytest.raises(ValueError, match=r"declares shape \(2, 3\) \(6 bytes\), payload has 5"):
        read_idx(tmp_path / "short")
    (tmp_path / "magic").write_bytes(b"\x01" + idx_bytes(good)[1:])
    with pytest.raises(ValueError, match="bad magic number"):
        read_idx(tmp_path / "magic")
    (tmp_path / "float").write_bytes(b"\x00\x00\x0d\x01" + (4).to_bytes(4, "big") + bytes(16))
    with pytest.raises(ValueError, match="IDX type 0x0d is not supported"):
        read_idx(tmp_path / "float")


def test_label_count_must_match_images(cache_dir):
    X_train, y_train, X_test, y_test = _tiny()
    write_idx_dir(cache_dir / "fashion-mnist", X_train, y_train[:4], X_test, y_test)
    with pytest.raises(ValueError, match="train has 5 images but labels of shape"):
        load_dataset("fashion-mnist")


def test_a_damaged_hand_placed_folder_is_not_said_to_be_fetched_anew(cache_dir):
    # From a review: the advice "delete it and load again (it is fetched anew)" is wrong for Fashion-MNIST.
    folder = write_idx_dir(cache_dir / "fashion-mnist", *_tiny())
    labels = folder / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(labels.read_bytes()[:12])  # a partial copy
    with pytest.raises(ValueError, match=r"is damaged .*; replace it: run `apt-get install") as err:
        load_dataset("fashion-mnist")
    assert "fetched anew" not in str(err.value)
