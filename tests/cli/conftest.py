"""Fixtures of the CLI tests that need no torch to set up."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.cli_runner import TrainedFile, train


@pytest.fixture
def small_mnist(tmp_path_factory, monkeypatch):
    """A ``$PRIVML_DATA`` holding a small MNIST-shaped cache (random uint8 images, labels 0..9; 200 train,
    50 test), so the CNN commands run end to end without the real dataset, which CI may lack."""
    from privml.data._cache import cache_file, write_cache
    from privml.data._dataset import RawSplits

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


@pytest.fixture
def train_file(tmp_path):
    """``train_file(*options)``: :func:`train` into this test's folder (the train-then-audit set-up of the
    ``audit --model`` tests)."""
    count = itertools.count()
    return lambda *options: train(tmp_path / f"model-{next(count)}.npz", *options)


#: The options of the small CNN run (on ``small_mnist``) that both the file audit and the options' audit repeat.
CNN_OPTIONS = (
    "--epsilon", "3", "--delta", "1e-6", "--epochs", "2", "--batch-size", "40", "--learning-rate", "0.2",
    "--clip-norm", "0.5", "--precision", "fp32", "--threads", "1", "--device", "cpu", "--max-train", "100",
    "--seed", "0", "--no-progress",
)


@pytest.fixture
def cnn_file(small_mnist, train_file) -> TrainedFile:
    """``privml train --method dpsgd-cnn --dataset mnist *CNN_OPTIONS`` on the small MNIST cache."""
    pytest.importorskip("torch")
    return train_file("--method", "dpsgd-cnn", "--dataset", "mnist", *CNN_OPTIONS)
