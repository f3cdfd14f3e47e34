"""Small models covering every supported layer type, for the gradient tests."""

from __future__ import annotations

import torch
from torch import nn


class TokenModel(nn.Module):
    """Embedding (with a padding index) -> LayerNorm -> Linear on a sequence -> mean -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 5, padding_idx=0)
        self.norm = nn.LayerNorm(5)
        self.mix = nn.Linear(5, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.norm(self.embed(x)))).mean(1))


def single_layer(kind: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """(model, x, y) of a tiny model around one layer of ``kind``, float64, seeded."""
    torch.manual_seed(0)
    batch = 6
    if kind == "linear":
        model = nn.Sequential(nn.Linear(5, 3))
        x = torch.randn(batch, 5)
    elif kind == "linear-sequence":
        model = nn.Sequential(nn.Linear(5, 4), nn.Flatten(), nn.Linear(12, 3))
        x = torch.randn(batch, 3, 5)
    elif kind == "conv2d":
        model = nn.Sequential(nn.Conv2d(2, 3, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(3 * 4 * 4, 3))
        x = torch.randn(batch, 2, 7, 7)
    elif kind == "conv2d-dilated-nobias":
        model = nn.Sequential(nn.Conv2d(2, 4, 2, dilation=2, bias=False), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))
        x = torch.randn(batch, 2, 5, 5)
    elif kind == "conv1d":
        model = nn.Sequential(nn.Conv1d(2, 3, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(3 * 5, 3))
        x = torch.randn(batch, 2, 9)
    elif kind == "conv3d":
        model = nn.Sequential(nn.Conv3d(2, 3, (2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(1, 1, 2)),
                              nn.Flatten(), nn.Linear(3 * 4 * 2 * 5, 3))
        x = torch.randn(batch, 2, 3, 6, 5)
    elif kind == "conv2d-grouped":
        model = nn.Sequential(nn.Conv2d(4, 6, 3, groups=2, padding=1, stride=2), nn.Flatten(), nn.Linear(6 * 3 * 3, 3))
        x = torch.randn(batch, 4, 5, 5)
    elif kind == "conv2d-depthwise-nobias":
        model = nn.Sequential(nn.Conv2d(3, 6, 2, groups=3, bias=False, dilation=2), nn.Flatten(),
                              nn.Linear(6 * 3 * 3, 3))
        x = torch.randn(batch, 3, 5, 5)
    elif kind == "groupnorm":
        model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))
        x = torch.randn(batch, 1, 5, 5)
    elif kind == "layernorm":
        model = nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6), nn.Linear(6, 3))
        x = torch.randn(batch, 5)
    elif kind == "embedding":
        model = TokenModel()
        x = torch.randint(0, 7, (batch, 4))
        x[0, :2] = 0  # padding positions
        x[1, :] = 3  # one index repeated: the Gram terms across positions matter
    else:
        raise ValueError(kind)
    model = model.double()
    if x.is_floating_point():
        x = x.double()
    y = torch.randint(0, 3, (batch,))
    return model, x, y


LAYER_KINDS = (
    "linear", "linear-sequence", "conv1d", "conv2d", "conv2d-dilated-nobias", "conv2d-grouped",
    "conv2d-depthwise-nobias", "conv3d", "groupnorm", "layernorm", "embedding",
)
