"""Random-state handling: every randomised function takes ``random_state``."""

from __future__ import annotations

import numbers

import numpy as np

RandomState = None | int | np.random.Generator | np.random.SeedSequence


def check_random_state(random_state: RandomState) -> np.random.Generator:
    """Turn ``random_state`` into a :class:`numpy.random.Generator`.

    ``None`` draws fresh OS entropy (what a deployment should use); an int or a
    SeedSequence gives a reproducible stream (for experiments and tests); a
    Generator is used as is, so callers can share one stream.
    """
    if random_state is None or isinstance(random_state, (numbers.Integral, np.random.SeedSequence)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    raise TypeError(
        "random_state must be None, an int, a numpy SeedSequence or a numpy Generator, "
        f"got {type(random_state).__name__}"
    )
