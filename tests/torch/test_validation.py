"""The validator rejects layers that mix examples and the fix makes the model trainable."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from privml.torch import DPSGD, UnsupportedModuleError, find_problems, fix_model, validate_model  # noqa: E402


def batchnorm_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, 3), nn.BatchNorm2d(6), nn.Tanh(), nn.Flatten(), nn.Linear(6 * 4 * 4, 8), nn.BatchNorm1d(8),
        nn.Linear(8, 3),
    )


def test_batchnorm_is_rejected_with_the_fix_named():
    model = batchnorm_model()
    with pytest.raises(UnsupportedModuleError, match="fix_model") as info:
        validate_model(model)
    assert len(info.value.problems) == 2
    assert "BatchNorm2d" in info.value.problems[0] and "mixes examples" in info.value.problems[0]


def test_dpsgd_refuses_a_batchnorm_model():
    model = batchnorm_model()
    with pytest.raises(UnsupportedModuleError):
        DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=10, clip_norm=1.0,
              sample_rate=0.5, steps=1, noise_multiplier=1.0)


def test_instance_norm_with_running_stats_is_rejected():
    assert find_problems(nn.Sequential(nn.InstanceNorm2d(3, track_running_stats=True)))
    assert not find_problems(nn.Sequential(nn.InstanceNorm2d(3)))


def test_fix_replaces_batchnorm_by_groupnorm_and_trains():
    model = fix_model(batchnorm_model(), groups=4)
    assert validate_model(model) is model
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert [(m.num_groups, m.num_channels) for m in norms] == [(3, 6), (4, 8)]  # largest divisor <= 4
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=8, clip_norm=1.0,
                   sample_rate=0.5, steps=1, noise_multiplier=1.0, seed=0)
    assert engine.mode == "ghost"
    engine.step(torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 0]))
    assert engine.steps_taken == 1


def test_fix_of_a_bare_batchnorm_returns_its_replacement():
    fixed = fix_model(nn.BatchNorm2d(64))
    assert isinstance(fixed, nn.GroupNorm) and fixed.num_groups == 32


def test_fix_rejects_a_bad_group_count():
    with pytest.raises(ValueError, match="groups"):
        fix_model(nn.BatchNorm2d(4), groups=0)


class _Centred(nn.Module):
    """A model whose own forward mixes examples (no layer the validator knows does)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x - x.mean(0))


def _engine(model, **overrides):
    return DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=50, clip_norm=1.0,
                 batch_size=10, noise_multiplier=1.0, steps=3, seed=0, **overrides)


@pytest.mark.parametrize("mode", ["auto", "ghost"])
def test_a_forward_that_mixes_examples_is_refused_before_a_step(mode):
    engine = _engine(_Centred(), mode=mode)
    with pytest.raises(ValueError, match="mixes examples"):
        engine.fit(torch.randn(50, 4), torch.randint(0, 3, (50,)))
    assert engine.steps_taken == 0


def test_a_loss_that_mixes_examples_is_refused():
    def centred_loss(outputs, targets):
        losses = nn.functional.cross_entropy(outputs, targets, reduction="none")
        return losses - losses.mean()

    engine = _engine(nn.Linear(4, 3), loss_fn=centred_loss, mode="ghost")
    with pytest.raises(ValueError, match="changed another example's loss"):
        engine.step(torch.randn(6, 4), torch.randint(0, 3, (6,)))
    assert engine.steps_taken == 0


def test_dropout_and_token_inputs_pass_the_independence_check():
    # Dropout draws the same masks in both probe runs; integer inputs are probed with token ids 0 and 1.
    model = nn.Sequential(nn.Embedding(5, 4), nn.Dropout(0.5), nn.Flatten(), nn.Linear(8, 3))
    engine = _engine(model, mode="ghost")
    engine.step(torch.randint(0, 5, (6, 2)), torch.randint(0, 3, (6,)))
    assert engine.steps_taken == 1


class _LogFeatures(nn.Module):
    """Features read through a log (positive data): NaN on negative synthetic inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(torch.log(x))


class _NumpyNoise(nn.Module):
    """Per-example noise drawn with numpy, not torch: independent of the other examples."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        import numpy as np

        return self.linear(x) + torch.as_tensor(np.random.normal(size=(x.shape[0], 3)), dtype=x.dtype)


@pytest.mark.parametrize("model", [_LogFeatures, _NumpyNoise])
def test_models_that_do_not_mix_examples_pass_the_check(model):
    # A review found both refused: NaN outputs on randn inputs, and numpy's random state differing between runs.
    engine = _engine(model(), mode="ghost")
    engine.step(torch.rand(6, 4) + 0.1, torch.randint(0, 3, (6,)))
    assert engine.steps_taken == 1
