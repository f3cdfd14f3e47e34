"""Model architectures for DP-SGD (none of them mixes examples: no BatchNorm)."""

from __future__ import annotations

from torch import nn

from privml.torch.models._resnet import GroupNormResNet
from privml.torch.models._tramer_boneh import TramerBonehCNN
from privml.torch.models._transformer import TransformerClassifier
from privml.torch.models._wide_resnet import WideResNet

#: Names accepted by :func:`build_model`.
ARCHITECTURES: tuple[str, ...] = ("tramer-boneh", "resnet", "wide-resnet", "transformer")
#: The architectures that classify images (those ``TorchClassifier(model=...)`` can train on image arrays).
IMAGE_ARCHITECTURES: tuple[str, ...] = ("tramer-boneh", "resnet", "wide-resnet")


def build_model(
    name: str,
    *,
    in_channels: int = 1,
    n_classes: int = 10,
    image_size: int = 28,
    vocab_size: int | None = None,
    max_len: int | None = None,
    padding_idx: int | None = None,
) -> nn.Module:
    """A fresh model by architecture name (one of :data:`ARCHITECTURES`).

    ``tramer-boneh`` (Tramer and Boneh 2021), ``resnet`` (a small GroupNorm
    ResNet) and ``wide-resnet`` (GroupNorm WRN-16-4, De et al. 2022) take
    images of ``in_channels`` channels; ``transformer`` (a 2-layer encoder,
    d_model 256) takes token ids and needs ``vocab_size`` and ``max_len``
    (``padding_idx`` optional). Arguments an architecture does not use are
    ignored.
    """
    if name == "tramer-boneh":
        return TramerBonehCNN(in_channels=in_channels, n_classes=n_classes, image_size=image_size)
    if name == "resnet":
        return GroupNormResNet(in_channels=in_channels, n_classes=n_classes)
    if name == "wide-resnet":
        return WideResNet(in_channels=in_channels, n_classes=n_classes)
    if name == "transformer":
        if vocab_size is None or max_len is None:
            raise ValueError("the transformer architecture needs vocab_size and max_len")
        return TransformerClassifier(
            vocab_size=vocab_size, n_classes=n_classes, max_len=max_len, padding_idx=padding_idx
        )
    raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}")


__all__ = [
    "ARCHITECTURES",
    "IMAGE_ARCHITECTURES",
    "GroupNormResNet",
    "TramerBonehCNN",
    "TransformerClassifier",
    "WideResNet",
    "build_model",
]
