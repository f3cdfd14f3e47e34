"""DP-SGD engine: clipping bound, noise scale, normalisation, micro-batches, step counting, budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scipy import stats  # noqa: E402
from torch import nn  # noqa: E402

from privml.accounting import DPSGDPlan, calibrate_dpsgd, dpsgd_event, make_accountant  # noqa: E402
from privml.exceptions import BudgetExhausted  # noqa: E402
from privml.torch import DPSGD, PoissonSampler, TramerBonehCNN, micro_batches  # noqa: E402
from privml.torch._noise import secure_standard_normal  # noqa: E402
from tests.torch._models import single_layer  # noqa: E402


class CountingSGD(torch.optim.SGD):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def step(self, closure=None):
        self.calls += 1
        return super().step(closure)


def engine_for(model, **overrides):
    settings = dict(n_samples=40, clip_norm=0.1, sample_rate=0.25, steps=10, noise_multiplier=1.0, seed=0)
    settings.update(overrides)
    return DPSGD(model, optimizer=CountingSGD(model.parameters(), lr=0.1), **settings)


@pytest.mark.parametrize("mode", ["ghost", "vmap"])
def test_every_clipped_example_has_norm_at_most_c(mode):
    model, x, y = single_layer("conv2d")
    clip = 0.05
    engine = engine_for(model, clip_norm=clip, mode=mode)
    _, norms = engine.clipped_sum(x, y)
    assert torch.all(norms > clip)  # the clip binds on every example here
    for i in range(x.shape[0]):
        one, _ = engine.clipped_sum(x[i : i + 1], y[i : i + 1])
        flat = torch.cat([g.flatten() for g in one.values()])
        assert float(flat.norm()) <= clip * (1 + 1e-9)
        assert float(flat.norm()) == pytest.approx(clip, rel=1e-9)


def test_clipping_is_flat_not_per_tensor():
    # One factor scales every tensor of an example: the clipped gradient is parallel to the raw one.
    model, x, y = single_layer("groupnorm")
    engine = engine_for(model, clip_norm=1e-3, mode="ghost")
    from privml.torch import cross_entropy_per_example, per_example_gradients

    raw = per_example_gradients(model, cross_entropy_per_example, x[:1], y[:1])
    clipped, norms = engine.clipped_sum(x[:1], y[:1])
    factor = 1e-3 / float(norms[0])
    for name, g in raw.items():
        torch.testing.assert_close(clipped[name], factor * g[0])


def test_small_gradients_are_not_changed():
    model, x, y = single_layer("linear")
    engine = engine_for(model, clip_norm=1e6)
    from privml.torch import cross_entropy_per_example, per_example_gradients

    raw = per_example_gradients(model, cross_entropy_per_example, x, y)
    clipped, _ = engine.clipped_sum(x, y)
    for name, g in raw.items():
        torch.testing.assert_close(clipped[name], g.sum(0))


def test_micro_batches_give_the_same_clipped_sum():
    model, x, y = single_layer("embedding")
    whole, _ = engine_for(model).clipped_sum(x, y)
    parts, _ = engine_for(model, max_physical_batch_size=4).clipped_sum(x, y)
    for name in whole:
        torch.testing.assert_close(parts[name], whole[name])


def test_noisy_gradient_is_normalised_by_the_expected_batch_size():
    model, x, y = single_layer("linear")
    engine = engine_for(model, noise_multiplier=1e-12)  # noise negligible: the divisor is visible
    sums, _ = engine.clipped_sum(x, y)
    gradient = engine._noisy_gradient(x, y)
    assert engine.expected_batch_size == pytest.approx(10.0)
    for name in sums:
        torch.testing.assert_close(gradient[name], sums[name] / 10.0)  # q n = 10, not the realised 6


def test_noise_has_std_sigma_c_over_qn():
    # An empty batch: the gradient is pure noise / (q n). Check its std statistically.
    torch.manual_seed(0)
    model = TramerBonehCNN()
    sigma, clip = 1.7, 0.3
    engine = engine_for(model, noise_multiplier=sigma, clip_norm=clip, steps=None)
    empty_x, empty_y = torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long)
    draws = torch.cat([torch.cat([g.flatten() for g in engine._noisy_gradient(empty_x, empty_y).values()]) for _ in range(4)])
    values = draws.double().numpy() * engine.expected_batch_size
    n = values.size  # 4 * 26010 coordinates
    # The sample variance of n normals has relative sd sqrt(2 / n) ~ 0.44%: a 5-sigma band.
    assert np.var(values) / (sigma * clip) ** 2 == pytest.approx(1.0, abs=5 * math.sqrt(2 / n))
    assert abs(np.mean(values)) < 5 * sigma * clip / math.sqrt(n)
    assert stats.kstest(values / (sigma * clip), "norm").pvalue > 1e-4


def test_noise_is_drawn_once_per_logical_step_not_per_micro_batch():
    # With micro-batches of 1, per-micro-batch noise would multiply the variance by the batch size.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(50, 40))
    # sigma = 10: the clipped sum (norm <= 8 C over 2040 coordinates) is negligible beside the noise.
    engine = engine_for(model, max_physical_batch_size=1, clip_norm=0.5, noise_multiplier=10.0, n_samples=8, sample_rate=0.5)
    x, y = torch.randn(8, 50), torch.randint(0, 40, (8,))
    grads = torch.cat([torch.cat([g.flatten() for g in engine._noisy_gradient(x, y).values()]) for _ in range(5)])
    std = float(grads.std()) * engine.expected_batch_size
    assert std == pytest.approx(10.0 * 0.5, rel=0.05)  # per-micro-batch noise would give sqrt(8) times more


def test_secure_noise_is_standard_normal():
    z = secure_standard_normal((20001,), dtype=torch.float64).numpy()
    assert z.shape == (20001,)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    model, x, y = single_layer("linear")
    engine = engine_for(model, secure_noise=True, noise_multiplier=2.0, clip_norm=1.0, steps=None)
    g = torch.cat([torch.cat([v.flatten() for v in engine._noisy_gradient(x[:0], y[:0]).values()]) for _ in range(800)])
    assert float(g.std()) * engine.expected_batch_size == pytest.approx(2.0, rel=0.06)


def test_accountant_steps_equal_logical_optimiser_steps_with_micro_batches():
    model, x, y = single_layer("conv2d")
    X, Y = x.repeat(5, 1, 1, 1), y.repeat(5)  # 30 records
    engine = DPSGD(model, optimizer=CountingSGD(model.parameters(), lr=0.1), n_samples=30, clip_norm=1.0,
                   sample_rate=0.5, steps=7, target_epsilon=5.0, delta=1e-5, max_physical_batch_size=2, seed=1)
    engine.fit(X, Y)
    assert engine.optimizer.calls == engine.steps_taken == 7
    assert engine.privacy_event_.count == 7
    expected = make_accountant("pld").compose(dpsgd_event(engine.noise_multiplier, 0.5, 7)).get_epsilon(1e-5)
    assert engine.epsilon == pytest.approx(expected)
    assert engine.epsilon <= 5.0
    with pytest.raises(BudgetExhausted):
        engine.step(X[:3], Y[:3])
    assert engine.optimizer.calls == 7


def test_epsilon_grows_with_steps_and_starts_at_zero():
    model, x, y = single_layer("linear")
    engine = engine_for(model, steps=None, noise_multiplier=1.0)
    assert engine.epsilon == 0.0
    seen = []
    for _ in range(3):
        engine.step(x, y)
        seen.append(engine.epsilon)
    assert 0 < seen[0] < seen[1] < seen[2]
    assert engine.privacy_.neighbouring.value == "add/remove-one"


def test_target_epsilon_calibration_matches_the_accountant():
    model, _, _ = single_layer("linear")
    engine = engine_for(model, noise_multiplier=None, target_epsilon=2.0, accountant="rdp", steps=50)
    expected = calibrate_dpsgd(2.0, sample_rate=0.25, steps=50, delta=1e-5, accountant="rdp").noise_multiplier
    assert engine.noise_multiplier == pytest.approx(expected)
    with pytest.raises(ValueError, match="above the target epsilon"):
        engine_for(model, noise_multiplier=0.5, target_epsilon=0.1, steps=50)


def test_empty_batches_step_and_count():
    model, x, y = single_layer("linear")
    before = [p.detach().clone() for p in model.parameters()]
    engine = engine_for(model)
    engine.step(x[:0], y[:0])
    assert engine.steps_taken == 1 and engine.optimizer.calls == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # the noise moved it


def test_poisson_sampler_rate_and_independence():
    sampler = PoissonSampler(n=2000, sample_rate=0.05, steps=400, generator=torch.Generator().manual_seed(0))
    sizes = np.array([len(b) for b in sampler])
    assert sizes.mean() == pytest.approx(100, abs=5 * math.sqrt(2000 * 0.05 * 0.95 / 400))
    assert sizes.std() == pytest.approx(math.sqrt(2000 * 0.05 * 0.95), rel=0.15)  # variable, Binomial
    secure = PoissonSampler(n=2000, sample_rate=0.05, steps=200, secure=True)
    assert np.mean([len(b) for b in secure]) == pytest.approx(100, abs=5 * math.sqrt(95 / 200))
    tiny = PoissonSampler(n=3, sample_rate=0.01, steps=50, generator=torch.Generator().manual_seed(0))
    assert any(len(b) == 0 for b in tiny)  # empty batches occur and are yielded


def test_micro_batches_split():
    idx = torch.arange(7)
    assert [len(p) for p in micro_batches(idx, 3)] == [3, 3, 1]
    assert micro_batches(idx[:0], 3) == []
    assert [len(p) for p in micro_batches(idx, None)] == [7]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sample_rate=None, batch_size=None), "exactly one"),
        (dict(noise_multiplier=None), "give noise_multiplier, a target epsilon, or both"),
        (dict(noise_multiplier=None, target_epsilon=1.0, steps=None), "planned number"),
        (dict(accountant="basic"), "accountant"),
        (dict(mode="fast"), "mode"),
        (dict(clip_norm=0.0), "clip_norm"),
        (dict(max_physical_batch_size=0), "max_physical_batch_size"),
        (dict(batch_size=100, sample_rate=None), "exceeds"),
    ],
)
def test_invalid_settings_are_refused(kwargs, match):
    model, _, _ = single_layer("linear")
    with pytest.raises(ValueError, match=match):
        engine_for(model, **kwargs)


def test_auto_mode_falls_back_to_vmap_for_unsupported_layers():
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.s

    model = nn.Sequential(nn.Linear(4, 3), Scale())
    assert engine_for(model).mode == "vmap"
    with pytest.raises(ValueError, match="vmap"):
        engine_for(model, mode="ghost")


def test_docstring_example_runs():
    import doctest

    import privml.torch._dpsgd as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0


def test_fit_refuses_data_of_another_size():
    model, x, y = single_layer("linear")
    engine = engine_for(model, n_samples=40)
    with pytest.raises(ValueError, match="n_samples=40"):
        engine.fit(x, y)
    assert engine.steps_taken == 0


def test_poisson_batches_of_a_dataset_include_empty_ones():
    from torch.utils.data import TensorDataset

    from privml.torch import poisson_batches

    data = TensorDataset(torch.arange(4.0).reshape(4, 1), torch.arange(4))
    sampler = PoissonSampler(n=4, sample_rate=0.2, steps=40, generator=torch.Generator().manual_seed(1))
    batches = list(poisson_batches(data, sampler))
    assert len(batches) == 40  # one per step, empty ones included
    sizes = [len(y) for _, y in batches]
    assert 0 in sizes and max(sizes) >= 2
    for x, y in batches:
        assert x.shape == (len(y), 1) and torch.equal(x[:, 0].long(), y)


def test_the_progress_bar_accounts_about_ten_times_not_once_per_epoch(monkeypatch):
    # Each epsilon shown composes every step so far; 40 epochs must not mean 40 compositions.
    model, x, y = single_layer("linear")
    X, Y = x.repeat(5, 1), y.repeat(5)  # 30 records, q = 0.5: 2 steps per epoch
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=30, clip_norm=1.0,
                   sample_rate=0.5, epochs=40, noise_multiplier=1.0, seed=0)
    calls = []
    original = DPSGDPlan.guarantee_after
    monkeypatch.setattr(DPSGDPlan, "guarantee_after", lambda self, t: calls.append(t) or original(self, t))
    engine.fit(X, Y, progress=True)
    assert engine.steps_taken == 80
    assert 2 <= len(calls) <= 11 and calls[-1] == 80  # the last step's epsilon is always shown


def test_a_step_that_fails_after_its_noisy_sum_is_formed_is_counted_and_leaves_no_gradient():
    class Failing(torch.optim.SGD):
        def step(self, closure=None):
            raise RuntimeError("optimiser failed")

    model, x, y = single_layer("linear")
    engine = DPSGD(model, optimizer=Failing(model.parameters(), lr=0.1), n_samples=40, clip_norm=0.1,
                   sample_rate=0.25, steps=10, noise_multiplier=1.0, seed=0)
    for attempt in range(1, 4):
        with pytest.raises(RuntimeError, match="optimiser failed"):
            engine.step(x, y)
        # The noisy gradient existed (and could have been read): each attempt spends a step.
        assert engine.steps_taken == attempt
        assert all(p.grad is None for p in model.parameters())


def test_a_step_refused_before_its_sum_is_formed_is_not_counted():
    model, x, y = single_layer("linear")
    engine = engine_for(model, loss_fn=lambda out, target: nn.functional.cross_entropy(out, target))
    with pytest.raises(ValueError, match="one loss per example"):
        engine.step(x, y)
    assert engine.steps_taken == 0
