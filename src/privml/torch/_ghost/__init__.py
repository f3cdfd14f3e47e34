"""Ghost clipping: per-example gradient norms without per-example gradients.

For a layer whose weight gradient is a sum of outer products of its input
``a`` and the gradient ``g`` of the loss in its output, the per-example
gradient norms follow from ``a`` and ``g`` alone (Goodfellow 2015; Li,
Tramer, Liang and Hashimoto 2022, "ghost clipping"; Bu, Mao and Xu 2022,
mixed ghost clipping). Given the clip factors ``c_i = min(1, C / ||g_i||)``
of the *whole* per-example gradient, the clipped sum ``sum_i c_i g_i`` of a
layer is again one product of ``a`` and ``c * g``: the "book-keeping"
variant of Bu, Mao, Xu et al. (2023) that replaces the second backward pass
of the original ghost clipping by this product.

Memory. The backward pass runs to a tap on each layer's output (see
:mod:`privml.torch._ghost.engine`), which hands the layer its output gradient
as soon as it is complete; the layer's norms are formed then, and the layer
keeps the smaller of its per-example gradients (GroupNorm, LayerNorm, and
convolutions on large images, whose norms instantiate them anyway) and its
input and output gradient. Input patches are formed by chunks of examples.
A step's peak tensor memory is then close to non-private training's, and
below both of Opacus's modes (measured on the CPU, BENCHMARKS.md).

One module per layer type, each with a :class:`~privml.torch._ghost.base.LayerRule`
whose ``prepare`` returns the per-example norms and the clipped sum (the table of
:mod:`privml.torch._ghost.rules`):

==============  ========================================  ============================
layer           per-example squared norm                  clipped sum
==============  ========================================  ============================
Linear          ``||a||^2 ||g||^2``, or the Gram trace    ``(c g)^T a``
Conv1d/2d/3d    the same on unfolded input patches        the backward kernel, or the
                (per group, summed, when grouped)         kept gradients' weighted sum
GroupNorm       materialised (C numbers per example)      weighted sum
LayerNorm       materialised                              weighted sum
Embedding       Gram trace masked by equal indices        ``index_add`` of ``c g``
==============  ========================================  ============================
"""

from __future__ import annotations

from privml.torch._ghost.base import LayerRule
from privml.torch._ghost.engine import ghost_clipped_sum
from privml.torch._ghost.rules import rule_for, supported_types

__all__ = ["LayerRule", "ghost_clipped_sum", "rule_for", "supported_types"]
