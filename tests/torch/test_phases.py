"""Named phases of a DP-SGD step: visible to torch.profiler, free and inert otherwise."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from privml.torch import DPSGD  # noqa: E402
from privml.torch._phases import PHASES, phase  # noqa: E402


def _engine() -> tuple[DPSGD, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = DPSGD(model, optimizer=optimizer, n_samples=100, clip_norm=1.0, batch_size=10, noise_multiplier=1.0,
                   mode="ghost", seed=3)
    generator = torch.Generator().manual_seed(1)
    return engine, torch.randn(10, 1, 8, 8, generator=generator), torch.randint(0, 3, (10,), generator=generator)


def test_phase_is_a_no_op_without_a_profiler_and_a_range_with_one() -> None:
    assert isinstance(phase("norms"), nullcontext)
    with profile(activities=[ProfilerActivity.CPU]):
        assert isinstance(phase("norms"), record_function)
    assert isinstance(phase("norms"), nullcontext)


def test_unknown_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown phase 'norm'"):
        phase("norm")


def test_a_profiled_ghost_step_shows_every_phase_once_per_layer_and_step() -> None:
    engine, x, y = _engine()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.step(x, y)
        engine.step(x, y)
    counts = {e.key.removeprefix("privml::"): e.count for e in prof.key_averages() if e.key.startswith("privml::")}
    # The norms are formed once per parameterised layer (2) as its output gradient arrives; the rest once a step.
    assert counts == {"forward": 2, "backward": 2, "norms": 4, "clipped_sums": 2, "noise": 2, "optimizer": 2}
    assert set(counts) == set(PHASES)


def test_profiling_does_not_change_the_step() -> None:
    plain, x, y = _engine()
    plain.step(x, y)
    profiled, _, _ = _engine()
    with profile(activities=[ProfilerActivity.CPU]):
        profiled.step(x, y)
    for a, b in zip(plain.module.parameters(), profiled.module.parameters(), strict=True):
        assert torch.equal(a, b)
