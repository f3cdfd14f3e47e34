"""The private feature mean (privml.torch._feature_mean): its event, its clip, its noise, its sensitivity."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privml.accounting import GaussianEvent  # noqa: E402
from privml.neighbouring import Neighbouring  # noqa: E402
from privml.torch._feature_mean import FeatureCentre, feature_mean_event, private_feature_mean  # noqa: E402
from privml.torch._noise import RandomSource  # noqa: E402


def test_event_states_the_sum_sensitivity_of_each_relation():
    assert feature_mean_event(10.0, "add/remove-one") == GaussianEvent(10.0)
    # replace-one: a term can move from u to -u, so the sum moves by 2 bounds: the noise is s / 2 of that
    assert feature_mean_event(10.0, "replace-one") == GaussianEvent(5.0, neighbouring=Neighbouring.REPLACE_ONE)
    with pytest.raises(ValueError, match="noise_multiplier"):
        feature_mean_event(0.0, "add/remove-one")


def _mean(features: torch.Tensor, s: float, seed: int = 3) -> torch.Tensor:
    return private_feature_mean(features, noise_multiplier=s, source=RandomSource("cpu", seed=seed))


def _clipped_sum(features: torch.Tensor, s: float, seed: int = 3) -> np.ndarray:
    """The released mean with the same noise subtracted: (n / R) mean - noise, the sum of the clipped terms."""
    n, d = features.shape[0], int(np.prod(features.shape[1:]))
    noise = RandomSource("cpu", seed=seed).normal((d,), s, dtype=torch.float64).numpy()
    released = _mean(features, s, seed).double().numpy().reshape(-1)
    return released * n / math.sqrt(d) - noise


def test_the_mean_is_the_exact_mean_plus_noise_of_the_stated_scale():
    rng = np.random.default_rng(0)
    d = 64
    rows = rng.normal(size=(500, 4, 4, 4))
    rows *= 0.5 * math.sqrt(d) / np.linalg.norm(rows.reshape(500, -1), axis=1)[:, None, None, None]  # inside R
    features = torch.from_numpy(rows.astype(np.float32))
    terms = _clipped_sum(features, 2.0)
    np.testing.assert_allclose(terms, rows.reshape(500, -1).sum(0) / math.sqrt(d), rtol=0, atol=1e-4)
    # and the noise is the source's N(0, s^2) draw at the stated s, exactly: (mean - exact) n / R replays it
    errors = (_mean(features, 2.0).double().numpy().reshape(-1) - rows.reshape(500, -1).mean(0)) * 500 / math.sqrt(d)
    noise = RandomSource("cpu", seed=3).normal((d,), 2.0, dtype=torch.float64).numpy()
    np.testing.assert_allclose(errors, noise, rtol=0, atol=1e-4)


def test_a_huge_row_counts_as_one_bound_and_neighbours_move_the_sum_by_at_most_the_sensitivity():

    zeros = torch.zeros((50, 1, 4, 4))
    huge = zeros.clone()
    huge[7] = 1e6  # norm 4e6, far beyond R = 4
    other = zeros.clone()
    other[7] = -3e5
    terms_zero, terms_huge, terms_other = (_clipped_sum(f, 1.0) for f in (zeros, huge, other))
    # zero-out / add-remove: the huge record's term has norm at most 1 (the clip, with its margin)
    assert np.linalg.norm(terms_huge - terms_zero) <= 1.0
    assert np.linalg.norm(terms_huge - terms_zero) > 0.999
    # replace-one: the sum moves by at most 2 (here u to -u, exactly the worst case)
    assert np.linalg.norm(terms_huge - terms_other) <= 2.0
    assert np.linalg.norm(terms_huge - terms_other) > 1.999


def test_noise_comes_from_the_source_alone():
    features = torch.ones((10, 1, 4, 4))
    assert torch.equal(_mean(features, 1.0, seed=5), _mean(features, 1.0, seed=5))
    assert not torch.equal(_mean(features, 1.0, seed=5), _mean(features, 1.0, seed=6))
    with pytest.raises(ValueError, match="at least one record"):
        _mean(torch.zeros((0, 1, 4, 4)), 1.0)


def test_the_centre_layer_subtracts_its_buffer_which_the_state_dict_carries():
    centre = FeatureCentre((1, 2, 2))
    x = torch.arange(8, dtype=torch.float32).reshape(2, 1, 2, 2)
    assert torch.equal(centre(x), x)
    centre.set_mean(torch.full((1, 2, 2), 1.5))
    assert torch.equal(centre(x), x - 1.5)
    assert list(centre.state_dict()) == ["mean"] and not list(centre.parameters())
