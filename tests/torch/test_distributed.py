"""Data-parallel DP-SGD (2 gloo processes) has the distribution of single-process DP-SGD."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.multiprocessing as mp  # noqa: E402

from privml.torch import DPSGD  # noqa: E402
from privml.torch._distributed import shard_bounds  # noqa: E402
from tests.torch import _ddp_worker  # noqa: E402

DRAWS = 300


def spawn(tmp_path, sigma: float, draws: int) -> list[dict]:
    init = tmp_path / f"init-{sigma}"
    mp.spawn(_ddp_worker.run, args=(2, str(init), str(tmp_path), sigma, draws), nprocs=2, join=True)
    out = []
    for rank in range(2):
        with np.load(tmp_path / f"rank{rank}.npz") as f:
            out.append({k: f[k] for k in f.files})
    return out


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    return spawn(tmp_path_factory.mktemp("ddp-noisy"), sigma=1.5, draws=DRAWS)


def single_process_reference() -> tuple[DPSGD, np.ndarray]:
    model, x, y = _ddp_worker.make_problem()
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), noise_multiplier=1.0,
                   **_ddp_worker.SETTINGS)
    sums, _ = engine.clipped_sum(x, y)
    return engine, torch.cat([g.flatten() for g in sums.values()]).numpy() / engine.expected_batch_size


def test_shards_partition_the_data():
    bounds = [shard_bounds(11, r, 3) for r in range(3)]
    assert bounds == [(0, 4), (4, 8), (8, 11)]
    with pytest.raises(ValueError):
        shard_bounds(11, 3, 3)


def test_distributed_clipped_sum_equals_single_process(noisy):
    _, expected = single_process_reference()
    for rank in range(2):
        np.testing.assert_allclose(noisy[rank]["exact"], expected, rtol=1e-9, atol=1e-12)


def test_ranks_stay_identical(noisy):
    np.testing.assert_array_equal(noisy[0]["gradients"], noisy[1]["gradients"])
    np.testing.assert_array_equal(noisy[0]["params"], noisy[1]["params"])


def test_noise_is_added_once_with_std_sigma_c(noisy):
    engine, expected = single_process_reference()
    noise = (noisy[0]["gradients"] - expected) * engine.expected_batch_size
    target = 1.5 * _ddp_worker.SETTINGS["clip_norm"]
    n = noise.size
    # Noise from both ranks would give sqrt(2) target; the band is 5 sds of the sample variance.
    assert np.var(noise) / target**2 == pytest.approx(1.0, abs=5 * math.sqrt(2 / n))
    assert abs(noise.mean()) < 5 * target / math.sqrt(n)


def test_sampling_covers_the_global_dataset(noisy):
    # Each rank samples its 5 records at q = 0.3: the global batch has mean q n = 3, variance n q (1 - q).
    total = noisy[0]["sizes"] + noisy[1]["sizes"]
    assert total.mean() == pytest.approx(3.0, abs=5 * math.sqrt(2.1 / total.size))
    assert not np.array_equal(noisy[0]["sizes"], noisy[1]["sizes"])  # independent coins per rank


def test_shards_that_do_not_add_up_to_n_are_refused(noisy):
    # Both ranks given all 10 records: 20 over the shards, so each record would count twice per step.
    for rank in range(2):
        assert "shards hold 20 records" in str(noisy[rank]["refused"])
