"""DP-SGD on a GPU: privml (ghost, ghost in bf16, vmap) vs Opacus 1.6 (hooks, ghost) vs non-private training.

Two parts, in one process, written to ``benchmarks/results/torch_gpu.json``
(and to ``$OUT`` when that is set, for the device tool):

``steps``
    Median milliseconds per logical step and peak GPU memory
    (``torch.cuda.max_memory_allocated`` over the timed steps: model, data,
    optimiser state and the step's working memory) of each variant on each
    row: the Tramer-Boneh CNN at batch 256 and 2048 (MNIST-shaped), a GroupNorm
    ResNet (width 64, 2 blocks per stage, 8 groups) and the WideResNet-16-4 of
    De et al. (2022) at 3x32x32, batch 256, and a 2-layer transformer encoder
    classifier (d = 256, sequence 128, vocabulary 8192) at batch 64 and 256.
    Synthetic inputs (timing does not depend on the values), the same initial
    weights for every variant, 5 warm-up steps, then timed steps between
    CUDA events. Before timing, privml's clipped sum is checked against
    Opacus's (float64, noise off) on the small rows: like for like.
``mnist``
    End to end on MNIST: the Tramer-Boneh CNN, epsilon = 3, delta = 1e-5
    (add/remove-one, PLD), 40 epochs, expected batch 512, C = 0.1, SGD lr 0.5
    momentum 0.9 (Tramer and Boneh 2021). privml is ``TorchClassifier(device=
    "cuda")`` as a user calls it (calibration, sampling and evaluation
    included); Opacus (hooks) gets the same noise multiplier, the same number
    of steps and the same Poisson batches gathered on the GPU (its fastest
    data path, not a DataLoader over single records); the non-private run
    takes the same number of steps on shuffled batches of 512.

``profile``
    Where a step's time goes, for deciding what to make faster: kernel time
    per step by privml phase (forward, norms, clipped sums, noise and
    optimiser; :mod:`privml.torch._phases`) and by the kernels' arithmetic
    (TF32 tensor cores or plain float32), for privml's ghost step in both
    clipping arithmetics (``clip_precision`` "fp32" and "tf32"), non-private
    training and Opacus (hooks); and the step times of diagnostic variants:
    grouped per-example convolution gradients, cuDNN's kernel for the
    book-kept convolutions' float32 sums, CUDA graphs over Poisson (padded)
    and fixed-size batches, and a compiled forward pass.

Run on a machine with a CUDA GPU and Opacus importable::

    python benchmarks/torch_gpu.py            # both parts
    python benchmarks/torch_gpu.py steps --rows tb-256

Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, write_json  # noqa: E402

RESULT = HERE / "results" / "torch_gpu.json"
VARIANTS = ("nonprivate", "privml-ghost", "privml-ghost-graph", "privml-ghost-tf32", "privml-ghost-tf32-graph",
            "privml-ghost-bf16", "privml-vmap", "opacus-hooks", "opacus-ghost")
#: privml's ghost steps the ratios choose from (fastest): float32 or TF32 clipping arithmetic, eager or graphed
PRIVML_GHOST = ("privml-ghost", "privml-ghost-graph", "privml-ghost-tf32", "privml-ghost-tf32-graph")
CLIP = 0.1
SIGMA = 1.0
N_TRAIN = 60_000
#: row name -> (model, batch)
ROWS: dict[str, tuple[str, int]] = {
    "tb-256": ("tramer-boneh", 256),
    "tb-2048": ("tramer-boneh", 2048),
    "resnet-256": ("resnet", 256),
    "wrn-256": ("wide-resnet", 256),
    "transformer-64": ("transformer", 64),
    "transformer-256": ("transformer", 256),
}
LABELS = {
    "tramer-boneh": "Tramer-Boneh CNN, 1x28x28",
    "resnet": "GroupNormResNet(width=64, blocks=2, groups=8), 3x32x32",
    "wide-resnet": "WideResNet-16-4 (GroupNorm 16), 3x32x32",
    "transformer": "2-layer transformer (d=256, 4 heads, seq 128, vocab 8192)",
}
SEQ, VOCAB = 128, 8192


# ------------------------------------------------------------------ models and batches
def build(model: str):  # noqa: ANN201 - torch is imported late
    from privml.torch.models import GroupNormResNet, TramerBonehCNN

    if model == "tramer-boneh":
        return TramerBonehCNN()
    if model == "resnet":
        return GroupNormResNet(in_channels=3, width=64, blocks=2, groups=8)
    if model == "wide-resnet":
        from privml.torch.models import build_model

        return build_model("wide-resnet", in_channels=3, n_classes=10, image_size=32)
    if model == "transformer":
        from privml.torch.models._transformer import TransformerClassifier

        return TransformerClassifier(vocab_size=VOCAB, n_classes=10, max_len=SEQ, d_model=256, n_heads=4, n_layers=2)
    raise ValueError(model)


def batch(model: str, size: int, device: str):  # noqa: ANN201
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    y = torch.randint(0, 10, (size,), generator=generator, device=device)
    if model == "transformer":
        return torch.randint(0, VOCAB, (size, SEQ), generator=generator, device=device), y
    shape = (1, 28, 28) if model == "tramer-boneh" else (3, 32, 32)
    return torch.randn(size, *shape, generator=generator, device=device), y


# ------------------------------------------------------------------ one step of each variant
def make_step(variant: str, model_name: str, X, y) -> Callable[[], None]:  # noqa: ANN001
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = build(model_name).to(X.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    size = X.shape[0]
    if variant == "nonprivate":

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(X), y).backward()
            optimizer.step()

        return step
    if variant.startswith("privml-"):
        from privml.torch import DPSGD

        parts = variant.split("-")
        # "fixed": fixed-size batches (replace-one, RDP), whose graph needs no padding (capacity = b).
        fixed = {"sampling": "fixed-size", "neighbouring": "replace-one", "accountant": "rdp"} if "fixed" in parts else {}
        engine = DPSGD(model, optimizer=optimizer, n_samples=N_TRAIN, clip_norm=CLIP, batch_size=size,
                       noise_multiplier=SIGMA, mode=parts[1], precision="bf16" if "bf16" in parts else "fp32", seed=0,
                       clip_precision="tf32" if "tf32" in parts else "fp32", cuda_graph="graph" in parts, **fixed)
        if "compile" in parts:  # the model's forward compiled (the taps and hooks stay outside, as graph breaks)
            model.forward = torch.compile(model.forward)
        step: Callable[[], None] = lambda: engine.step(X, y)  # noqa: E731
        if "grouped" in parts:
            step = _grouped_instantiation(step, X.device.type)
        return step if "kernelsums" not in parts else _kernel_sums(step, X.device.type)
    model, optimizer, criterion = _opacus(model, optimizer, X, y, variant.split("-")[1])

    def opacus_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        criterion(model(X), y).backward()
        optimizer.step()

    return opacus_step


def _during(step: Callable[[], None], patch: Any) -> Callable[[], None]:
    """``step`` run inside ``patch`` (a ``unittest.mock`` patch, entered and left around every call)."""

    def patched_step() -> None:
        with patch:
            step()

    return patched_step


def _grouped_instantiation(step: Callable[[], None], device: str) -> Callable[[], None]:
    """``step`` with convolutions' per-example gradients formed by one grouped kernel on ``device`` (the CPU's way)."""
    from privml.torch._ghost import conv

    return _during(step, mock.patch.dict(conv.GROUPED_INSTANTIATION, {device: True}))


def _kernel_sums(step: Callable[[], None], device: str) -> Callable[[], None]:
    """``step`` with book-kept convolutions' fp32 sums from the framework's weight-gradient kernel (cuDNN on a GPU)."""
    from privml.torch._ghost import conv

    return _during(step, mock.patch.dict(conv.KERNEL_SUMS, {device: True}))


def _opacus(model, optimizer, X, y, mode: str, noise: float = SIGMA):  # noqa: ANN001, ANN202
    """Opacus's private model, optimiser and criterion; batches are fed directly (expected size = X's rows)."""
    import torch
    from opacus import PrivacyEngine
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    # make_private reads the sample rate (batch / n) from a data loader; the loader itself is never iterated.
    fake = TensorDataset(torch.zeros(N_TRAIN, 1))
    loader = DataLoader(fake, batch_size=X.shape[0])
    criterion = nn.CrossEntropyLoss()
    made = PrivacyEngine(accountant="rdp").make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=noise, max_grad_norm=CLIP,
        poisson_sampling=True, grad_sample_mode=mode, criterion=criterion)
    if mode == "ghost":
        return made[0], made[1], made[2]
    return made[0], made[1], criterion


def measure(step: Callable[[], None], timed_steps: int, device: str) -> dict[str, float]:
    import torch

    cuda = device.startswith("cuda")
    for _ in range(5):
        step()
    if cuda:
        sync(device)
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(timed_steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:  # a dry run of the script on a machine without a GPU (--device cpu)
            began = time.perf_counter()
            step()
            times.append((time.perf_counter() - began) * 1e3)
    return {"median_ms": statistics.median(times), "q1_ms": statistics.quantiles(times, n=4)[0],
            "q3_ms": statistics.quantiles(times, n=4)[2],
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"), "steps": timed_steps}


def parity(model_name: str, device: str) -> float:
    """Largest relative difference of privml's clipped sum (ghost) from Opacus's (hooks), float64, no noise."""
    import torch

    from privml.torch import DPSGD

    X, y = batch(model_name, 16, device)
    if X.is_floating_point():
        X = X.double()
    torch.manual_seed(0)
    ours = build(model_name).double().to(device)
    theirs = build(model_name).double().to(device)
    theirs.load_state_dict(ours.state_dict())
    engine = DPSGD(ours, optimizer=torch.optim.SGD(ours.parameters(), lr=0.1), n_samples=N_TRAIN, clip_norm=CLIP,
                   batch_size=16, noise_multiplier=1.0, mode="ghost", seed=0)
    sums, _ = engine.clipped_sum(X, y)
    model, optimizer, criterion = _opacus(theirs, torch.optim.SGD(theirs.parameters(), lr=0.1), X, y, "hooks", 0.0)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(X), y, reduction="mean").backward()
    optimizer.pre_step()  # clip, add zero noise, divide by the expected batch size (16)
    names = [name for name, _ in ours.named_parameters()]
    mine = torch.cat([sums[n].flatten() / 16 for n in names])
    other = torch.cat([p.grad.flatten() for p in theirs.parameters()])
    return float((mine - other).norm() / other.norm())


def run_steps(rows: list[str], variants: list[str], timed_steps: int, device: str,
              on_row: Callable[[str, dict], None] | None = None) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    for row in rows:
        model_name, size = ROWS[row]
        X, y = batch(model_name, size, device)
        result: dict[str, Any] = {"model": LABELS[model_name], "batch": size,
                                  "parameters": sum(p.numel() for p in build(model_name).parameters())}
        if size <= 256 and "opacus-hooks" in variants:
            try:
                result["parity_vs_opacus"] = parity(model_name, device)
            except Exception as exc:  # noqa: BLE001 - a peer's failure is recorded, not fatal
                result["parity_vs_opacus"] = f"{type(exc).__name__}: {exc}"[:300]
        for variant in variants:
            # Free the previous variant entirely (an engine and its CUDA graph reference each other, and a
            # graph's memory pool lives until the graph is collected) so each peak is the variant's own.
            gc.collect()
            torch.cuda.empty_cache()
            try:
                result[variant] = measure(make_step(variant, model_name, X, y), timed_steps, device)
            except Exception as exc:  # noqa: BLE001
                result[variant] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            torch.cuda.empty_cache()
            print(f"{row} {variant}: {result[variant]}", file=sys.stderr, flush=True)
        out[row] = result
        if on_row is not None:
            on_row(row, result)
    return out


# ------------------------------------------------------------------ where a step's time goes
#: The profile part's variants: PROFILED run under torch.profiler; TIMED_ONLY are diagnostics that are only timed
#: (a CUDA graph replays as one launch, which a profile would not attribute to phases).
PROFILED = ("nonprivate", "privml-ghost", "privml-ghost-tf32", "opacus-hooks")
TIMED_ONLY = ("privml-ghost-grouped", "privml-ghost-kernelsums", "privml-ghost-graph", "privml-ghost-graph-fixed",
              "privml-ghost-compile")


def kernel_class(name: str) -> str:
    """A kernel's arithmetic by its name: TF32 tensor cores, plain float32 (SIMT), other GEMM/conv, or the rest.

    >>> [kernel_class(k) for k in ("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn", "ampere_sgemm_128x64_tn",
    ...                            "implicit_convolve_sgemm", "cutlass_80_tensorop_s1688gemm_64x64",
    ...                            "void at::native::vectorized_elementwise_kernel<4>")]
    ['tf32', 'fp32', 'fp32', 'tf32', 'other']
    """
    low = name.lower()
    if "tf32" in low or "1688" in low:  # s1688 / 16x8x8 are the TF32 tensor-core shapes
        return "tf32"
    if "sgemm" in low or "simt" in low or "f32f32_f32f32" in low:
        return "fp32"
    if any(word in low for word in ("gemm", "conv", "wgrad", "dgrad", "fprop", "xmma", "cudnn")):
        return "gemm/conv (other)"
    return "other"


def profile_step(step: Callable[[], None], device: str, steps: int = 5) -> dict[str, Any]:
    """Kernel (CPU: operator) time per step of ``step``, by privml phase, by kernel class, and the top kernels.

    On a GPU the kernels are the profile's device events that are not
    annotations (the profiler also attaches each kernel to the operator that
    launched it, and mirrors every ``record_function`` range as a device
    span that includes idle time: neither is counted). A phase's time is the
    kernels launched inside its CPU-side ``privml::`` range
    (``device_time_total``, which follows the range's operators on its own
    thread: the norms, formed on autograd's thread during the backward pass,
    are attributed; the backward range on the main thread is not). On the
    CPU the figures are operators' own CPU time. Each figure is per step, in
    milliseconds, over ``steps`` profiled steps after 5 warm-up steps.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    for _ in range(5):
        step()
    sync(device)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(device)
    per_step = 1e3 * steps  # profiler times are microseconds
    totals: dict[str, list[float]] = {}  # kernel (CPU: operator) name -> [time, calls]
    phases: dict[str, float] = {}
    for event in prof.events():
        if event.name.startswith("privml::"):
            if event.device_type == DeviceType.CPU:
                time_us = event.device_time_total if cuda else event.cpu_time_total
                phases[event.name.removeprefix("privml::")] = phases.get(event.name.removeprefix("privml::"), 0.0) \
                    + time_us / per_step
            continue
        if cuda:
            if event.device_type != DeviceType.CUDA or event.is_user_annotation:
                continue
            time_us = event.device_time_total
        else:
            if event.is_user_annotation:
                continue
            time_us = event.self_cpu_time_total
        entry = totals.setdefault(event.name, [0.0, 0])
        entry[0] += time_us / per_step
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])
    out: dict[str, Any] = {
        "steps": steps,
        "total_ms": sum(t for t, _ in totals.values()),
        "phases_ms": phases,
        "top": [{"name": name[:120], "ms": t, "calls": calls // steps} for name, (t, calls) in ranked[:20]],
    }
    if cuda:
        classes: dict[str, float] = {}
        for name, (t, _) in totals.items():
            classes[kernel_class(name)] = classes.get(kernel_class(name), 0.0) + t
        out["classes_ms"] = classes
    return out


def run_profile(rows: list[str], device: str, timed_steps: int,
                on_row: Callable[[str, dict], None] | None = None) -> dict[str, Any]:
    """Per row: the profiled variants' breakdowns and the diagnostic variants' step times (``measure``)."""
    import torch

    out: dict[str, Any] = {}
    for row in rows:
        model_name, size = ROWS[row]
        X, y = batch(model_name, size, device)
        result: dict[str, Any] = {"model": LABELS[model_name], "batch": size}
        for variant in (*PROFILED, *TIMED_ONLY):
            if "graph" in variant and not device.startswith("cuda"):
                continue  # a graph needs CUDA
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            try:
                step = make_step(variant, model_name, X, y)
                result[variant] = (profile_step(step, device) if variant in PROFILED
                                   else measure(step, timed_steps, device))
            except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                result[variant] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"profile {row} {variant}: {json.dumps(result[variant], default=str)[:400]}", file=sys.stderr,
                  flush=True)
        out[row] = result
        if on_row is not None:
            on_row(row, result)
    return out


# ------------------------------------------------------------------ end to end on MNIST
def run_mnist(epochs: float, device: str, max_train: int | None) -> dict[str, Any]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from privml.torch import TorchClassifier
    from privml.torch._data import load_images
    from privml.torch._sampling import PoissonSampler
    from privml.torch.models import TramerBonehCNN

    data = load_images("mnist", max_train=max_train, random_state=0)
    X_train, y_train = data.X_train.to(device), data.y_train.to(device)
    X_test, y_test = data.X_test.to(device), data.y_test.to(device)
    n, batch_size = X_train.shape[0], 512

    def accuracy(model) -> float:  # noqa: ANN001
        with torch.no_grad():
            model.eval()
            return float((model(X_test).argmax(1) == y_test).float().mean())

    out: dict[str, Any] = {"epochs": epochs, "batch_size": batch_size, "clip_norm": CLIP, "epsilon": 3.0,
                           "delta": 1e-5, "n_train": int(n)}
    # privml, as a user calls it: numpy in, calibration and all (the default: CUDA graph steps);
    # then eager steps, and bf16 passes.
    runs = {"privml": {}, "privml-eager": {"cuda_graph": False}, "privml-tf32": {"clip_precision": "tf32"},
            "privml-bf16": {"precision": "bf16"}}
    for name, options in runs.items():
        sync(device)
        start = time.perf_counter()
        clf = TorchClassifier(epsilon=3.0, delta=1e-5, classes=tuple(range(10)), epochs=epochs,
                              batch_size=batch_size, learning_rate=0.5, momentum=0.9, clip_norm=CLIP, device=device,
                              random_state=0, **options)
        try:
            clf.fit(data.X_train.numpy(), data.y_train.numpy())
        except Exception as exc:  # noqa: BLE001 - recorded in the results, not hidden
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"mnist {name}: {out[name]}", file=sys.stderr, flush=True)
            continue
        sync(device)
        seconds = time.perf_counter() - start
        out[name] = {"seconds": seconds, "steps": clf.fit_info_["steps"], "options": options,
                     "test_accuracy": float(np.mean(clf.predict(data.X_test.numpy()) == data.y_test.numpy())),
                     "noise_multiplier": clf.fit_info_["noise_multiplier"], "epsilon_spent": clf.privacy_.epsilon}
        print(f"mnist {name}: {out[name]}", file=sys.stderr, flush=True)
    ran = next(r for r in out.values() if isinstance(r, dict) and "steps" in r)
    sigma, steps = ran["noise_multiplier"], ran["steps"]

    # Opacus (hooks): the same noise, steps and Poisson batches, gathered on the GPU.
    torch.manual_seed(0)
    model = TramerBonehCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    model, optimizer, criterion = _opacus(model, optimizer, X_train[:batch_size], y_train[:batch_size], "hooks", sigma)
    generator = torch.Generator(device=device).manual_seed(1)
    sampler = PoissonSampler(n=int(n), sample_rate=batch_size / n, steps=steps, generator=generator)
    sync(device)
    start = time.perf_counter()
    for idx in sampler:
        optimizer.zero_grad(set_to_none=True)
        criterion(model(X_train[idx]), y_train[idx]).backward()
        optimizer.step()
    sync(device)
    out["opacus-hooks"] = {"seconds": time.perf_counter() - start, "test_accuracy": accuracy(model), "steps": steps}
    print(f"mnist opacus: {out['opacus-hooks']}", file=sys.stderr, flush=True)

    # Non-private: the same number of steps, shuffled batches of 512.
    torch.manual_seed(0)
    model = TramerBonehCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    generator = torch.Generator(device=device).manual_seed(2)
    per_epoch = n // batch_size
    sync(device)
    start = time.perf_counter()
    model.train()
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(n, generator=generator, device=device)
        idx = order[(step % per_epoch) * batch_size:(step % per_epoch + 1) * batch_size]
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(X_train[idx]), y_train[idx]).backward()
        optimizer.step()
    sync(device)
    out["nonprivate"] = {"seconds": time.perf_counter() - start, "test_accuracy": accuracy(model), "steps": steps}
    print(f"mnist nonprivate: {out['nonprivate']}", file=sys.stderr, flush=True)
    return out


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ------------------------------------------------------------------ output
def _device_description() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "gpu_memory_gib": props.total_memory / 2**30, "torch": torch.__version__,
            "cuda": torch.version.cuda, "opacus": _opacus_version(),
            # What the non-private and Opacus steps run under (privml's norms and sums force exact float32).
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32}


def _opacus_version() -> str:
    try:
        import opacus

        return opacus.__version__
    except ImportError:
        return "not installed"


def render(data: dict) -> str:
    """Markdown section for BENCHMARKS.md from the stored results."""
    m, d = data.get("machine", {}), data.get("device", {})
    out = ["## DP-SGD on a GPU: privml vs Opacus", ""]
    out.append(f"Device: {d.get('gpu')} ({d.get('gpu_memory_gib', 0):.0f} GiB), torch {d.get('torch')}, CUDA "
               f"{d.get('cuda')}, Opacus {d.get('opacus')}; host {m.get('cpu')}, {m.get('cores')} cores, commit "
               f"{m.get('commit')}, {m.get('date')}.")
    out += ["", "Command: `python benchmarks/torch_gpu.py` on the GPU machine (the device tool; Opacus carried as a "
            "wheel; `benchmarks/gpu_checks.sh` runs it with the GPU tests and the CNN study). Not part of `make "
            "bench`, which runs on the CPU machine.", ""]
    steps = data.get("steps")
    if steps:
        out += [
            f"Median ms per logical step (peak GPU memory, GiB) of one DP-SGD step, flat clipping to C = {CLIP}, "
            f"noise multiplier {SIGMA}, synthetic batch, same initial weights. `-tf32`: `clip_precision=\"tf32\"` "
            "(norms and clipped sums on TF32 tensor cores, operands rounded by privml, the rounding bounded inside "
            "C: a private step); `-graph`: replayed as a CUDA graph over the batch padded to the smallest rung "
            "that holds it of a ladder of public capacities (`privml.torch._graphs`; TorchClassifier's default on a "
            "GPU for small models). The synthetic batch has exactly b records, itself a rung, so it runs unpadded "
            "here; a Poisson batch pads about half a standard deviation of rows on average (the end-to-end run "
            "below pays that). Eager steps are bound by the host's launches, and their times spread between calls "
            "on the same machine (the ResNet's eager ghost step took 28.8 ms in one call and 36.7 in another the "
            "same day, its code unchanged). The ratios take privml's fastest ghost step (named) against "
            "Opacus's faster mode and against non-private.",
            "",
            "| model, batch | " + " | ".join(VARIANTS) + " | privml's fastest | privml / best Opacus "
            "| privml / non-private | parity vs Opacus |",
            "|---|" + "---|" * (len(VARIANTS) + 4),
        ]
        for row in steps.values():
            cells = []
            for variant in VARIANTS:
                r = row.get(variant, {})
                cells.append(f"{r['median_ms']:.2f} ({r['peak_gib']:.2f})" if "median_ms" in r
                             else ("error" if "error" in r else "-"))
            ghost = _privml_best(row).get("median_ms")
            opacus = [row.get(v, {}).get("median_ms") for v in ("opacus-hooks", "opacus-ghost")]
            opacus = [t for t in opacus if t]
            ratio = f"{ghost / min(opacus):.2f}x" if ghost and opacus else "-"
            nonpriv = row.get("nonprivate", {}).get("median_ms")
            vs_np = f"{ghost / nonpriv:.2f}x" if ghost and nonpriv else "-"
            par = row.get("parity_vs_opacus")
            par_s = f"{par:.1e}" if isinstance(par, float) else ("error" if par else "-")
            fastest = _privml_best(row).get("variant", "-")
            out.append(f"| {row['model']}, {row['batch']} | " + " | ".join(cells)
                       + f" | {fastest} | {ratio} | {vs_np} | {par_s} |")
        errors = [f"{name} {v}: {row[v]['error']}" for name, row in steps.items() for v in VARIANTS
                  if isinstance(row.get(v), dict) and "error" in row[v]]
        if errors:
            out += ["", "Errors (recorded, not hidden): " + "; ".join(errors)]
        out += ["", "Targets (issue 15): " + "; ".join(_step_verdicts(steps)) + "."]
        out.append("")
    if data.get("profile"):
        out += _render_profile(data["profile"], data.get("profile_commit"))
    mnist = data.get("mnist")
    if mnist:
        out += [
            f"End to end, MNIST, Tramer-Boneh CNN, epsilon = {mnist['epsilon']:g}, delta = {mnist['delta']:g}, "
            f"{mnist['epochs']:g} epochs, expected batch {mnist['batch_size']}, C = {mnist['clip_norm']}"
            + (f" (measured at commit {mnist['commit']})" if "commit" in mnist else "") + ". `privml` is "
            "TorchClassifier's default on a GPU (CUDA graph steps), `privml-eager` the same without graphs:",
            "",
            "| run | wall time (s) | test accuracy | steps |",
            "|---|---|---|---|",
        ]
        for name in ("privml", "privml-eager", "privml-tf32", "privml-bf16", "opacus-hooks", "nonprivate"):
            r = mnist.get(name)
            if r and "error" in r:
                out.append(f"| {name} | error: {r['error']} | | |")
            elif r:
                out.append(f"| {name} | {r['seconds']:.1f} | {r['test_accuracy'] * 100:.2f}% | {r['steps']} |")
        ours = mnist.get("privml")
        if ours and "seconds" in ours:
            met = ours["seconds"] <= 12 and ours["test_accuracy"] >= 0.98
            out += ["", f"Target: at most 12 s at >= 98.0%: {ours['seconds']:.1f} s at "
                    f"{ours['test_accuracy'] * 100:.2f}%, {'met' if met else 'not met'}."]
        out.append("")
    return "\n".join(out)


def _render_profile(profile: dict, commit: str | None) -> list[str]:
    """Where a step's GPU time goes: kernel time by phase and by arithmetic, and the diagnostic variants."""
    classes = ("tf32", "fp32", "gemm/conv (other)", "other")
    out = [f"### Where a step's GPU time goes (`python benchmarks/torch_gpu.py profile`, commit {commit})", "",
           "Kernel time per step (ms) under `torch.profiler`, 5 steps after 5 warm-up steps: by privml phase (the "
           "norms are formed inside the backward pass) and by the kernels' arithmetic, read from their names "
           "(TF32 tensor cores, plain float32, other GEMM or convolution kernels, everything else). The total is "
           "kernel time, not wall time; the step table above gives wall time.", "",
           "| model, batch | variant | kernels | forward | norms | clipped sums | noise + optimiser | "
           + " | ".join(classes) + " |",
           "|---|---|---|---|---|---|---|" + "---|" * len(classes)]
    for row in profile.values():
        for variant in PROFILED:
            r = row.get(variant, {})
            if "total_ms" not in r:
                out.append(f"| {row['model']}, {row['batch']} | {variant} | {r.get('error', '-')} |" + " |" * (
                    4 + len(classes)))
                continue
            ph = r.get("phases_ms", {})

            def cell(*names: str, ph: dict = ph) -> str:
                found = [ph[n] for n in names if n in ph]
                return f"{sum(found):.2f}" if found else "-"

            out.append(f"| {row['model']}, {row['batch']} | {variant} | {r['total_ms']:.2f} | {cell('forward')} | "
                       f"{cell('norms')} | {cell('clipped_sums')} | {cell('noise', 'optimizer')} | "
                       + " | ".join(f"{r.get('classes_ms', {}).get(c, 0.0):.2f}" for c in classes) + " |")
    out += ["", "Diagnostic step times (median ms, CUDA events): "
            "`privml-ghost-grouped` forms convolutions' per-example gradients by one grouped weight-gradient kernel "
            "(the CPU's way) rather than from patches; `privml-ghost-kernelsums` forms book-kept convolutions' float32 "
            "sums with cuDNN's weight-gradient kernel (the CPU's way; privml uses products of patches on a GPU, "
            "whose error is of the form the norms' bounds assume); `privml-ghost-graph-fixed` replays a CUDA graph over "
            "fixed-size batches, which need no padding (capacity = b), against `privml-ghost-graph`'s Poisson "
            "capacity; `privml-ghost-compile` runs the model's forward through `torch.compile` (timed after the "
            "5 warm-up steps, so compilation is not counted).", "",
            "| model, batch | " + " | ".join(TIMED_ONLY) + " |", "|---|" + "---|" * len(TIMED_ONLY)]
    for row in profile.values():
        cells = [f"{row[v]['median_ms']:.2f}" if "median_ms" in row.get(v, {}) else
                 ("error" if "error" in row.get(v, {}) else "-") for v in TIMED_ONLY]
        out.append(f"| {row['model']}, {row['batch']} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def _privml_best(row: dict) -> dict:
    """privml's fastest ghost step on a row (:data:`PRIVML_GHOST`), with its name under ``"variant"``."""
    timed = [{**row[v], "variant": v} for v in PRIVML_GHOST if "median_ms" in row.get(v, {})]
    return min(timed, key=lambda r: r["median_ms"]) if timed else {}


def _step_verdicts(steps: dict) -> list[str]:
    """Each acceptance figure of the step table, measured row by row."""
    time_ok, memory_ok, worst_time, worst_memory = [], [], 0.0, 0.0
    for name, row in steps.items():
        ghost = _privml_best(row)
        peers = [row[v] for v in ("opacus-hooks", "opacus-ghost") if "median_ms" in row.get(v, {})]
        if "median_ms" not in ghost or not peers:
            continue
        ratio = ghost["median_ms"] / min(p["median_ms"] for p in peers)
        # Memory of the eager step: a CUDA graph's private pool is allocated at capture (during the warm-up,
        # before the peak is reset), so the graph variant's figure understates its footprint.
        eager = row.get(ghost["variant"].removesuffix("-graph"), ghost)
        memory = eager["peak_gib"] / min(p["peak_gib"] for p in peers)
        worst_time, worst_memory = max(worst_time, ratio), max(worst_memory, memory)
        (time_ok if ratio <= 0.5 else []).append(name)
        (memory_ok if memory <= 1.0 else []).append(name)
    verdicts = [
        f"step time <= 0.5x Opacus's faster mode on every row: {len(time_ok)} of {len(steps)} rows "
        f"(worst {worst_time:.2f}x)",
        f"peak memory (eager ghost step) <= Opacus's lowest on every row: {len(memory_ok)} of {len(steps)} rows "
        f"(worst {worst_memory:.2f}x)",
    ]
    row = steps.get("transformer-256", {})
    if "median_ms" in _privml_best(row) and "median_ms" in row.get("nonprivate", {}):
        ratio = _privml_best(row)["median_ms"] / row["nonprivate"]["median_ms"]
        verdicts.append(f"transformer at batch 256 <= 1.3x non-private: {ratio:.2f}x, {'met' if ratio <= 1.3 else 'not met'}")
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", choices=["steps", "mnist", "profile", "render"],
                        help="default: steps mnist")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--timed-steps", type=int, default=20)
    parser.add_argument("--epochs", type=float, default=40.0)
    parser.add_argument("--out", default=str(RESULT))
    parser.add_argument("--device", default="cuda", help="cuda; 'cpu' only dry-runs the script (nothing is stored)")
    parser.add_argument("--max-train", type=int, default=None, help="MNIST training records (default: all 60,000)")
    args = parser.parse_args(argv)
    args.parts = args.parts or ["steps", "mnist"]
    if args.parts == ["render"]:
        print(render(json.loads(Path(args.out).read_text())))
        return 0
    try:
        import torch
    except ImportError:
        print("torch_gpu: torch is not installed; nothing to measure", file=sys.stderr)
        return 0
    if args.device == "cpu":
        steps = run_steps(args.rows, args.variants, args.timed_steps, "cpu") if "steps" in args.parts else {}
        mnist = run_mnist(args.epochs, "cpu", args.max_train) if "mnist" in args.parts else {}
        profiled = run_profile(args.rows, "cpu", args.timed_steps) if "profile" in args.parts else {}
        print(json.dumps({"steps": steps, "mnist": mnist, "profile": profiled}, indent=1, default=str))
        return 0
    if not torch.cuda.is_available():
        print("torch_gpu: no CUDA device here; this benchmark needs a GPU (nothing measured)", file=sys.stderr)
        return 0
    torch.backends.cudnn.benchmark = True  # fixed shapes in the step table
    path = Path(args.out)
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(machine=machine(), device=_device_description())

    def saver(part: str) -> Callable[[str, dict], None]:
        # Each row is written as soon as it is measured: a call cut off by the device tool's time limit keeps
        # the rows it finished (benchmarks/gpu_checks.sh writes under $OUT, which comes back either way).
        def save(row: str, result: dict) -> None:
            data.setdefault(part, {})[row] = result
            if part == "profile":
                data["profile_commit"] = machine().get("commit")
            write_json(path, data)

        return save

    if "steps" in args.parts:
        run_steps(args.rows, args.variants, args.timed_steps, "cuda", on_row=saver("steps"))
    if "profile" in args.parts:
        run_profile(args.rows, "cuda", args.timed_steps, on_row=saver("profile"))
    if "mnist" in args.parts:
        # Poisson batches change size every step: cuDNN autotuning would re-run for each new size
        # (PyTorch's default is off; a user training with Poisson sampling should leave it off).
        torch.backends.cudnn.benchmark = False
        data["mnist"] = run_mnist(args.epochs, "cuda", args.max_train)
        write_json(path, data)
    if os.environ.get("OUT"):
        write_json(Path(os.environ["OUT"]) / path.name, data)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
