"""Torch DP-SGD under replace-one neighbours and with fixed-size batches (issue 14)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from scipy import stats  # noqa: E402

from privml.accounting import GroupPrivacyAccountant, dpsgd_event, make_accountant  # noqa: E402
from privml.neighbouring import Neighbouring  # noqa: E402
from privml.torch import DPSGD, FixedSizeSampler, PoissonSampler  # noqa: E402
from tests.torch._models import single_layer  # noqa: E402
from tests.torch.test_classifier import blobs, small  # noqa: E402

RO = Neighbouring.REPLACE_ONE


def engine_for(model, **overrides):
    settings = dict(n_samples=40, clip_norm=0.1, sample_rate=0.25, steps=10, noise_multiplier=1.0, seed=0)
    settings.update(overrides)
    return DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), **settings)


def test_defaults_are_unchanged():
    model, _, _ = single_layer("linear")
    engine = engine_for(model)
    assert engine.neighbouring is Neighbouring.ADD_REMOVE_ONE and engine.sampling == "poisson"
    assert isinstance(engine.sampler(), PoissonSampler)
    info = engine.info()
    assert info["neighbouring"] == "add/remove-one" and info["sampling"] == "poisson" and "bound" not in info


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_replace_one_engine_is_accounted_under_its_relation(accountant):
    noise = {}
    for key, extra in {
        "ar": {},
        "tight": {"neighbouring": "replace-one"},
        "group": {"neighbouring": "replace-one", "replace_one_bound": "group"},
    }.items():
        model, x, y = single_layer("linear")
        engine = engine_for(model, noise_multiplier=None, target_epsilon=2.0, accountant=accountant, **extra)
        for batch in engine.sampler(steps=3):
            engine.step(x[batch % x.shape[0]], y[batch % x.shape[0]])
        noise[key] = engine.noise_multiplier
        assert engine.epsilon <= 2.0
        if key != "ar":
            assert engine.privacy_.neighbouring is RO and engine.info()["bound"] == key
            assert engine.privacy_event_ == dpsgd_event(engine.noise_multiplier, 0.25, 3, neighbouring="replace-one")
            acc = make_accountant(accountant) if key == "tight" else GroupPrivacyAccountant(accountant)
            assert acc.compose(engine.privacy_event_).get_epsilon(1e-5) == pytest.approx(engine.epsilon)
            assert engine.privacy_.accountant == acc.name
    assert noise["ar"] < noise["tight"] < noise["group"]


def test_fixed_size_sampler_draws_b_distinct_records_uniformly():
    draws, n, b = 3000, 20, 6
    counts = np.zeros(n)
    for secure in (False, True):
        sampler = FixedSizeSampler(n=n, batch_size=b, steps=draws if not secure else 50,
                                   generator=torch.Generator().manual_seed(0), secure=secure)
        for batch in sampler:
            assert batch.numel() == b and torch.unique(batch).numel() == b
            assert torch.all(batch[1:] > batch[:-1])
            if not secure:
                counts[batch.numpy()] += 1
    assert stats.chisquare(counts, np.full(n, draws * b / n)).pvalue > 1e-3
    with pytest.raises(ValueError):
        FixedSizeSampler(n=5, batch_size=6, steps=1)


def test_fixed_size_engine_divides_by_b_and_refuses_other_batch_sizes():
    model, x, y = single_layer("linear")
    engine = engine_for(model, neighbouring="replace-one", sampling="fixed-size", accountant="rdp",
                        batch_size=10, sample_rate=None)
    assert engine.expected_batch_size == 10
    sampler = engine.sampler(steps=4)
    assert isinstance(sampler, FixedSizeSampler) and sampler.batch_size == 10
    for batch in sampler:
        engine.step(x[batch % x.shape[0]], y[batch % x.shape[0]])
    assert engine.steps_taken == 4 and engine.info()["sampling"] == "fixed-size"
    assert engine.privacy_event_ == dpsgd_event(
        1.0, 0.25, 4, neighbouring="replace-one", sampling="fixed-size", population=40
    )
    with pytest.raises(ValueError, match="exactly 10"):
        engine.step(x[:7], y[:7])
    assert engine.steps_taken == 4  # nothing was computed or counted
    # the noisy gradient is (clipped sum + noise) / b: with zero inputs the weight gradients are pure noise,
    # of std s C / b (dividing by anything else, e.g. a realised or expected Poisson size, shows here)
    zero_x = torch.zeros_like(x[:10])
    weights = [g for _ in range(300) for name, g in engine._noisy_gradient(zero_x, y[:10]).items()
               if name.endswith("weight")]
    noise = torch.cat([w.flatten() for w in weights])
    assert float(noise.std()) == pytest.approx(1.0 * 0.1 / 10, rel=0.05)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sampling="fixed-size"), "replace-one"),
        (dict(sampling="fixed-size", neighbouring="replace-one"), "accountant='rdp'"),
        (dict(sampling="fixed-size", neighbouring="replace-one", accountant="rdp", sample_rate=0.2125), "whole"),
        (dict(sampling="fixed-size", neighbouring="replace-one", accountant="rdp", replace_one_bound="group"),
         "group privacy"),
        (dict(sampling="shuffled"), "sampling"),
        (dict(neighbouring="replace-one", replace_one_bound="loose"), "replace_one_bound"),
        (dict(neighbouring="swap"), "unknown neighbouring"),
    ],
)
def test_invalid_combinations_are_refused(kwargs, match):
    model, _, _ = single_layer("linear")
    with pytest.raises(ValueError, match=match):
        engine_for(model, **kwargs)


def test_classifier_passes_the_relation_and_sampler_through():
    X, y = blobs(80)
    model = small(epochs=2, batch_size=20, neighbouring="replace-one", sampling="fixed-size", accountant="rdp")
    model.fit(X, y)
    assert model.privacy_.neighbouring is RO and model.privacy_.epsilon <= 8.0
    assert model.fit_info_["sampling"] == "fixed-size" and model.fit_info_["bound"] == "tight"
    assert model.fit_info_["expected_batch_size"] == 20
    assert set(model.fit_info_) <= model.released_info
    baseline = small(epsilon=float("inf"), epochs=1, neighbouring="replace-one").fit(X, y)
    assert baseline.privacy_.neighbouring is RO and baseline.privacy_.epsilon == float("inf")
    with pytest.raises(ValueError, match="replace-one"):
        small(sampling="fixed-size", accountant="rdp").fit(X, y)
