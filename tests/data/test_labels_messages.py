"""Errors about a class set never print it: it may have been read from private labels (from a review)."""

from __future__ import annotations

import warnings

import pytest

from privml.data import load_dataset


def test_a_single_inferred_class_is_counted_not_named(tmp_path):
    data = tmp_path / "one.csv"
    data.write_text("x,label\n" + "".join(f"{i / 10},secretlabel\n" for i in range(10)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="at least 2 classes, got 1") as info:
            load_dataset(f"csv:{data}")
    assert "secretlabel" not in str(info.value)


def test_a_test_file_that_is_not_npz_is_named_plainly(tmp_path):
    import numpy as np

    np.savez(tmp_path / "d.npz", X=np.zeros((20, 2)), y=np.arange(20) % 2)
    (tmp_path / "t.csv").write_text("x0,x1,label\n0,0,1\n")
    with pytest.raises(ValueError, match="t.csv is not an .npz file") as info:
        load_dataset(f"npz:{tmp_path / 'd.npz'}", test_path=tmp_path / "t.csv", classes=(0, 1))
    assert "pickle" not in str(info.value)
