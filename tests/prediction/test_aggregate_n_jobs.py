"""SubsampleAndAggregate's n_jobs is checked before the partition is drawn (from a review: joblib refused 0 and 'x'
only after it, and -100 was accepted)."""

from __future__ import annotations

import numpy as np
import pytest

from privml.prediction._aggregate import SubsampleAndAggregate


@pytest.mark.parametrize(("n_jobs", "error"), [(0, ValueError), (-100_000, ValueError), ("x", TypeError),
                                               (1.5, TypeError)])
def test_bad_n_jobs_is_refused_before_any_randomness(n_jobs, error):
    X = np.random.default_rng(1).normal(size=(60, 3)) / 3
    y = (X[:, 0] > 0).astype(int)
    rng = np.random.default_rng(0)
    before = str(rng.bit_generator.state)
    model = SubsampleAndAggregate(n_models=5, epsilon=1, budget=10, n_jobs=n_jobs, classes=(0, 1), random_state=rng)
    with pytest.raises(error, match="n_jobs must be a positive integer"):
        model.fit(X, y)
    assert str(rng.bit_generator.state) == before


def test_joblibs_all_cores_but_some_is_accepted():
    # -2 is joblib's "every core but one", a common setting (a review found it refused).
    X = np.random.default_rng(1).normal(size=(60, 3)) / 3
    y = (X[:, 0] > 0).astype(int)
    SubsampleAndAggregate(n_models=5, epsilon=1, budget=10, n_jobs=-2, classes=(0, 1), random_state=0).fit(X, y)
