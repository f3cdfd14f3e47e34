"""The GroupNorm Wide ResNet and the transformer classifier: exact clipped sums, one DP-SGD step, shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from privml.torch import (  # noqa: E402
    DPSGD,
    TransformerClassifier,
    WideResNet,
    build_model,
    cross_entropy_per_example,
    validate_model,
    vmap_clipped_sum,
)
from privml.torch.models import ARCHITECTURES, IMAGE_ARCHITECTURES  # noqa: E402
from tests.torch._brute_force import assert_clipped_sums_match  # noqa: E402


def small_wide_resnet():
    torch.manual_seed(0)
    model = WideResNet(in_channels=3, n_classes=4, depth=10, width=1, groups=4).double()
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    return model, x, torch.tensor([0, 1, 2, 3])


def small_transformer(padding_idx=0):
    torch.manual_seed(1)
    model = TransformerClassifier(
        vocab_size=11, n_classes=3, max_len=6, d_model=16, n_heads=2, n_layers=2, padding_idx=padding_idx
    ).double()
    tokens = torch.randint(1, 11, (5, 6))
    tokens[0, 3:] = 0  # padding (a token like any other when padding_idx is None)
    tokens[1, 1:] = 3  # one token repeated: the embedding's Gram terms across positions matter
    tokens[2, :] = 0  # a sequence of padding only
    return model, tokens, torch.tensor([0, 1, 2, 0, 1])


def one_dpsgd_step(model, x, y):
    before = [p.detach().clone() for p in model.parameters()]
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=2 * x.shape[0],
                   clip_norm=1.0, sample_rate=0.5, steps=1, noise_multiplier=1.0, seed=0, mode="ghost")
    assert engine.mode == "ghost"
    engine.step(x, y)
    assert engine.steps_taken == 1
    after = list(model.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert all(not torch.equal(b, a) for b, a in zip(before, after))  # noise reaches every parameter


def test_wide_resnet_clipped_sums_equal_brute_force():
    assert_clipped_sums_match(*small_wide_resnet())


@pytest.mark.parametrize("padding_idx", [0, None])
def test_transformer_clipped_sums_equal_brute_force(padding_idx):
    assert_clipped_sums_match(*small_transformer(padding_idx))


def test_vmap_of_the_transformer_runs_batched(recwarn):
    # SDPA's fused kernels have no vmap batching rule: a per-example fallback loop would warn.
    model, tokens, y = small_transformer()
    vmap_clipped_sum(model, cross_entropy_per_example, tokens, y, 1.0)
    assert not [w for w in recwarn if "performance drop" in str(w.message)]


def test_one_dpsgd_step_on_each_model():
    one_dpsgd_step(*small_wide_resnet())
    one_dpsgd_step(*small_transformer())


def test_wide_resnet_16_4_shape_and_size():
    model = WideResNet(in_channels=3, n_classes=10)
    assert validate_model(model) is model
    blocks = [m for m in model.modules() if type(m).__name__ == "_PreActBlock"]
    assert len(blocks) == 6  # (16 - 4) / 6 = 2 per stage
    assert model.head.in_features == 256  # 64 * width
    assert sum(p.numel() for p in model.parameters()) == 2_748_890
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert all(m.num_groups == 16 for m in model.modules() if isinstance(m, nn.GroupNorm))
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_wide_resnet_rejects_bad_configurations():
    with pytest.raises(ValueError, match="depth"):
        WideResNet(depth=12)
    with pytest.raises(ValueError, match="groups"):
        WideResNet(groups=32)  # the 16-channel stem cannot be split in 32 groups
    with pytest.raises(ValueError, match="in place"):
        WideResNet(activation=lambda: nn.ReLU(inplace=True))


def test_wide_resnet_activation_is_configurable():
    model = WideResNet(depth=10, width=1, activation=nn.Tanh)
    assert any(isinstance(m, nn.Tanh) for m in model.modules())
    assert not any(isinstance(m, nn.ReLU) for m in model.modules())


def test_transformer_ignores_padding():
    # Padding is masked as a key and left out of the pooling: appending it changes nothing.
    model, _, _ = small_transformer()
    model.eval()
    tokens = torch.tensor([[4, 7, 2]])
    padded = torch.tensor([[4, 7, 2, 0, 0, 0]])
    with torch.no_grad():
        torch.testing.assert_close(model(padded), model(tokens), rtol=1e-12, atol=1e-12)
        assert torch.isfinite(model(torch.zeros(2, 4, dtype=torch.long))).all()  # all padding: no NaN


def test_transformer_checks_its_input():
    model = TransformerClassifier(vocab_size=5, n_classes=2, max_len=4, d_model=8, n_heads=2)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="divide"):
        TransformerClassifier(vocab_size=5, n_classes=2, max_len=4, d_model=10, n_heads=4)


def test_default_transformer_layers():
    model = TransformerClassifier(vocab_size=100, n_classes=2, max_len=128)
    assert len(model.blocks) == 2 and model.blocks[0].ff1.out_features == 1024
    assert model.blocks[0].attn.num_heads == 4
    kinds = {type(m) for m in model.modules() if any(True for _ in m.parameters(recurse=False))}
    assert kinds == {nn.Embedding, nn.LayerNorm, nn.Linear}  # only layers with ghost rules hold parameters


def test_build_model_knows_the_new_architectures():
    assert set(ARCHITECTURES) == {"tramer-boneh", "resnet", "wide-resnet", "transformer"}
    assert set(IMAGE_ARCHITECTURES) == set(ARCHITECTURES) - {"transformer"}
    wrn = build_model("wide-resnet", in_channels=3, n_classes=10)
    assert isinstance(wrn, WideResNet) and (wrn.depth, wrn.width) == (16, 4)
    transformer = build_model("transformer", n_classes=2, vocab_size=50, max_len=16, padding_idx=0)
    assert isinstance(transformer, TransformerClassifier) and transformer.padding_idx == 0
    with pytest.raises(ValueError, match="vocab_size"):
        build_model("transformer")
    assert type(build_model("resnet")).__name__ == "GroupNormResNet"


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("options", [{}, {"return_indices": True}, {"padding": 1, "ceil_mode": True}, "channels_last"])
def test_channels_last_max_pool_equals_the_framework_pool(ties, options):
    # The Tramer-Boneh CNN's pool takes a faster CPU route; values, indices and gradients must be the framework's,
    # ties included (saturated tanh outputs are exactly 1.0), and the output in the framework's memory format.
    from privml.torch.models._tramer_boneh import ChannelsLastMaxPool2d

    generator = torch.Generator().manual_seed(0)
    x = (torch.randint(0, 3, (6, 16, 14, 14), generator=generator).double() if ties
         else torch.randn(6, 16, 14, 14, generator=generator, dtype=torch.float64))
    if options == "channels_last":
        x, options = x.contiguous(memory_format=torch.channels_last), {}
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, expected = ChannelsLastMaxPool2d(2, 1, **options)(ours), nn.MaxPool2d(2, 1, **options)(theirs)
    if options.get("return_indices"):
        (out, indices), (expected, expected_indices) = out, expected
        assert torch.equal(indices, expected_indices)
    # Small integer weights: an input that is the maximum of several overlapping windows sums their weights,
    # exactly in any order, so the gradients compare bitwise whatever order each backward kernel adds in.
    weights = torch.randint(-8, 9, expected.shape, generator=generator).double()
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    assert torch.equal(out, expected) and torch.equal(ours.grad, theirs.grad)
    assert out.stride() == expected.stride() and ours.grad.stride() == theirs.grad.stride()
