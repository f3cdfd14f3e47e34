from __future__ import annotations

import io
import os
import pickle
import tarfile

import numpy as np
import pytest

from privml.data import DatasetNotAvailable, load_dataset
from privml.data import _cifar10 as cifar10
from tests.data.builders import cifar_batches, py2_batch_pickle, write_cifar_archive


def _payloads(batches):
    return {name: py2_batch_pickle(data, labels) for name, (data, labels) in batches.items()}


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_loads_the_python_archive(cache_dir):
    batches = cifar_batches()
    cache_dir.mkdir()
    write_cifar_archive(cache_dir / "cifar-10-python.tar.gz", _payloads(batches))
    data = load_dataset("cifar10", preprocess=False)
    train = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    assert data.X_train.shape == (10, 3, 32, 32) and data.X_train.dtype == np.uint8
    np.testing.assert_array_equal(data.X_train.reshape(10, -1), train)
    assert data.y_test.tolist() == batches["test_batch"][1]
    assert data.info.classes[3] == "cat"
    assert (cache_dir / "cifar10.npz").is_file()

    features = load_dataset("cifar10", classes=("cat", "dog", "truck"))
    assert features.info.n_features == 3072
    assert np.all(np.linalg.norm(features.X_train, axis=1) <= 1)


def test_channel_major_layout():
    data = np.zeros((1, 3072), dtype=np.uint8)
    data[0, 1024:2048] = 7  # the green plane
    images, labels = cifar10.parse_batch(py2_batch_pickle(data, [1]), what="batch")
    assert images.shape == (1, 3, 32, 32)
    assert np.all(images[0, 1] == 7) and np.all(images[0, 0] == 0) and np.all(images[0, 2] == 0)
    assert labels.tolist() == [1]


def test_extracted_folder(cache_dir):
    folder = cache_dir / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name, payload in _payloads(cifar_batches(n_per_batch=1)).items():
        (folder / name).write_bytes(payload)
    assert load_dataset("cifar10").info.n_train == 5


def test_malicious_batch_is_rejected_not_executed(cache_dir, tmp_path):
    marker = tmp_path / "executed"
    payloads = _payloads(cifar_batches())
    payloads["data_batch_3"] = pickle.dumps({"data": _Evil(str(marker)), "labels": [0]}, protocol=2)
    cache_dir.mkdir()
    write_cifar_archive(cache_dir / "cifar-10-python.tar.gz", payloads)
    with pytest.raises(ValueError, match=r"refusing to load (posix|os|nt)\.system"):
        load_dataset("cifar10")
    assert not marker.exists()
    assert not (cache_dir / "cifar10.npz").exists()


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [0]}, "2 images but 1 labels"),
        ({b"data": np.zeros((1, 100), dtype=np.uint8), b"labels": [0]}, r"shape \(n, 3072\)"),
        ({b"data": np.zeros((1, 3072), dtype=np.uint8), b"labels": [10]}, r"ints in 0..9"),
        ([1, 2], "expected a dict"),
    ],
)
def test_malformed_batches(batch, message):
    with pytest.raises(ValueError, match=message):
        cifar10.parse_batch(pickle.dumps(batch, protocol=3), what="batch")


def test_missing_member_and_links_are_not_followed(cache_dir):
    payloads = _payloads(cifar_batches())
    del payloads["test_batch"]
    cache_dir.mkdir()
    archive = write_cifar_archive(cache_dir / "cifar-10-python.tar.gz", payloads)
    with pytest.raises(ValueError, match="has no cifar-10-batches-py/test_batch"):
        load_dataset("cifar10")
    write_cifar_archive(archive, payloads)
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz") as tar:  # add test_batch as a symlink to a system file
        for member, payload in members:
            tar.addfile(member, io.BytesIO(payload))
        link = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(ValueError, match="is not a regular file"):
        load_dataset("cifar10")


def test_not_available(cache_dir):
    with pytest.raises(DatasetNotAvailable, match=r"CIFAR-10 not found in .*; download cifar-10-python.tar.gz"):
        load_dataset("cifar10")


def test_a_garbage_archive_is_one_line_saying_how_to_replace_it(cache_dir):
    # From a review: tarfile.ReadError escaped as a traceback, and the advice said the archive "is fetched anew",
    # which privml cannot do for CIFAR-10.
    cache_dir.mkdir()
    (cache_dir / "cifar-10-python.tar.gz").write_bytes(b"garbage" * 100)
    with pytest.raises(ValueError, match=r"is damaged \(.*\); replace it: download cifar-10-python.tar.gz") as err:
        load_dataset("cifar10")
    assert "fetched anew" not in str(err.value)
    assert not (cache_dir / "cifar10.npz").exists()


def test_fetch_reports_a_garbage_archive_as_a_fetch_error(cache_dir):
    from privml.data import DatasetFetchError
    from privml.data._fetch import fetch

    cache_dir.mkdir()
    (cache_dir / "cifar-10-python.tar.gz").write_bytes(b"garbage" * 100)
    with pytest.raises(DatasetFetchError, match="could not convert CIFAR-10"):
        fetch("cifar10", quiet=True)


def test_batches_re_pickled_by_python3_at_protocol_2_load(cache_dir):
    # From a review: these were refused with "refusing to load _codecs.encode".
    folder = cache_dir / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name, (data, labels) in cifar_batches(n_per_batch=1).items():
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"a.png"]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    assert load_dataset("cifar10").info.n_train == 5
