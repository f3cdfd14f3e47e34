"""Which :class:`~privml.torch._ghost.base.LayerRule` handles a layer: one table over the rule modules.

A layer is matched by its exact type: a subclass may change the forward, so it is not.
"""

from __future__ import annotations

from torch import nn

from privml.torch._ghost.base import LayerRule
from privml.torch._ghost.conv import ConvRule
from privml.torch._ghost.embedding import EmbeddingRule
from privml.torch._ghost.linear import LinearRule
from privml.torch._ghost.norm import GroupNormRule, LayerNormRule

__all__ = ["rule_for", "supported_types"]

_RULES: dict[type[nn.Module], LayerRule] = {
    nn.Linear: LinearRule(),
    nn.Conv1d: ConvRule(),
    nn.Conv2d: ConvRule(),
    nn.Conv3d: ConvRule(),
    nn.Embedding: EmbeddingRule(),
    nn.GroupNorm: GroupNormRule(),
    nn.LayerNorm: LayerNormRule(),
}


def rule_for(module: nn.Module) -> LayerRule | None:
    """The rule for ``module``'s exact type, or None: ghost clipping does not know the layer."""
    return _RULES.get(type(module))


def supported_types() -> tuple[type[nn.Module], ...]:
    """The layer types ghost clipping knows."""
    return tuple(_RULES)
