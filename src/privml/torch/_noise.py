"""Randomness of DP-SGD on the model's device: seeded (reproducible) or secure (unpredictable).

Every random draw of a step (the sampling coins or permutation, and the
Gaussian noise) comes from a :class:`RandomSource` bound to one device, so a
step never moves a tensor between devices and a CUDA run draws on the GPU.

What "secure" means, per device
-------------------------------
A seeded generator can be replayed by anyone who learns its seed, and then
the noise can be subtracted from the released model: seeded runs are for
tests and reproducible experiments. ``secure=True`` removes that attack:

* **CPU:** every standard normal is built (Box-Muller, float64) from 53-bit
  uniforms read from ``os.urandom``, the operating system's cryptographically
  secure generator; the coins likewise.
* **Any other device (CUDA):** reading ``os.urandom`` for millions of
  coordinates per step and copying them to the GPU would cost more than the
  step itself. Instead each draw uses a fresh device generator (Philox4x32-10
  on CUDA, Salmon et al. 2011) keyed with 64 bits from ``os.urandom``; the key
  lives only for that draw and is never stored, printed or saved. The noise is
  therefore unpredictable and cannot be replayed from anything privml writes.
  Philox is a counter-based generator built from a reduced-round block
  cipher: it passes the statistical test batteries but carries no proof of
  cryptographic strength, so this is weaker than the CPU path against an
  adversary able to attack the generator itself (recovering a 64-bit key
  from noisy model weights is not a known attack, and the key changes every
  step).

Either way the transform to Gaussian values is floating-point arithmetic, so
the caveat of Mironov (2012) about the low-order bits of sampled noise
applies; DP-SGD releases post-processed sums of many noisy steps, never one
exact noisy value.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

_TWO_POW_53 = float(2**53)


def _os_key() -> int:
    """64 fresh bits from the OS's CSPRNG (a non-negative int, as torch generators want)."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def secure_uniform(count: int) -> np.ndarray:
    """``count`` uniforms in (0, 1), float64, each from 53 bits of ``os.urandom``."""
    words = np.frombuffer(os.urandom(8 * count), dtype=np.uint64)
    # (k + 0.5) / 2^53 lies strictly inside (0, 1): log(u) is finite in Box-Muller.
    return ((words >> np.uint64(11)).astype(np.float64) + 0.5) / _TWO_POW_53


def secure_standard_normal(shape: tuple[int, ...], *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal draws from ``os.urandom`` (CPU), by Box-Muller in float64.

    The generator is unpredictable, unlike a seeded Mersenne Twister, which an
    adversary who learns the seed (or enough outputs) can replay to subtract
    the noise.
    """
    count = math.prod(shape)
    pairs = (count + 1) // 2
    u = secure_uniform(2 * pairs).reshape(2, pairs)
    radius = np.sqrt(-2.0 * np.log(u[0]))
    angle = 2.0 * np.pi * u[1]
    z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:count]
    return torch.from_numpy(z.reshape(shape)).to(dtype)


class RandomSource:
    """The draws of one DP-SGD stream (noise, or sampling) on one device.

    Parameters
    ----------
    device:
        Where every tensor it returns lives (the model's device).
    seed:
        Seed of the stream's generator (reproducible runs; ignored when
        ``secure``). None draws one from the OS.
    generator:
        Use this generator (on ``device``) instead of seeding a new one.
    secure:
        Draw as the module notes describe instead of from the seeded generator.

    Examples
    --------
    >>> source = RandomSource("cpu", seed=0)
    >>> source.normal((3,), 2.0).shape, source.uniform(4).dtype
    (torch.Size([3]), torch.float64)
    >>> RandomSource("cpu", seed=0).normal((3,), 1.0).equal(RandomSource("cpu", seed=0).normal((3,), 1.0))
    True
    """

    def __init__(
        self,
        device: torch.device | str,
        *,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        secure: bool = False,
    ) -> None:
        self.device = torch.device(device)
        self.secure = bool(secure)
        if generator is not None:
            if torch.device(generator.device).type != self.device.type:
                raise ValueError(f"the generator lives on {generator.device}, the draws on {self.device}")
            self.generator = generator
        else:
            self.generator = torch.Generator(device=self.device)
            self.generator.manual_seed(_os_key() if seed is None else int(seed))

    def _generator(self) -> torch.Generator:
        """The seeded generator, or (secure, not CPU) a fresh one keyed from ``os.urandom`` for this draw."""
        if not self.secure:
            return self.generator
        fresh = torch.Generator(device=self.device)
        fresh.manual_seed(_os_key())
        return fresh

    def normal(
        self, shape: torch.Size | tuple[int, ...], std: float, *, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """N(0, std^2) per coordinate, ``dtype``, on the source's device."""
        shape = tuple(shape)
        if self.secure and self.device.type == "cpu":
            return (std * secure_standard_normal(shape, dtype=torch.float64)).to(dtype)
        return torch.normal(0.0, std, size=shape, generator=self._generator(), dtype=dtype, device=self.device)

    def normal_like(self, tensors: list[torch.Tensor], std: float) -> list[torch.Tensor]:
        """N(0, std^2) per coordinate, one tensor shaped (and typed) like each of ``tensors``.

        One draw per dtype, split into the shapes: one kernel instead of one
        per tensor (a step of a small model on a GPU is bound by launches);
        the coordinates are independent either way. The dtypes are read at
        each call (a model may be cast).
        """
        noise: list[torch.Tensor | None] = [None] * len(tensors)
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            members = [i for i, t in enumerate(tensors) if t.dtype == dtype]
            sizes = [tensors[i].numel() for i in members]
            flat = self.normal((sum(sizes),), std, dtype=dtype)
            for i, part in zip(members, torch.split(flat, sizes), strict=True):
                noise[i] = part.view(tensors[i].shape)
        return noise  # type: ignore[return-value]  # every slot is filled: each tensor has a dtype

    def uniform(self, count: int) -> torch.Tensor:
        """``count`` float64 uniforms in [0, 1) on the source's device (sampling coins)."""
        if self.secure and self.device.type == "cpu":
            return torch.from_numpy(secure_uniform(count))
        return torch.rand(count, generator=self._generator(), dtype=torch.float64, device=self.device)

    def permutation(self, count: int) -> torch.Tensor:
        """A uniformly random permutation of ``range(count)`` (int64) on the source's device."""
        if self.secure and self.device.type == "cpu":
            # Sorting count secure uniforms gives a uniform permutation (ties have probability ~count^2 / 2^53).
            return torch.from_numpy(np.argsort(secure_uniform(count), kind="stable"))
        return torch.randperm(count, generator=self._generator(), device=self.device)

