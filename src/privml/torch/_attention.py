"""Multi-head attention built from four ``nn.Linear`` layers, so per-example gradient rules apply.

:class:`torch.nn.MultiheadAttention` keeps the query, key and value
projections in one fused ``in_proj_weight`` parameter used through
``F.multi_head_attention_forward``, not in ``nn.Linear`` modules, so the
ghost-clipping rules (which recognise layers by type, Li et al. 2022) cannot
see it. :class:`DPMultiheadAttention` computes the same function (Vaswani et
al. 2017) with separate ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj``
linear layers, each applied to batch-first inputs so that dimension 0 is the
example, and :func:`torch.nn.functional.scaled_dot_product_attention`. Opacus
offers the same swap (Yousefpour et al. 2021); :func:`privml.torch.fix_model`
performs it.

Every operation acts on each example alone (masks are per example or shared),
so the module does not mix examples.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def _functorch_active() -> bool:
    # True inside torch.func transforms (vmap, grad): the per-example gradients of mode="vmap".
    return bool(torch._C._are_functorch_transforms_active())


def _float_mask(mask: torch.Tensor | None, name: str, dtype: torch.dtype) -> torch.Tensor | None:
    # The convention of nn.MultiheadAttention: True (bool) means "may not attend"; floats are added.
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not torch.is_floating_point(mask):
        raise TypeError(f"{name} must be a bool or floating-point tensor, got {mask.dtype}")
    return mask


class DPMultiheadAttention(nn.Module):
    """Drop-in replacement for :class:`torch.nn.MultiheadAttention` made of ``nn.Linear`` layers.

    Same constructor (``add_bias_kv`` and ``add_zero_attn`` must stay False)
    and the same ``forward(query, key, value, key_padding_mask, need_weights,
    attn_mask, average_attn_weights, is_causal)`` with the same shapes, mask
    conventions and outputs; :meth:`from_torch` copies a trained module so
    the outputs agree to rounding.

    Differences from PyTorch's module, none visible in the outputs:

    * the projections are ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj``
      (``nn.Linear``) instead of ``in_proj_weight``/``in_proj_bias``, which
      are ``None``, and ``_qkv_same_embed_dim`` is False, so
      :class:`~torch.nn.TransformerEncoderLayer` never takes its fused fast
      path (which would read the fused parameters);
    * the projections always see batch-first ``(N, L, E)`` inputs: ghost
      clipping reads dimension 0 of a layer's input as the example;
    * no inference fast path (nested tensors are not accepted);
    * inside :mod:`torch.func` transforms (``mode="vmap"``) attention is
      computed unfused, because SDPA's fused kernels have no ``vmap``
      batching rule and fall back to a loop over examples (3x slower on a
      2-layer d=256 encoder at batch 256, measured on an H200); a query whose
      keys are all masked gets zero weights there, as from SDPA.

    Parameters
    ----------
    embed_dim, num_heads:
        Model width and number of heads (``num_heads`` must divide ``embed_dim``).
    dropout:
        Dropout on the attention probabilities, in training mode only.
    bias:
        Biases in the four projections.
    add_bias_kv, add_zero_attn:
        Must be False: the learned ``bias_k``/``bias_v`` are parameters appended
        to the keys and values, not weights of a Linear layer, so no
        per-example gradient rule covers them.
    kdim, vdim:
        Feature sizes of ``key`` and ``value`` (default ``embed_dim``).
    batch_first:
        Inputs and outputs are ``(N, L, E)`` instead of ``(L, N, E)``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got {embed_dim} and {num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide embed_dim={embed_dim}")
        if add_bias_kv:
            raise ValueError(
                "DPMultiheadAttention does not support add_bias_kv=True: bias_k and bias_v are parameters appended "
                "to the keys and values, not Linear weights, so no per-example gradient rule covers them"
            )
        if add_zero_attn:
            raise ValueError("DPMultiheadAttention does not support add_zero_attn=True")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        # Read by nn.TransformerEncoderLayer / nn.TransformerEncoder to decide on their fused fast paths:
        # False and None route them to the ordinary forward, which calls this module.
        self._qkv_same_embed_dim = False
        self.in_proj_weight: torch.Tensor | None = None
        self.in_proj_bias: torch.Tensor | None = None
        self.bias_k: torch.Tensor | None = None
        self.bias_v: torch.Tensor | None = None
        self.add_zero_attn = False
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # nn.MultiheadAttention's initialisation: Xavier-uniform projections, zero biases. Its fused
        # (3E, E) in_proj_weight has a wider Xavier bound than three (E, E) blocks; each block here
        # uses its own fan-in and fan-out.
        for layer in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(layer.weight)
        for layer in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> DPMultiheadAttention:
        """An equivalent module holding a copy of ``mha``'s weights (same device, dtype and mode).

        The fused ``in_proj_weight`` (or the separate ``q/k/v_proj_weight``
        when ``kdim``/``vdim`` differ from ``embed_dim``) is split into the
        three projections; ``requires_grad`` and training mode are kept.

        Raises
        ------
        ValueError
            if ``mha`` uses ``add_bias_kv`` or ``add_zero_attn``.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"expected an nn.MultiheadAttention, got {type(mha).__name__}")
        reference = mha.out_proj.weight
        new = cls(
            mha.embed_dim,
            mha.num_heads,
            dropout=mha.dropout,
            bias=mha.in_proj_bias is not None,
            add_bias_kv=mha.bias_k is not None,
            add_zero_attn=mha.add_zero_attn,
            kdim=mha.kdim,
            vdim=mha.vdim,
            batch_first=mha.batch_first,
            device=reference.device,
            dtype=reference.dtype,
        )
        if mha.in_proj_weight is not None:
            weights = list(mha.in_proj_weight.chunk(3))
        else:
            weights = [mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight]
        biases = list(mha.in_proj_bias.chunk(3)) if mha.in_proj_bias is not None else [None, None, None]
        sources = [(w, b) for w, b in zip(weights, biases)] + [(mha.out_proj.weight, mha.out_proj.bias)]
        with torch.no_grad():
            for layer, (weight, bias) in zip((new.q_proj, new.k_proj, new.v_proj, new.out_proj), sources):
                layer.weight.copy_(weight)
                layer.weight.requires_grad_(weight.requires_grad)
                if layer.bias is not None and bias is not None:
                    layer.bias.copy_(bias)
                    layer.bias.requires_grad_(bias.requires_grad)
        return new.train(mha.training)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        # (N, L, E) -> (N, H, L, E / H)
        batch, length, _ = x.shape
        return x.reshape(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention outputs and (when ``need_weights``) weights, as :meth:`torch.nn.MultiheadAttention.forward`."""
        # long-function: a drop-in for nn.MultiheadAttention.forward, its signature, argument checks and mask
        # rules one for one, in the order torch applies them, so an error or a mask reads as it does there.
        batched = query.dim() == 3
        if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
            raise ValueError(
                "query, key and value must all be 3-D (batched) or all 2-D (unbatched), got "
                f"{query.dim()}-D, {key.dim()}-D and {value.dim()}-D"
            )
        if key_padding_mask is not None and key_padding_mask.dim() != query.dim() - 1:
            raise ValueError(f"key_padding_mask must be {query.dim() - 1}-D, got {key_padding_mask.dim()}-D")
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise ValueError(f"attn_mask must be 2-D or 3-D, got {attn_mask.dim()}-D")
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(f"key and value differ in their sequence or batch sizes: {key.shape} and {value.shape}")
        # Batch-first inside: dimension 0 of every projection's input is the example.
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"expected query with {self.embed_dim} features, got {query.shape[-1]}")
        batch, target, _ = query.shape
        source = key.shape[1]

        padding = _float_mask(key_padding_mask, "key_padding_mask", query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint (as nn.MultiheadAttention); "
                "nn.Transformer.generate_square_subsequent_mask makes one"
            )
        causal_hint = is_causal and padding is None and not need_weights
        mask = None if causal_hint else _float_mask(attn_mask, "attn_mask", query.dtype)
        if mask is not None:
            if mask.dim() == 2:
                if mask.shape != (target, source):
                    raise ValueError(f"a 2-D attn_mask must have shape {(target, source)}, got {tuple(mask.shape)}")
                mask = mask.reshape(1, 1, target, source)
            else:
                expected = (batch * self.num_heads, target, source)
                if mask.shape != expected:
                    raise ValueError(f"a 3-D attn_mask must have shape {expected}, got {tuple(mask.shape)}")
                mask = mask.reshape(batch, self.num_heads, target, source)
        if padding is not None:
            if padding.shape != (batch, source):
                raise ValueError(f"key_padding_mask must have shape {(batch, source)}, got {tuple(padding.shape)}")
            padding = padding.reshape(batch, 1, 1, source)
            mask = padding if mask is None else mask + padding

        q = self._heads(self.q_proj(query))
        k = self._heads(self.k_proj(key))
        v = self._heads(self.v_proj(value))
        dropout = self.dropout if self.training else 0.0
        weights: torch.Tensor | None = None
        if need_weights or _functorch_active():
            # The weights are asked for, or we run under torch.func.vmap, where SDPA's fused kernels have
            # no batching rule and would fall back to a slow loop over examples: the same math, unfused.
            if causal_hint:
                allowed = torch.ones(target, source, dtype=torch.bool, device=q.device).tril()
                mask = torch.zeros(target, source, dtype=q.dtype, device=q.device).masked_fill(~allowed, float("-inf"))
            scores = torch.matmul(q * math.sqrt(1.0 / self.head_dim), k.transpose(-2, -1))
            if mask is not None:
                scores = scores + mask
            if need_weights:  # as nn.MultiheadAttention: a query that may attend nowhere gets NaN
                weights = torch.softmax(scores, dim=-1)
            else:  # as SDPA: such a query gets zero weights, with finite gradients
                nowhere = torch.isneginf(scores).all(-1, keepdim=True)
                weights = torch.softmax(scores.masked_fill(nowhere, 0.0), dim=-1).masked_fill(nowhere, 0.0)
            if dropout > 0.0:
                weights = F.dropout(weights, p=dropout)
            heads = torch.matmul(weights, v)
            if not need_weights:
                weights = None
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal_hint)
        out = self.out_proj(heads.transpose(1, 2).reshape(batch, target, self.embed_dim))

        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


__all__ = ["DPMultiheadAttention"]
