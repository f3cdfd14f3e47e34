"""Ghost clipping: norms and clipped sums equal those from materialised per-example gradients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from privml.torch import (  # noqa: E402
    DPSGD,
    GroupNormResNet,
    TramerBonehCNN,
    cross_entropy_per_example,
    ghost_clipped_sum,
    per_example_gradients,
    vmap_clipped_sum,
)
from privml.torch._ghost.base import outer_product_norms  # noqa: E402
from privml.torch._per_sample import flat_norms  # noqa: E402
from tests.torch._models import LAYER_KINDS, single_layer  # noqa: E402


def assert_ghost_matches(model, x, y, clip_norm):
    ghost_sums, ghost_norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, clip_norm)
    vmap_sums, _ = vmap_clipped_sum(model, cross_entropy_per_example, x, y, clip_norm)
    truth = flat_norms(per_example_gradients(model, cross_entropy_per_example, x, y))
    torch.testing.assert_close(ghost_norms, truth, rtol=1e-10, atol=1e-12)
    assert set(ghost_sums) == set(vmap_sums)
    for name, value in vmap_sums.items():
        torch.testing.assert_close(ghost_sums[name], value, rtol=1e-9, atol=1e-12)
    return truth


def assert_exact_where_the_clip_binds_for_all_and_for_some(model, x, y):
    # The clip binds for some examples and not others only if C sits inside the range of norms;
    # at C = 0.05 it binds everywhere, so check a C in the middle too.
    norms = assert_ghost_matches(model, x, y, clip_norm=0.05)
    assert_ghost_matches(model, x, y, clip_norm=float(norms.median()))


def force(monkeypatch, **helpers):
    """Replace the rules' cost decisions by name, in every rule module that imported them."""
    import privml.torch._ghost.base as base
    import privml.torch._ghost.conv as conv

    for name, value in helpers.items():
        for module in (base, conv):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, value)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_ghost_norms_and_sums_match_materialised(kind):
    assert_exact_where_the_clip_binds_for_all_and_for_some(*single_layer(kind))


@pytest.mark.parametrize("kind", [k for k in LAYER_KINDS if k.startswith("conv")])
@pytest.mark.parametrize("gram", [True, False])
def test_both_convolution_norm_formulas_are_exact(kind, gram, monkeypatch):
    # Mixed ghost clipping picks a formula per layer by cost; force each one on every convolution kind.
    force(monkeypatch, ghost_norm_is_cheaper=lambda *shape: gram)
    assert_exact_where_the_clip_binds_for_all_and_for_some(*single_layer(kind))


@pytest.mark.parametrize("kind", [k for k in LAYER_KINDS if k.startswith(("conv", "linear"))])
@pytest.mark.parametrize("keep", [True, False])
def test_kept_per_example_gradients_and_book_keeping_give_the_same_sums(kind, keep, monkeypatch):
    # A layer keeps its instantiated per-example gradients or its input and output gradient, by size; force each
    # on every convolution and linear kind (the Gram branch cannot keep: force instantiation then).
    force(monkeypatch, ghost_norm_is_cheaper=lambda *shape: False,
          instantiation_is_kept=lambda steps, d, p, given: keep and steps > 1)  # T = 1: nothing to instantiate
    assert_exact_where_the_clip_binds_for_all_and_for_some(*single_layer(kind))


@pytest.mark.parametrize("kind", [k for k in LAYER_KINDS if k.startswith(("conv", "linear"))])
@pytest.mark.parametrize(("gram", "grouped"), [(True, False), (False, False), (False, True)])
def test_norms_by_chunks_of_one_example_are_exact(kind, gram, grouped, monkeypatch):
    # The transient bound splits the batch into chunks; the smallest chunks must give the same norms and sums.
    import privml.torch._ghost.conv as conv

    monkeypatch.setitem(conv.GROUPED_INSTANTIATION, "cpu", grouped)
    force(monkeypatch, ghost_norm_is_cheaper=lambda *shape: gram, rows_per_chunk=lambda *sizes: 1)
    assert_exact_where_the_clip_binds_for_all_and_for_some(*single_layer(kind))


@pytest.mark.parametrize("kind", [k for k in LAYER_KINDS if k.startswith("conv")])
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("keep", [True, False])
def test_both_instantiations_of_convolution_gradients_are_exact(kind, grouped, keep, monkeypatch):
    # Per-example weight gradients come from one grouped weight-gradient kernel or from patches and batched
    # products (by device); each, kept or not, on every convolution kind (1-3 D, dilated, grouped, depthwise).
    import privml.torch._ghost.conv as conv

    calls = []
    real = conv.per_example_weight_grads
    monkeypatch.setattr(conv, "per_example_weight_grads", lambda *args: calls.append(1) or real(*args))
    monkeypatch.setitem(conv.GROUPED_INSTANTIATION, "cpu", grouped)
    force(monkeypatch, ghost_norm_is_cheaper=lambda *shape: False,
          instantiation_is_kept=lambda steps, d, p, given: keep and steps > 1)
    assert_exact_where_the_clip_binds_for_all_and_for_some(*single_layer(kind))
    assert bool(calls) == grouped


def test_the_grouped_instantiation_is_the_cpu_default_and_gives_each_examples_gradient():
    import privml.torch._ghost.conv as conv

    assert conv.GROUPED_INSTANTIATION.get("cpu") is True
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 4, 3, stride=2, padding=1, dilation=2, groups=1).double()
    x = torch.randn(5, 3, 9, 9, dtype=torch.float64)
    out = layer(x)
    g = torch.randn_like(out)
    grads = conv.per_example_weight_grads(layer, x, g)
    for i in range(5):
        layer.zero_grad()
        (layer(x[i : i + 1]) * g[i : i + 1]).sum().backward()
        torch.testing.assert_close(grads[i], layer.weight.grad, rtol=1e-12, atol=1e-12)


def test_early_convolutions_keep_their_per_example_gradients():
    # 32 x 32 inputs, 16 channels, 3 x 3: 16 x 144 numbers per example against 2 x 16 x 1024 for input and gradient.
    from privml.torch._ghost.base import instantiation_is_kept

    assert instantiation_is_kept(steps=1024, d=144, p=16, given=2 * 16 * 1024)
    assert not instantiation_is_kept(steps=64, d=1152, p=128, given=2 * 128 * 64)  # late: Gram, keep a and g
    assert not instantiation_is_kept(steps=1, d=512, p=10, given=522)  # a classifier head: nothing to instantiate


def test_ghost_on_whole_models():
    torch.manual_seed(3)
    cnn = TramerBonehCNN().double()
    assert_ghost_matches(cnn, torch.randn(5, 1, 28, 28, dtype=torch.float64), torch.tensor([0, 1, 2, 3, 4]), 0.1)
    resnet = GroupNormResNet(width=4, groups=2).double()
    assert_ghost_matches(resnet, torch.randn(4, 1, 12, 12, dtype=torch.float64), torch.tensor([5, 6, 7, 8]), 0.1)


@pytest.mark.parametrize("steps,d,p", [(1, 4, 3), (2, 50, 40), (30, 3, 2)])
def test_both_ghost_formulas_are_exact(steps, d, p):
    # (2, 50, 40) takes the Gram-trace branch, (30, 3, 2) the materialising one.
    torch.manual_seed(4)
    a = torch.randn(5, steps, d, dtype=torch.float64)
    g = torch.randn(5, steps, p, dtype=torch.float64)
    truth = torch.einsum("btp,btd->bpd", g, a).square().sum((1, 2))
    torch.testing.assert_close(outer_product_norms(a, g), truth)


def test_unsupported_layer_is_rejected_with_a_pointer_to_vmap():
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.s

    model = nn.Sequential(nn.Linear(4, 3), Scale())
    with pytest.raises(ValueError, match="mode='vmap'"):
        ghost_clipped_sum(model, cross_entropy_per_example, torch.randn(2, 4), torch.tensor([0, 1]), 1.0)


def test_shared_layer_is_rejected():
    layer = nn.Linear(3, 3)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(torch.tanh(self.layer(x)))

    with pytest.raises(ValueError, match="more than once"):
        ghost_clipped_sum(Twice(), cross_entropy_per_example, torch.randn(2, 3), torch.tensor([0, 1]), 1.0)


def test_a_parameter_tied_between_two_layers_is_rejected_and_auto_falls_back_to_vmap():
    # Each module's norm would cover its own use and one module's sum replace the other's.
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    model[2].weight = model[0].weight
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    with pytest.raises(ValueError, match="tied weights"):
        ghost_clipped_sum(model, cross_entropy_per_example, x, y, 1.0)
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=10, clip_norm=1.0,
                   batch_size=4, noise_multiplier=1.0, steps=1)
    assert engine.mode == "vmap"


def test_a_parameter_a_rule_does_not_cover_is_rejected():
    # It would be released as zero: the rule forms the gradients of weight and bias only.
    layer = nn.Linear(3, 3)
    layer.scale = nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match=r"does not cover \(scale\)"):
        ghost_clipped_sum(layer, cross_entropy_per_example, torch.randn(2, 3), torch.tensor([0, 1]), 1.0)


def test_non_zero_padding_mode_is_rejected_with_a_pointer_to_vmap():
    model = nn.Sequential(nn.Conv1d(2, 2, 3, padding=1, padding_mode="reflect"), nn.Flatten())
    with pytest.raises(ValueError, match="numeric zero padding only.*mode='vmap'"):
        ghost_clipped_sum(model, cross_entropy_per_example, torch.randn(2, 2, 4), torch.tensor([0, 1]), 1.0)


def test_only_the_bias_of_a_grouped_convolution_trained():
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(4, 4, 3, groups=2), nn.Flatten(), nn.Linear(4, 3)).double()
    model[0].weight.requires_grad_(False)
    assert_ghost_matches(model, torch.randn(5, 4, 3, 3, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1]), 0.1)


def test_batch_averaged_loss_is_rejected():
    model = nn.Sequential(nn.Linear(3, 2))
    mean_loss = lambda out, y: nn.functional.cross_entropy(out, y)  # noqa: E731
    with pytest.raises(ValueError, match="one loss per example"):
        ghost_clipped_sum(model, mean_loss, torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), 1.0)


def test_in_place_activation_after_a_layer_is_refused():
    # ReLU(inplace=True) rewrites the Linear output: its recorded gradient would be the ReLU's.
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(inplace=True), nn.Linear(5, 2))
    with pytest.raises(ValueError, match="in place"):
        ghost_clipped_sum(model, cross_entropy_per_example, torch.randn(3, 4), torch.tensor([0, 1, 0]), 1.0)
    model[1].inplace = False
    sums, norms = ghost_clipped_sum(model, cross_entropy_per_example, torch.randn(3, 4), torch.tensor([0, 1, 0]), 1.0)
    assert norms.shape == (3,)


def test_every_layer_rule_is_in_the_table():
    import inspect

    from privml.torch._ghost import base, conv, embedding, linear, norm, rules

    defined = {cls for module in (conv, embedding, linear, norm) for _, cls in inspect.getmembers(module, inspect.isclass)
               if issubclass(cls, base.LayerRule) and not inspect.isabstract(cls) and cls.__module__ == module.__name__}
    assert defined and defined == {type(rule) for rule in rules._RULES.values()}
    assert rules.rule_for(nn.GroupNorm(2, 4)) is not None and rules.rule_for(nn.Linear(2, 2)) is not None


def test_a_transient_over_budget_is_split_into_equal_chunks_once(monkeypatch):
    # 2 T^2 = 800 numbers of Gram matrices per example against a and g's T (p + d) = 140: chunks of 8 examples
    # of 48 (140 x 48 / 800 = 8), formed once, not halved again inside each chunk.
    import privml.torch._ghost.base as base

    calls = []
    real = torch.bmm
    monkeypatch.setattr(base, "ghost_norm_is_cheaper", lambda *shape: True)
    monkeypatch.setattr(base.torch, "bmm", lambda x, y: calls.append(x.shape[0]) or real(x, y))
    a, g = torch.randn(48, 20, 4, dtype=torch.float64), torch.randn(48, 20, 3, dtype=torch.float64)
    truth = torch.einsum("btp,btd->bpd", g, a).square().sum((1, 2))
    torch.testing.assert_close(base.outer_product_norms(a, g), truth)
    assert calls == [8] * 12  # two products per chunk, six chunks


def test_a_devices_chunk_floor_lets_a_small_transient_be_one_chunk(monkeypatch):
    # The same Gram transient as above: with the device's floor (CHUNK_FLOOR, 2^25 numbers on a GPU) above it,
    # the 48 examples are one chunk; the norms are the same.
    import privml.torch._ghost.base as base

    calls = []
    real = torch.bmm
    monkeypatch.setattr(base, "ghost_norm_is_cheaper", lambda *shape: True)
    monkeypatch.setattr(base.torch, "bmm", lambda x, y: calls.append(x.shape[0]) or real(x, y))
    monkeypatch.setitem(base.CHUNK_FLOOR, "cpu", 48 * 800)
    a, g = torch.randn(48, 20, 4, dtype=torch.float64), torch.randn(48, 20, 3, dtype=torch.float64)
    truth = torch.einsum("btp,btd->bpd", g, a).square().sum((1, 2))
    torch.testing.assert_close(base.outer_product_norms(a, g), truth)
    assert calls == [48, 48]


@pytest.mark.parametrize("tf32", [False, True])
def test_a_convolutions_norms_and_sum_use_the_devices_chunk_floor(tf32, monkeypatch):
    # Every chunked pass of a convolution (patches for the norms and for the products-of-patches sum) takes the
    # device's floor: one chunk each when the floor holds the whole batch's transient, and the same results.
    import privml.torch._ghost.base as base
    import privml.torch._ghost.conv as conv

    monkeypatch.setitem(conv.KERNEL_SUMS, "cpu", False)  # the GPU's products of patches ...
    monkeypatch.setitem(conv.GROUPED_INSTANTIATION, "cpu", False)  # ... and patches for the norms
    dtype = torch.float32 if tf32 else torch.float64  # TF32 rounding is of float32 operands
    torch.manual_seed(0)
    layer = nn.Conv2d(4, 6, 3, padding=1).to(dtype)
    a, g = torch.randn(32, 4, 8, 8, dtype=dtype), torch.randn(32, 6, 8, 8, dtype=dtype)
    factors = torch.rand(32, dtype=dtype)

    def run(floor: int) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        sizes = []
        real = conv.patches
        monkeypatch.setitem(base.CHUNK_FLOOR, "cpu", floor)
        monkeypatch.setattr(conv, "patches", lambda module, x: sizes.append(x.shape[0]) or real(module, x))
        prepared = conv.ConvRule().prepare(layer, a, g, tf32=tf32)
        norms = prepared.squared_norms()
        total = prepared.clipped_sum(factors, tf32=tf32)["weight"]
        monkeypatch.setattr(conv, "patches", real)
        return sizes, norms, total

    chunked, norms, total = run(0)
    assert len(chunked) > 2  # without a floor the layer's own size chunks it
    whole, norms_whole, total_whole = run(10**9)
    assert whole == [32, 32]  # one chunk for the norms, one for the sum
    torch.testing.assert_close(norms_whole, norms)
    torch.testing.assert_close(total_whole, total)


def test_layers_that_do_not_reach_the_loss_or_do_not_run_contribute_zero():
    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(4, 3)
            self.dangling = nn.Linear(4, 2)  # runs, but its output never reaches the loss
            self.skipped = nn.Linear(4, 2)  # never runs

        def forward(self, x):
            self.dangling(x)
            return self.used(x)

    torch.manual_seed(6)
    model = Branches().double()
    x, y = torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    truth = assert_ghost_matches(model, x, y, clip_norm=0.1)
    sums, norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.1)
    for name in ("dangling.weight", "dangling.bias", "skipped.weight", "skipped.bias"):
        assert torch.count_nonzero(sums[name]) == 0
    torch.testing.assert_close(norms, truth)


def test_a_step_under_no_grad_is_refused_rather_than_summed_to_zero():
    model = nn.Sequential(nn.Linear(4, 3)).double()
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.tensor([0, 1, 2])
    with torch.no_grad(), pytest.raises(ValueError, match="no_grad"):
        ghost_clipped_sum(model, cross_entropy_per_example, x, y, 1.0)


def test_the_clipped_sums_hold_no_graph():
    # A graph behind a sum would keep its layer's input and scaled gradient alive as long as the sum.
    torch.manual_seed(0)
    model = GroupNormResNet(width=4, groups=2).double()
    x, y = torch.randn(4, 1, 12, 12, dtype=torch.float64), torch.tensor([0, 1, 2, 3])
    sums, norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.1)
    assert not norms.requires_grad and not any(value.requires_grad for value in sums.values())


@pytest.mark.parametrize(("side", "kept"), [(8, False), (16, True)])
def test_a_grouped_convolution_keeps_its_gradients_only_if_all_groups_take_less_room(side, kept):
    # Conv2d(32, 32, 3, groups=2): 2 x 16 x 144 = 4,608 numbers of per-example gradients against 2 x 32 x side^2
    # of input and output gradient: 4,096 at 8 x 8 (keep a and g), 16,384 at 16 x 16 (keep the gradients).
    from privml.torch._ghost.rules import rule_for

    layer = nn.Conv2d(32, 32, 3, groups=2, padding=1)
    a, g = torch.randn(2, 32, side, side), torch.randn(2, 32, side, side)
    prepared = rule_for(layer).prepare(layer, a, g)
    prepared.squared_norms()
    assert (prepared.compact() is not None) == kept


def test_under_bf16_a_layer_keeps_per_example_gradients_only_if_they_take_fewer_bytes(monkeypatch):
    # Conv2d(16, 32, 3, padding=1) on 12 x 12: 32 x 144 = 4,608 numbers of gradients per example against 6,912 of
    # input and output gradient, so fewer numbers, but 18,432 float32 bytes against 13,824 in bfloat16.
    import privml.torch._ghost.engine as engine

    kept = []
    real = engine._GhostPass.receive

    def spy(self, index, grad):
        real(self, index, grad)
        layer = self.layers[index]  # a layer that keeps its gradients lets go of its input
        kept.append((type(layer.module).__name__, layer.activation is None))

    monkeypatch.setattr(engine._GhostPass, "receive", spy)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.Flatten(), nn.Linear(32 * 144, 3))
    x, y = torch.randn(4, 16, 12, 12), torch.tensor([0, 1, 2, 0])
    ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.1)
    assert ("Conv2d", True) in kept  # float32: the gradients are kept
    kept.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sums, norms = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.1)
    assert ("Conv2d", False) in kept  # bf16: a and g, re-prepared for the sum
    total = torch.sqrt(sum(value.double().square().sum() for value in sums.values()))
    assert float(total) <= 4 * 0.1 * (1 + 1e-5) and torch.isfinite(norms).all()


@pytest.mark.parametrize(("channels", "grouped"), [(1, False), (2, True)])
def test_a_single_channel_convolution_instantiates_from_patches(channels, grouped, monkeypatch):
    # A grayscale first layer's patches are cheap and the grouped kernel was slower there: it keeps the patches.
    import privml.torch._ghost.conv as conv

    calls = []
    real = conv.per_example_weight_grads
    monkeypatch.setattr(conv, "per_example_weight_grads", lambda *args: calls.append(1) or real(*args))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(channels, 4, 5, stride=2, padding=2), nn.Flatten(), nn.Linear(4 * 7 * 7, 3))
    x = torch.randn(3, channels, 14, 14, dtype=torch.float64)
    assert_ghost_matches(model.double(), x, torch.tensor([0, 1, 2]), 0.1)
    assert bool(calls) == grouped


def test_a_ghost_step_on_the_gpus_code_path_issues_few_operations_per_non_private_one(monkeypatch):
    # On a GPU each operation costs the host a launch: at 365adcf the eager ghost step of the benchmark ResNet was
    # host-bound (43 ms against 26 ms of kernels on an H200), issuing 11 times the operations of a non-private step
    # at batch 8 as each layer's patches were chunked by its own size. Counted here on the GPU's code path (patches,
    # products-of-patches sums, the chunk floor): 5.3 times non-private with the floor, 11.4 without.
    from torch.utils._python_dispatch import TorchDispatchMode

    import privml.torch._ghost.base as base
    import privml.torch._ghost.conv as conv

    monkeypatch.setitem(conv.KERNEL_SUMS, "cpu", False)
    monkeypatch.setitem(conv.GROUPED_INSTANTIATION, "cpu", False)
    monkeypatch.setitem(base.CHUNK_FLOOR, "cpu", base.CHUNK_FLOOR["cuda"])

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    def operations(step) -> int:
        step()  # first calls (lazy set-up) are not counted
        Count.calls = 0
        with Count():
            step()
        return Count.calls

    torch.manual_seed(0)
    model = GroupNormResNet(in_channels=3, width=16, blocks=1, groups=4)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

    def non_private() -> None:
        model.zero_grad(set_to_none=True)
        cross_entropy_per_example(model(x), y).sum().backward()

    ratio = operations(lambda: ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.1)) / operations(non_private)
    assert ratio <= 6, ratio


def test_a_float64_loss_on_a_float32_model_gives_the_float32_sums():
    # The clip factors take the loss's dtype; each layer's sum takes them in its own (a review found the float32
    # products of a Linear layer refusing float64 factors with a RuntimeError).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(32, 3))
    x, y = torch.randn(5, 1, 6, 6), torch.randint(0, 3, (5,))
    wide, _ = ghost_clipped_sum(model, lambda out, t: cross_entropy_per_example(out, t).double(), x, y, 0.5)
    plain, _ = ghost_clipped_sum(model, cross_entropy_per_example, x, y, 0.5)
    for name, value in plain.items():
        assert wide[name].dtype == torch.float32
        torch.testing.assert_close(wide[name], value)
