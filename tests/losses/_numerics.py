"""Finite differences and random data shared by the loss tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from privml.losses import HuberHingeLoss, LogisticLoss, Loss, MultinomialLogisticLoss, SquaredLoss


def central_gradient(f: Callable[[np.ndarray], float], w: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of a scalar function, in the shape of ``w``."""
    flat = np.asarray(w, dtype=np.float64).reshape(-1)
    grad = np.empty_like(flat)
    for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = step
        grad[i] = (f((flat + e).reshape(np.shape(w))) - f((flat - e).reshape(np.shape(w)))) / (2 * step)
    return grad.reshape(np.shape(w))


def central_jacobian(f: Callable[[np.ndarray], np.ndarray], w: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """Central-difference Jacobian ``(m, p)`` of a vector function of the flattened ``w``."""
    flat = np.asarray(w, dtype=np.float64).reshape(-1)
    columns = []
    for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = step
        plus = np.asarray(f((flat + e).reshape(np.shape(w)))).reshape(-1)
        minus = np.asarray(f((flat - e).reshape(np.shape(w)))).reshape(-1)
        columns.append((plus - minus) / (2 * step))
    return np.stack(columns, axis=1)


def unit_ball_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Rows in the unit ball; every other row on the unit sphere, where the constants are tight."""
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    radii = np.where(np.arange(n) % 2 == 0, 1.0, rng.uniform(0.1, 1.0, size=n))
    return X * radii[:, None]


@dataclass(frozen=True)
class Case:
    """A loss, how to draw labels for it, and the margins where its second derivative jumps."""

    name: str
    loss: Loss
    labels: Callable[[np.random.Generator, int], np.ndarray]
    kinks: tuple[float, ...] = field(default=())

    def __repr__(self) -> str:
        return self.name


def _binary(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(np.array([-1, 1]), size=n)


def _classes(k: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, n: rng.integers(0, k, size=n)


def _targets(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(0.0, 2.0, size=n)


CASES = [
    Case("logistic", LogisticLoss(), _binary),
    Case("huber-0.5", HuberHingeLoss(0.5), _binary, kinks=(0.5, 1.5)),
    Case("huber-0.1", HuberHingeLoss(0.1), _binary, kinks=(0.9, 1.1)),
    Case("multinomial-2", MultinomialLogisticLoss(2), _classes(2)),
    Case("multinomial-4", MultinomialLogisticLoss(4), _classes(4)),
    Case("squared", SquaredLoss(), _targets),
]


def draw(
    case: Case, rng: np.random.Generator, n: int = 7, d: int = 3, scale: float = 2.0, *, kink_margin: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random ``(w, X, y)``; with ``kink_margin > 0`` every margin stays that far from the kinks."""
    for _ in range(1000):
        X = unit_ball_rows(rng, n, d)
        y = case.labels(rng, n)
        w = scale * rng.standard_normal(case.loss.parameter_shape(d))
        if not case.kinks or kink_margin == 0.0:
            return w, X, y
        margins = y * (X @ w)
        if min(np.min(np.abs(margins - kink)) for kink in case.kinks) > kink_margin:
            return w, X, y
    raise AssertionError("could not draw margins away from the kinks")
