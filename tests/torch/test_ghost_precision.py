"""The "tf32" clipping arithmetic: TF32 rounding, the bound on each contribution, and its plumbing."""

from __future__ import annotations

import contextlib
import copy
from unittest import mock

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from privml.torch import DPSGD, TramerBonehCNN, cross_entropy_per_example, ghost_clipped_sum
from privml.torch._ghost import base, conv
from privml.torch._ghost.precision import (
    ROUNDING_BOUND,
    TF32_MAX,
    exact_float32,
    round_to_tf32,
    tf32_products,
)
from privml.torch.models import GroupNormResNet, TransformerClassifier, WideResNet


def _reference_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round to 11 significant bits in float64, ties away from zero, independently of the bit trick."""
    mantissa, exponent = np.frexp(x.double().numpy())  # x = m 2^e, 0.5 <= |m| < 1
    scaled = np.abs(mantissa) * 2.0**11
    return torch.from_numpy(np.ldexp(np.sign(mantissa) * np.floor(scaled + 0.5) / 2.0**11, exponent)).float()


def test_rounding_to_tf32_is_round_to_nearest_on_the_11th_bit():
    torch.manual_seed(0)
    x = torch.cat([
        torch.randn(50_000) * 10.0 ** torch.randint(-30, 30, (50_000,)).float(),
        torch.tensor([0.0, -0.0, 1.0, -3.0, 1 + 2.0**-11, 1 + 3 * 2.0**-11, -1 - 2.0**-12, 2.0**-120, 3.3e38]),
    ])
    rounded = round_to_tf32(x)
    assert torch.equal(rounded, _reference_tf32(x))
    assert bool(((rounded.view(torch.int32) & 0x1FFF) == 0).all())  # 10 explicit mantissa bits left
    finite = x != 0
    assert float(((rounded - x).abs() / x.abs())[finite].max()) <= 2.0**-11
    assert torch.equal(round_to_tf32(rounded), rounded)
    assert float(round_to_tf32(torch.tensor([1 + 2.0**-11]))) == 1 + 2.0**-10  # a tie goes away from zero
    assert float(round_to_tf32(torch.tensor([-1 - 2.0**-11]))) == -1 - 2.0**-10


def test_rounding_saturates_instead_of_overflowing_and_keeps_nan():
    big = torch.tensor([3.4028235e38, -3.4028235e38, float("inf"), -float("inf"), TF32_MAX])
    assert round_to_tf32(big).tolist() == [TF32_MAX, -TF32_MAX, TF32_MAX, -TF32_MAX, TF32_MAX]
    assert float((3.4028235e38 - TF32_MAX) / 3.4028235e38) <= 2.0**-11  # within the bound, like any rounding
    assert torch.isnan(round_to_tf32(torch.tensor([float("nan")]))).all()


def test_products_of_rounded_values_are_exact_in_float32():
    torch.manual_seed(1)
    a, b = round_to_tf32(torch.randn(10_000)), round_to_tf32(torch.randn(10_000))
    assert torch.equal((a * b).double(), a.double() * b.double())


def test_rounding_leaves_other_dtypes_and_layouts_alone():
    x = torch.randn(4, 3, dtype=torch.float64)
    assert round_to_tf32(x) is x
    t = torch.randn(5, 7).T  # not contiguous
    assert torch.equal(round_to_tf32(t), _reference_tf32(t))


def test_the_tf32_context_allows_tf32_products_only_and_restores_the_settings():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    saved = matmul.fp32_precision, cudnn.fp32_precision
    try:
        matmul.fp32_precision = cudnn.fp32_precision = "ieee"
        with tf32_products():
            assert (matmul.fp32_precision, cudnn.fp32_precision) == ("tf32", "ieee")
        with exact_float32():
            assert (matmul.fp32_precision, cudnn.fp32_precision) == ("ieee", "ieee")
        assert (matmul.fp32_precision, cudnn.fp32_precision) == ("ieee", "ieee")
    finally:
        matmul.fp32_precision, cudnn.fp32_precision = saved


class _Sequence(nn.Module):
    """Linear layers over 12 positions: per-example gradients sum 12 outer products, so rounding shows."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(20, 30), nn.Linear(30 * 12, 5, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)).flatten(1))


def _convs() -> nn.Module:
    # Kept (wide image, few channels) and book-kept (small image, many channels) layers, grouped, strided, dilated.
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=2, dilation=2, groups=2), nn.ReLU(),
        nn.Conv2d(16, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 3),
    )


def _conv1d_3d() -> nn.Module:
    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.one = nn.Conv1d(2, 48, 5, stride=2)
            self.three = nn.Conv3d(1, 4, 2)
            self.head = nn.Linear(48 * 8 + 4 * 1 * 3 * 4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 2, 20)
            a = torch.tanh(self.one(x))
            b = torch.tanh(self.three(x.reshape(x.shape[0], 1, 2, 4, 5)))
            return self.head(torch.cat([a.flatten(1), b.flatten(1)], 1))

    return Both()


CASES = {
    "sequence": (_Sequence, lambda: (torch.randn(8, 12, 20) * 3, torch.randint(0, 5, (8,)))),
    "convolutions": (_convs, lambda: (torch.randn(6, 3, 16, 16), torch.randint(0, 3, (6,)))),
    "conv1d-conv3d": (_conv1d_3d, lambda: (torch.randn(6, 2, 20), torch.randint(0, 3, (6,)))),
    "tramer-boneh": (TramerBonehCNN, lambda: (torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,)))),
    "resnet": (lambda: GroupNormResNet(in_channels=3, n_classes=4, width=8, blocks=1, groups=4),
               lambda: (torch.randn(4, 3, 16, 16), torch.randint(0, 4, (4,)))),
    "wide-resnet": (lambda: WideResNet(in_channels=3, n_classes=4, depth=10, width=1, groups=4),
                    lambda: (torch.randn(4, 3, 16, 16), torch.randint(0, 4, (4,)))),
    "transformer": (lambda: TransformerClassifier(vocab_size=50, n_classes=3, max_len=16, d_model=16, n_heads=2,
                                                  n_layers=1, padding_idx=0),
                    lambda: (torch.randint(0, 50, (6, 16)), torch.randint(0, 3, (6,)))),
}


def _norm(sums: dict[str, torch.Tensor]) -> float:
    return float(sum(v.double().square().sum() for v in sums.values()).sqrt())


def _contributions(model, x, y, clip_norm, precision="tf32"):
    """Each example's term of the clipped sum, by its norm: the sum over a batch of that example alone."""
    return [
        _norm(ghost_clipped_sum(model, cross_entropy_per_example, x[k : k + 1], y[k : k + 1], clip_norm,
                                clip_precision=precision)[0])
        for k in range(x.shape[0])
    ]


def _setup(name):
    torch.manual_seed(0)
    make_model, make_data = CASES[name]
    model, (x, y) = make_model(), make_data()
    model(x)  # materialise any lazy shapes
    return model, x, y


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_examples_term_stays_within_the_clip_norm(name):
    model, x, y = _setup(name)
    _, norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 1.0)
    clip_norm = float(norms.min()) / 10  # every example is clipped: its term's norm is C up to the rounding
    terms = _contributions(model, x, y, clip_norm)
    assert max(terms) <= clip_norm * (1 + 1e-6), max(terms) / clip_norm
    assert min(terms) >= clip_norm * 0.97  # the bound costs at most a few percent of the clip here


def test_without_the_rounding_bound_some_terms_exceed_the_clip_norm():
    # The bound is needed: clipping over the exact norms of the rounded operands alone leaves the sum's last
    # rounding unaccounted for, and several of these examples then move the sum by more than C.
    model, x, y = _setup("sequence")
    x, y = torch.cat([x] * 8) + torch.randn(64, 12, 20), torch.cat([y] * 8)
    with (mock.patch.object(base.OuterProduct, "norm_slack", lambda self: None),
          mock.patch.object(conv._ConvPrepared, "norm_slack", lambda self: None)):
        terms = _contributions(model, x, y, 1e-3)
    assert max(terms) > 1e-3 * (1 + 1e-5)


def test_the_book_kept_convolutions_are_the_ones_bounded():
    # Both conv paths run in the "convolutions" case: layers that keep their gradients are summed without
    # products (no bound), the others by products of patches (bounded).
    model, x, y = _setup("convolutions")
    calls = []
    original = conv._ConvPrepared.norm_slack

    def spy(self):
        calls.append(self)
        return original(self)

    with mock.patch.object(conv._ConvPrepared, "norm_slack", spy):
        ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.01, clip_precision="tf32")
    convolutions = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    assert 0 < len(calls) < convolutions


_PRODUCTS = {getattr(torch.ops.aten, name).default for name in (
    "mm", "bmm", "addmm", "addmm_", "baddbmm", "mv", "addmv", "dot", "addbmm", "convolution", "convolution_backward",
)}
_ACCUMULATING = {getattr(torch.ops.aten, name).default for name in ("addmm", "addmm_", "baddbmm", "addmv", "addbmm")}


class _ProductOperands(TorchDispatchMode):
    """Record whether each matrix product's (or convolution's) float32 operands are TF32-representable."""

    def __init__(self) -> None:
        super().__init__()
        self.rounded: list[bool] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _PRODUCTS:
            operands = [a for a in args if isinstance(a, torch.Tensor) and a.dtype == torch.float32]
            if func is torch.ops.aten.convolution_backward.default:
                operands = operands[:2]  # grad_output and input; the weight passes only its shape
            elif func in _ACCUMULATING:
                operands = operands[1:3]  # the accumulator is added, not multiplied
            self.rounded.append(all(bool(((o.view(torch.int32) & 0x1FFF) == 0).all()) for o in operands))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_product_of_the_tf32_arithmetic_multiplies_rounded_operands(name, bf16):
    # On a GPU, TF32 is on for products while the norms and sums are formed: a product of unrounded operands
    # would round them in hardware, outside every bound. Watched here at the operator level (norm layers' weighted
    # sums, kept gradients, biases, Gram matrices, patches, Embedding, under bf16 autocast too).
    from privml.torch._ghost import engine

    model, x, y = _setup(name)
    watch = _ProductOperands()

    @contextlib.contextmanager
    def watched():
        with tf32_products(), watch:
            yield

    with (mock.patch.object(engine, "tf32_products", watched),
          torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()):
        ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.01, clip_precision="tf32")
    assert watch.rounded and all(watch.rounded), watch.rounded


def test_a_layer_re_prepared_from_bf16_is_bounded():
    # Under bf16 autocast a layer's instantiated gradients can be dropped for its half-precision input and
    # gradient (fewer bytes); its sum is then a product, and must carry the product's bound.
    class Positions(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)
            self.head = nn.Linear(256, 3, bias=False).requires_grad_(False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.b(torch.relu(self.a(x)))).flatten(1)).float()

    torch.manual_seed(0)
    model, x, y = Positions(), torch.randn(32, 16, 16) * 3, torch.randint(0, 3, (32,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        terms = _contributions(model, x, y, 1e-4)
    assert max(terms) <= 1e-4 * (1 + 1e-6), max(terms) / 1e-4


def test_a_huge_activation_is_clipped_not_turned_into_nan():
    # An input near float32's maximum: its norm overflows and its clip factor is 0, so its term must be 0. Had the
    # rounding overflowed to infinity, the term would be 0 * inf = NaN, and the sum with it.
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.zero_(), model.bias.zero_()
    x = torch.tensor([[3.4028235e38, 0.0], [1.0, 2.0]])
    sums, norms = ghost_clipped_sum(model, cross_entropy_per_example, x, torch.tensor([0, 1]), 0.1,
                                    clip_precision="tf32")
    assert torch.isinf(norms[0]) and all(bool(torch.isfinite(v).all()) for v in sums.values())


@pytest.mark.parametrize("name", ["sequence", "convolutions", "transformer"])
def test_a_batch_sums_its_examples_terms(name):
    # The terms are per example: the batch's sum is theirs, so C bounds what adding or removing one example
    # changes. Up to floating point: the forward and backward passes give an example's input and gradient
    # last-bit differences in another batch (measured: 3e-7 of the sum in "fp32"), which rounding to TF32 can
    # turn into one TF32 unit in an element (5e-5 here).
    model, x, y = _setup(name)
    batch, _ = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.05, clip_precision="tf32")
    alone = [ghost_clipped_sum(model, cross_entropy_per_example, x[k : k + 1], y[k : k + 1], 0.05,
                               clip_precision="tf32")[0] for k in range(x.shape[0])]
    names = sorted(batch)
    total = torch.cat([sum(parts[key] for parts in alone).flatten() for key in names])
    together = torch.cat([batch[key].flatten() for key in names])
    assert float((together - total).norm() / together.norm()) < 2e-4


@pytest.mark.parametrize("name", sorted(CASES))
def test_tf32_sums_are_close_to_float32_sums(name):
    model, x, y = _setup(name)
    _, norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 1.0)
    clip_norm = float(norms.median())  # some clipped, some not
    exact, exact_norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, clip_norm)
    rounded, rounded_norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, clip_norm,
                                               clip_precision="tf32")
    names = sorted(exact)
    assert names == sorted(rounded)
    a, b = (torch.cat([sums[key].flatten() for key in names]) for sums in (exact, rounded))
    assert float((b - a).norm() / a.norm()) < 3e-3  # the whole gradient (a single tensor's sum may cancel out)
    torch.testing.assert_close(rounded_norms, exact_norms, rtol=2e-3, atol=0)


def test_float64_layers_are_not_rounded():
    # float64 products never use TF32: "tf32" leaves them exact, so the sums equal "fp32"'s.
    model, x, y = _setup("sequence")
    model, x = model.double(), x.double()
    exact, _ = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.01)
    rounded, _ = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.01, clip_precision="tf32")
    for key in exact:
        torch.testing.assert_close(rounded[key], exact[key], rtol=1e-12, atol=0)


def test_bf16_passes_with_tf32_clipping_stay_within_the_clip_norm():
    model, x, y = _setup("tramer-boneh")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        terms = _contributions(model, x, y, 1e-3)
    assert max(terms) <= 1e-3 * (1 + 1e-6)


def test_unknown_clip_precision_is_refused():
    model, x, y = _setup("sequence")
    with pytest.raises(ValueError, match="clip_precision must be one of fp32, tf32"):
        ghost_clipped_sum(model, cross_entropy_per_example, x, y, 1.0, clip_precision="fp16")


def _engine(model, **kwargs):
    return DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=100, clip_norm=0.1,
                 batch_size=10, steps=2, noise_multiplier=1.0, seed=0, **kwargs)


def test_dpsgd_takes_tf32_clipping_and_reports_it():
    model, x, y = _setup("tramer-boneh")
    engine = _engine(model, clip_precision="tf32")
    before = [p.detach().clone() for p in model.parameters()]
    engine.step(x, y)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert engine.info()["clip_precision"] == "tf32"
    assert _engine(TramerBonehCNN()).info()["clip_precision"] == "fp32"


def test_dpsgd_refuses_tf32_clipping_it_cannot_do():
    with pytest.raises(ValueError, match="clip_precision must be one of fp32, tf32, got 'bf16'"):
        _engine(TramerBonehCNN(), clip_precision="bf16")
    with pytest.raises(ValueError, match="clip_precision='tf32' needs ghost clipping.*mode='vmap'"):
        _engine(TramerBonehCNN(), clip_precision="tf32", mode="vmap")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_tf32_clipping_does_not_depend_on_the_tf32_setting():
    # Every product multiplies operands privml rounded to TF32, so the hardware's TF32 changes nothing.
    model, x, y = _setup("resnet")
    model, x, y = model.cuda(), x.cuda(), y.cuda()
    results = []
    for allowed in ("tf32", "ieee"):
        with mock.patch("privml.torch._ghost.engine.tf32_products",
                        lambda allowed=allowed: _fixed_products(allowed)):
            results.append(ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.05, clip_precision="tf32")[0])
    names = sorted(results[0])
    on, off = (torch.cat([r[key].flatten() for key in names]) for r in results)
    assert float((on - off).norm() / off.norm()) < 1e-5  # float32 accumulation order only


def _fixed_products(setting):
    from privml.torch._ghost import precision

    return precision._products(matmul_tf32=setting == "tf32")


def test_rounding_bound_covers_the_double_rounding_of_a_scaled_gradient():
    # fl(c g) then rounded to TF32 is within ROUNDING_BOUND of the exact c g (g already TF32, c any float32).
    torch.manual_seed(2)
    g = round_to_tf32(torch.randn(100_000))
    c = torch.rand(100_000) * 0.999 + 1e-3
    got = round_to_tf32(g * c).double()
    exact = g.double() * c.double()
    nonzero = exact != 0
    assert float(((got - exact).abs() / exact.abs())[nonzero].max()) <= ROUNDING_BOUND


def _twin_weight_grad(layer: nn.Module, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The weight gradient of ``sum(layer(x) * g)`` for a float64 copy of ``layer``: float64's exact reference."""
    twin = copy.deepcopy(layer).double()
    return torch.autograd.grad((twin(x.double()) * g.double()).sum(), twin.weight)[0]


@pytest.mark.parametrize("layer, shape", [
    (nn.Linear(6, 5), (5, 4, 6)),
    (nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), (5, 4, 9, 9)),
    (nn.Conv1d(3, 4, 2), (5, 3, 9)),
])
def test_the_tf32_sum_is_the_documented_arithmetic(layer, shape):
    # The proof bounds sum_k sum_t round(c_k round(g_kt)) round(a_kt)^T against c_k times the gradient of the rounded
    # operands: the rule must compute exactly that (up to float32 accumulation), here against float64.
    from privml.torch._ghost.rules import rule_for

    torch.manual_seed(3)
    x = torch.randn(*shape)
    g = torch.randn_like(layer(x))
    factors = torch.rand(5) * 0.9 + 0.05
    got = rule_for(layer).prepare(layer, x, g.detach(), tf32=True).clipped_sum(factors, tf32=True)["weight"]
    scaled = round_to_tf32(round_to_tf32(g.detach()) * factors.reshape(-1, *[1] * (g.dim() - 1)))
    torch.testing.assert_close(got.double(), _twin_weight_grad(layer, round_to_tf32(x), scaled), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layer, shape", [
    (nn.Linear(6, 5), (5, 4, 6)),
    (nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), (5, 4, 9, 9)),
    (nn.Conv2d(2, 3, 3, padding=1), (5, 2, 16, 16)),  # keeps its instantiated gradients
    (nn.Conv1d(3, 4, 2), (5, 3, 9)),
])
def test_the_tf32_norms_are_those_of_the_rounded_operands_gradients(layer, shape):
    # The weight's per-example gradient of the rounded input and output gradient; a convolution's bias's of the
    # gradient as it is (a sum without products, the same in its norms and sum), a Linear layer's of the rounded one.
    from privml.torch._ghost.rules import rule_for

    torch.manual_seed(4)
    x = torch.randn(*shape)
    g = torch.randn_like(layer(x)).detach()
    got = rule_for(layer).prepare(layer, x, g, tf32=True).squared_norms()
    bias_grads = round_to_tf32(g).sum(1) if isinstance(layer, nn.Linear) else g.reshape(*g.shape[:2], -1).sum(2)
    expected = torch.stack([
        _twin_weight_grad(layer, round_to_tf32(x[k : k + 1]), round_to_tf32(g[k : k + 1])).square().sum()
        + bias_grads[k].double().square().sum()
        for k in range(shape[0])
    ])
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=0)


def _linear_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Example i's output gradient is exactly ``y[i]``: the tests below choose it."""
    return (out * y).sum(tuple(range(1, out.dim())))


# Two positions whose terms cancel, built so that float32 loses the norm whatever the kernel: inputs
# a_t = (B, e_t, 0, ..., 0) with B = 2^13 and e_t = +-1 (all TF32-exact), output gradients +1 and -1. Every Gram
# entry a_t . a_s is 2^26 + e_t e_s, which float32 rounds to 2^26 whatever the order of the sum or the use of
# FMA: the other 4094 products are 0, and 2^26 +- 1 lies within half a spacing of 2^26 (float32's spacing is 8
# above 2^26, 4 below). So every entry is exactly 2^26, and the trace's four terms, +-2^26 times the gradients'
# Gram entries (+-4, exact), sum to exactly 0 in any order. The true per-example
# gradient is the difference of the positions, (0, 2, 0, ...) per output: its norm is 4 (linear, conv), 2
# (embedding). The inputs are 4096 wide so that the Gram trace is the cheaper norm (the engine's choice).
_B, _WIDTH = 2.0**13, 4096


def _cancelling_rows() -> torch.Tensor:
    rows = torch.zeros(2, _WIDTH)
    rows[:, 0], rows[0, 1], rows[1, 1] = _B, 1.0, -1.0
    assert all(float(torch.tensor(_B * _B + e, dtype=torch.float32)) == _B * _B for e in (1.0, -1.0))
    return rows


def _cancelling(kind: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    rows = _cancelling_rows()
    if kind == "linear":
        y = torch.ones(1, 2, 4)
        y[0, 1] = -1
        return nn.Linear(_WIDTH, 4, bias=False), rows.unsqueeze(0), y
    if kind == "conv":
        y = torch.ones(1, 4, 2)
        y[0, :, 1] = -1
        return nn.Conv1d(_WIDTH, 4, 1, bias=False), rows.T.unsqueeze(0).contiguous(), y
    # An Embedding: the same token twice, with gradients (B, 1, 0, ...) and (-B, 1, 0, ...), whose sum is
    # (0, 2, 0, ...); the Gram entries are +-2^26 +- 1, so again exactly +-2^26.
    y = rows.clone().unsqueeze(0)
    y[0, 1, 0], y[0, 1, 1] = -_B, 1.0
    return nn.Embedding(3, _WIDTH), torch.tensor([[1, 1]]), y


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("kind", ["linear", "conv", "embedding"])
def test_a_norm_lost_to_cancellation_still_bounds_the_term(kind, precision):
    # Without the Gram traces' floating-point bound this example moves the sum by up to 40 C (20 C, embedding).
    model, x, y = _cancelling(kind)
    sums, norms = ghost_clipped_sum(model, _linear_loss, x, y, 0.1, clip_precision=precision)
    true = _twin_weight_grad(model, x, y).norm() if kind != "embedding" else (y[0, 0].double() + y[0, 1].double()).norm()
    assert float(true) == (2.0 if kind == "embedding" else 4.0)
    assert float(norms[0]) == 0.0  # the computed norm lost all of it, on any IEEE-754 machine
    assert _norm(sums) <= 0.1 * (1 + 1e-6)


def test_a_convolutions_bias_is_summed_from_the_values_its_norms_were_taken_of():
    # One example's output gradient cancels (2^40 and -2^40) around a smaller value: summed over positions one way
    # it is 0, another way 1e4. The norm saw the first; the backward kernel's own reduction over the batch can give
    # the second, which would then pass unclipped (a review found the kernel adding 1e4 where the norm saw 0).
    from privml.torch._ghost.rules import rule_for

    layer = nn.Conv1d(2, 1, 1)
    x = torch.zeros(8, 2, 64)
    g = torch.randn(8, 1, 64)
    g[3] = 0
    g[3, 0, 31], g[3, 0, 2], g[3, 0, 34] = 2.0**40, -(2.0**40), 1.0e4
    prepared = rule_for(layer).prepare(layer, x, g)
    prepared.squared_norms()
    per_example = g.reshape(8, 1, -1).sum(2)  # the norms' reduction
    factors = torch.rand(8)
    got = prepared.clipped_sum(factors)["bias"]
    torch.testing.assert_close(got, factors @ per_example, rtol=1e-6, atol=1e-3)


def test_book_kept_convolution_sums_from_patches_equal_the_brute_force():
    # The products-of-patches sum (a GPU's float32 path, and "tf32"'s) against one backward per example, in float64.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _brute_force import assert_clipped_sums_match

    torch.manual_seed(5)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=2, dilation=2, groups=1), nn.Tanh(),
        nn.Conv2d(16, 32, 3, padding=1, groups=4), nn.Tanh(), nn.Flatten(), nn.Linear(32 * 4 * 4, 3),
    ).double()
    x, y = torch.randn(6, 3, 8, 8, dtype=torch.float64), torch.randint(0, 3, (6,))
    with mock.patch.dict(conv.KERNEL_SUMS, {"cpu": False}):
        assert_clipped_sums_match(model, x, y)
