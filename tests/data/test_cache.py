from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from privml.data import list_datasets, load_dataset
from privml.data._cache import CACHE_FORMAT, read_cache, resolve_cache_dir, write_cache
from privml.data._dataset import RawSplits
from tests.data.builders import ADULT_WHEEL, write_adult_wheel


def _raw(n: int = 3) -> RawSplits:
    return RawSplits(
        X_train=np.arange(n * 4, dtype=np.uint8).reshape(n, 4),
        y_train=np.zeros(n, dtype=np.uint8),
        X_test=np.ones((1, 4), dtype=np.uint8),
        y_test=np.ones(1, dtype=np.uint8),
        source="unit test",
    )


def test_resolve_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "env"))
    assert resolve_cache_dir() == tmp_path / "env"
    assert resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("PRIVML_DATA")
    assert resolve_cache_dir() == Path("~/.cache/privml").expanduser()


def test_round_trip_keeps_dtypes_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "sub" / "set.npz"
    write_cache(path, _raw())
    back = read_cache(path)
    assert back is not None
    assert back.X_train.dtype == np.uint8
    np.testing.assert_array_equal(back.X_train, _raw().X_train)
    assert back.source == f"{path} (converted from unit test)"
    assert [p.name for p in path.parent.iterdir()] == ["set.npz"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_failed_write_removes_the_temporary_file(tmp_path):
    bad = RawSplits(
        X_train=np.array([object()]), y_train=np.zeros(1), X_test=np.zeros(1), y_test=np.zeros(1), source="x"
    )
    with pytest.raises(ValueError, match="Object arrays cannot be saved when allow_pickle=False"):
        write_cache(tmp_path / "bad.npz", bad)
    assert list(tmp_path.iterdir()) == []


def test_old_format_is_rebuilt_from_the_source(cache_dir):
    cache_dir.mkdir()
    write_adult_wheel(cache_dir / ADULT_WHEEL)
    np.savez(cache_dir / "adult.npz", X_train=np.zeros((1, 14)), y_train=np.zeros(1), X_test=np.zeros((1, 14)),
             y_test=np.zeros(1), source=np.array("old"), format=np.array(CACHE_FORMAT - 1))  # fmt: skip
    assert load_dataset("adult").info.n_train == 5
    assert read_cache(cache_dir / "adult.npz") is not None


def test_unwritable_cache_still_loads(cache_dir):
    cache_dir.mkdir()
    write_adult_wheel(cache_dir / ADULT_WHEEL)
    (cache_dir / "adult.npz").mkdir()  # something in the way that even root cannot replace
    with pytest.warns(UserWarning, match="could not write the adult cache file"):
        assert load_dataset("adult").info.n_train == 5


def test_list_datasets_reports_the_cache(cache_dir):
    cache_dir.mkdir()
    write_adult_wheel(cache_dir / ADULT_WHEEL)
    entry = {e["name"]: e for e in list_datasets()}["adult"]
    assert entry["available"] is True and entry["location"] == str(cache_dir / ADULT_WHEEL)
    load_dataset("adult")
    entry = {e["name"]: e for e in list_datasets()}["adult"]
    assert entry["location"] == str(cache_dir / "adult.npz")


def test_a_damaged_cache_file_is_not_current_and_reads_as_one_line(tmp_path):
    # A bad block inside an array: the zip's CRC catches it (a review saw "already cached" and failing loads).
    from privml.data._cache import is_current

    path = tmp_path / "set.npz"
    raw = _raw(2000)
    raw = RawSplits(X_train=np.random.default_rng(0).integers(0, 255, (2000, 64), dtype=np.uint8),
                    y_train=raw.y_train, X_test=raw.X_test, y_test=raw.y_test, source="unit test")
    write_cache(path, raw)
    assert is_current(path)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)
    path.write_bytes(bytes(data))
    assert not is_current(path)
    with pytest.raises(ValueError, match="not a valid privml cache file"):
        read_cache(path)


def test_a_partial_wheel_in_the_cache_is_one_line(cache_dir):
    cache_dir.mkdir()
    (cache_dir / ADULT_WHEEL).write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match="is damaged"):
        load_dataset("adult")
    # Adult is fetched on first use: deleting the partial copy is enough.
    with pytest.raises(ValueError, match=r"delete it and load again \(it is fetched anew\)"):
        load_dataset("adult")


@pytest.mark.parametrize(("y_train", "y_test"), [(np.zeros(200), np.zeros(50)), (np.zeros(300), np.zeros((50, 1)))])
def test_labels_not_one_per_record_are_not_a_valid_cache_file(cache_dir, y_train, y_test):
    # From a review: 300 images and 200 labels in mnist.npz crashed later with an IndexError traceback.
    cache_dir.mkdir()
    np.savez(cache_dir / "mnist.npz", X_train=np.zeros((300, 784), np.uint8), y_train=y_train,
             X_test=np.zeros((50, 784), np.uint8), y_test=y_test, source=np.array("x"), format=np.array(CACHE_FORMAT))  # fmt: skip
    with pytest.raises(ValueError, match=r"mnist\.npz is not a valid privml cache file \(X_t.* does not match y_t"):
        read_cache(cache_dir / "mnist.npz")
    with pytest.raises(ValueError, match="not a valid privml cache file"):
        load_dataset("mnist", max_train=100, offline=True)
