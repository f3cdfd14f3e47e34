"""Ghost rule for :class:`torch.nn.Conv2d`: a Linear layer applied to input patches."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from privml.torch.ghost.base import LayerRule, OuterProduct, Prepared, register, trainable


def patches(module: nn.Conv2d, activation: torch.Tensor) -> torch.Tensor:
    """Input patches ``(B, T, kh kw Cin)``, T output positions, features ordered (row, column, channel).

    Built from strided views of the channels-last padded input, so the one
    copy (the final reshape) moves runs of ``kw * Cin`` contiguous numbers;
    :func:`torch.nn.functional.unfold` (whose CPU kernel loops over the
    batch) and a channels-first gather were both about twice as slow on the
    Tramer-Boneh CNN. Norms do not depend on the feature order; weights are
    permuted back by :func:`_to_weight`.
    """
    (ph, pw), (kh, kw), (sh, sw), (dh, dw) = module.padding, module.kernel_size, module.stride, module.dilation
    channels_last = activation.permute(0, 2, 3, 1)
    padded = F.pad(channels_last, (0, 0, pw, pw, ph, ph)) if ph or pw else channels_last
    windows = padded.unfold(1, dh * (kh - 1) + 1, sh).unfold(2, dw * (kw - 1) + 1, sw)  # (B, Ho, Wo, C, eh, ew)
    if dh > 1 or dw > 1:
        windows = windows[..., ::dh, ::dw]
    batch, out_h, out_w, channels = windows.shape[:4]
    return windows.permute(0, 1, 2, 4, 5, 3).reshape(batch, out_h * out_w, kh * kw * channels)


def _to_weight(shape: torch.Size):  # noqa: ANN202 - a small closure factory
    channels_out, channels_in, kh, kw = shape
    return lambda w: w.reshape(channels_out, kh, kw, channels_in).permute(0, 3, 1, 2)


class Conv2dRule(LayerRule):
    def check(self, module: nn.Module) -> None:
        assert isinstance(module, nn.Conv2d)
        if module.groups != 1:
            raise ValueError(f"ghost clipping supports Conv2d with groups=1 only, got groups={module.groups}")
        if module.padding_mode != "zeros" or isinstance(module.padding, str):
            raise ValueError(
                "ghost clipping supports Conv2d with numeric zero padding only, "
                f"got padding={module.padding!r}, padding_mode={module.padding_mode!r}"
            )

    def prepare(self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor) -> Prepared:
        batch, channels_out = grad_output.shape[:2]
        weight = trainable(module, "weight")
        a = patches(module, activation) if weight else activation.new_zeros(batch, 1, 1)  # type: ignore[arg-type]
        g = grad_output.reshape(batch, channels_out, -1).transpose(1, 2)
        return OuterProduct(
            a,
            g,
            weight=weight,
            bias=trainable(module, "bias"),
            weight_shape=module.weight.shape,
            to_weight=_to_weight(module.weight.shape),
        )


register(nn.Conv2d, Conv2dRule())
