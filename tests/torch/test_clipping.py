"""Clip factors, and what a record whose gradient is not finite does to a step's sum: nothing."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from privml.torch import DPSGD, TramerBonehCNN  # noqa: E402
from privml.torch._clipping import clip_factors, drop_rows  # noqa: E402


def test_clip_factors_drop_non_finite_norms():
    norms = torch.tensor([0.0, 0.5, 2.0, math.inf, math.nan])
    assert clip_factors(norms, 1.0).tolist() == [1.0, 1.0, 0.5, 0.0, 0.0]


def test_dropped_rows_are_exact_zeros_whatever_they_held():
    t = torch.tensor([[1.0, math.inf], [math.nan, 2.0], [3.0, 4.0]])
    out = drop_rows(t, torch.tensor([True, False, True]))
    assert out.tolist() == [[1.0, math.inf], [0.0, 0.0], [3.0, 4.0]] and t.isnan().any()  # t itself is unchanged


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Tanh(), nn.Linear(5, 3))


def _image():
    torch.manual_seed(0)
    return TramerBonehCNN()


CASES = {
    "mlp": (_mlp, lambda g: torch.randn(8, 6, generator=g)),
    "cnn": (_image, lambda g: torch.rand(8, 1, 28, 28, generator=g)),
}
# Each makes row 3 bad: NaN, infinite, or finite but large enough that the norms' products overflow
BAD = {"nan": math.nan, "inf": math.inf, "overflow": 3e38}


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["ghost", "vmap"])
def test_a_non_finite_record_adds_nothing_to_the_sum(mode, case, bad):
    make_model, make_x = CASES[case]
    model = make_model()
    x = make_x(torch.Generator().manual_seed(1))
    y = torch.arange(8) % 3
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=100, clip_norm=0.5,
                   batch_size=8, noise_multiplier=1.0, steps=1, mode=mode, seed=0)
    x_bad = x.clone()
    x_bad[3] = BAD[bad]
    with_bad, norms = engine.clipped_sum(x_bad, y)
    keep = torch.tensor([0, 1, 2, 4, 5, 6, 7])
    without, _ = engine.clipped_sum(x[keep], y[keep])
    dropped = not torch.isfinite(norms[3])
    assert dropped or bad == "overflow"  # a finite input may still give a finite norm: then it is clipped as usual
    for name, value in with_bad.items():
        assert torch.isfinite(value).all(), name
        if dropped:
            torch.testing.assert_close(value, without[name], rtol=1e-5, atol=1e-6, msg=name)
