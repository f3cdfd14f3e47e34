"""Ghost rule for :class:`torch.nn.Linear`: the gradient of example i is ``sum_t g_t a_t^T``."""

from __future__ import annotations

import torch
from torch import nn

from privml.torch._ghost.base import LayerRule, OuterProduct, Prepared, trainable
from privml.torch._ghost.precision import round_to_tf32


class LinearRule(LayerRule):
    def prepare(
        self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor, *, tf32: bool = False
    ) -> Prepared:
        assert isinstance(module, nn.Linear)  # rules are looked up by exact type
        batch = activation.shape[0]
        # Every dimension between the batch and the features (sequence positions) is summed over.
        a = activation.reshape(batch, -1, activation.shape[-1])
        g = grad_output.reshape(batch, -1, grad_output.shape[-1])
        if tf32:  # every product below (instantiation, Gram matrices, the sum) multiplies these
            a, g = round_to_tf32(a), round_to_tf32(g)
        return OuterProduct(
            a, g, weight=trainable(module, "weight"), bias=trainable(module, "bias"), weight_shape=module.weight.shape,
            tf32=tf32,
        )

