"""The ghost-clipping pass over a whole model: capture, norms, clipped sum."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from privml.torch._clipping import clip_factors, drop_rows, rows_must_be_dropped
from privml.torch._ghost.base import LayerRule, Prepared
from privml.torch._ghost.precision import CLIP_PRECISIONS, exact_float32, tf32_products
from privml.torch._ghost.rules import rule_for
from privml.torch._phases import phase


@dataclass
class _Layer:
    """A parameterised layer as recorded in the forward pass, and what its clipped sum needs after its backward."""

    module: nn.Module
    rule: LayerRule
    activation: torch.Tensor | None  # the layer's input (detached); dropped once a compact form is kept
    input_version: int  # the input's version counter when recorded
    output_shape: torch.Size
    kept: Prepared | None = None  # set when the output gradient arrives
    grad: torch.Tensor | None = None  # the raw output gradient, kept only to re-prepare a half-precision layer
    tf32: bool = False  # whether its norms and sum use the "tf32" arithmetic (set with its norms)
    dtype: torch.dtype | None = None  # the dtype its norms and sum are formed in (set with its norms)

    @property
    def received(self) -> bool:
        """Whether its output gradient arrived (a layer keeps one of the two once it has)."""
        return self.kept is not None or self.grad is not None


class _Tap(torch.autograd.Function):
    """The identity on a layer's output whose backward hands the output gradient to the engine.

    Every tap also takes the same scalar ``anchor`` leaf; the backward pass
    asks for the anchor's gradient only, so autograd runs every node between
    the losses and the taps, computes input gradients but no parameter
    gradients, and captures nothing larger than a scalar: each output
    gradient lives only until its layer's norms are formed. (Asking for the
    outputs' gradients instead, as ``autograd.grad`` does, holds all of them
    until the pass ends, and the outputs themselves from the forward pass.)
    """

    @staticmethod
    def forward(
        ctx: Any, output: torch.Tensor, anchor: torch.Tensor, receive: Callable[[torch.Tensor], None]
    ) -> torch.Tensor:
        del anchor
        ctx.receive = receive
        return output  # returned as-is: autograd makes it a view, so an in-place change of it is an error

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.receive(grad)
        return grad, None, None


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
    owners: dict[int, str] = {}  # id of each trainable parameter -> the module that holds it
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
        label = f"{type(module).__name__} ({name or 'the model'})"
        extra = [attr for attr, p in module.named_parameters(recurse=False) if p.requires_grad
                 and attr not in rule.parameters]
        if extra:
            # The rule forms the gradients of its own parameters only: another one would be released as zero.
            raise ValueError(f"{label} holds trainable parameters its ghost rule does not cover ({', '.join(extra)}); "
                             "use mode='vmap'")
        for p in own:
            if id(p) in owners:
                # Tied weights: each module's norm and sum would cover its own use only (the example's norm is of
                # the sum of both uses' gradients, and one module's sum would replace the other's).
                raise ValueError(f"{label} shares a trainable parameter with {owners[id(p)]} (tied weights); "
                                 "use mode='vmap'")
            owners[id(p)] = label
        found.append((name, module, rule))
    return found


def ghost_clipped_sum(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    clip_norm: float,
    modules: list[tuple[str, nn.Module, LayerRule]] | None = None,
    *,
    clip_precision: str = "fp32",
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Sum over the batch of the per-example gradients, each clipped as a whole to ``clip_norm``.

    One forward pass records every parameterised layer's input and taps its
    output; one backward pass to the taps (not to the parameters) hands each
    layer its per-example output gradients as they arrive, and the layer's
    rule turns them into per-example squared norms at once, summed over
    layers into ``||g_i||^2`` of the whole gradient. Each layer then keeps
    the smaller of its per-example gradients and its input and output
    gradient, from which the clipped sum ``sum_i c_i g_i`` is formed layer
    by layer once the factors are known (ghost clipping, Li et al. 2022;
    mixed ghost clipping, Bu, Mao and Xu 2022; book-keeping, Bu et al. 2023).

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
    clip_precision:
        The arithmetic of the norms and sums (:mod:`privml.torch._ghost.precision`):
        ``"fp32"`` (default), or ``"tf32"``: operands rounded to TF32 by
        privml, products on TF32 tensor cores, and each example clipped over
        its norm plus a bound on the sum's rounding.

    Returns
    -------
    sums:
        ``{parameter name: sum_i c_i g_i}`` with ``c_i = min(1, C / N_i)``,
        ``N_i`` the norm ``||g_i||`` plus, layer by layer, a bound on the
        floating-point error that could hide part of it
        (:meth:`~privml.torch._ghost.base.Prepared.norm_slack`).
    norms:
        ``||g_i||`` of each example's whole gradient, shape ``(B,)`` (private: a diagnostic).

    Notes
    -----
    Privacy: each clipped term has L2 norm at most C over all parameters
    together, so the sum has L2 sensitivity C under add/remove-one
    neighbours (Abadi et al. 2016). The identity "row i of the output
    gradient of sum_j loss_j is the gradient of loss_i" holds only if
    nothing mixes examples (:mod:`privml.torch._validation`). An example
    whose norm is not finite adds exactly nothing (factor 0, rows zeroed).
    """
    if clip_precision not in CLIP_PRECISIONS:
        raise ValueError(f"clip_precision must be one of {', '.join(CLIP_PRECISIONS)}, got {clip_precision!r}")
    if modules is None:
        modules = ghost_modules(model)
    ghost_pass = _GhostPass(modules, x.shape[0], x.device, tf32=clip_precision == "tf32")
    try:
        losses = ghost_pass.forward(model, loss_fn, x, y)
        if losses.shape != (x.shape[0],):
            raise ValueError(
                f"loss_fn must return one loss per example, shape ({x.shape[0]},), got {tuple(losses.shape)}"
            )
        if ghost_pass.layers and not losses.requires_grad:
            # Under torch.no_grad() no output is tapped and every sum would silently be zero.
            raise ValueError("the losses do not depend on the model's parameters: is the step running under "
                             "torch.no_grad() or inference_mode()?")
        ghost_pass.check()
        return ghost_pass.backward(losses, clip_norm)
    finally:
        ghost_pass.layers.clear()  # a failed pass keeps no inputs or gradients alive


class _GhostPass:
    """One micro-batch's forward pass with taps, its backward pass, and the layer-by-layer clipped sums."""

    def __init__(
        self, modules: list[tuple[str, nn.Module, LayerRule]], batch: int, device: torch.device, *, tf32: bool = False
    ) -> None:
        self.modules = modules
        self.tf32 = tf32
        self.by_module = {id(m): (name, rule) for name, m, rule in modules}
        self.batch = batch
        self.layers: list[_Layer] = []
        # The anchor every tap takes (see _Tap); its own gradient is never formed.
        self.anchor = torch.zeros((), device=device, requires_grad=True)
        # Each layer's (B,) squared norms and the slack of its sum (Prepared.norm_slack, None for none), as the
        # backward pass forms them; added up once it ends (_totals), not layer by layer: on a GPU every operation
        # costs a launch, and per-layer accumulation was five or six of them per layer.
        self.squared_parts: list[torch.Tensor] | None = None
        self.slack_parts: list[torch.Tensor | None] = []

    def forward(
        self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
            activation = inputs[0]
            index = len(self.layers)
            self.layers.append(
                _Layer(module, self.by_module[id(module)][1], activation.detach(), activation._version, output.shape)
            )
            if not output.requires_grad:  # nothing upstream of the loss through it: no gradient, no tap
                return output
            return _Tap.apply(output, self.anchor, lambda grad: self.receive(index, grad))

        handles = [m.register_forward_hook(hook) for _, m, _ in self.modules]
        try:
            with phase("forward"):
                return loss_fn(model(x), y)
        except RuntimeError as exc:
            if "is being modified inplace" not in str(exc) or "custom Function" not in str(exc):
                raise
            # An in-place op (e.g. ReLU(inplace=True)) on a tapped output: the gradient reaching the tap would
            # be the next op's, and the norms silently wrong; autograd refuses it, and so do we, plainly.
            raise ValueError(
                "the output of a parameterised layer was modified in place after the layer ran; use out-of-place "
                "activations (inplace=False) or mode='vmap'"
            ) from None
        finally:
            for handle in handles:
                handle.remove()

    def check(self) -> None:
        """Refuse a forward pass whose records would give wrong per-example norms (each reason below)."""
        for layer in self.layers:
            assert layer.activation is not None
            if layer.activation.shape[:1] != (self.batch,) or layer.output_shape[:1] != (self.batch,):
                # The rules read dimension 0 as the example; anything else would give wrong norms.
                raise ValueError(
                    f"{self._label(layer)} saw input {tuple(layer.activation.shape)} and output "
                    f"{tuple(layer.output_shape)} for a batch of {self.batch}: ghost clipping needs the example on "
                    "dimension 0 of every layer; use mode='vmap'"
                )
        seen = [id(layer.module) for layer in self.layers]
        if len(set(seen)) != len(seen):
            raise ValueError(
                "a parameterised module ran more than once in one forward pass (shared weights); "
                "its per-example norm is not the sum of per-use norms: use mode='vmap'"
            )
        for layer in self.layers:
            assert layer.activation is not None
            if layer.activation._version != layer.input_version:
                # The layer's recorded input was rewritten: its norms would come from the wrong input.
                raise ValueError(
                    f"the input of {self._label(layer)} was modified in place after the layer ran; "
                    "use out-of-place operations (inplace=False) or mode='vmap'"
                )

    def _label(self, layer: _Layer) -> str:
        return f"{type(layer.module).__name__} ({self.by_module[id(layer.module)][0] or 'the model'})"

    def _arithmetic(self) -> Any:
        return tf32_products() if self.tf32 else exact_float32()

    def _prepare(self, layer: _Layer, activation: torch.Tensor, grad: torch.Tensor) -> Prepared:
        """The layer's rule applied to float32 (or wider) operands, its products on TF32 ones where asked."""
        return layer.rule.prepare(layer.module, _wide(activation), _wide(grad), tf32=layer.tf32)

    def receive(self, index: int, grad: torch.Tensor) -> None:
        """Layer ``index``'s output gradient, during the backward pass: add its norms, keep what its sum needs."""
        layer = self.layers[index]
        assert self.squared_parts is not None and layer.activation is not None
        # Only float32 products can run on TF32: wider ones are exact as they are.
        layer.dtype = _wide(grad).dtype
        layer.tf32 = self.tf32 and layer.dtype == torch.float32
        # Norms and sums in float32 or wider, never under a caller's autocast (bf16 passes), in the chosen arithmetic.
        with phase("norms"), torch.autocast(grad.device.type, enabled=False), self._arithmetic():
            prepared = self._prepare(layer, layer.activation, grad)
            squared = prepared.squared_norms()
            compact = prepared.compact()
            low = _low(layer.activation) or _low(grad)
            if compact is not None and low and compact.nbytes() > layer.activation.nbytes + grad.nbytes:
                compact = None  # float32 gradients, counted smaller in numbers, would outweigh half-precision a and g
            self.squared_parts.append(squared)
            # The slack of whatever will form this layer's sum: the kept gradients (none), or the products of its
            # input and gradient, re-prepared identically for a half-precision layer (see Prepared.norm_slack).
            self.slack_parts.append((compact or prepared).norm_slack())
        if compact is not None:
            layer.kept, layer.activation = compact, None
        elif low:
            layer.grad = grad  # re-prepared from half precision later, rather than keep float32 copies
        else:
            layer.kept, layer.activation = prepared, None  # it holds the input and gradient

    def _drop(self, keep: torch.Tensor) -> None:
        """Zero every recorded per-example value of the examples not kept (factor 0, see clip_factors)."""
        for layer in self.layers:
            if layer.kept is not None:
                layer.kept.drop_examples(keep)
            if layer.activation is not None:
                layer.activation = drop_rows(layer.activation, keep)
            if layer.grad is not None:
                layer.grad = drop_rows(layer.grad, keep)

    def _totals(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B,)`` each: the squared norms summed over layers, and the sum of each layer's ``(norm + slack)^2``.

        A layer without a slack adds its squared norm as it is (not the square of its root, which may round
        below it).
        """
        assert self.squared_parts is not None
        zero = torch.zeros(self.batch, dtype=dtype, device=device)
        if not self.squared_parts:
            return zero, zero
        squared = torch.stack([s.to(dtype) for s in self.squared_parts])  # (layers, B)
        plain = [s.to(dtype) for s, k in zip(self.squared_parts, self.slack_parts, strict=True) if k is None]
        slacked = [(s, k) for s, k in zip(self.squared_parts, self.slack_parts, strict=True) if k is not None]
        bounded = torch.stack(plain).sum(0) if plain else zero
        if slacked:
            roots = torch.stack([s.to(dtype) for s, _ in slacked]).clamp(min=0).sqrt()
            bounded = bounded + (roots + torch.stack([k.to(dtype) for _, k in slacked])).square().sum(0)
        return squared.sum(0), bounded

    def backward(self, losses: torch.Tensor, clip_norm: float) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Run the backward pass through the taps, then form the clip factors and each layer's clipped sum."""
        self.squared_parts, self.slack_parts = [], []
        if losses.requires_grad:
            with phase("backward"):
                torch.autograd.grad(losses.sum(), [self.anchor], allow_unused=True)
        squared, bounded = self._totals(torch.float32 if _low(losses) else losses.dtype, losses.device)
        norms = squared.clamp(min=0).sqrt()
        # Clipped over each norm plus what floating point may hide from it (Prepared.norm_slack), not the norm alone.
        bounded = bounded.clamp(min=0).sqrt()
        factors = clip_factors(bounded, clip_norm)
        keep = torch.isfinite(bounded)
        if rows_must_be_dropped(keep):  # an example whose norm is not finite: its rows become exact zeros
            self._drop(keep)
        sums: dict[str, torch.Tensor] = {}
        # No graph: the sums are data, and a recorded graph would keep each layer's input and scaled
        # gradient alive as long as the returned sums (the weight is a Parameter in the convolutions').
        with (
            phase("clipped_sums"),
            torch.no_grad(),
            torch.autocast(losses.device.type, enabled=False),
            self._arithmetic(),
        ):
            for layer in self.layers:
                if not layer.received:  # its output did not reach the losses: a zero gradient
                    continue
                prepared = layer.kept
                if prepared is None:
                    assert layer.activation is not None and layer.grad is not None
                    prepared = self._prepare(layer, layer.activation, layer.grad)
                prefix = self.by_module[id(layer.module)][0]
                # Every layer's sum under "tf32" avoids matrix products of unrounded operands (a norm layer's
                # weighted sum included), since TF32 is on for products while the sums are formed.
                # The factors in the layer's own dtype: a float64 loss on a float32 layer would otherwise mix
                # dtypes in its products (float32 factors are what a float32 model's clipping uses anyway).
                layer_factors = factors.to(layer.dtype) if layer.dtype is not None else factors
                for attr, value in prepared.clipped_sum(layer_factors, tf32=self.tf32).items():
                    sums[f"{prefix}.{attr}" if prefix else attr] = value
                layer.kept = layer.activation = layer.grad = None  # free this layer's inputs and gradients
        for name, module, _ in self.modules:
            # A layer that did not run, or whose output did not reach the losses, contributes nothing.
            for attr, param in module.named_parameters(recurse=False):
                key = f"{name}.{attr}" if name else attr
                if param.requires_grad and key not in sums:
                    sums[key] = torch.zeros_like(param)
        return sums, norms
