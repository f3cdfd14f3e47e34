"""The ghost-clipping pass over a whole model: capture, norms, clipped sum."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from privml.torch.clipping import clip_factors
from privml.torch.ghost.base import LayerRule, Prepared, rule_for


@dataclass
class _Record:
    module: nn.Module
    rule: LayerRule
    activation: torch.Tensor
    output: torch.Tensor
    version: int  # the output's version counter when recorded
    input_version: int


@contextmanager
def exact_float32() -> Iterator[None]:
    """Turn off TF32 in matrix products and cuDNN convolutions for the clipping arithmetic.

    On Ampere and later GPUs, TF32 rounds float32 operands to 10 mantissa
    bits (relative error ~1e-3). The clip factors must come from the norms of
    exactly the per-example gradients that are summed, and the sum must hold
    each example's contribution to within C: with TF32, norms and sums would
    be off by ~1e-3 relative and an example could move the sum by about
    1.001 C, more than the sensitivity the noise is calibrated to. (The
    forward and backward passes may use TF32 or bf16: that changes which
    gradients are computed, not the bound on their clipped sum.)
    """
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _low(t: torch.Tensor) -> bool:
    return t.dtype in (torch.bfloat16, torch.float16)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float32 for a half-precision tensor (autocast): norms, clipping and sums are formed in float32."""
    return t.float() if _low(t) else t


def _sequence_first(module: nn.Module) -> bool:
    """Whether ``module`` (or the attention it wraps, as in ``nn.TransformerEncoderLayer``) is sequence-first."""
    first = getattr(module, "batch_first", None)
    if first is None:
        first = getattr(getattr(module, "self_attn", None), "batch_first", None)
    return first is False


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
        if _sequence_first(module):
            # Its layers see (T, B, ...): the rules would read positions as examples. With T != B the
            # shapes disagree; with T == B the norms would be silently wrong, so refuse outright.
            raise ValueError(
                f"{type(module).__name__} ({name or 'the model'}) runs sequence-first (batch_first=False): ghost "
                "clipping needs the example on dimension 0 of every layer; use batch_first=True or mode='vmap'"
            )
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
    _check_records(records, x.shape[0], by_module)
    outputs = [r.output for r in records]
    raw_grads = torch.autograd.grad(losses.sum(), outputs, allow_unused=True)  # None for an unused output
    del outputs
    grads = [torch.zeros_like(r.output) if g is None else g for r, g in zip(records, raw_grads, strict=True)]
    del raw_grads
    for record in records:
        record.output = None  # type: ignore[assignment]  # the graph is freed; keep no reference to it

    # Norms, factors and sums in float32 or wider, never under a caller's autocast (bf16 passes),
    # and without TF32 products.
    with torch.autocast(losses.device.type, enabled=False), exact_float32():
        return _clipped_sums(records, grads, modules, by_module, losses, clip_norm)


def _check_records(records: list[_Record], batch: int, by_module: dict[int, tuple[str, LayerRule]]) -> None:
    """Refuse a forward pass whose records would give wrong per-example norms (each reason below)."""
    for record in records:
        if record.activation.shape[:1] != (batch,) or record.output.shape[:1] != (batch,):
            # The rules read dimension 0 as the example; anything else would give wrong norms.
            name = by_module[id(record.module)][0] or "the model"
            raise ValueError(
                f"{type(record.module).__name__} ({name}) saw input {tuple(record.activation.shape)} and output "
                f"{tuple(record.output.shape)} for a batch of {batch}: ghost clipping needs the example on "
                "dimension 0 of every layer; use mode='vmap'"
            )
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


def _clipped_sums(
    records: list[_Record],
    grads: list[torch.Tensor],
    modules: list[tuple[str, nn.Module, LayerRule]],
    by_module: dict[int, tuple[str, LayerRule]],
    losses: torch.Tensor,
    clip_norm: float,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per-example norms over all layers, then the clipped sum of each layer (book-keeping)."""
    # Layer by layer, so only one layer's transient working memory (patches, Gram matrices,
    # instantiated per-example gradients) is alive at a time (Bu, Mao and Xu 2022). A layer
    # recorded in half precision is upcast for each pass instead of keeping float32 copies.
    def prepare(i: int) -> Prepared:
        record = records[i]
        return record.rule.prepare(record.module, _wide(record.activation), _wide(grads[i]))

    kept: list[Prepared | None] = []
    squared = torch.zeros(losses.shape[0], dtype=torch.float32 if _low(losses) else losses.dtype, device=losses.device)
    for i, record in enumerate(records):
        layer = prepare(i)
        squared = squared + layer.squared_norms()
        kept.append(None if _low(record.activation) or _low(grads[i]) else layer)
    norms = squared.clamp(min=0).sqrt()
    factors = clip_factors(norms, clip_norm)

    sums: dict[str, torch.Tensor] = {}
    for i, record in enumerate(records):
        prefix = by_module[id(record.module)][0]
        layer = kept[i] or prepare(i)
        for attr, value in layer.clipped_sum(factors).items():
            sums[f"{prefix}.{attr}" if prefix else attr] = value
        kept[i] = None  # free this layer's inputs and gradients
        grads[i] = None  # type: ignore[call-overload]
    for name, module, _ in modules:
        # A layer that did not run in this forward pass contributes nothing (zero gradient).
        for attr, param in module.named_parameters(recurse=False):
            key = f"{name}.{attr}" if name else attr
            if param.requires_grad and key not in sums:
                sums[key] = torch.zeros_like(param)
    return sums, norms
