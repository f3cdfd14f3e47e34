"""The contract of a ghost-clipping rule for one layer type, and the registry."""

from __future__ import annotations

from abc import ABC, abstractmethod

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


def ghost_norm_is_cheaper(steps: int, d: int, p: int) -> bool:
    """Whether the Gram trace beats instantiating the ``(p, d)`` per-example gradient, per example.

    The mixed ghost clipping rule of Bu, Mao and Xu (2022, "Scalable and
    efficient training of large convolutional neural networks with
    differential privacy", Section 3): the ghost norm needs two ``T x T`` Gram
    matrices, instantiation one ``p x d`` gradient; take the smaller, so the
    layer's working memory is ``min(2 T^2, p d)`` numbers per example.
    """
    return 2 * steps * steps < p * d


def outer_product_norms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Squared Frobenius norms of ``sum_t g[i, t] a[i, t]^T`` for each i; ``a`` (B,T,d), ``g`` (B,T,p).

    Exact either way; the cheaper formula of :func:`ghost_norm_is_cheaper` is
    used and nothing is kept.
    """
    batch, steps, d = a.shape
    p = g.shape[-1]
    if steps == 1:
        return a.reshape(batch, d).square().sum(1) * g.reshape(batch, p).square().sum(1)
    if ghost_norm_is_cheaper(steps, d, p):
        return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
    return torch.bmm(g.transpose(1, 2), a).square().sum((1, 2))


class OuterProduct(Prepared):
    """A layer whose example-i weight gradient is ``sum_t g[i, t] a[i, t]^T`` (plus ``sum_t g`` for a bias).

    ``a`` is ``(B, T, d)``, ``g`` is ``(B, T, p)``. The norms use
    :func:`outer_product_norms` (mixed ghost clipping); the clipped sum is
    one product ``(c g)^T a`` over all examples and positions at once
    (book-keeping, Bu et al. 2023), so no per-example gradient outlives the
    norm computation.
    """

    def __init__(
        self,
        a: torch.Tensor,
        g: torch.Tensor,
        *,
        weight: bool,
        bias: bool,
        weight_shape: torch.Size,
    ) -> None:
        self.a, self.g, self.weight, self.bias, self.weight_shape = a, g, weight, bias, weight_shape

    def squared_norms(self) -> torch.Tensor:
        total = torch.zeros(self.g.shape[0], dtype=self.g.dtype, device=self.g.device)
        if self.weight:
            total = total + outer_product_norms(self.a, self.g)
        if self.bias:
            total = total + self.g.sum(1).square().sum(1)
        return total

    def clipped_sum(self, factors: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if self.weight:
            scaled = (self.g * factors[:, None, None]).reshape(-1, self.g.shape[-1])
            out["weight"] = (scaled.T @ self.a.reshape(-1, self.a.shape[-1])).reshape(self.weight_shape)
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

