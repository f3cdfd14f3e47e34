"""The contract every privacy mechanism follows.

A mechanism is configured once with its privacy parameters and the
sensitivity of the function it protects, then ``randomise``s values. It never
sees the dataset, only f(D): the caller is responsible for ``sensitivity``
being a true bound under ``neighbouring``. ``event`` describes one call for an
accountant, so repeated use can be composed with any accountant.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from privml._random import RandomState, check_random_state
from privml._validation import check_delta, check_epsilon, check_finite_array, check_positive
from privml.accounting._events import DpEvent
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring


class Mechanism(ABC):
    """Base class: validated (epsilon, delta, sensitivity), a random generator,
    and the per-call guarantee.

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon:
        Privacy loss bound, > 0.
    delta:
        Failure probability in [0, 1); mechanisms that are pure DP require 0.
    sensitivity:
        Bound on how much f changes between neighbours, in the norm the
        mechanism names (L1 for Laplace, L2 for Gaussian and L2-Laplace).
    neighbouring:
        Relation under which ``sensitivity`` holds.
    random_state:
        None (OS entropy), an int seed, or a numpy Generator.
    """

    #: whether the mechanism needs delta > 0 (Gaussian) or requires delta == 0 (pure DP)
    pure: bool = True

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 0.0,
        sensitivity: float = 1.0,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if self.pure and self.delta != 0:
            raise ValueError(f"{type(self).__name__} is pure epsilon-DP: delta must be 0, got {self.delta!r}")
        if not self.pure and self.delta == 0:
            raise ValueError(f"{type(self).__name__} needs delta > 0, got 0")
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.neighbouring = Neighbouring.parse(neighbouring)
        self.random_state = random_state
        self._rng: np.random.Generator = check_random_state(random_state)

    @abstractmethod
    def randomise(self, value):  # noqa: ANN001 - scalar or array, per mechanism
        """Return a privatised copy of ``value`` (never modifies it in place)."""

    def _release(self, value: Any, noise: Callable[[np.ndarray], np.ndarray]) -> float | np.ndarray:
        """``value`` (checked finite, never modified) plus ``noise(value)``: a float for a scalar, else a new array."""
        arr = check_finite_array(value, "value")
        noisy = arr + noise(arr)
        return float(noisy) if noisy.ndim == 0 else noisy

    @property
    @abstractmethod
    def event(self) -> DpEvent:
        """The privacy event of one call to :meth:`randomise`."""

    @property
    def privacy(self) -> PrivacyGuarantee:
        """The guarantee of one call to :meth:`randomise`."""
        return PrivacyGuarantee(self.epsilon, self.delta, self.neighbouring, accountant="single-release")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r}, "
            f"sensitivity={self.sensitivity!r}, neighbouring={self.neighbouring.value!r})"
        )
