"""Reject layers DP-SGD cannot train privately, and offer the fix (BatchNorm -> GroupNorm, MHA -> DP MHA).

Per-example clipping bounds the sensitivity of the clipped sum only if
example i's gradient depends on example i alone. A layer that normalises
with statistics of the batch (BatchNorm in training mode, SyncBatchNorm)
breaks this: removing one example changes every other example's gradient,
so the add/remove-one sensitivity C of Abadi et al. (2016) no longer holds.
Normalisation layers with running statistics (BatchNorm, InstanceNorm with
``track_running_stats``) also store averages of the private data in their
buffers, released with the model without clipping or noise.

:class:`torch.nn.MultiheadAttention` does not mix examples, but keeps its
query, key and value projections in one fused ``in_proj_weight`` used by a
functional kernel, not in ``nn.Linear`` layers, so the per-example gradient
rules of ghost clipping do not know it. :func:`fix_model` swaps it for
:class:`~privml.torch.attention.DPMultiheadAttention`, the same function
built from ``nn.Linear`` layers (outputs unchanged, as Opacus does).
"""

from __future__ import annotations

from torch import nn

from privml.torch.attention import DPMultiheadAttention

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
_INSTANCE_NORMS = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)
# Lazy modules (LazyLinear, LazyBatchNorm...) have no shape yet: nothing to check or clip.
_LAZY = nn.modules.lazy.LazyModuleMixin


class UnsupportedModuleError(ValueError):
    """A model contains layers that DP-SGD cannot train privately; ``problems`` lists them."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            "the model cannot be trained with DP-SGD:\n  - "
            + "\n  - ".join(problems)
            + "\nprivml.torch.fix_model(model) replaces every BatchNorm by a GroupNorm "
            "(and InstanceNorm with running statistics by one without), and every MultiheadAttention "
            "by an equivalent DPMultiheadAttention."
        )


def find_problems(model: nn.Module) -> list[str]:
    """Human-readable reasons why ``model`` cannot be trained with per-example clipping (empty if none)."""
    problems = []
    module: nn.Module  # torch leaves named_modules() unannotated
    for name, module in model.named_modules():
        where = name or "the model"
        if isinstance(module, _BATCH_NORMS):
            problems.append(
                f"{where}: {type(module).__name__} normalises with batch statistics, so it mixes examples "
                "(one example's gradient depends on the others) and its running averages leak"
            )
        elif isinstance(module, nn.MultiheadAttention):
            problems.append(
                f"{where}: MultiheadAttention keeps its query/key/value projections in one fused in_proj "
                "parameter, not in Linear layers the per-example gradient rules know; fix_model swaps it for "
                "privml.torch.DPMultiheadAttention (same outputs)"
            )
        elif isinstance(module, _INSTANCE_NORMS) and module.track_running_stats:
            problems.append(f"{where}: {type(module).__name__}(track_running_stats=True) stores unprivatised averages")
        elif isinstance(module, _LAZY) and module.has_uninitialized_params():
            problems.append(f"{where}: {type(module).__name__} is uninitialised; run one forward pass first")
    return problems


def validate_model(model: nn.Module) -> nn.Module:
    """Return ``model`` if every layer acts on each example alone; raise otherwise.

    Raises
    ------
    UnsupportedModuleError
        listing every offending layer and naming the fix, :func:`fix_model`.
    """
    problems = find_problems(model)
    if problems:
        raise UnsupportedModuleError(problems)
    return model


def _groups(channels: int, preferred: int) -> int:
    # The largest divisor of the channel count not above the preferred number of groups.
    return max(g for g in range(1, min(preferred, channels) + 1) if channels % g == 0) if channels else 1


def fix_model(model: nn.Module, *, groups: int = 32) -> nn.Module:
    """Replace, in place, every BatchNorm by a GroupNorm, drop InstanceNorm running statistics, swap attention.

    Each ``BatchNorm*d(C)`` becomes ``GroupNorm(g, C)`` with ``g`` the largest
    divisor of C not above ``groups`` (32 following Wu and He 2018), keeping
    ``eps`` and ``affine``; trained BatchNorm weights are not carried over (the
    normalisations differ). Each ``nn.MultiheadAttention`` becomes
    :meth:`DPMultiheadAttention.from_torch(mha) <privml.torch.attention.DPMultiheadAttention.from_torch>`,
    which keeps its weights, so the model computes the same outputs; an
    ``nn.TransformerEncoder`` around it stops converting padded inputs to
    nested tensors in evaluation (that fast path needs the fused
    projection). Returns the model (a bare module is returned as its
    replacement).

    Raises
    ------
    ValueError
        for a MultiheadAttention with ``add_bias_kv`` or ``add_zero_attn``
        (:class:`~privml.torch.attention.DPMultiheadAttention` has no equivalent).
    """
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    replacement = _replacement(model, groups)
    if replacement is not None:
        return replacement
    for name, child in list(model.named_children()):
        new = _replacement(child, groups)
        if new is not None:
            setattr(model, name, new)
        else:
            fix_model(child, groups=groups)
    if isinstance(model, nn.TransformerEncoder) and any(
        isinstance(getattr(layer, "self_attn", None), DPMultiheadAttention) for layer in model.layers
    ):
        # Decided at construction from the fused MultiheadAttention; in eval mode with a padding mask it
        # would feed nested tensors to the layers, which DPMultiheadAttention does not accept.
        model.use_nested_tensor = False
    return model


def _replacement(module: nn.Module, groups: int) -> nn.Module | None:
    if isinstance(module, _BATCH_NORMS):
        channels = module.num_features
        return nn.GroupNorm(_groups(channels, groups), channels, eps=module.eps, affine=module.affine)
    if isinstance(module, nn.MultiheadAttention):
        return DPMultiheadAttention.from_torch(module)
    if isinstance(module, _INSTANCE_NORMS) and module.track_running_stats:
        return type(module)(module.num_features, eps=module.eps, affine=module.affine, track_running_stats=False)
    return None


__all__ = ["UnsupportedModuleError", "find_problems", "fix_model", "validate_model"]
