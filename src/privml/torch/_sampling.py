"""Sampling of logical batches (Poisson, or fixed-size without replacement) and their split into micro-batches."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import default_collate

from privml.torch._noise import RandomSource


class _IndexSampler(ABC):
    """What both samplers share: ``steps`` batches of indices out of ``n`` drawn by a :class:`RandomSource`.

    ``generator`` (seeded, reproducible) fixes the device the batches are
    drawn on; without one they are drawn on ``device`` (CPU by default) from
    fresh OS entropy. ``secure`` draws as :mod:`privml.torch._noise` describes.
    Subclasses draw ``count`` batches at once in :meth:`sample_many`.
    """

    def __init__(
        self, n: int, steps: int, generator: torch.Generator | None, secure: bool, device: torch.device | str | None,
        *, empty: bool,
    ) -> None:
        if not (isinstance(n, int) and n >= (0 if empty else 1)):
            raise ValueError(f"n must be a {'non-negative' if empty else 'positive'} int, got {n!r}")
        if not (isinstance(steps, int) and steps >= 0):
            raise ValueError(f"steps must be a non-negative int, got {steps!r}")
        if generator is not None:
            if device is not None and torch.device(device).type != torch.device(generator.device).type:
                raise ValueError(f"the generator lives on {generator.device}, not on device={device}")
            self.source = RandomSource(generator.device, generator=generator, secure=secure)
        else:
            self.source = RandomSource("cpu" if device is None else device, secure=secure)
        self.n, self.steps, self.secure, self.generator = n, steps, secure, self.source.generator

    def __len__(self) -> int:
        return self.steps

    def _chunk(self) -> int:
        """How many batches one :meth:`sample_many` call draws while iterating."""
        return 1

    def sample(self) -> torch.Tensor:
        """One logical batch: a sorted int64 tensor of indices."""
        return self.sample_many(1)[0]

    @abstractmethod
    def sample_many(self, count: int) -> list[torch.Tensor]:
        """``count`` independent logical batches."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        remaining, chunk = self.steps, self._chunk()
        while remaining:
            count = min(chunk, remaining)
            yield from self.sample_many(count)
            remaining -= count


class PoissonSampler(_IndexSampler):
    """Each of ``n`` indices enters each logical batch independently with probability q.

    Iterating yields ``steps`` index tensors (sorted, possibly empty; their
    size is Binomial(n, q)). This is the sampling the accounting assumes:
    the sampled Gaussian mechanism of Mironov, Talwar and Zhang (2019),
    analysed under add/remove-one neighbours. Shuffled fixed-size batches
    are a different mechanism, and accounting for them as Poisson
    under-reports epsilon (Chua et al. 2024). The realised batch size is
    private: DP-SGD normalises by the expected size ``q n`` instead.

    Parameters
    ----------
    n:
        Number of records (public).
    sample_rate:
        q in (0, 1].
    steps:
        Number of batches to yield.
    generator:
        A seeded :class:`torch.Generator` for reproducible runs; fresh OS
        entropy otherwise. The batches are drawn on its device (the model's).
    secure:
        Draw the inclusion coins securely (:mod:`privml.torch._noise`)
        instead of from ``generator``: which records were used must stay as
        unpredictable as the noise for the amplification argument to hold
        against an adversary who could otherwise replay a seeded stream.
    device:
        Where the index tensors are made when no ``generator`` is given
        (default CPU).
    """

    def __init__(
        self,
        *,
        n: int,
        sample_rate: float,
        steps: int,
        generator: torch.Generator | None = None,
        secure: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(n, steps, generator, secure, device, empty=True)
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
        self.sample_rate = float(sample_rate)

    def _chunk(self) -> int:
        # Chunks of steps whose coins take at most about 32 MiB (float64), and at most 64 steps.
        return max(1, min(64, (1 << 22) // max(1, self.n)))

    def sample_many(self, count: int) -> list[torch.Tensor]:
        """``count`` independent logical batches, drawn together.

        The coins of all ``count`` batches are one draw and the indices one
        ``nonzero``: on a GPU, finding the indices waits for the device, and
        doing it once per chunk of steps instead of once per step lets the
        host run ahead of the device. The batches are distributed exactly as
        ``count`` calls of :meth:`sample`.
        """
        keep = (self.source.uniform(count * self.n) < self.sample_rate).reshape(count, self.n)
        _, columns = torch.nonzero(keep, as_tuple=True)  # row-major: batch by batch, each sorted
        return list(torch.split(columns, keep.sum(1).tolist()))


class FixedSizeSampler(_IndexSampler):
    """Each logical batch is ``batch_size`` distinct indices out of ``n``, uniform over all such sets.

    Iterating yields ``steps`` sorted index tensors of exactly b = ``batch_size``
    elements, drawn afresh (without replacement within a batch, independently
    across batches). This is the sampler of Wang, Balle and Kasiviswanathan
    (2019), analysed under replace-one neighbours with n and b public; DP-SGD
    divides by b. Shuffling once and cutting the permutation into batches is
    a different mechanism (Chua et al. 2024) and is not what this does.

    Parameters
    ----------
    batch_size:
        b in [1, n] (public).
    n, steps, generator, device:
        As in :class:`PoissonSampler` (n >= 1 here).
    secure:
        Draw the permutations securely (:mod:`privml.torch._noise`) instead
        of from ``generator``.
    """

    def __init__(
        self,
        *,
        n: int,
        batch_size: int,
        steps: int,
        generator: torch.Generator | None = None,
        secure: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(n, steps, generator, secure, device, empty=False)
        if not (isinstance(batch_size, int) and 1 <= batch_size <= n):
            raise ValueError(f"batch_size must be an int in [1, n={n}], got {batch_size!r}")
        self.batch_size = batch_size

    def sample_many(self, count: int) -> list[torch.Tensor]:
        """``count`` logical batches, each a sorted int64 tensor of ``batch_size`` distinct indices."""
        return [torch.sort(self.source.permutation(self.n)[: self.batch_size]).values for _ in range(count)]


def micro_batches(indices: torch.Tensor, size: int | None) -> list[torch.Tensor]:
    """Split a logical batch into physical micro-batches of at most ``size`` (one if ``size`` is None).

    Purely a memory device: the clipped sums of the micro-batches add up to
    the clipped sum of the logical batch, which gets one noise draw and
    counts as one step.
    """
    if size is None or indices.numel() <= size:
        return [indices] if indices.numel() else []
    return list(torch.split(indices, size))


def poisson_batches(dataset: Any, sampler: PoissonSampler | FixedSizeSampler) -> Iterator[Any]:
    """Logical batches of a map-style ``torch.utils.data.Dataset`` drawn by ``sampler``.

    Each batch is the default collation of the sampled records; an empty
    sample yields a batch of the same structure with zero rows (collating
    nothing would fail, and skipping the step would change the mechanism
    the accountant assumes: the step must still run, adding pure noise).
    """
    template = default_collate([dataset[0]]) if len(dataset) else None
    for indices in sampler:
        if indices.numel():
            yield default_collate([dataset[i] for i in indices.tolist()])
        elif template is not None:
            yield _empty_like(template)


def _empty_like(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, (list, tuple)):
        return type(batch)(_empty_like(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _empty_like(v) for k, v in batch.items()}
    raise TypeError(f"cannot form an empty batch of {type(batch).__name__}")
