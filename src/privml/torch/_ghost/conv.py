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
kernel), so they are formed by chunks of examples, each living only while
its norms are computed, by the cheaper of the two exact formulas per group
(mixed ghost clipping, Bu, Mao and Xu 2022); a chunk's transient is at most
the size of the layer's input and output gradient. Where the norms
instantiate the per-example weight gradients, the CPU forms them without
patches, by one grouped weight-gradient kernel over a chunk of examples
(:func:`per_example_weight_grads`). When they are fewer numbers
than the input and output gradient (early, wide-image layers: 64 x 576 per
example against 2 x 64 x 1024 at 32 x 32) and keeping them saves operations
(:func:`~privml.torch._ghost.base.instantiation_is_kept`), they are
instantiated and kept, and the clipped sum is their weighted sum. Otherwise the clipped sum is
the weight gradient of the convolution for the output gradient scaled by
each example's clip factor (book-keeping, Bu et al. 2023): on the CPU the
framework's own backward kernel, elsewhere products of patches formed by
chunks (:data:`KERNEL_SUMS`), whose floating-point error is of the form the
norms' bounds assume.
"""

from __future__ import annotations

import math
from types import EllipsisType

import torch
import torch.nn.functional as F
from torch import nn

from privml.torch._ghost.base import (
    LayerRule,
    Materialised,
    Prepared,
    chunk_room,
    ghost_norm_is_cheaper,
    instantiation_is_kept,
    outer_product_norms,
    rows_per_chunk,
    squared_frobenius,
    trainable,
)
from privml.torch._ghost.precision import (
    conv_position_bound,
    position_sums,
    product_norm_slack,
    round_to_tf32,
    weighted_sum,
)

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
    kernel = math.prod(module.kernel_size)
    return windows.permute(order).reshape(batch, positions, kernel * channels)


#: Devices on which a convolution's per-example weight gradients are instantiated by one grouped weight-gradient
#: kernel (:func:`per_example_weight_grads`) rather than from input patches and batched products. On 2 CPU cores
#: (batch 32, 64 channels, 3 x 3, 32 x 32) the grouped kernel took 15 ms against 47 (30 of them forming the
#: patches), and it forms no patches; other devices keep the patches until measured there
#: (``benchmarks/torch_gpu.py profile`` times both on a GPU).
GROUPED_INSTANTIATION: dict[str, bool] = {"cpu": True}

#: Devices on which a book-kept convolution's float32 clipped sum is the framework's weight-gradient kernel for the
#: scaled output gradient, rather than products of patches (:meth:`_ConvPrepared._patch_sum`). Elsewhere, and
#: always under "tf32", it is the products, whose error is of the form the norms' bounds assume: cuDNN may pick an
#: FFT or Winograd algorithm, whose error mixes an example's positions (a crafted input could hide behind it).
#: The CPU's oneDNN kernel is a direct convolution.
KERNEL_SUMS: dict[str, bool] = {"cpu": True}


def per_example_weight_grads(module: _ConvNd, activation: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """``(b, Cout, Cin / G, *kernel)``: each example's weight gradient, in the weight's layout.

    Stacking the b examples along the channels and giving each its own set
    of groups (b G groups) makes them one convolution whose weight gradient
    holds every example's (Rochette, Manoel and Tramel 2019, "Efficient
    per-example gradient computations in convolutional neural networks"):
    one call of the framework's weight-gradient kernel, and no input patches.
    """
    batch, groups = activation.shape[0], module.groups
    padding = module.padding
    assert not isinstance(padding, str)  # ConvRule.check refuses string padding
    x = activation.reshape(1, batch * module.in_channels, *activation.shape[2:])
    g = grad_output.reshape(1, batch * module.out_channels, *grad_output.shape[2:])
    # Only the weight's shape is read (no input gradient is asked for), but the kernel makes any weight contiguous:
    # an uninitialised one saves it a copy. Its room is counted in the chunk size (see _ConvPrepared.squared_norms).
    weight = g.new_empty(batch * module.out_channels, module.in_channels // groups, *module.kernel_size)
    _, grads, _ = torch.ops.aten.convolution_backward(
        g, x, weight, None, list(module.stride), list(padding), list(module.dilation), False,
        [0] * len(module.kernel_size), batch * groups, [False, True, False],
    )
    return grads.reshape(batch, *module.weight.shape)


class _ConvPrepared(Prepared):
    """One convolution's input and output gradient: norms from transient patches, the sum by a kernel or patches."""

    def __init__(
        self, module: _ConvNd, activation: torch.Tensor, grad_output: torch.Tensor, *, tf32: bool = False
    ) -> None:
        self.module, self.activation, self.grad_output = module, activation, grad_output
        self.weight, self.bias = trainable(module, "weight"), trainable(module, "bias")
        # "tf32": the operands of every product are rounded chunk by chunk as the chunks are formed (no whole-layer
        # rounded copy, see _round); the bias gradients are sums without products and use the gradient as it is.
        self._tf32 = tf32
        self._weight_squared: torch.Tensor | None = None  # the weight's part of the squared norms
        self._sums: torch.Tensor | None = None  # (B,) S = sum_t |a_t| |g_t| over patches (or a bound on it)
        self._gram = False  # whether the weight's norms came from Gram traces (else instantiated)
        self._instantiated: torch.Tensor | None = None  # (B, *weight shape), when kept
        self._bias: torch.Tensor | None = None  # (B, Cout): each example's bias gradient, formed once

    def _round(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as a product's operand: rounded to TF32 under the "tf32" arithmetic."""
        return round_to_tf32(t) if self._tf32 else t

    def _bias_grads(self) -> torch.Tensor:
        if self._bias is None:
            self._bias = self.grad_output.reshape(*self.grad_output.shape[:2], -1).sum(2)
        return self._bias

    def squared_norms(self) -> torch.Tensor:
        module, g_out = self.module, self.grad_output
        batch, channels_out = g_out.shape[:2]
        g = g_out.reshape(batch, channels_out, -1).transpose(1, 2)  # (B, T, Cout)
        total = torch.zeros(batch, dtype=g.dtype, device=g.device)
        if self.bias:
            total = total + self._bias_grads().square().sum(1)
        if not self.weight:
            return total
        groups, steps = module.groups, g.shape[1]
        kernel = math.prod(module.kernel_size)
        p, d = channels_out // groups, kernel * module.in_channels // groups
        given = steps * channels_out + self.activation[0].numel()  # numbers per example: output gradient and input
        if instantiation_is_kept(steps, d, p, given // groups):  # all groups' gradients are kept
            self._instantiated = g.new_empty(batch, *module.weight.shape)
        # Kept gradients are instantiated whichever norm formula is cheaper (see instantiation_is_kept).
        gram = self._instantiated is None and ghost_norm_is_cheaper(steps, d, p)
        # One input channel (a grayscale image's first layer): its patches are cheap, and the grouped kernel, one
        # channel per group, was slower (1.3 against 1.0 ms for the Tramer-Boneh CNN's first layer, batch 64).
        if not gram and GROUPED_INSTANTIATION.get(g.device.type, False) and module.in_channels > 1:
            # Chunks of examples whose transient takes at most the room the layer was given: the kernel's weight
            # argument, its output (which it writes twice on the CPU) and its copies of the input and gradient,
            # about 3 G p d + given numbers per example (measured with the profiler's allocation events).
            rows = rows_per_chunk(
                batch, 3 * groups * p * d + given * (2 if self._tf32 else 1), chunk_room(given * batch, g.device)
            )
            weight = torch.zeros_like(total)
            for lo in range(0, batch, rows):
                part = slice(lo, min(lo + rows, batch))
                grads = per_example_weight_grads(module, self._round(self.activation[part]), self._round(g_out[part]))
                weight[part] = squared_frobenius(grads)
                if self._instantiated is not None:
                    self._instantiated[part] = grads
            self._weight_squared = weight  # S, if its slack is asked for, is bounded from the input and gradient
            return total + weight
        # Patches are K times the input: form them by chunks of examples so that this layer's transient
        # (patches and Gram matrices or gradients) stays within what it was given.
        transient = steps * kernel * module.in_channels + (2 * steps * steps if gram else p * d)
        transient += given if self._tf32 else 0  # the chunk's rounded input and gradient
        rows = rows_per_chunk(batch, transient, chunk_room(given * batch, g.device))
        weight, self._gram = torch.zeros_like(total), gram
        # S from the patches where a slack will be asked for (not for kept gradients, unless bf16 drops them: then
        # it is bounded from the input and gradient), an extra read of patches 9 times the input on a 3 x 3 layer.
        sums = torch.zeros_like(total) if self._instantiated is None else None
        for lo in range(0, batch, rows):
            part = slice(lo, min(lo + rows, batch))
            a = patches(module, self._round(self.activation[part]))  # (b, T, K Cin), dropped after this chunk
            g_part = self._round(g[part])
            weight[part] = self._chunk_norms(part, a, g_part, groups, p)
            if sums is not None:
                sums[part] = position_sums(a, g_part)  # over all groups: at least the groups' S, and their norm
        self._sums = sums
        self._weight_squared = weight
        return total + weight

    def _chunk_norms(self, part: slice, a: torch.Tensor, g: torch.Tensor, groups: int, p: int) -> torch.Tensor:
        """Squared weight-gradient norms of examples ``part`` (summed over groups); instantiated ones are kept."""
        if groups == 1:
            blocks = [(a, g)]
        else:  # patch features are (kernel position..., channel): split the channels into their groups
            batch, steps = a.shape[:2]
            kernel = a.shape[2] // self.module.in_channels
            split = a.reshape(batch, steps, kernel, groups, self.module.in_channels // groups)
            blocks = [
                (split[:, :, :, j].reshape(batch, steps, -1), g[:, :, j * p : (j + 1) * p]) for j in range(groups)
            ]
        module = self.module
        total = torch.zeros(g.shape[0], dtype=g.dtype, device=g.device)
        for j, (a_j, g_j) in enumerate(blocks):
            if self._instantiated is None:
                total = total + outer_product_norms(a_j, g_j)
            else:
                grads = torch.bmm(g_j.transpose(1, 2), a_j)  # (b, p, K Cin/G), features (kernel position..., channel)
                total = total + squared_frobenius(grads)
                grads = grads.reshape(-1, p, *module.kernel_size, module.in_channels // groups).movedim(-1, 2)
                self._instantiated[part, j * p : (j + 1) * p] = grads  # the weight's layout: (Cin/G, kernel...)
        return total

    def compact(self) -> Prepared | None:
        if self._instantiated is None:
            return None
        grads = {"weight": self._instantiated}
        if self._bias is not None:
            grads["bias"] = self._bias
        return Materialised(grads)

    def clipped_sum(self, factors: torch.Tensor, *, tf32: bool = False) -> dict[str, torch.Tensor]:
        module, g_out = self.module, self.grad_output
        out: dict[str, torch.Tensor] = {}
        if self.bias:
            # From the per-example bias gradients the norms were taken of: the backward kernel's own reduction over
            # examples and positions may round an example's cancelling positions differently (a review found an
            # example whose bias gradient summed to 0 on the norms' side and 1e4 in the kernel's).
            out["bias"] = weighted_sum(factors, self._bias_grads(), tf32=tf32)
        if not self.weight:
            return out
        if tf32 or not KERNEL_SUMS.get(g_out.device.type, False):
            out["weight"] = self._patch_sum(factors, tf32=tf32)
            return out
        scaled = g_out * factors.reshape(-1, *([1] * (g_out.dim() - 1))).to(g_out.dtype)
        padding = module.padding
        assert not isinstance(padding, str)  # ConvRule.check refuses string padding
        _, weight, _ = torch.ops.aten.convolution_backward(
            scaled,
            self.activation,
            module.weight.to(scaled.dtype),
            None,
            list(module.stride),
            list(padding),
            list(module.dilation),
            False,
            [0] * len(module.kernel_size),
            module.groups,
            [False, True, False],
        )
        out["weight"] = weight
        return out

    def _patch_sum(self, factors: torch.Tensor, *, tf32: bool) -> torch.Tensor:
        """The weight's clipped sum as matrix products of the scaled gradient and the input patches.

        The arithmetic the norms' error bounds assume (sums of products over
        positions), not the framework's weight-gradient kernel: cuDNN may
        transform its operands (Winograd, FFT) first, which mixes positions
        and, under TF32, rounds the transformed values. ``rounding`` is
        :func:`~privml.torch._ghost.precision.round_to_tf32` under ``"tf32"``
        (the input and the scaled gradient are rounded as the norms' were,
        and the scaled gradient once more: the one rounding the bound is
        for). The input is unfolded into patches by chunks of examples, as
        for the norms, so the transient stays within what the layer was
        given; the products accumulate in float32.
        """
        rounding = round_to_tf32 if tf32 else (lambda t: t)
        module, g_out = self.module, self.grad_output
        batch, channels_out = g_out.shape[:2]
        scale = factors.reshape(-1, *([1] * (g_out.dim() - 1))).to(g_out.dtype)
        groups, steps = module.groups, g_out[0, 0].numel()
        kernel = math.prod(module.kernel_size)
        p, per_group = channels_out // groups, module.in_channels // groups
        total = g_out.new_zeros(groups, p, kernel * per_group)
        given = steps * channels_out + self.activation[0].numel()
        # Per example: its patches, and its (rounded) input and scaled gradient.
        rows = rows_per_chunk(
            batch, steps * kernel * module.in_channels + given, chunk_room(given * batch, g_out.device)
        )
        for lo in range(0, batch, rows):
            part = slice(lo, lo + rows)
            a = patches(module, rounding(self.activation[part]))  # (b, T, K Cin): (kernel position..., channel)
            scaled = rounding(self._round(g_out[part]) * scale[part])
            g_part = scaled.reshape(-1, channels_out, steps).transpose(1, 2).reshape(-1, channels_out)  # (b T, Cout)
            split = a.reshape(-1, kernel, groups, per_group)
            for j in range(groups):
                total[j].addmm_(g_part[:, j * p : (j + 1) * p].T, split[:, :, j].reshape(-1, kernel * per_group))
        # (G, p, kernel..., Cin/G) -> the weight's layout (Cout, Cin/G, kernel...)
        return total.reshape(channels_out, *module.kernel_size, per_group).movedim(-1, 1).contiguous()

    def norm_slack(self) -> torch.Tensor | None:
        # Of this object's own sum, products of patches and the scaled g (kept gradients are summed by Materialised).
        if not self.weight:
            return None
        assert self._weight_squared is not None  # squared_norms ran
        module = self.module
        s = self._sums
        if s is None:
            s = conv_position_bound(self.activation, self.grad_output, math.prod(module.kernel_size))
        # Per group: d = K Cin / G, p = Cout / G; the groups' squared S add up to at most S^2.
        d, p = math.prod(module.kernel_size) * module.in_channels // module.groups, module.out_channels // module.groups
        return product_norm_slack(
            self._weight_squared, s, gram=self._gram, d=d, p=p, steps=self.grad_output[0, 0].numel(), tf32=self._tf32
        )


class ConvRule(LayerRule):
    def check(self, module: nn.Module) -> None:
        assert isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
        if module.padding_mode != "zeros" or isinstance(module.padding, str):
            raise ValueError(
                f"ghost clipping supports {type(module).__name__} with numeric zero padding only, "
                f"got padding={module.padding!r}, padding_mode={module.padding_mode!r}; use mode='vmap'"
            )

    def prepare(
        self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor, *, tf32: bool = False
    ) -> Prepared:
        assert isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
        return _ConvPrepared(module, activation, grad_output, tf32=tf32)

