"""Per-example gradients of any module with torch.func (vmap over grad, functional_call)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from privml.torch._clipping import clip_factors, drop_rows, rows_must_be_dropped
from privml.torch._ghost.precision import exact_float32


def per_example_gradients(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """``{name: (B, *param.shape)}``: the gradient of each example's loss in each trainable parameter.

    Each example runs through the model as a batch of one inside
    :func:`torch.func.vmap`, so the result is exact for any layer that does
    not mix examples; layers that do (BatchNorm in training mode) would see a
    batch of one, which is why the validator rejects them. Random layers
    (dropout) draw independently per example (``randomness="different"``).
    """
    params = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def loss_of_one(
        p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor
    ) -> torch.Tensor:
        out = functional_call(model, (p, b), (xi.unsqueeze(0),))
        return loss_fn(out, yi.unsqueeze(0)).sum()

    return vmap(grad(loss_of_one), in_dims=(None, None, 0, 0), randomness="different")(params, buffers, x, y)


def flat_norms(per_example: dict[str, torch.Tensor]) -> torch.Tensor:
    """``||g_i||``: the L2 norm of example i's gradient over *all* parameters flattened together."""
    squared = torch.stack([g.reshape(g.shape[0], -1).square().sum(1) for g in per_example.values()])
    return squared.sum(0).sqrt()


def vmap_clipped_sum(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    clip_norm: float,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """``sum_i c_i g_i`` with ``c_i = min(1, C / ||g_i||)`` from materialised per-example gradients.

    Privacy: flat clipping of the whole per-example gradient, so the sum has
    L2 sensitivity C under add/remove-one neighbours (Abadi et al. 2016,
    Algorithm 1). Memory is O(B P) for P parameters: bound B with physical
    micro-batches.

    Returns
    -------
    sums, norms:
        As :func:`privml.torch.ghost_clipped_sum`.
    """
    per_example = per_example_gradients(model, loss_fn, x, y)
    # Norms, clip factors and sums in the gradients' own precision, never under a caller's autocast.
    with torch.autocast(x.device.type, enabled=False), exact_float32():
        norms = flat_norms(per_example)
        factors = clip_factors(norms, clip_norm)
        keep = torch.isfinite(norms)
        if rows_must_be_dropped(keep):  # a non-finite gradient: its factor is 0, and 0 * inf would be NaN
            per_example = {name: drop_rows(g, keep) for name, g in per_example.items()}
        sums = {name: torch.tensordot(factors.to(g.dtype), g, dims=1) for name, g in per_example.items()}
    return sums, norms
