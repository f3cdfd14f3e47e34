"""Model architectures for DP-SGD (none of them mixes examples: no BatchNorm)."""

from __future__ import annotations

from torch import nn

from privml.torch.models.resnet import GroupNormResNet
from privml.torch.models.tramer_boneh import TramerBonehCNN

#: Names accepted by :func:`build_model` (and by ``TorchClassifier(model=...)``).
ARCHITECTURES: tuple[str, ...] = ("tramer-boneh", "resnet")


def build_model(name: str, *, in_channels: int = 1, n_classes: int = 10, image_size: int = 28) -> nn.Module:
    """A fresh model by architecture name (``tramer-boneh`` or ``resnet``)."""
    if name == "tramer-boneh":
        return TramerBonehCNN(in_channels=in_channels, n_classes=n_classes, image_size=image_size)
    if name == "resnet":
        return GroupNormResNet(in_channels=in_channels, n_classes=n_classes)
    raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}")


__all__ = ["ARCHITECTURES", "GroupNormResNet", "TramerBonehCNN", "build_model"]
