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

    A norm that is not finite (NaN or infinite: a non-finite input, or a
    product that overflowed while the norm was formed) gets the factor 0:
    such an example's term is dropped, not scaled, so it cannot turn the
    whole sum into NaN and tell its neighbouring batch apart. The sums must
    then hold exact zeros for it (:func:`drop_rows`), since ``0 * inf`` is NaN.
    """
    factors = clip_norm / torch.clamp(norms, min=clip_norm)
    return torch.where(torch.isfinite(norms), factors, torch.zeros_like(factors))


def drop_rows(t: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``t`` with the rows (dimension 0) of the examples not kept set to exact zeros (out of place).

    For the examples whose clip factor is 0 because their norm is not
    finite (:func:`clip_factors`): a zero row contributes exactly nothing to
    a weighted sum or a product, whatever non-finite values it held.
    """
    return torch.where(keep.reshape(-1, *([1] * (t.dim() - 1))), t, torch.zeros((), dtype=t.dtype, device=t.device))


def rows_must_be_dropped(keep: torch.Tensor) -> bool:
    """Whether some example is not kept, or cannot be known not to be without waiting for the device.

    Outside a CUDA graph capture this asks the device (one wait per step,
    the price of never releasing a NaN sum); while a graph is being captured
    nothing may wait, so the rows are always dropped (a replay does it on
    every step, on the device).
    """
    if keep.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return True
    return not bool(keep.all())
