"""The pieces of one DP-SGD step on a linear model, in numpy.

What :class:`privml.linear.DPSGDClassifier` does at each step, apart
from its noise: draw the batch (a Poisson sample, the sampled Gaussian
mechanism of Mironov, Talwar and Zhang 2019; or a fixed-size batch without
replacement, Wang, Balle and Kasiviswanathan 2019), sum the per-example
gradients clipped as a whole to C (Abadi et al. 2016, Algorithm 1; the
ghost-norm factorisation of Goodfellow 2015 and Li et al. 2022), take the
step's learning rate from a schedule, and average the iterates. None of
them touches the privacy accounting: the schedule and the averaging are
post-processing, and the samplers draw independently of the data.
"""

from __future__ import annotations

import math

import numpy as np

from privml._validation import check_count, check_positive, check_probability
from privml.losses import Loss

__all__ = [
    "LR_SCHEDULES",
    "clipped_gradient_sum",
    "fixed_size_sample",
    "learning_rate_schedule",
    "poisson_sample",
]

#: Learning-rate schedules accepted by ``lr_schedule``.
LR_SCHEDULES: tuple[str, ...] = ("constant", "cosine", "step", "inverse_sqrt")


def poisson_sample(n: int, sample_rate: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of a Poisson sample: each of ``n`` records kept independently with probability q.

    Parameters
    ----------
    n:
        Number of records, >= 1.
    sample_rate:
        q in (0, 1].
    rng:
        The generator to draw from.

    Returns
    -------
    ndarray of int
        Sorted indices of the kept records; their number is Binomial(n, q)
        and may be 0.

    Notes
    -----
    Privacy: this is the sampling that the amplification theorems for DP-SGD
    assume (Mironov, Talwar and Zhang 2019, Section 3, the sampled Gaussian
    mechanism; Balle, Barthe and Gaboardi 2018, Thm 8), analysed under
    add/remove-one neighbours. Shuffling and cutting fixed-size batches is a
    different mechanism, and accounting for it as Poisson under-reports
    epsilon (Chua et al. 2024), so every step draws afresh here. The number
    of kept records is itself private (it moves with the added or removed
    record): it must not be released, nor used to normalise the gradient.
    """
    n = check_count(n, "n")
    sample_rate = check_probability(sample_rate, "sample_rate")
    return np.flatnonzero(rng.random(n) < sample_rate)


def fixed_size_sample(n: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a batch of exactly ``batch_size`` distinct records, uniform over all such batches.

    Parameters
    ----------
    n:
        Number of records, >= 1.
    batch_size:
        b in [1, n].
    rng:
        The generator to draw from.

    Returns
    -------
    ndarray of int
        Sorted indices of b records drawn without replacement.

    Notes
    -----
    Privacy: the sampler of Wang, Balle and Kasiviswanathan 2019 (Theorem 9),
    analysed under replace-one neighbours (n and b public). Every step draws
    afresh, independently of the data: shuffling once and cutting the
    permutation into batches is a different mechanism (Chua et al. 2024).
    b is public, so normalising by it is post-processing.
    """
    n = check_count(n, "n")
    batch_size = check_count(batch_size, "batch_size", maximum=n)
    return np.sort(rng.choice(n, size=batch_size, replace=False))


def clipped_gradient_sum(
    loss: Loss,
    weights: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    clip_norm: float,
    *,
    row_norms: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sum of per-example loss gradients, each clipped to L2 norm ``clip_norm``.

    Parameters
    ----------
    loss:
        A loss of a linear model (binary margin loss or multinomial logistic).
    weights:
        Current parameters, shape ``(d,)`` or ``(d, k)``.
    X:
        Records of the batch, shape ``(b, d)`` (b may be 0): an array, or CSR if ``row_norms`` is given.
    y:
        Their labels as the loss expects them (validated by the caller).
    clip_norm:
        C > 0.
    row_norms:
        ``||x_i||`` of the rows of ``X``, if already known (they do not change
        between steps); computed otherwise.

    Returns
    -------
    total:
        ``sum_i g_i min(1, C / ||g_i||)``, with the shape of ``weights``.
    norms:
        The unclipped per-example gradient norms ``||g_i||`` (for tests and
        diagnostics inside a trusted boundary: they are private data).

    Notes
    -----
    Sensitivity: each clipped term has L2 norm at most C, where the norm is
    the Frobenius norm of the *whole* per-example gradient (every class's
    weights together, flattened as in
    :meth:`privml.losses.Loss.per_example_gradients`). Hence the sum has L2
    sensitivity C under add/remove-one neighbours and 2C under replace-one,
    whatever the loss (Abadi et al. 2016, Algorithm 1). Clipping each class
    (or each parameter tensor) separately to C would let one record move the
    sum by C sqrt(k) and void that bound.

    The per-example gradient of a linear model is ``g_i = x_i r_i^T`` with
    ``r_i`` the derivative of the loss in the score(s), so
    ``||g_i|| = ||x_i|| ||r_i||`` and ``sum_i c_i g_i = X^T (c * R)``: no
    ``(b, d k)`` array is formed.
    """
    if X.shape[0] == 0:
        return np.zeros_like(weights), np.zeros(0)
    score_grads = loss._score_gradients(X @ weights, y)  # noqa: SLF001 - validated once by the caller
    residual_norms = np.abs(score_grads) if score_grads.ndim == 1 else np.linalg.norm(score_grads, axis=1)
    x_norms = np.linalg.norm(X, axis=1) if row_norms is None else row_norms
    norms = x_norms * residual_norms
    # min(1, C / ||g||), written to give exactly 1 (not C/0) for a zero gradient.
    factors = clip_norm / np.maximum(norms, clip_norm)
    scaled = score_grads * factors if score_grads.ndim == 1 else score_grads * factors[:, None]
    finite = np.isfinite(norms)
    if not finite.all():
        # A gradient that is not finite (weights overflowed) is dropped, as in privml.torch's clip_factors: its
        # term is exact zeros (0 * inf is NaN), so it cannot turn the sum into NaN. The rows X are finite.
        scaled[~finite] = 0.0
    return X.T @ scaled, norms


def learning_rate_schedule(schedule: str, learning_rate: float, steps: int) -> np.ndarray:
    """Learning rate of each of ``steps`` steps.

    ``constant``: eta; ``cosine``: eta (1 + cos(pi t / T)) / 2; ``step``: eta,
    divided by 10 after half and again after three quarters of the steps;
    ``inverse_sqrt``: eta / sqrt(1 + 10 t / T) (eta / sqrt(11) at the end).
    A schedule is a public function of the step index: it costs no privacy.
    """
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {schedule!r}")
    t = np.arange(steps, dtype=np.float64)
    if schedule == "constant":
        return np.full(steps, float(learning_rate))
    if schedule == "cosine":
        return learning_rate * 0.5 * (1.0 + np.cos(np.pi * t / steps))
    if schedule == "step":
        return learning_rate * 0.1 ** ((t >= steps / 2).astype(float) + (t >= 3 * steps / 4))
    return learning_rate / np.sqrt(1.0 + 10.0 * t / steps)


#: Defaults of DPSGDClassifier's tail_fraction and ema_decay (a set value the averaging ignores is an error)
DEFAULT_TAIL_FRACTION = 0.5
DEFAULT_EMA_DECAY = 0.99


def check_averaging(kind: str, tail_fraction: float, ema_decay: float, kinds: tuple[str, ...]) -> None:
    """Validate the averaging settings; ``tail_fraction`` other than its default is refused unless ``kind`` is
    "tail", and ``ema_decay`` unless it is "ema": the averaging would silently ignore them."""
    if kind not in kinds:
        raise ValueError(f"averaging must be one of {', '.join(kinds)}, got {kind!r}")
    tail = check_positive(tail_fraction, "tail_fraction")
    if tail > 1:
        raise ValueError(f"tail_fraction must be in (0, 1], got {tail!r}")
    decay = check_positive(ema_decay, "ema_decay", allow_zero=True)
    if decay >= 1:
        raise ValueError(f"ema_decay must be in [0, 1), got {decay!r}")
    # Compared as float32 would store them: the default given in another precision (np.float32(0.99)) is not a
    # setting of its own.
    if kind != "tail" and not math.isclose(tail, DEFAULT_TAIL_FRACTION, rel_tol=1e-6):
        raise ValueError(f"tail_fraction applies to averaging='tail' only, got averaging={kind!r}")
    if kind != "ema" and not math.isclose(decay, DEFAULT_EMA_DECAY, rel_tol=1e-6):
        raise ValueError(f"ema_decay applies to averaging='ema' only, got averaging={kind!r}")


class _Averager:
    """Running average of the iterates (post-processing: no privacy cost)."""

    def __init__(self, kind: str, steps: int, tail_fraction: float, ema_decay: float) -> None:
        self.kind = kind
        self.first = 0 if kind == "uniform" else steps - max(1, math.ceil(tail_fraction * steps))
        self.decay = ema_decay
        self.total: np.ndarray | None = None
        self.count = 0

    def update(self, step: int, weights: np.ndarray) -> None:
        if self.kind == "ema":
            # Started at the first iterate, so no bias correction is needed.
            self.total = weights.copy() if self.total is None else self.decay * self.total + (1 - self.decay) * weights
        elif self.kind in ("uniform", "tail") and step >= self.first:
            self.total = weights.copy() if self.total is None else self.total + weights
            self.count += 1

    def result(self, last: np.ndarray) -> np.ndarray:
        if self.kind == "none" or self.total is None:
            return last
        return self.total if self.kind == "ema" else self.total / self.count
