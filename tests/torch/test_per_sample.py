"""Per-example gradients (vmap) equal the gradients of batches of one, for every layer and model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from privml.torch import GroupNormResNet, TramerBonehCNN, cross_entropy_per_example, per_example_gradients  # noqa: E402
from privml.torch._per_sample import flat_norms  # noqa: E402
from tests.torch._models import LAYER_KINDS, single_layer  # noqa: E402


def micro_batch_gradients(model, x, y):
    """Ground truth: one ordinary backward pass per example."""
    out = []
    for i in range(x.shape[0]):
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1], reduction="sum").backward()
        out.append({name: p.grad.detach().clone() for name, p in model.named_parameters()})
    return out


def assert_match(model, x, y):
    per_example = per_example_gradients(model, cross_entropy_per_example, x, y)
    truth = micro_batch_gradients(model, x, y)
    assert set(per_example) == {name for name, _ in model.named_parameters()}
    for i, expected in enumerate(truth):
        for name, grad in expected.items():
            torch.testing.assert_close(per_example[name][i], grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_per_example_gradients_equal_batches_of_one(kind):
    assert_match(*single_layer(kind))


def test_tramer_boneh_cnn_per_example_gradients():
    torch.manual_seed(1)
    model = TramerBonehCNN().double()
    assert sum(p.numel() for p in model.parameters()) == 26010  # the paper's parameter count
    assert_match(model, torch.randn(3, 1, 28, 28, dtype=torch.float64), torch.tensor([1, 7, 3]))


def test_resnet_per_example_gradients():
    torch.manual_seed(2)
    model = GroupNormResNet(in_channels=3, n_classes=4, width=4, groups=2).double()
    assert_match(model, torch.randn(3, 3, 8, 8, dtype=torch.float64), torch.tensor([0, 3, 2]))


def test_flat_norm_is_the_norm_of_the_concatenated_gradient():
    model, x, y = single_layer("conv2d")
    per_example = per_example_gradients(model, cross_entropy_per_example, x, y)
    flat = torch.cat([g.reshape(g.shape[0], -1) for g in per_example.values()], dim=1)
    torch.testing.assert_close(flat_norms(per_example), flat.norm(dim=1))


def test_frozen_parameters_are_left_out():
    model, x, y = single_layer("layernorm")
    model[0].weight.requires_grad_(False)
    per_example = per_example_gradients(model, cross_entropy_per_example, x, y)
    assert "0.weight" not in per_example and "0.bias" in per_example
