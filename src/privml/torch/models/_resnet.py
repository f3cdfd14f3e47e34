"""A small residual network with GroupNorm, for DP-SGD."""

from __future__ import annotations

import torch
from torch import nn


class _Block(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, stride=1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, channels_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False), nn.GroupNorm(groups, channels_out)
            )
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.act(out + self.shortcut(x))


class GroupNormResNet(nn.Module):
    """A ResNet (He et al. 2016) with GroupNorm in place of BatchNorm and tanh activations.

    BatchNorm normalises with statistics of the batch, so one example's
    gradient depends on the others and per-example clipping no longer bounds
    the sensitivity; GroupNorm normalises each example alone (Wu and He
    2018), the standard replacement in DP-SGD (Kurakin et al. 2022; De et al.
    2022). Three stages of ``blocks`` residual blocks with ``width``, 2
    ``width`` and 4 ``width`` channels, global average pooling, one linear
    layer. Every layer acts on each example alone.

    Parameters
    ----------
    in_channels, n_classes:
        Input channels and classes.
    width:
        Channels of the first stage (default 16).
    blocks:
        Residual blocks per stage (default 1).
    groups:
        GroupNorm groups (must divide ``width``; default 4).
    """

    def __init__(
        self, *, in_channels: int = 1, n_classes: int = 10, width: int = 16, blocks: int = 1, groups: int = 4
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False), nn.GroupNorm(groups, width), nn.Tanh()
        )
        layers = []
        channels = width
        for stage, out in enumerate((width, 2 * width, 4 * width)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(_Block(channels, out, stride, groups))
                channels = out
        self.stages = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.stages(self.stem(x))), 1))
