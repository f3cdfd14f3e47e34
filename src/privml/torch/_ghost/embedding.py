"""Ghost rule for :class:`torch.nn.Embedding`.

Example i's gradient is ``sum_t e_{k_t} g_t^T`` (row ``k_t`` of the table
receives ``g_t``), so its squared norm is ``sum_{t,s} [k_t = k_s] g_t . g_s``
and the clipped sum is an ``index_add`` of the scaled output gradients.
"""

from __future__ import annotations

import torch
from torch import nn

from privml.torch._ghost.base import LayerRule, Prepared, trainable
from privml.torch._ghost.precision import gram_norm_slack, round_to_tf32


class EmbeddingRule(LayerRule):
    parameters = ("weight",)

    def check(self, module: nn.Module) -> None:
        assert isinstance(module, nn.Embedding)
        if module.max_norm is not None or module.scale_grad_by_freq or module.sparse:
            raise ValueError("ghost clipping supports Embedding without max_norm, scale_grad_by_freq or sparse")

    def _flatten(
        self, module: nn.Embedding, indices: torch.Tensor, grad_output: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = indices.shape[0]
        keys = indices.reshape(batch, -1)
        g = grad_output.reshape(batch, keys.shape[1], -1)
        padding = module.padding_idx
        if padding is not None:
            # PyTorch gives the padding row no gradient, whatever flows back to it.
            g = g * (keys != padding).unsqueeze(-1).to(g.dtype)
        return keys, g

    def prepare(
        self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor, *, tf32: bool = False
    ) -> Prepared:
        assert isinstance(module, nn.Embedding)  # rules are looked up by exact type
        keys, g = self._flatten(module, activation, grad_output)
        if tf32:  # the norms' Gram products multiply g; the sum is an index_add, without products
            g = round_to_tf32(g)
        return _EmbeddingPrepared(module, keys, g, trainable(module, "weight"))


class _EmbeddingPrepared(Prepared):
    def __init__(self, module: nn.Embedding, keys: torch.Tensor, g: torch.Tensor, weight: bool) -> None:
        self.module, self.keys, self.g, self.weight = module, keys, g, weight
        self._squared: torch.Tensor | None = None

    def squared_norms(self) -> torch.Tensor:
        keys, g = self.keys, self.g
        if not self.weight:
            return torch.zeros(keys.shape[0], dtype=g.dtype, device=g.device)
        same = (keys.unsqueeze(2) == keys.unsqueeze(1)).to(g.dtype)
        self._squared = (torch.bmm(g, g.transpose(1, 2)) * same).sum((1, 2))
        return self._squared

    def norm_slack(self) -> torch.Tensor | None:
        # A Gram trace whose one-hot inputs have norm 1: positions of one key can cancel (g and -g), and the
        # index_add of the sum adds them exactly as they are.
        if not self.weight:
            return None
        assert self._squared is not None  # squared_norms ran
        s = torch.linalg.vector_norm(self.g, dim=-1).sum(1)
        return gram_norm_slack(self._squared, s, d=1, p=self.g.shape[-1], steps=self.g.shape[1])

    def clipped_sum(self, factors: torch.Tensor, *, tf32: bool = False) -> dict[str, torch.Tensor]:
        del tf32  # no matrix product: the same either way
        if not self.weight:
            return {}
        scaled = (self.g * factors[:, None, None]).reshape(-1, self.g.shape[-1])
        weight = self.module.weight
        total = torch.zeros_like(weight)
        return {"weight": total.index_add_(0, self.keys.reshape(-1), scaled.to(weight.dtype))}

