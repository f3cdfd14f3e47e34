"""Shared fixtures: small float64 models so exact comparisons are tight, one torch thread."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machine is shared: one intra-op thread per test process.
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture
def image_cache(tmp_path_factory, monkeypatch):
    """A ``$PRIVML_DATA`` holding small MNIST and Fashion-MNIST files in the cache's format.

    Random uint8 images with labels 0..9 (600 train, 200 test): enough to run
    the CNN paths end to end without the real datasets, which CI may lack.
    """
    import numpy as np

    from privml.data._cache import cache_file, write_cache
    from privml.data._dataset import RawSplits

    root = tmp_path_factory.mktemp("image-cache")
    rng = np.random.default_rng(0)
    for name in ("mnist", "fashion-mnist"):
        raw = RawSplits(
            X_train=rng.integers(0, 256, size=(600, 28, 28), dtype=np.uint8),
            y_train=np.arange(600, dtype=np.uint8) % 10,
            X_test=rng.integers(0, 256, size=(200, 28, 28), dtype=np.uint8),
            y_test=np.arange(200, dtype=np.uint8) % 10,
            source=f"synthetic {name}-shaped test data",
        )
        write_cache(cache_file(root, name), raw)
    monkeypatch.setenv("PRIVML_DATA", str(root))
    return root


def pytest_collection_modifyitems(config, items):
    """Skip ``gpu`` tests where torch finds no CUDA device (CI); they run on a GPU machine."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
