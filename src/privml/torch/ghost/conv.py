"""Ghost rule for :class:`torch.nn.Conv1d`, :class:`~torch.nn.Conv2d` and :class:`~torch.nn.Conv3d`.

A convolution is a Linear layer applied to input patches: the gradient of
example i is ``sum_t g[i, t] a[i, t]^T`` over output positions t, with
``a[i, t]`` the flattened receptive field (kernel positions x input channels)
and ``g[i, t]`` the output channels' gradient there. A grouped convolution
(``groups = G``, depthwise included) is G such layers side by side, each
seeing ``Cin / G`` input channels and producing ``Cout / G`` outputs: its
squared norm is the sum of the G blocks' and its clipped sum is the blocks'
stacked along the output channels. Any stride, dilation and numeric zero
padding; padding given as a string (``"same"``) or a non-zero padding mode is
refused (use ``mode="vmap"``).

Memory. The patches are ``K`` times the layer's input (9 times for a 3x3
kernel), so they live only while this layer's norms are computed, by the
cheaper of the two exact formulas per group (mixed ghost clipping, Bu, Mao
and Xu 2022). The clipped sum needs no patches: it is the weight gradient
of the convolution for the output gradient scaled by each example's clip
factor, which the framework's own backward kernel computes (cuDNN on a GPU;
book-keeping, Bu et al. 2023).
"""

from __future__ import annotations

from types import EllipsisType

import torch
import torch.nn.functional as F
from torch import nn

from privml.torch.ghost.base import LayerRule, Prepared, outer_product_norms, register, trainable

_ConvNd = nn.Conv1d | nn.Conv2d | nn.Conv3d


def patches(module: _ConvNd, activation: torch.Tensor) -> torch.Tensor:
    """Input patches ``(B, T, K Cin)``: T output positions, features ordered (kernel position..., channel).

    Built from strided views of the channels-last padded input, so the one
    copy (the final reshape) moves runs of ``k_last * Cin`` contiguous
    numbers; :func:`torch.nn.functional.unfold` (whose CPU kernel loops over
    the batch, and exists for 2-D only) and a channels-first gather were both
    about twice as slow on the Tramer-Boneh CNN. Norms do not depend on the
    feature order.
    """
    dims = len(module.kernel_size)
    padding = module.padding
    assert not isinstance(padding, str)  # ConvRule.check refuses string padding ("same", "valid")
    channels_last = activation.movedim(1, -1)  # (B, S_1..S_n, C)
    pads: list[int] = [0, 0]
    for p in reversed(padding):  # F.pad lists the last dimension first
        pads += [int(p), int(p)]
    padded = F.pad(channels_last, pads) if any(pads) else channels_last
    windows = padded
    for axis, (k, s, d) in enumerate(zip(module.kernel_size, module.stride, module.dilation)):
        windows = windows.unfold(1 + axis, d * (k - 1) + 1, s)  # appends the window extent as a last dimension
    # windows: (B, O_1..O_n, C, e_1..e_n); keep every d-th element of each extent (dilation).
    if any(d > 1 for d in module.dilation):
        every: tuple[EllipsisType | slice, ...] = (Ellipsis, *(slice(None, None, d) for d in module.dilation))
        windows = windows[every]
    batch, channels = windows.shape[0], windows.shape[1 + dims]
    positions = 1
    for size in windows.shape[1 : 1 + dims]:
        positions *= size
    order = (0, *range(1, 1 + dims), *range(2 + dims, 2 + 2 * dims), 1 + dims)  # (B, O..., e..., C)
    kernel = 1
    for k in module.kernel_size:
        kernel *= k
    return windows.permute(order).reshape(batch, positions, kernel * channels)


class _ConvPrepared(Prepared):
    """One convolution's input and output gradient: norms from transient patches, sum by the backward kernel."""

    def __init__(self, module: _ConvNd, activation: torch.Tensor, grad_output: torch.Tensor) -> None:
        self.module, self.activation, self.grad_output = module, activation, grad_output
        self.weight, self.bias = trainable(module, "weight"), trainable(module, "bias")

    def squared_norms(self) -> torch.Tensor:
        module, g_out = self.module, self.grad_output
        batch, channels_out = g_out.shape[:2]
        g = g_out.reshape(batch, channels_out, -1).transpose(1, 2)  # (B, T, Cout)
        total = torch.zeros(batch, dtype=g.dtype, device=g.device)
        if self.bias:
            total = total + g.sum(1).square().sum(1)
        if not self.weight:
            return total
        a = patches(module, self.activation)  # (B, T, K Cin), dropped when this returns
        groups = module.groups
        if groups == 1:
            return total + outer_product_norms(a, g)
        # Patch features are (kernel position..., channel): split the channels into their groups.
        kernel = a.shape[2] // module.in_channels
        split = a.reshape(batch, a.shape[1], kernel, groups, module.in_channels // groups)
        out_per_group = channels_out // groups
        for j in range(groups):
            a_j = split[:, :, :, j].reshape(batch, a.shape[1], -1)
            total = total + outer_product_norms(a_j, g[:, :, j * out_per_group : (j + 1) * out_per_group])
        return total

    def clipped_sum(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        module, g_out = self.module, self.grad_output
        scaled = g_out * factors.reshape(-1, *([1] * (g_out.dim() - 1))).to(g_out.dtype)
        padding = module.padding
        assert not isinstance(padding, str)  # ConvRule.check refuses string padding
        _, weight, bias = torch.ops.aten.convolution_backward(
            scaled,
            self.activation,
            module.weight.to(scaled.dtype),
            [module.out_channels] if self.bias else None,
            list(module.stride),
            list(padding),
            list(module.dilation),
            False,
            [0] * len(module.kernel_size),
            module.groups,
            [False, self.weight, self.bias],
        )
        out: dict[str, torch.Tensor] = {}
        if self.weight:
            out["weight"] = weight
        if self.bias:
            out["bias"] = bias
        return out


class ConvRule(LayerRule):
    def check(self, module: nn.Module) -> None:
        assert isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
        if module.padding_mode != "zeros" or isinstance(module.padding, str):
            raise ValueError(
                f"ghost clipping supports {type(module).__name__} with numeric zero padding only, "
                f"got padding={module.padding!r}, padding_mode={module.padding_mode!r}; use mode='vmap'"
            )

    def prepare(self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor) -> Prepared:
        assert isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
        return _ConvPrepared(module, activation, grad_output)


for _layer in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
    register(_layer, ConvRule())
