"""Gaussian noise for DP-SGD: seeded (reproducible) or from the OS's CSPRNG."""

from __future__ import annotations

import math
import os

import numpy as np
import torch

_TWO_POW_53 = float(2**53)


def secure_standard_normal(shape: tuple[int, ...], *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal draws from ``os.urandom`` (the OS's cryptographically secure generator).

    Box-Muller in float64 on uniforms with 53 random bits each. The
    generator is unpredictable, unlike a seeded Mersenne Twister, which an
    adversary who learns the seed (or enough outputs) can replay to subtract
    the noise. The transform is still floating-point arithmetic, so the
    caveat of Mironov (2012) about the low-order bits of sampled noise
    applies; the weights released by DP-SGD are post-processed sums of many
    noisy steps, never one exact noisy value.
    """
    count = math.prod(shape)
    pairs = (count + 1) // 2
    words = np.frombuffer(os.urandom(16 * pairs), dtype=np.uint64).reshape(2, pairs)
    # (k + 0.5) / 2^53 lies strictly inside (0, 1): log(u1) is finite.
    u1 = ((words[0] >> np.uint64(11)).astype(np.float64) + 0.5) / _TWO_POW_53
    u2 = ((words[1] >> np.uint64(11)).astype(np.float64) + 0.5) / _TWO_POW_53
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = 2.0 * np.pi * u2
    z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:count]
    return torch.from_numpy(z.reshape(shape)).to(dtype)


def gaussian_noise(
    shape: torch.Size | tuple[int, ...],
    std: float,
    *,
    generator: torch.Generator | None,
    secure: bool,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """N(0, std^2) per coordinate: from ``os.urandom`` if ``secure``, else from ``generator``."""
    shape = tuple(shape)
    if secure:
        return (std * secure_standard_normal(shape, dtype=torch.float64)).to(dtype=dtype, device=device)
    return torch.normal(0.0, std, size=shape, generator=generator, dtype=dtype, device=device)
