"""The ghost-clipping pass over a whole model: capture, norms, clipped sum."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from privml.torch.clipping import clip_factors
from privml.torch.ghost.base import LayerRule, rule_for


@dataclass
class _Record:
    module: nn.Module
    rule: LayerRule
    activation: torch.Tensor
    output: torch.Tensor
    version: int  # the output's version counter when recorded
    input_version: int


def ghost_modules(model: nn.Module) -> list[tuple[str, nn.Module, LayerRule]]:
    """Modules holding trainable parameters, with their rules; raise if one has no rule.

    Raises
    ------
    ValueError
        naming the first module whose parameters ghost clipping cannot
        handle (use ``mode="vmap"``, which handles any layer).
    """
    found = []
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        rule = rule_for(module)
        if rule is None:
            raise ValueError(
                f"ghost clipping has no rule for {type(module).__name__} ({name or 'the model'}) with trainable "
                "parameters; use mode='vmap' (torch.func per-example gradients, any layer)"
            )
        rule.check(module)
        found.append((name, module, rule))
    return found


def ghost_clipped_sum(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    clip_norm: float,
    modules: list[tuple[str, nn.Module, LayerRule]] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Sum over the batch of the per-example gradients, each clipped as a whole to ``clip_norm``.

    One forward pass records every parameterised layer's input and output;
    one backward pass to those outputs (not to the parameters) gives the
    per-example output gradients; the rules turn them into per-example
    squared norms, summed over layers into ``||g_i||^2`` of the whole
    gradient, and then into the clipped sum ``sum_i c_i g_i`` layer by layer
    (ghost clipping, Li et al. 2022; book-keeping, Bu et al. 2023).

    Parameters
    ----------
    model:
        A module that does not mix examples (validated by the caller).
    loss_fn:
        Per-example losses, shape ``(B,)``, from outputs and targets.
    x, y:
        A non-empty micro-batch.
    clip_norm:
        C > 0.
    modules:
        The result of :func:`ghost_modules` (recomputed if omitted).

    Returns
    -------
    sums:
        ``{parameter name: sum_i c_i g_i}`` with ``c_i = min(1, C / ||g_i||)``.
    norms:
        ``||g_i||`` of each example's whole gradient, shape ``(B,)``.

    Notes
    -----
    Privacy: each clipped term has L2 norm at most C over all parameters
    together, so the sum has L2 sensitivity C under add/remove-one
    neighbours (Abadi et al. 2016). The identity "row i of the output
    gradient of sum_j loss_j is the gradient of loss_i" holds only for
    models in which no layer mixes examples, which the validator enforces.
    """
    if modules is None:
        modules = ghost_modules(model)
    by_module = {id(m): (name, rule) for name, m, rule in modules}
    records: list[_Record] = []

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        activation = inputs[0]
        records.append(
            _Record(module, by_module[id(module)][1], activation.detach(), output, output._version, activation._version)
        )

    handles = [m.register_forward_hook(hook) for _, m, _ in modules]
    try:
        losses = loss_fn(model(x), y)
    finally:
        for handle in handles:
            handle.remove()
    if losses.shape != (x.shape[0],):
        raise ValueError(f"loss_fn must return one loss per example, shape ({x.shape[0]},), got {tuple(losses.shape)}")
    seen = [id(r.module) for r in records]
    if len(set(seen)) != len(seen):
        raise ValueError(
            "a parameterised module ran more than once in one forward pass (shared weights); "
            "its per-example norm is not the sum of per-use norms: use mode='vmap'"
        )
    for record in records:
        if record.output._version != record.version or record.activation._version != record.input_version:
            # An in-place op (e.g. ReLU(inplace=True)) rewrote the output: the gradient we would get
            # is the gradient in the *next* op's output, and the norms would be silently wrong.
            name = by_module[id(record.module)][0] or "the model"
            raise ValueError(
                f"the input or output of {type(record.module).__name__} ({name}) was modified in place after the layer "
                "ran; "
                "use out-of-place activations (inplace=False) or mode='vmap'"
            )
    outputs = [r.output for r in records]
    raw_grads = torch.autograd.grad(losses.sum(), outputs, allow_unused=True)  # None for an unused output
    grads = [torch.zeros_like(o) if g is None else g for o, g in zip(outputs, raw_grads, strict=True)]

    prepared = [r.rule.prepare(r.module, r.activation, g) for r, g in zip(records, grads, strict=True)]
    squared = torch.zeros(x.shape[0], dtype=losses.dtype, device=losses.device)
    for layer in prepared:
        squared = squared + layer.squared_norms()
    norms = squared.clamp(min=0).sqrt()
    factors = clip_factors(norms, clip_norm).to(losses.dtype)

    sums: dict[str, torch.Tensor] = {}
    for record, layer in zip(records, prepared, strict=True):
        prefix = by_module[id(record.module)][0]
        for attr, value in layer.clipped_sum(factors).items():
            sums[f"{prefix}.{attr}" if prefix else attr] = value
    for name, module, _ in modules:
        # A layer that did not run in this forward pass contributes nothing (zero gradient).
        for attr, param in module.named_parameters(recurse=False):
            key = f"{name}.{attr}" if name else attr
            if param.requires_grad and key not in sums:
                sums[key] = torch.zeros_like(param)
    return sums, norms
