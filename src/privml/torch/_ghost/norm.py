"""Ghost rules for GroupNorm and LayerNorm: their per-example gradients are small, so materialise them.

The affine weight's gradient of example i is ``sum over positions of
x_hat * g`` (``x_hat`` the normalised input) and the bias's is ``sum g``:
one number per channel (GroupNorm) or per normalised element (LayerNorm).
Both normalisations act on each example separately, so they do not mix
examples (unlike BatchNorm).
"""

from __future__ import annotations

from abc import abstractmethod

import torch
import torch.nn.functional as F
from torch import nn

from privml.torch._ghost.base import LayerRule, Materialised, Prepared, trainable


class _AffineNormRule(LayerRule):
    @abstractmethod
    def _normalised(self, module: nn.Module, activation: torch.Tensor) -> torch.Tensor:
        """The normalised input ``x_hat`` (before the affine map)."""

    @abstractmethod
    def _reduce_dims(self, module: nn.Module, activation: torch.Tensor) -> tuple[int, ...]:
        """Dimensions summed to get one gradient entry per affine parameter."""

    def _per_example(
        self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        dims = self._reduce_dims(module, activation)
        out: dict[str, torch.Tensor] = {}
        if trainable(module, "weight"):
            x_hat = self._normalised(module, activation)
            out["weight"] = (x_hat * grad_output).sum(dims) if dims else x_hat * grad_output
        if trainable(module, "bias"):
            out["bias"] = grad_output.sum(dims) if dims else grad_output
        return out

    def prepare(
        self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor, *, tf32: bool = False
    ) -> Prepared:
        del tf32  # no matrix products: the per-example gradients are elementwise products and sums
        return Materialised(self._per_example(module, activation, grad_output))


class GroupNormRule(_AffineNormRule):
    def _normalised(self, module: nn.Module, activation: torch.Tensor) -> torch.Tensor:
        return F.group_norm(activation, module.num_groups, eps=module.eps)  # type: ignore[arg-type]

    def _reduce_dims(self, module: nn.Module, activation: torch.Tensor) -> tuple[int, ...]:
        return tuple(range(2, activation.dim()))  # spatial positions; the channel dim is the parameter's


class LayerNormRule(_AffineNormRule):
    def _normalised(self, module: nn.Module, activation: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(activation, module.normalized_shape, eps=module.eps)  # type: ignore[arg-type]

    def _reduce_dims(self, module: nn.Module, activation: torch.Tensor) -> tuple[int, ...]:
        normalised = len(module.normalized_shape)  # type: ignore[arg-type]
        return tuple(range(1, activation.dim() - normalised))

