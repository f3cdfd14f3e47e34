"""The padded DP-SGD step behind ``cuda_graph=True``: the same release as the eager step.

On CPU (CI) the padded step runs eagerly, which checks its arithmetic: padded
rows weigh 0, so the update equals the unpadded step's. The ``gpu`` tests
capture and replay the graph.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from privml.torch import DPSGD, TramerBonehCNN  # noqa: E402
from privml.torch._graphs import WARMUP_STEPS, GraphedStep, capacity_ladder  # noqa: E402


def _engines(
    device: str = "cpu", capacity: int | None = None, graph: bool = False, secure: bool = False
) -> tuple[DPSGD, DPSGD]:
    engines = []
    for padded in (False, True):
        torch.manual_seed(0)
        model = TramerBonehCNN().to(device)
        engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9), n_samples=200,
                       clip_norm=0.1, batch_size=20, noise_multiplier=1.0, seed=3, max_physical_batch_size=None,
                       cuda_graph=graph and padded, secure_noise=secure)
        if padded and (capacity or not graph):  # one capacity when asked for, else the ladder DPSGD builds
            engine._graphed = GraphedStep(engine, (capacity,) if capacity else capacity_ladder(200, 0.1))
        engines.append(engine)
    return engines[0], engines[1]


def _batches(device: str = "cpu"):
    generator = torch.Generator().manual_seed(1)
    X, y = torch.randn(200, 1, 28, 28, generator=generator), torch.randint(0, 10, (200,), generator=generator)
    return X.to(device), y.to(device)


def _assert_same_weights(a: DPSGD, b: DPSGD, rtol: float) -> None:
    for (name, p), q in zip(a.module.named_parameters(), b.module.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=rtol, atol=1e-7, msg=name)


def test_the_ladder_is_public_and_ends_three_deviations_up():
    assert capacity_ladder(200, 0.1) == (16, 24, 32, 40)  # mean 20, sd 4.2: 15.8, 20, 24.2, 28.5, 32.7 rounded up
    assert capacity_ladder(60_000, 512 / 60_000) == (496, 512, 536, 560, 584)
    assert capacity_ladder(100, 0.1, fixed_size=10) == (10,)  # fixed-size batches need no padding
    assert capacity_ladder(50, 0.9) == (48, 50)  # never more than n
    assert capacity_ladder(10_000, 1e-4) == (8,)  # a rung at or below zero records is not made


def test_each_batch_runs_on_the_smallest_rung_that_holds_it():
    # Padded to q n + 8 sd, a Poisson batch carried eight standard deviations of zero rows (twice the work of
    # the transformer's batch of 64 on an H200); each rung pads at most the gap to the one below.
    eager, padded = _engines()
    X, y = _batches()
    start = 0
    for size, rung in ((5, 16), (16, 16), (17, 24), (30, 32), (40, 40), (0, 16)):
        before = padded._graphed.rungs[rung].steps_run
        eager.step(X[start:start + size], y[start:start + size])
        padded.step(X[start:start + size], y[start:start + size])
        assert padded._graphed.rungs[rung].steps_run == before + 1, (size, rung)
        start += size
    assert padded._graphed.steps_run == eager.steps_taken == 6
    # Above the top rung (one step in about 700): the eager step, the same release.
    eager.step(X[:41], y[:41])
    padded.step(X[:41], y[:41])
    assert padded._graphed.steps_run == 6 and padded.steps_taken == 7
    # One noise buffer for every rung (each kept a parameter-sized copy: a review).
    assert len({id(rung.noise) for rung in padded._graphed.rungs.values()}) == 1
    _assert_same_weights(eager, padded, rtol=1e-5)


def test_padded_steps_equal_eager_steps():
    eager, padded = _engines()
    X, y = _batches()
    sizes = []
    for batch in eager.sampler(steps=6):
        sizes.append(len(batch))
        eager.step(X[batch], y[batch])
        padded.step(X[batch], y[batch])
    assert len(set(sizes)) > 1  # Poisson batches of different sizes, all padded to one capacity
    assert eager.steps_taken == padded.steps_taken == 6 and padded._graphed.steps_run == 6
    _assert_same_weights(eager, padded, rtol=1e-5)


def test_an_empty_batch_and_a_batch_over_the_capacity_are_handled():
    eager, padded = _engines(capacity=8)
    X, y = _batches()
    for rows in (slice(0, 0), slice(0, 5), slice(0, 12)):  # empty, padded, over capacity (eager)
        eager.step(X[rows], y[rows])
        padded.step(X[rows], y[rows])
    assert padded.steps_taken == 3 and padded._graphed.steps_run == 2
    _assert_same_weights(eager, padded, rtol=1e-5)


def test_cuda_graph_is_refused_where_it_cannot_run():
    model = TramerBonehCNN()
    with pytest.raises(ValueError, match="CUDA device"):
        DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=100, clip_norm=1.0,
              batch_size=10, noise_multiplier=1.0, cuda_graph=True)


@pytest.mark.gpu
@pytest.mark.parametrize("secure", [False, True])
def test_cuda_graph_replays_the_eager_step(secure):
    eager, graphed = _engines("cuda", graph=True, secure=secure)
    X, y = _batches("cuda")
    steps = 8 * WARMUP_STEPS + 6  # batches spread over the ladder's rungs, each warmed up before its capture
    for batch in eager.sampler(steps=steps):
        if not secure:
            eager.step(X[batch], y[batch])
        graphed.step(X[batch], y[batch])
    assert graphed._graphed.graphs and graphed.steps_taken == steps
    # A rung is captured once its warm-up steps are run, and replayed from then on.
    for rung in graphed._graphed.rungs.values():
        assert (rung.graph is not None) == (rung.steps_run > WARMUP_STEPS), rung.capacity
    if not secure:  # same seeds, same noise: the replayed steps equal the eager ones
        _assert_same_weights(eager, graphed, rtol=1e-3)


@pytest.mark.gpu
def test_a_replayed_graph_drops_a_record_whose_gradient_is_not_finite():
    # In a capture nothing may wait for the device, so the graph zeroes dropped rows on every replay. One rung
    # holds every batch here, so the last step is a replay whatever the sizes drawn (a review: spread over the
    # ladder, the NaN batch could land on a rung still warming up, and the test would check the eager step).
    eager, graphed = _engines("cuda", capacity=64, graph=True)
    X, y = _batches("cuda")
    batches = list(eager.sampler(steps=WARMUP_STEPS + 3))
    for batch in batches[:-1]:
        eager.step(X[batch], y[batch])
        graphed.step(X[batch], y[batch])
    last = batches[-1]
    bad = X[last].clone()
    bad[0] = float("nan")
    eager.step(X[last][1:], y[last][1:])  # the batch without the record
    assert graphed._graphed.rungs[64].graph is not None  # captured: the next step is a replay
    graphed.step(bad, y[last])  # replayed with it: its term is dropped, not NaN
    _assert_same_weights(eager, graphed, rtol=1e-3)


@pytest.mark.gpu
def test_an_eager_step_between_replays_changes_nothing():
    # Batches above the top rung (about one step in 700) run the eager step between graph replays: the optimiser's
    # state and the parameters the graphs read must carry across (a review asked for this on a GPU).
    eager, graphed = _engines("cuda", capacity=16, graph=True)
    X, y = _batches("cuda")
    sizes = [12] * (WARMUP_STEPS + 2) + [20] + [12] * 3  # captured, then eager (20 > 16), then replayed
    start = 0
    for size in sizes:
        eager.step(X[start:start + size], y[start:start + size])
        graphed.step(X[start:start + size], y[start:start + size])
        start = (start + size) % 150
    rung = graphed._graphed.rungs[16]
    assert rung.graph is not None and rung.steps_run == len(sizes) - 1 and graphed.steps_taken == len(sizes)
    _assert_same_weights(eager, graphed, rtol=1e-3)


@pytest.mark.gpu
def test_auto_graphs_a_large_model_only_without_padding():
    # A 2.7M-parameter ResNet at batch 256: padded to its Poisson capacity the graph lost to the eager step
    # (BENCHMARKS.md), so "auto" steps eagerly; fixed-size batches need no padding, so "auto" replays a graph.
    from privml.torch import GroupNormResNet

    chosen = {}
    for sampling in ("poisson", "fixed-size"):
        model = GroupNormResNet(in_channels=3, width=64, blocks=2, groups=8).to("cuda")
        options = {"neighbouring": "replace-one", "accountant": "rdp"} if sampling == "fixed-size" else {}
        engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=60_000,
                       clip_norm=0.1, batch_size=256, noise_multiplier=1.0, sampling=sampling, cuda_graph="auto",
                       **options)
        chosen[sampling] = engine._graphed is not None
    assert chosen == {"poisson": False, "fixed-size": True}


def test_a_batch_mean_loss_is_refused_by_the_padded_step():
    # Broadcast over the padded rows, a scalar loss would give them (records not sampled) a gradient.
    _, padded = _engines()
    padded.loss_fn = lambda outputs, targets: torch.nn.functional.cross_entropy(outputs, targets)
    X, y = _batches()
    with pytest.raises(ValueError, match="one loss per example"):
        padded.step(X[:5], y[:5])
    assert padded.steps_taken == 0


def test_padded_rows_hold_no_record():
    _, padded = _engines(capacity=8)
    X, y = _batches()
    padded.step(X[:6], y[:6])
    padded.step(X[6:9], y[6:9])  # a smaller batch: rows 3..7 are padding, not the first batch's records
    rung = padded._graphed.rungs[8]
    assert torch.count_nonzero(rung._x[3:]) == 0 and torch.count_nonzero(rung._y[3:]) == 0


def test_a_record_with_a_non_finite_gradient_is_dropped_by_both_steps():
    eager, padded = _engines()
    X, y = _batches()
    bad = X[:6].clone()
    bad[2] = float("nan")
    keep = torch.tensor([0, 1, 3, 4, 5])
    eager.step(X[keep], y[keep])  # the batch without the record
    padded.step(bad, y[:6])  # with it: its term is dropped, not NaN
    _assert_same_weights(eager, padded, rtol=1e-5)
