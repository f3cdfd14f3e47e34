"""Device-agnostic DP-SGD: every tensor a step makes is placed on the model's device, explicitly.

CI has no GPU, so the CPU runs below check the property that makes CUDA work:
privml never creates a tensor with an implicit (default, CPU) device or a
generator of another device. A factory call from privml's code without
``device=`` would pass on CPU and fail (or silently copy) on a GPU, so the
mode below fails the test for it. The ``gpu`` tests run the same paths on
CUDA where one exists.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from privml.torch import DPSGD, TorchClassifier, TramerBonehCNN  # noqa: E402
from privml.torch._classifier import resolve_device  # noqa: E402
from privml.torch._dpsgd_setup import module_device
from privml.torch._noise import RandomSource  # noqa: E402
from privml.torch._sampling import PoissonSampler  # noqa: E402

_FACTORIES = {
    torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.rand, torch.randn, torch.randint,
    torch.randperm, torch.normal, torch.tensor, torch.as_tensor, torch.eye, torch.linspace,
}


class ImplicitDeviceCalls(TorchFunctionMode):
    """Record factory calls made from privml's own code that do not name a device."""

    def __init__(self) -> None:
        super().__init__()
        self.offenders: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FACTORIES and "device" not in kwargs:
            caller = sys._getframe(1)
            while caller is not None and "/torch/" in caller.f_code.co_filename.replace("\\", "/") and (
                "/privml/" not in caller.f_code.co_filename
            ):
                caller = caller.f_back
            if caller is not None and "/privml/" in caller.f_code.co_filename.replace("\\", "/"):
                self.offenders.append(f"{func.__name__} at {caller.f_code.co_filename}:{caller.f_lineno}")
        return func(*args, **kwargs)


def _data(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 28, 28, generator=generator), torch.randint(0, 10, (n,), generator=generator)


@pytest.mark.parametrize("mode", ["ghost", "vmap"])
@pytest.mark.parametrize("sampling", ["poisson", "fixed-size"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_training_run_creates_no_tensor_with_an_implicit_device(mode, sampling, precision):
    X, y = _data()
    model = TramerBonehCNN()
    relation = {"neighbouring": "replace-one", "accountant": "rdp"} if sampling == "fixed-size" else {}
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=64, clip_norm=1.0,
                   batch_size=16, steps=3, noise_multiplier=1.0, mode=mode, sampling=sampling,
                   max_physical_batch_size=8, precision=precision, seed=0, **relation)
    with ImplicitDeviceCalls() as calls:
        engine.fit(X, y)
        if sampling == "poisson":
            engine.step(X[:0], y[:0])  # an empty Poisson sample still adds noise
    assert engine.steps_taken == (4 if sampling == "poisson" else 3)
    assert calls.offenders == []


def test_the_classifier_and_the_nonprivate_baseline_place_every_tensor():
    X, y = _data(48)
    for epsilon in (8.0, float("inf")):
        with ImplicitDeviceCalls() as calls:
            TorchClassifier(epsilon=epsilon, classes=tuple(range(10)), epochs=1, batch_size=16, device="cpu",
                            random_state=0).fit(X.numpy(), y.numpy()).predict(X.numpy())
        assert calls.offenders == []


def test_the_check_itself_catches_an_implicit_device():
    with ImplicitDeviceCalls() as calls:
        exec(compile("import torch\ntorch.zeros(3)", "/fake/privml/module.py", "exec"))
    assert len(calls.offenders) == 1


def test_random_sources_and_samplers_follow_the_device():
    source = RandomSource("cpu", seed=3)
    assert source.generator.device.type == "cpu"
    assert source.normal((4,), 1.0).device.type == "cpu"
    sampler = PoissonSampler(n=10, sample_rate=0.5, steps=1, generator=source.generator)
    assert sampler.sample().device.type == "cpu"
    with pytest.raises(ValueError, match="generator lives on"):
        PoissonSampler(n=10, sample_rate=0.5, steps=1, generator=source.generator, device="meta")
    with pytest.raises(ValueError, match="generator lives on"):
        RandomSource("meta", generator=source.generator)


def test_secure_permutations_are_uniform():
    source = RandomSource("cpu", secure=True)
    firsts = np.array([int(source.permutation(4)[0]) for _ in range(4000)])
    counts = np.bincount(firsts, minlength=4)
    assert counts.min() > 850 and sorted(source.permutation(50).tolist()) == list(range(50))


def test_device_names_are_checked_before_training():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    X, y = _data(8)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            TorchClassifier(epsilon=1.0, classes=tuple(range(10)), device="cuda").fit(X.numpy(), y.numpy())
    with pytest.raises(ValueError, match="precision"):
        TorchClassifier(epsilon=1.0, classes=tuple(range(10)), precision="fp8").fit(X.numpy(), y.numpy())


def test_a_model_spread_over_devices_is_refused():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).to("meta"))
    with pytest.raises(ValueError, match="several devices"):
        module_device(model)


def test_bf16_clips_each_example_in_float32():
    # One example with a huge gradient: whatever the bf16 rounding of the passes, its clipped
    # contribution is formed from the values its norm was computed from, so it stays within C.
    torch.manual_seed(0)
    model = TramerBonehCNN()
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=8, clip_norm=0.1,
                   batch_size=4, noise_multiplier=1.0, precision="bf16", seed=0)
    x, y = 50 * torch.randn(1, 1, 28, 28), torch.tensor([3])
    sums, norms = engine.clipped_sum(x, y)
    assert all(v.dtype == torch.float32 for v in sums.values())
    total = torch.sqrt(sum(v.double().square().sum() for v in sums.values()))
    assert float(norms[0]) > 0.1 and float(total) <= 0.1 * (1 + 1e-5)
    reference = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=8, clip_norm=0.1,
                      batch_size=4, noise_multiplier=1.0, seed=0).clipped_sum(x, y)[0]
    flat = torch.cat([v.flatten() for v in sums.values()])
    ref = torch.cat([reference[k].flatten() for k in sums])
    assert float((flat - ref).norm() / ref.norm()) < 0.05  # bf16 passes: about 1e-2 relative


# ------------------------------------------------------------------ CUDA (skipped without a GPU)
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["ghost", "vmap"])
def test_cuda_clipped_sums_match_the_brute_force(mode):
    from tests.torch._models import LAYER_KINDS, single_layer

    for kind in LAYER_KINDS:
        model, x, y = single_layer(kind)
        model, x, y = model.cuda(), x.cuda(), y.cuda()
        engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=100, clip_norm=0.5,
                       batch_size=10, noise_multiplier=1.0, mode=mode, seed=0)
        sums, _ = engine.clipped_sum(x, y)
        brute = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
        for i in range(x.shape[0]):
            model.zero_grad()
            engine.loss_fn(model(x[i : i + 1]), y[i : i + 1]).sum().backward()
            norm = torch.sqrt(sum(p.grad.square().sum() for p in model.parameters()))
            for n, p in model.named_parameters():
                brute[n] += p.grad * min(1.0, 0.5 / float(norm))
        for n in brute:
            torch.testing.assert_close(sums[n], brute[n], rtol=1e-9, atol=1e-12, msg=f"{kind}: {n}")


@pytest.mark.gpu
@pytest.mark.parametrize("secure", [False, True])
def test_cuda_training_runs_on_the_device(secure):
    X, y = _data(256)
    model = TorchClassifier(epsilon=4.0, classes=tuple(range(10)), epochs=2, batch_size=64, device="cuda",
                            secure_noise=secure, random_state=0).fit(X.numpy(), y.numpy())
    assert next(model.module_.parameters()).device.type == "cuda"
    assert model.predict_proba(X.numpy()).shape == (256, 10)
    engine_source = RandomSource("cuda", secure=secure, seed=0)
    z = engine_source.normal((200_000,), 2.0)
    assert z.device.type == "cuda" and abs(float(z.std()) - 2.0) < 0.02


def test_clipping_arithmetic_never_uses_tf32():
    from privml.torch._ghost.precision import exact_float32

    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    saved = matmul.fp32_precision, conv.fp32_precision
    matmul.fp32_precision = conv.fp32_precision = "tf32"  # a user's setting, in the per-backend API
    try:
        with exact_float32():
            assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")  # restored
    finally:
        matmul.fp32_precision, conv.fp32_precision = saved


@pytest.mark.parametrize("setting", ["torch.backends.cuda.matmul.fp32_precision = 'tf32'",
                                     "torch.backends.cuda.matmul.allow_tf32 = True"])
def test_the_float32_context_works_after_a_user_set_either_tf32_api(setting):
    # Reading the legacy flags once the per-backend settings are used raises in torch; the context must not.
    import subprocess
    import sys

    code = (f"import torch\n{setting}\nfrom privml.torch._ghost.engine import exact_float32\n"
            "with exact_float32():\n    assert torch.backends.cuda.matmul.fp32_precision == 'ieee'\n"
            "assert torch.backends.cuda.matmul.fp32_precision == 'tf32'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-800:]
