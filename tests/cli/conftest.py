"""Fixtures of the CLI tests that need no torch to set up."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def small_mnist(tmp_path_factory, monkeypatch):
    """A ``$PRIVML_DATA`` holding a small MNIST-shaped cache (random uint8 images, labels 0..9; 200 train,
    50 test), so the CNN commands run end to end without the real dataset, which CI may lack."""
    from privml.data.cache import cache_file, write_cache
    from privml.data.dataset import RawSplits

    root = tmp_path_factory.mktemp("mnist-cache")
    rng = np.random.default_rng(0)
    raw = RawSplits(
        X_train=rng.integers(0, 256, size=(200, 28, 28), dtype=np.uint8),
        y_train=np.arange(200, dtype=np.uint8) % 10,
        X_test=rng.integers(0, 256, size=(50, 28, 28), dtype=np.uint8),
        y_test=np.arange(50, dtype=np.uint8) % 10,
        source="synthetic mnist-shaped test data",
    )
    write_cache(cache_file(root, "mnist"), raw)
    monkeypatch.setenv("PRIVML_DATA", str(root))
    return root


@pytest.fixture
def tiny_images(tmp_path):
    """npz:PATH of 120 random 16 x 16 grey images in two classes (the CNN audit's smallest run)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (120, 16, 16)).astype(np.float32)
    y = (X[:, :8].mean(axis=(1, 2)) > 0.5).astype(np.int64)
    path = tmp_path / "images.npz"
    np.savez(path, X=X, y=y)
    return f"npz:{path}"
