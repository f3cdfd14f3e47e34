"""A GroupNorm Wide ResNet (WRN-16-4 by default), the DP-SGD image model of De et al. (2022)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _activation(factory: Callable[[], nn.Module]) -> nn.Module:
    module = factory()
    if not isinstance(module, nn.Module):
        raise TypeError(f"activation must build an nn.Module (e.g. nn.ReLU), got {type(module).__name__}")
    if getattr(module, "inplace", False):
        # Ghost clipping reads each layer's recorded output later; an in-place op would overwrite it.
        raise ValueError(f"activation must not be in place, got {module!r}")
    return module


class _PreActBlock(nn.Module):
    """norm-act-conv, norm-act-conv, plus the input (or a 1x1 projection of the activated input)."""

    def __init__(
        self, channels_in: int, channels_out: int, stride: int, groups: int, activation: Callable[[], nn.Module]
    ) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels_in)
        self.act1 = _activation(activation)
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, channels_out)
        self.act2 = _activation(activation)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, stride=1, padding=1, bias=False)
        self.shortcut: nn.Conv2d | None = None
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.act1(self.norm1(x))
        skip = x if self.shortcut is None else self.shortcut(activated)
        out = self.conv2(self.act2(self.norm2(self.conv1(activated))))
        return out + skip


class WideResNet(nn.Module):
    """WRN-``depth``-``width`` with GroupNorm: the DP-SGD image classifier of De et al. (2022).

    A Wide ResNet (Zagoruyko and Komodakis 2016) of pre-activation blocks
    (He et al. 2016b): a 3x3 convolution to 16 channels, three stages of
    ``(depth - 4) / 6`` blocks with ``16 width``, ``32 width`` and ``64
    width`` channels (stride 2 at the start of the second and third), a
    final normalisation and activation, global average pooling and one
    linear layer. Each block is norm-activation-conv twice plus a skip
    connection (a 1x1 convolution of the activated input where the shape
    changes). De et al. (2022) report their CIFAR-10 results with WRN-16-4
    (2.75 million parameters here for 3x32x32 inputs and 10 classes).

    BatchNorm is replaced by GroupNorm (Wu and He 2018): it normalises each
    example alone, so every layer acts on each example alone and
    per-example clipping bounds the sensitivity (see
    :mod:`privml.torch._validation`).

    Not included: De et al. also standardise every convolution's weights
    (Qiao et al. 2019), i.e. the convolution uses ``(W - mean(W)) / std(W)``
    per output channel. The per-example gradient of the raw ``W`` is then
    the outer product ``g a^T`` of an ordinary convolution passed back
    through the Jacobian of the standardisation, which couples all entries
    of an output channel, so it is not an outer product of the layer's
    input and output gradient and the ghost-clipping norms (Li et al.
    2022) do not apply. Plain convolutions keep ghost clipping exact; the
    omission changes the architecture, not the privacy guarantee. Neither
    augmentation multiplicity nor parameter averaging (also De et al.) is
    part of the model.

    Parameters
    ----------
    in_channels, n_classes:
        Input channels (default 3) and classes (default 10).
    depth:
        Total depth: 6 n + 4 with n >= 1 blocks per stage (default 16).
    width:
        Widening factor k (default 4).
    groups:
        GroupNorm groups (default 16, as De et al.); must divide 16, the
        stem's channels, and so every stage's.
    activation:
        A callable building the activation module (default :class:`torch.nn.ReLU`,
        as De et al.; :class:`torch.nn.Tanh` follows Papernot et al. 2021);
        it must not act in place.
    """

    def __init__(
        self,
        *,
        in_channels: int = 3,
        n_classes: int = 10,
        depth: int = 16,
        width: int = 4,
        groups: int = 16,
        activation: Callable[[], nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        if not (isinstance(depth, int) and depth >= 10 and (depth - 4) % 6 == 0):
            raise ValueError(f"depth must be 6 n + 4 with n >= 1 (10, 16, 22, 28...), got {depth!r}")
        if not (isinstance(width, int) and width >= 1):
            raise ValueError(f"width must be a positive int, got {width!r}")
        stem = 16
        widths = (16 * width, 32 * width, 64 * width)
        if not (isinstance(groups, int) and groups >= 1) or any(c % groups for c in (stem, *widths)):
            raise ValueError(f"groups must divide every stage's channels {(stem, *widths)}, got {groups!r}")
        blocks = (depth - 4) // 6
        self.depth, self.width = depth, width
        self.stem = nn.Conv2d(in_channels, stem, 3, padding=1, bias=False)
        layers = []
        channels = stem
        for stage, out in enumerate(widths):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(_PreActBlock(channels, out, stride, groups, activation))
                channels = out
        self.stages = nn.Sequential(*layers)
        self.norm = nn.GroupNorm(groups, channels)
        self.act = _activation(activation)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.norm(self.stages(self.stem(x))))
        return self.head(torch.flatten(self.pool(out), 1))


__all__ = ["WideResNet"]
