"""Shared data for the private-prediction tests."""

from __future__ import annotations

import numpy as np
import pytest

from privml.data import load_dataset


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    """``n`` rows on the unit sphere in R^d."""
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def binary_problem(n: int = 40, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm rows with labels in {0, 1} from a fixed linear rule."""
    X = unit_rows(n, d, seed)
    return X, (X[:, 0] > 0).astype(int)


@pytest.fixture(scope="session")
def digits():
    return load_dataset("digits", bias=0.5, random_state=0)
