"""The contract of a ghost-clipping rule for one layer type, and the registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import nn


class Prepared(ABC):
    """One layer's per-example quantities for one micro-batch, computed once and reused."""

    @abstractmethod
    def squared_norms(self) -> torch.Tensor:
        """``(B,)``: squared L2 norm of the gradient of all the layer's trainable parameters, per example."""

    @abstractmethod
    def clipped_sum(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        """``sum_i factors[i] * grad_i`` for each trainable parameter, by its attribute name."""


class LayerRule(ABC):
    """Ghost clipping of one layer type.

    ``activation`` is the layer's input and ``grad_output`` the gradient of
    the *sum* of the per-example losses in the layer's output; because no
    supported model mixes examples (see :mod:`privml.torch.validation`), row
    ``i`` of ``grad_output`` is the gradient of example ``i``'s loss alone.
    """

    @abstractmethod
    def prepare(self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor) -> Prepared:
        """The per-example norms and the means to form the clipped sum for this micro-batch."""

    def check(self, module: nn.Module) -> None:  # a hook with a default: most rules accept every configuration
        """Raise :class:`ValueError` for a configuration this rule cannot handle."""
        return None


class OuterProduct(Prepared):
    """A layer whose example-i weight gradient is ``sum_t g[i, t] a[i, t]^T`` (plus ``sum_t g`` for a bias).

    ``a`` is ``(B, T, d)``, ``g`` is ``(B, T, p)``. The squared norm takes the
    cheaper of two exact formulas (Bu, Mao and Xu 2022, "mixed ghost
    clipping"): the Gram trace ``sum_{t,s} (a_t . a_s)(g_t . g_s)`` costs
    O(B T^2 (d + p)); materialising the ``(p, d)`` per-example gradients costs
    O(B T d p), and then the clipped sum reuses them.
    """

    def __init__(
        self,
        a: torch.Tensor,
        g: torch.Tensor,
        *,
        weight: bool,
        bias: bool,
        weight_shape: torch.Size,
        to_weight: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.a, self.g, self.weight, self.bias, self.weight_shape = a, g, weight, bias, weight_shape
        # Maps a (p, d) gradient to the parameter's layout, when ``a``'s features are in another order.
        self.to_weight = to_weight or (lambda w: w.reshape(weight_shape))
        self.per_example: torch.Tensor | None = None

    def squared_norms(self) -> torch.Tensor:
        a, g = self.a, self.g
        batch, steps, d = a.shape
        p = g.shape[-1]
        total = torch.zeros(batch, dtype=g.dtype, device=g.device)
        if self.weight:
            if steps == 1:
                total = total + a.reshape(batch, d).square().sum(1) * g.reshape(batch, p).square().sum(1)
            elif steps * steps * (d + p) < steps * d * p:
                total = total + (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
            else:
                self.per_example = torch.bmm(g.transpose(1, 2), a)
                total = total + self.per_example.square().sum((1, 2))
        if self.bias:
            total = total + g.sum(1).square().sum(1)
        return total

    def clipped_sum(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if self.weight:
            if self.per_example is not None:
                total = torch.tensordot(factors, self.per_example, dims=1)
            else:
                scaled = (self.g * factors[:, None, None]).reshape(-1, self.g.shape[-1])
                total = scaled.T @ self.a.reshape(-1, self.a.shape[-1])
            out["weight"] = self.to_weight(total)
        if self.bias:
            out["bias"] = factors @ self.g.sum(1)
        return out


_RULES: dict[type[nn.Module], LayerRule] = {}


def register(layer_type: type[nn.Module], rule: LayerRule) -> None:
    _RULES[layer_type] = rule


def rule_for(module: nn.Module) -> LayerRule | None:
    """The rule for ``module``'s exact type (subclasses may change the forward, so they are not matched)."""
    _load_rules()
    return _RULES.get(type(module))


def supported_types() -> tuple[type[nn.Module], ...]:
    _load_rules()
    return tuple(_RULES)


def _load_rules() -> None:
    if _RULES:
        return
    # Imported for their registration side effect, late to avoid an import cycle.
    from privml.torch.ghost import conv, embedding, linear, norm  # noqa: F401


def trainable(module: nn.Module, name: str) -> bool:
    param = getattr(module, name, None)
    return isinstance(param, nn.Parameter) and param.requires_grad


def outer_product_norms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Squared Frobenius norms of ``sum_t g[i, t] a[i, t]^T`` for each i; ``a`` (B,T,d), ``g`` (B,T,p)."""
    return OuterProduct(a, g, weight=True, bias=False, weight_shape=torch.Size()).squared_norms()
