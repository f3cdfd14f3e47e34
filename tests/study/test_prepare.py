from __future__ import annotations

import numpy as np
import pytest

from privml.study._prepare import prepare


def test_pca_is_fit_on_public_records_only():
    # Which private records are trained on must not move the PCA basis: the test set's
    # projection is identical whatever n is (a PCA fit on private records would change it).
    small = prepare("digits", n=100, d=8, k=None, public_size=200, seed=0)
    large = prepare("digits", n=900, d=8, k=None, public_size=200, seed=0)
    np.testing.assert_array_equal(small.X_test, large.X_test)
    np.testing.assert_allclose(small.X_train, large.X_train[:100], rtol=1e-12, atol=1e-15)
    assert any("public" in step and "PCA" in step for step in small.steps)


def test_rows_are_in_the_unit_ball_with_bias():
    data = prepare("digits", n=300, d=12, k=None, public_size=200, seed=1)
    assert data.X_train.shape == (300, 13)
    assert np.all(np.linalg.norm(data.X_train, axis=1) <= 1.0)
    assert np.all(data.X_train[:, -1] == 0.5)


def test_k_keeps_the_first_k_classes():
    data = prepare("digits", n=None, d=None, k=3, public_size=50, seed=0)
    assert data.n_classes == 3
    assert set(np.unique(data.y_train)) == {0, 1, 2}
    assert set(np.unique(data.y_test)) <= {0, 1, 2}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 10_000, "d": None, "k": None}, "n = 10000 training records requested"),
        ({"n": None, "d": 500, "k": None}, "d = 500 dimensions requested"),
        ({"n": None, "d": None, "k": 11}, "k = 11 classes requested"),
        ({"n": None, "d": None, "k": 2, "public_size": 300}, "public_size = 300 leaves"),
    ],
)
def test_impossible_points_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        prepare("digits", **{"public_size": 200, "seed": 0, **kwargs})


def test_images_for_cnns_refuse_non_image_data():
    with pytest.raises(ValueError, match="holds no images"):
        prepare("iris", n=None, d=None, k=None, public_size=10, seed=0, images=True)


def test_a_csv_edited_in_place_is_read_again_in_the_same_process(tmp_path):
    # A review: the per-process caches were keyed by the path alone, so a second study in one process (a notebook)
    # trained on the rows the file held before it was edited.
    import os

    path = tmp_path / "d.csv"
    rows = "\n".join(f"{i % 7},{(i * 3) % 5},{i % 2}" for i in range(60))
    path.write_text("a,b,label\n" + rows + "\n")
    first = prepare(f"csv:{path}", n=None, d=None, k=None, public_size=10, seed=0, classes=("0", "1"))
    path.write_text("a,b,label\n" + rows.replace("0,", "6,") + "\n")
    os.utime(path, ns=(1, 1))  # a different modification time, whatever the file system's resolution
    second = prepare(f"csv:{path}", n=None, d=None, k=None, public_size=10, seed=0, classes=("0", "1"))
    assert not np.array_equal(first.X_train, second.X_train)
