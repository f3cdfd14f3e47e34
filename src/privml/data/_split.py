"""The fixed train/test split used where a dataset has none."""

from __future__ import annotations

import numpy as np

#: Seed of every fixed split: the test set is the same in every run.
SPLIT_SEED = 0
TEST_FRACTION = 0.2


def fixed_split(
    n: int, *, test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``range(n)`` into train and test indices by a seeded shuffle.

    Data-independent: the indices depend only on ``n`` and the seed, not on
    any record. The seed is fixed rather than taken from ``random_state`` so
    that results across runs and methods are compared on one test set.

    Parameters
    ----------
    n : int
        Number of records, at least 2.
    test_fraction : float, default 0.2
        Share of records in the test set (rounded, at least one record each side).
    seed : int, default 0

    Returns
    -------
    train, test : numpy.ndarray of int64
        Disjoint sorted index arrays covering ``range(n)``.
    """
    if n < 2:
        raise ValueError(f"need at least 2 records to split into train and test, got {n}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    n_test = min(n - 1, max(1, round(n * test_fraction)))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])
