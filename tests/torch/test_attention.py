"""DPMultiheadAttention equals nn.MultiheadAttention; the validator reports MHA and fix_model swaps it."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from privml.torch import (  # noqa: E402
    DPSGD,
    DPMultiheadAttention,
    UnsupportedModuleError,
    cross_entropy_per_example,
    find_problems,
    fix_model,
    ghost_clipped_sum,
    validate_model,
    vmap_clipped_sum,
)
from tests.torch._brute_force import assert_clipped_sums_match, brute_force_clipped_sum  # noqa: E402

EXACT = dict(rtol=1e-12, atol=1e-12)
N, L, S, E, HEADS = 3, 4, 5, 8, 2


def pair(**kwargs):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, HEADS, **kwargs).double()
    return mha, DPMultiheadAttention.from_torch(mha)


def inputs(batch_first, kdim=E):
    q = torch.randn(N, L, E, dtype=torch.float64)
    k = torch.randn(N, S, kdim, dtype=torch.float64)
    v = torch.randn(N, S, kdim, dtype=torch.float64)
    if not batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    return q, k, v


def masks():
    padding = torch.zeros(N, S, dtype=torch.bool)
    padding[0, -2:] = True
    padding[2, 0] = True
    causal_like = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=2)
    per_head = torch.randn(N * HEADS, L, S, dtype=torch.float64)
    return {
        "none": {},
        "padding": {"key_padding_mask": padding},
        "attn": {"attn_mask": causal_like},
        "both": {"key_padding_mask": padding, "attn_mask": causal_like},
        "float-3d": {"key_padding_mask": padding.double() * -1e9, "attn_mask": per_head},
    }


def assert_same(mha, dp, args, **kwargs):
    expected = mha(*args, **kwargs)
    got = dp(*args, **kwargs)
    torch.testing.assert_close(got[0], expected[0], **EXACT)
    if expected[1] is None:
        assert got[1] is None
    else:
        torch.testing.assert_close(got[1], expected[1], **EXACT)


@pytest.mark.parametrize("batch_first,kdim,bias", [(True, None, True), (False, None, True), (True, 6, False),
                                                   (False, 6, True)])
def test_from_torch_matches_multihead_attention(batch_first, kdim, bias):
    mha, dp = pair(batch_first=batch_first, kdim=kdim, vdim=kdim, bias=bias)
    args = inputs(batch_first, kdim or E)
    for mask, training, need_weights, average in itertools.product(
        masks().values(), (True, False), (True, False), (True, False)
    ):
        mha.train(training)
        dp.train(training)
        for grad in (True, False):  # eval without grad takes nn.MultiheadAttention's fused fast path
            with torch.set_grad_enabled(grad):
                assert_same(mha, dp, args, need_weights=need_weights, average_attn_weights=average, **mask)


def test_self_attention_causal_and_unbatched():
    mha, dp = pair(batch_first=True)
    x = torch.randn(2, 5, E, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    for need_weights in (True, False):  # is_causal takes SDPA's causal path when no weights are asked for
        assert_same(mha, dp, (x, x, x), attn_mask=causal, is_causal=True, need_weights=need_weights)
    padding = torch.tensor([False, False, False, True, True])
    assert_same(mha, dp, (x[0], x[0], x[0]), key_padding_mask=padding)
    assert_same(mha, dp, (x[0], x[0], x[0]), attn_mask=torch.randn(HEADS, 5, 5, dtype=torch.float64),
                average_attn_weights=False)
    with pytest.raises(RuntimeError, match="attn_mask"):
        dp(x, x, x, is_causal=True)  # as nn.MultiheadAttention: the hint needs the mask


def test_same_outputs_under_vmap():
    # Under torch.func transforms (mode="vmap") attention is computed unfused; the causal hint still applies.
    _, dp = pair(batch_first=True)
    x = torch.randn(3, 5, E, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    padding = torch.rand(3, 5) < 0.3
    padding[:, 0] = False

    def one(xi, pi, **kwargs):
        return dp(xi, xi, xi, key_padding_mask=pi, need_weights=False, **kwargs)[0]

    torch.testing.assert_close(torch.func.vmap(one)(x, padding), one(x, padding), **EXACT)
    padding[1] = True  # a query that may attend nowhere: zeros, as SDPA gives (not NaN)
    torch.testing.assert_close(torch.func.vmap(one)(x, padding), one(x, padding), **EXACT)
    grads = torch.func.vmap(torch.func.grad(lambda xi, pi: one(xi, pi).sum()))(x, padding)
    assert torch.isfinite(grads).all()
    mapped = torch.func.vmap(lambda xi: dp(xi, xi, xi, attn_mask=causal, is_causal=True, need_weights=False)[0])
    torch.testing.assert_close(mapped(x), dp(x, x, x, attn_mask=causal, need_weights=False)[0], **EXACT)


def test_from_torch_keeps_mode_dtype_and_frozen_parameters():
    mha = nn.MultiheadAttention(E, HEADS, dropout=0.25).double().eval()
    mha.in_proj_weight.requires_grad_(False)
    dp = DPMultiheadAttention.from_torch(mha)
    assert not dp.training and dp.dropout == 0.25 and dp.q_proj.weight.dtype == torch.float64
    assert not dp.q_proj.weight.requires_grad and dp.q_proj.bias.requires_grad
    assert dp.in_proj_weight is None and dp.in_proj_bias is None and not dp._qkv_same_embed_dim


def test_unsupported_options_are_refused():
    with pytest.raises(ValueError, match="add_bias_kv"):
        DPMultiheadAttention(E, HEADS, add_bias_kv=True)
    with pytest.raises(ValueError, match="add_zero_attn"):
        DPMultiheadAttention(E, HEADS, add_zero_attn=True)
    with pytest.raises(ValueError, match="add_bias_kv"):
        fix_model(nn.Sequential(nn.MultiheadAttention(E, HEADS, add_bias_kv=True)))
    with pytest.raises(ValueError, match="divide"):
        DPMultiheadAttention(E, 3)


class Encoder(nn.Module):
    """Embedding -> nn.TransformerEncoder (2 layers, padding mask) -> mean -> Linear."""

    def __init__(self, batch_first=True):
        super().__init__()
        self.batch_first = batch_first
        self.embed = nn.Embedding(11, 16, padding_idx=0)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=batch_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=batch_first)
        self.head = nn.Linear(16, 3)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h if self.batch_first else h.transpose(0, 1)
        h = self.encoder(h, src_key_padding_mask=tokens.eq(0))
        h = h if self.batch_first else h.transpose(0, 1)
        return self.head(h.mean(1))


def encoder_batch(length=6):
    torch.manual_seed(2)
    tokens = torch.randint(1, 11, (5, length))
    tokens[0, 3:] = 0
    tokens[1, 1:] = 3
    return tokens, torch.tensor([0, 1, 2, 0, 1])


def test_validator_reports_mha_and_dpsgd_refuses_it():
    model = Encoder()
    problems = find_problems(model)
    assert len(problems) == 2  # one per layer
    assert all("MultiheadAttention" in p and "fix_model" in p for p in problems)
    with pytest.raises(UnsupportedModuleError, match="fix_model"):
        validate_model(model)
    with pytest.raises(UnsupportedModuleError, match="fix_model"):
        DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=10, clip_norm=1.0,
              sample_rate=0.5, steps=1, noise_multiplier=1.0)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_fix_model_swaps_mha_and_keeps_the_outputs():
    torch.manual_seed(3)
    original = Encoder().double()
    fixed = fix_model(Encoder().double())
    fixed.load_state_dict(original.state_dict(), strict=False)  # same embedding, norms, MLP and head
    for mine, theirs in zip(fixed.encoder.layers, original.encoder.layers):
        mine.self_attn = DPMultiheadAttention.from_torch(theirs.self_attn)
    assert validate_model(fixed) is fixed
    assert not any(isinstance(m, nn.MultiheadAttention) for m in fixed.modules())
    tokens, _ = encoder_batch()
    original.train()
    fixed.train()
    torch.testing.assert_close(fixed(tokens), original(tokens), **EXACT)
    # Evaluation without grad: PyTorch packs the padded batch into nested tensors and takes its fused path;
    # the fixed encoder must run the ordinary path and agree on every non-padded position.
    original.eval()
    fixed.eval()
    with torch.no_grad():
        h_fixed = fixed.encoder(fixed.embed(tokens), src_key_padding_mask=tokens.eq(0))
        h_original = original.encoder(original.embed(tokens), src_key_padding_mask=tokens.eq(0))
    keep = tokens.ne(0)
    torch.testing.assert_close(h_fixed[keep], h_original[keep], **EXACT)


def test_fix_model_on_a_bare_mha_returns_its_replacement():
    mha, _ = pair(batch_first=True)
    fixed = fix_model(mha)
    assert isinstance(fixed, DPMultiheadAttention)
    x = torch.randn(2, 3, E, dtype=torch.float64)
    torch.testing.assert_close(fixed(x, x, x)[0], mha(x, x, x)[0], **EXACT)


@pytest.mark.parametrize("all_padding", [False, True])
def test_fixed_transformer_encoder_clipped_sums_equal_brute_force(all_padding):
    torch.manual_seed(4)
    model = fix_model(Encoder()).double()
    tokens, y = encoder_batch()
    if all_padding:
        tokens[2] = 0  # every key masked: SDPA's zeros, and finite gradients, on every path
    assert_clipped_sums_match(model, tokens, y)


def test_one_dpsgd_step_on_a_fixed_transformer_encoder():
    from tests.torch.test_models_zoo import one_dpsgd_step

    torch.manual_seed(5)
    model = fix_model(Encoder())
    one_dpsgd_step(model, *encoder_batch())


def test_ghost_on_a_sequence_first_encoder_refuses_or_is_exact():
    torch.manual_seed(6)
    model = fix_model(Encoder(batch_first=False)).double()
    tokens, y = encoder_batch(length=5)  # as many positions as examples
    _, norms = brute_force_clipped_sum(model, tokens, y, 1.0)
    clip_norm = float(norms.median())
    truth, _ = brute_force_clipped_sum(model, tokens, y, clip_norm)
    # With T == B the shapes cannot tell positions from examples: the engine refuses the module.
    with pytest.raises(ValueError, match="sequence-first"):
        ghost_clipped_sum(model, cross_entropy_per_example, tokens, y, clip_norm)
    # vmap treats each example alone, whatever the layout inside: exact.
    sums, _ = vmap_clipped_sum(model, cross_entropy_per_example, tokens, y, clip_norm)
    for name, value in truth.items():
        torch.testing.assert_close(sums[name], value, rtol=1e-10, atol=1e-12)


def test_ghost_refuses_a_layer_whose_dimension_0_is_not_the_example():
    class Transposed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mix = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 3)

        def forward(self, x):  # (B, T, 4) -> the Linear sees (T, B, 4)
            return self.head(self.mix(x.transpose(0, 1)).transpose(0, 1).mean(1))

    with pytest.raises(ValueError, match="dimension 0"):
        ghost_clipped_sum(Transposed().double(), cross_entropy_per_example, torch.randn(3, 5, 4).double(),
                          torch.tensor([0, 1, 2]), 1.0)
