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
"""

from __future__ import annotations

from types import EllipsisType

import torch
import torch.nn.functional as F
from torch import nn

from privml.torch.ghost.base import LayerRule, OuterProduct, Prepared, register, trainable

_ConvNd = nn.Conv1d | nn.Conv2d | nn.Conv3d


def patches(module: _ConvNd, activation: torch.Tensor) -> torch.Tensor:
    """Input patches ``(B, T, K Cin)``: T output positions, features ordered (kernel position..., channel).

    Built from strided views of the channels-last padded input, so the one
    copy (the final reshape) moves runs of ``k_last * Cin`` contiguous
    numbers; :func:`torch.nn.functional.unfold` (whose CPU kernel loops over
    the batch, and exists for 2-D only) and a channels-first gather were both
    about twice as slow on the Tramer-Boneh CNN. Norms do not depend on the
    feature order; weights are permuted back by :func:`_to_weight`.
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


def _to_weight(shape: torch.Size):  # noqa: ANN202 - a small closure factory
    """Map a ``(Cout_g, K Cin_g)`` block in patch order to the weight layout ``(Cout_g, Cin_g, k...)``."""
    channels_out, channels_in, *kernel = shape
    dims = len(kernel)
    return lambda w: w.reshape(channels_out, *kernel, channels_in).permute(0, dims + 1, *range(1, dims + 1))


class _Groups(Prepared):
    """G independent outer-product blocks (a grouped convolution): norms add, sums stack."""

    def __init__(self, blocks: list[OuterProduct]) -> None:
        self.blocks = blocks

    def squared_norms(self) -> torch.Tensor:
        return torch.stack([block.squared_norms() for block in self.blocks]).sum(0)

    def clipped_sum(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = [block.clipped_sum(factors) for block in self.blocks]
        return {name: torch.cat([part[name] for part in parts]) for name in parts[0]}


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
        batch, channels_out = grad_output.shape[:2]
        weight, bias = trainable(module, "weight"), trainable(module, "bias")
        g = grad_output.reshape(batch, channels_out, -1).transpose(1, 2)  # (B, T, Cout)
        groups = module.groups
        if groups == 1:
            a = patches(module, activation) if weight else activation.new_zeros(batch, 1, 1)
            return OuterProduct(a, g, weight=weight, bias=bias, weight_shape=module.weight.shape,
                                to_weight=_to_weight(module.weight.shape))
        out_per_group = channels_out // groups
        block_shape = torch.Size((out_per_group, *module.weight.shape[1:]))
        if weight:
            # Patch features are (kernel position..., channel): split the channels into their groups.
            a = patches(module, activation)
            kernel = a.shape[2] // module.in_channels
            split = a.reshape(batch, a.shape[1], kernel, groups, module.in_channels // groups)
            inputs = [split[:, :, :, j].reshape(batch, a.shape[1], -1) for j in range(groups)]
        else:  # only the bias is trained: its gradient needs g alone
            inputs = [activation.new_zeros(batch, 1, 1)] * groups
        return _Groups([
            OuterProduct(inputs[j], g[:, :, j * out_per_group : (j + 1) * out_per_group], weight=weight, bias=bias,
                         weight_shape=block_shape, to_weight=_to_weight(block_shape))
            for j in range(groups)
        ])


for _layer in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
    register(_layer, ConvRule())
