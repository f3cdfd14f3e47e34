"""The GPU benchmark's profile attribution, on a profile shaped like torch's CUDA one (CI has no GPU).

On CUDA the profiler records each kernel twice (as a device event, and
attached to the operator that launched it) and mirrors every
``record_function`` range as a device span that includes idle time; the
attribution must count each kernel once and a phase by its kernels only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.autograd import DeviceType  # noqa: E402
from torch.autograd.profiler_util import EventList, FunctionEvent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import torch_gpu  # noqa: E402


def _event(i, name, start, end, *, thread=1, device=DeviceType.CPU, annotation=False):
    return FunctionEvent(id=i, name=name, thread=thread, start_us=start, end_us=end, use_device="cuda",
                         device_type=device, is_user_annotation=annotation, stack=[], input_shapes=[])


def _one_cuda_step() -> EventList:
    # privml::forward holds aten::mm, whose 30-us float32 GEMM runs after 20 us of GPU idle time; the optimiser's
    # own range holds aten::add_ and a 5-us kernel.
    forward, mm = _event(1, "privml::forward", 0, 100, annotation=True), _event(2, "aten::mm", 10, 20)
    mm.append_kernel("sm80_xmma_gemm_f32f32_f32f32_f32_nn", 0, 30)
    optimiser = _event(3, "Optimizer.step#SGD.step", 200, 260, annotation=True)
    add = _event(4, "aten::add_", 210, 220)
    add.append_kernel("void at::native::vectorized_elementwise_kernel<4>", 0, 5)
    device = [
        _event(5, "sm80_xmma_gemm_f32f32_f32f32_f32_nn", 50, 80, thread=7, device=DeviceType.CUDA),
        _event(6, "void at::native::vectorized_elementwise_kernel<4>", 300, 305, thread=7, device=DeviceType.CUDA),
        _event(7, "privml::forward", 30, 110, thread=7, device=DeviceType.CUDA, annotation=True),
        _event(8, "Optimizer.step#SGD.step", 300, 305, thread=7, device=DeviceType.CUDA, annotation=True),
    ]
    events = EventList([forward, mm, optimiser, add, *device], use_device="cuda")
    events._build_tree()
    return events


def test_each_kernel_counts_once_and_a_phase_by_its_kernels(monkeypatch):
    events = _one_cuda_step()

    class Recorded:
        def __init__(self, **options) -> None:
            pass

        def __enter__(self) -> Recorded:
            return self

        def __exit__(self, *exc) -> bool:
            return False

        def events(self) -> EventList:
            return events

    monkeypatch.setattr(torch.profiler, "profile", Recorded)
    monkeypatch.setattr(torch_gpu, "sync", lambda device: None)
    out = torch_gpu.profile_step(lambda: None, "cuda", steps=1)
    assert out["total_ms"] == pytest.approx(0.035)
    assert out["phases_ms"] == {"forward": pytest.approx(0.030)}
    assert [k["name"] for k in out["top"]] == ["sm80_xmma_gemm_f32f32_f32f32_f32_nn",
                                               "void at::native::vectorized_elementwise_kernel<4>"]
    assert out["classes_ms"] == {"fp32": pytest.approx(0.030), "other": pytest.approx(0.005)}


def test_on_the_cpu_phases_and_operators_come_from_a_real_profile():
    from privml.torch import DPSGD, TramerBonehCNN

    torch.manual_seed(0)
    model = TramerBonehCNN()
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=1000, clip_norm=0.1,
                   batch_size=8, noise_multiplier=1.0, seed=0)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    out = torch_gpu.profile_step(lambda: engine.step(x, y), "cpu", steps=2)
    assert set(out["phases_ms"]) == {"forward", "backward", "norms", "clipped_sums", "noise", "optimizer"}
    assert 0 < out["phases_ms"]["norms"] <= out["phases_ms"]["backward"] and out["total_ms"] > 0
