"""A transformer encoder classifier for token sequences, built only from layers with per-example gradient rules."""

from __future__ import annotations

import torch
from torch import nn

from privml.torch._attention import DPMultiheadAttention


class _EncoderBlock(nn.Module):
    """Pre-LayerNorm block: ``x + attn(LN(x))``, then ``x + MLP(LN(x))`` with a GELU MLP."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = DPMultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.ff2 = nn.Linear(d_ff, d_model)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.drop1(self.attn(h, h, h, key_padding_mask=padding, need_weights=False)[0])
        return x + self.drop2(self.ff2(self.act(self.ff1(self.norm2(x)))))


class TransformerClassifier(nn.Module):
    """A transformer encoder (Vaswani et al. 2017) that classifies token sequences, for DP-SGD.

    Token embedding plus learned positional embedding, ``n_layers``
    pre-LayerNorm encoder blocks (Xiong et al. 2020), a final LayerNorm,
    mean pooling over the (non-padding) positions and one linear layer.
    Attention is :class:`~privml.torch.DPMultiheadAttention`
    (separate ``nn.Linear`` query, key, value and output projections and
    :func:`torch.nn.functional.scaled_dot_product_attention`); the MLP is
    Linear-GELU-Linear. The parameterised layers are therefore only
    ``nn.Embedding``, ``nn.LayerNorm`` and ``nn.Linear``, each with a
    ghost-clipping rule (Li et al. 2022), and every layer acts on each
    example alone (LayerNorm normalises each position of each example).

    The positions enter as an index tensor of shape ``(B, T)`` into an
    ``nn.Embedding``, so the positional table is clipped per example like
    any other embedding (one row per position, each used once per example).

    Parameters
    ----------
    vocab_size, n_classes:
        Token ids are ``0 .. vocab_size - 1``; number of classes.
    max_len:
        Longest sequence accepted (rows of the positional table).
    d_model, n_heads, n_layers:
        Width (default 256), attention heads (default 4, must divide
        ``d_model``) and encoder blocks (default 2).
    d_ff:
        Hidden width of the MLP (default ``4 d_model``).
    dropout:
        Dropout after the embeddings, on the attention probabilities and on
        each residual branch (default 0).
    padding_idx:
        Token id of padding, or None. Padding tokens get no embedding
        gradient, are masked out as attention keys and are left out of the
        mean pooling. A sequence made only of padding attends to every
        position (masking all keys would give NaN) and pools to zero.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        n_classes: int,
        max_len: int,
        d_model: int = 256,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
        padding_idx: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("n_classes", n_classes), ("max_len", max_len),
                            ("d_model", d_model), ("n_heads", n_heads), ("n_layers", n_layers)):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx must be in [0, {vocab_size}), got {padding_idx!r}")
        self.max_len, self.padding_idx = max_len, padding_idx
        self.token = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.position = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_EncoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, n_classes)`` of token ids ``(B, T)``, ``T <= max_len``."""
        if tokens.dim() != 2:
            raise ValueError(f"expected token ids of shape (batch, length), got {tuple(tokens.shape)}")
        batch, length = tokens.shape
        if length > self.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len={self.max_len}")
        positions = torch.arange(length, device=tokens.device).expand(batch, length)
        x = self.drop(self.token(tokens) + self.position(positions))
        padding = is_padding = None
        if self.padding_idx is not None:
            is_padding = tokens.eq(self.padding_idx)
            padding = is_padding & ~is_padding.all(1, keepdim=True)  # an all-padding row attends everywhere
        for block in self.blocks:
            x = block(x, padding)
        x = self.norm(x)
        if is_padding is None:
            pooled = x.mean(1)
        else:
            keep = (~is_padding).unsqueeze(-1).to(x.dtype)
            pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.head(pooled)


__all__ = ["TransformerClassifier"]
