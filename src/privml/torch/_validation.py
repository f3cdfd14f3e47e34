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
:class:`~privml.torch.DPMultiheadAttention`, the same function
built from ``nn.Linear`` layers (outputs unchanged, as Opacus does).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from privml.exceptions import PrivmlError
from privml.torch._attention import DPMultiheadAttention
from privml.torch._ghost.row_probe import fixed_randomness, rows_moved

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
_INSTANCE_NORMS = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)
# Lazy modules (LazyLinear, LazyBatchNorm...) have no shape yet: nothing to check or clip.
_LAZY = nn.modules.lazy.LazyModuleMixin


class UnsupportedModuleError(PrivmlError, ValueError):
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


def check_examples_independent(
    model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> None:
    """Raise if changing one example of a batch changes another example's output or loss.

    Ghost clipping reads row i of the gradient of ``sum_j loss_j`` as example
    i's gradient, true only if nothing mixes examples. :func:`find_problems`
    knows layer types, not what a model's own ``forward`` or the loss does
    (``x - x.mean(0)``, a loss minus its batch mean): a review measured such
    a model moving the released sum by 9 C. So before the first ghost step
    the model and the loss are run on three synthetic examples, twice, the
    first one changed the second time, and the other two rows must not
    move. Only the shapes and dtypes of ``x`` and ``y`` are read (public),
    never their values (:func:`_probe_inputs`), with targets 0. Both runs
    share one random state, torch's, numpy's and Python's (dropout draws
    the same masks), and record no gradient; outputs that are not finite
    must be so in both runs. A check of gross mixing, not a proof: a model
    that fails on the synthetic inputs is not checked, and a mixing term
    below the tolerance is not seen. ``mode="auto"`` does not switch to
    vmap on this refusal: under vmap such a model computes another function.

    Raises
    ------
    ValueError
        naming what moved (the model's output or the loss).
    """
    targets = torch.zeros((3, *y.shape[1:]), dtype=y.dtype, device=x.device)
    runs = None
    for rows, changed in _probe_inputs(x):
        runs = [_run_seeded(model, loss_fn, inputs, targets) for inputs in (rows, changed)]
        if None not in runs:
            break
    if runs is None or None in runs:
        return  # synthetic inputs this model cannot take: nothing is checked
    (out_a, loss_a), (out_b, loss_b) = runs  # type: ignore[misc]
    for what, first, second in (("output", out_a, out_b), ("loss", loss_a, loss_b)):
        comparable = isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and first.dim() > 0
        if comparable and first.shape[0] == 3 and rows_moved(first[1:], second[1:]):  # type: ignore[union-attr,index]
            raise ValueError(
                f"changing one example of a batch changed another example's {what}: the model or the loss mixes "
                "examples (batch statistics, a batch mean), so per-example clipping would not bound one record's "
                "effect; remove the cross-example operation, or use mode='vmap', which runs each example alone"
            )


def _probe_inputs(x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Pairs of three synthetic rows shaped like ``x``'s, the first row changed: tried in turn until one runs.

    Non-negative values in [0, 1) for floating-point data (features read
    through a log or a square root stay finite); token ids 1 and 2 for
    integer data (0 is often padding, and a row of padding only can be NaN
    under attention), then 0 and 1 for a vocabulary of two.
    """
    shape, device = (3, *x.shape[1:]), x.device
    if x.is_floating_point():
        rows = torch.rand(shape, generator=torch.Generator(device=device).manual_seed(0), device=device, dtype=x.dtype)
        changed = rows.clone()
        changed[0] = 1.0 - rows[0]
        return [(rows, changed)]
    pairs = []
    for low, high in ((1, 2), (0, 1)):
        rows = torch.full(shape, low, dtype=x.dtype, device=device)
        rows[1] = high
        changed = rows.clone()
        changed[0] = high
        pairs.append((rows, changed))
    return pairs


def _run_seeded(
    model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], inputs: torch.Tensor,
    targets: torch.Tensor,
) -> tuple[object, object] | None:
    """``(outputs, losses)`` under one fixed random state (torch, numpy, Python), or None if the model refuses."""
    try:
        with fixed_randomness(inputs.device), torch.no_grad():
            outputs = model(inputs)
            return outputs, loss_fn(outputs, targets)
    except Exception:  # noqa: BLE001 - synthetic inputs this model cannot take
        return None


def _groups(channels: int, preferred: int) -> int:
    # The largest divisor of the channel count not above the preferred number of groups.
    return max(g for g in range(1, min(preferred, channels) + 1) if channels % g == 0) if channels else 1


def fix_model(model: nn.Module, *, groups: int = 32) -> nn.Module:
    """Replace, in place, every BatchNorm by a GroupNorm, drop InstanceNorm running statistics, swap attention.

    Each ``BatchNorm*d(C)`` becomes ``GroupNorm(g, C)`` with ``g`` the largest
    divisor of C not above ``groups`` (32 following Wu and He 2018), keeping
    ``eps`` and ``affine``; trained BatchNorm weights are not carried over (the
    normalisations differ). Each ``nn.MultiheadAttention`` becomes
    :meth:`DPMultiheadAttention.from_torch(mha) <privml.torch._attention.DPMultiheadAttention.from_torch>`,
    which keeps its weights, so the model computes the same outputs; an
    ``nn.TransformerEncoder`` around it stops converting padded inputs to
    nested tensors in evaluation (that fast path needs the fused
    projection). Returns the model (a bare module is returned as its
    replacement).

    Raises
    ------
    ValueError
        for a MultiheadAttention with ``add_bias_kv`` or ``add_zero_attn``
        (:class:`~privml.torch.DPMultiheadAttention` has no equivalent).
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


__all__ = ["UnsupportedModuleError", "check_examples_independent", "find_problems", "fix_model", "validate_model"]
