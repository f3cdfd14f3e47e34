"""The end-to-end MNIST CNN of Tramer and Boneh (2021), with tanh activations."""

from __future__ import annotations

import torch
from torch import nn


class ChannelsLastMaxPool2d(nn.MaxPool2d):
    """:class:`torch.nn.MaxPool2d` computed in channels-last layout on the CPU (the same values and gradients).

    PyTorch's CPU kernel for a channels-first input is slow for small
    windows: a 2 x 2, stride-1 pool of a batch of 256 16 x 14 x 14 maps took
    14 ms forward and backward on one core against 7 ms through channels-last,
    and was a third of a Tramer-Boneh DP-SGD step. On other devices, and
    under torch.func transforms (``mode="vmap"``: vmap cannot change a
    tensor's memory format), the input goes to the framework's kernel unchanged.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.MaxPool2d's parameter name
        if (
            input.device.type != "cpu"
            or input.dim() != 4
            or torch._C._functorch.is_functorch_wrapped_tensor(input)  # before any memory-format query
            or input.is_contiguous(memory_format=torch.channels_last)  # already the fast layout, and kept
        ):
            return super().forward(input)
        pooled = super().forward(input.contiguous(memory_format=torch.channels_last))
        if self.return_indices:
            return tuple(t.contiguous() for t in pooled)  # type: ignore[return-value]
        return pooled.contiguous()


class TramerBonehCNN(nn.Sequential):
    """Two tanh convolutions with max-pooling, then two linear layers (26,010 parameters on MNIST).

    The architecture of Tramer and Boneh, "Differentially private learning
    needs better features (or much more data)", ICLR 2021, Table 8 (code:
    ftramer/Handcrafted-DP, ``models.py``): conv 16x8x8 stride 2 padding 3,
    tanh, max-pool 2 stride 1; conv 32x4x4 stride 2, tanh, max-pool 2 stride
    1; linear to 32, tanh; linear to the classes. Tanh rather than ReLU
    because bounded activations keep gradients small under clipping
    (Papernot et al. 2021). Every layer acts on each example alone.

    Parameters
    ----------
    in_channels, n_classes, image_size:
        1, 10 and 28 for MNIST and Fashion-MNIST.
    """

    def __init__(self, *, in_channels: int = 1, n_classes: int = 10, image_size: int = 28) -> None:
        side = (image_size + 2 * 3 - 8) // 2 + 1 - 1  # conv1, then the stride-1 pool
        side = (side - 4) // 2 + 1 - 1  # conv2, then the pool
        if side < 1:
            raise ValueError(f"image_size must be at least 16 for this architecture, got {image_size}")
        super().__init__(
            nn.Conv2d(in_channels, 16, 8, stride=2, padding=3),
            nn.Tanh(),
            ChannelsLastMaxPool2d(2, 1),
            nn.Conv2d(16, 32, 4, stride=2),
            nn.Tanh(),
            ChannelsLastMaxPool2d(2, 1),
            nn.Flatten(),
            nn.Linear(32 * side * side, 32),
            nn.Tanh(),
            nn.Linear(32, n_classes),
        )
