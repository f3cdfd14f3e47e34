"""Flat clipping of the whole per-example gradient, and the clipped sum it feeds.

Privacy: the noise of DP-SGD is calibrated to the L2 sensitivity of
``sum_i clip(g_i)``. With ``clip(g) = g min(1, C / ||g||)`` and ``||g||``
the norm of the *whole* per-example gradient (every parameter tensor of the
model flattened into one vector), adding or removing one example moves the
sum by at most C (Abadi et al. 2016, Algorithm 1). Clipping each tensor to
C separately would let one example move it by C sqrt(#tensors) (the
bug of vdMH20's reference DP-SGD, facebookresearch/private_prediction).
"""

from __future__ import annotations

from typing import Literal

import torch

Mode = Literal["auto", "ghost", "vmap"]
MODES: tuple[str, ...] = ("auto", "ghost", "vmap")


def clip_factors(norms: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """``min(1, C / ||g_i||)`` for each example, written to be exactly 1 (not C/0) for a zero gradient.

    ``norms`` must be the norms of the *whole* per-example gradients (all
    parameters flattened together): scaling example i's every tensor by
    this one factor bounds its contribution to the sum by C, the L2
    sensitivity of the clipped sum under add/remove-one neighbours (Abadi
    et al. 2016, Algorithm 1).
    """
    return clip_norm / torch.clamp(norms, min=clip_norm)
