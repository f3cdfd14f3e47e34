"""One DP-SGD step captured as a CUDA graph, over a batch padded to a public capacity.

A step of a small model on a GPU is bound by the host: hundreds of kernel
launches (the forward and backward passes, the per-layer norms, the clipped
sums, the noise and the optimiser) cost more CPU time than the GPU needs to
run them. A CUDA graph records the launches once and replays them with one
call. A graph needs fixed shapes, but Poisson batches vary in size, so every
batch is padded to a fixed capacity K:

* the first ``b`` rows of static input buffers hold the sampled records, the
  other ``K - b`` rows zeros (no record), and a weight vector is 1 on the
  first ``b`` rows and 0 on the rest;
* the per-example losses are multiplied by the weights, so a padded row's
  gradient is exactly zero: its norm is 0, its clip factor 1, its
  contribution to the clipped sum 0. The clipped sum is the sum over the ``b``
  sampled records, as in the eager step (up to the order of floating-point
  additions), and the mechanism and its accounting are unchanged.

The capacities are public, functions of n and q alone: a ladder of rungs at
``q n + j sd`` (j = -1 .. 3, sd = ``sqrt(q n (1 - q))``, rounded up to 8, at
most n); for fixed-size batches the one capacity b. Each batch runs the graph
of the smallest rung that holds it, each rung's graph captured the first time
batches reach it, so a step pads about half a standard deviation of rows
(on an H200 the transformer at batch 64 took 9.5 ms per step padded to
``q n + 8 sd``, the one capacity before the ladder, and 4.8 ms unpadded).
Which rung runs depends on the batch's size, a function of the sampling coins
and n, never of the records. A batch above the top rung (about one step in
700) runs the eager step instead; all compute the same release. There is no
rung above ``q n + 3 sd``: one reached that rarely would first be captured
thousands of steps in, where a capture that failed (out of memory) would end
a long fit.

The noise is drawn outside the graph by the engine's :class:`RandomSource`
(seeded or secure) and copied into one static buffer all rungs' graphs read
(a replay never reuses a draw, secure noise works unchanged, and the rungs
do not each keep a parameter-sized copy). The optimiser's
hyper-parameters are frozen into the graph when it is captured (a learning
rate changed afterwards is not seen): change them before training.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn


class Engine(Protocol):
    """What a graphed step needs of its engine (:class:`privml.torch.DPSGD`, which builds one)."""

    device: torch.device
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: torch.optim.Optimizer
    sampling: str
    n_samples: int
    sample_rate: float
    expected_batch_size: float
    mode: str
    distributed: bool
    max_physical_batch_size: int | None
    _params: list[tuple[str, nn.Parameter]]

    def _draw_noise(self) -> list[torch.Tensor]: ...

    def _noisy_gradient(self, x: torch.Tensor, y: torch.Tensor, *, loss_fn: Any = None,
                        noise: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]: ...

    def _apply(self, gradient: dict[str, torch.Tensor]) -> None: ...


#: Eager steps (real, counted steps) before the capture: they create the optimiser's state and let
#: cuBLAS and cuDNN allocate their workspaces, which a capture must not do.
WARMUP_STEPS = 3


#: Rungs of the capacity ladder, in standard deviations of the Poisson batch size about its mean.
LADDER_STEPS = (-1, 0, 1, 2, 3)


def capacity_ladder(n: int, sample_rate: float, fixed_size: int | None = None) -> tuple[int, ...]:
    """The public padded batch sizes, smallest first: rungs at ``q n + j sd`` (j in ``LADDER_STEPS``), at most n.

    >>> capacity_ladder(60_000, 512 / 60_000)
    (496, 512, 536, 560, 584)
    >>> capacity_ladder(100, 0.1, fixed_size=10)
    (10,)
    """
    if fixed_size is not None:
        return (fixed_size,)
    mean = sample_rate * n
    spread = math.sqrt(n * sample_rate * (1 - sample_rate))
    return tuple(sorted({min(n, 8 * math.ceil((mean + j * spread) / 8)) for j in LADDER_STEPS
                         if mean + j * spread > 0}))


#: ``cuda_graph="auto"`` replays a graph when capacity (the top rung) x trained parameters is at most this.
#: Measured on an NVIDIA H200 (BENCHMARKS.md) before the ladder, every batch padded to q n + 8 sd: the
#: Tramer-Boneh CNN (26,010 parameters; capacity 696 at batch 512 of 60,000) ran 5.6x faster per step as a
#: graph, being bound by host launches; a 2.7M-parameter ResNet at batch 256 (capacity 392) ran 1.4x slower,
#: its GPU work growing with the padded rows. With the ladder the ResNet's graph of a batch of exactly b took
#: 26.1 ms against 36.7 ms eager, but each rung a batch reaches keeps its own graph and memory, so larger
#: steps stay eager by default.
AUTO_GRAPH_WORK = 2**27


def graph_pays_off(capacity: int, parameters: int, *, padded: bool = True) -> bool:
    """Whether ``cuda_graph="auto"`` uses a graph: small steps gain, compute-bound ones lose to padding.

    Without padding (fixed-size batches: the capacity is b) a replay runs
    the eager step's kernels without their launches: no extra work, so a
    graph is used whatever the model's size (H200, batch 256, BENCHMARKS.md:
    ResNet 25.3 against 28.8 ms eager, WRN-16-4 24.1 against 25.4 ms, the
    transformer 14.1 against 13.7 ms).

    >>> graph_pays_off(696, 26_010), graph_pays_off(392, 2_748_890), graph_pays_off(256, 2_748_890, padded=False)
    (True, False, True)
    """
    return not padded or capacity * parameters <= AUTO_GRAPH_WORK


class GraphedStep:
    """Padded steps at each capacity of a ladder: a batch runs on the smallest capacity that holds it.

    Each capacity is a :class:`PaddedGraph`, warmed up and captured the
    first time a batch reaches it (a rung no batch reaches costs nothing).
    """

    def __init__(self, engine: Engine, capacities: tuple[int, ...]) -> None:
        if not capacities or list(capacities) != sorted(set(capacities)) or capacities[0] < 1:
            raise ValueError(f"capacities must be increasing positive sizes, got {capacities!r}")
        self.capacities = capacities
        noise = _NoiseBuffer(engine)
        self.rungs = {capacity: PaddedGraph(engine, capacity, noise) for capacity in capacities}

    @property
    def capacity(self) -> int:
        """The largest batch a graph holds (the top rung)."""
        return self.capacities[-1]

    @property
    def steps_run(self) -> int:
        return sum(rung.steps_run for rung in self.rungs.values())

    @property
    def graphs(self) -> dict[int, torch.cuda.CUDAGraph]:
        """The captured graphs by capacity."""
        return {k: rung.graph for k, rung in self.rungs.items() if rung.graph is not None}

    def fits(self, batch: int) -> bool:
        return batch <= self.capacity

    def rung_for(self, batch: int) -> PaddedGraph:
        """The smallest capacity that holds ``batch`` records (``fits`` first)."""
        return self.rungs[next(k for k in self.capacities if batch <= k)]

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One logical step on the batch ``(x, y)`` of at most the top rung's records (counted by the engine)."""
        self.rung_for(x.shape[0])(x, y)


class _NoiseBuffer:
    """The static noise every rung's graph reads, refilled with a fresh draw before each padded step."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tensors: list[torch.Tensor] | None = None

    def fill(self) -> None:
        noise = self.engine._draw_noise()
        if self.tensors is None:
            self.tensors = [z.clone() for z in noise]
        else:
            torch._foreach_copy_(self.tensors, noise)


class PaddedGraph:
    """The padded step of ``engine`` at capacity K: eager while warming up, then (CUDA) a graph replay.

    On a CPU model nothing is captured and every step runs the padded
    computation eagerly (the path CI tests; it is slower than the plain step).
    """

    def __init__(self, engine: Engine, capacity: int, noise: _NoiseBuffer) -> None:
        self.engine, self.capacity = engine, capacity
        self.noise = noise  # shared by every rung of the engine's ladder
        self.capture = engine.device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps_run = 0
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        self._weights = torch.zeros(capacity, device=engine.device)

    def _loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Padded rows weigh 0: their gradients, norms and contributions are exactly zero.
        losses = self.engine.loss_fn(outputs, targets)
        if losses.shape != (self.capacity,):
            # Checked here, before the weights: a scalar (a mean over the batch) would broadcast to every row and
            # give the padded rows, records not sampled in this step, a gradient.
            raise ValueError(
                f"loss_fn must return one loss per example, shape ({self.capacity},), got {tuple(losses.shape)}"
            )
        return losses * self._weights.to(outputs.dtype)

    def _fill(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Copy the batch into the static buffers (the first ``b`` rows) and set the weights."""
        if self._x is None or self._y is None:
            self._x = torch.zeros((self.capacity, *x.shape[1:]), dtype=x.dtype, device=self.engine.device)
            self._y = torch.zeros((self.capacity, *y.shape[1:]), dtype=y.dtype, device=self.engine.device)
        b = x.shape[0]
        self._x[:b].copy_(x)
        self._y[:b].copy_(y)
        # The padded rows hold zeros, not records of earlier batches: a padded row weighs 0, and must not carry a
        # record (one whose gradient is not finite would otherwise be dropped or not by a step it is not in).
        self._x[b:].zero_()
        self._y[b:].zero_()
        self._weights.zero_()
        self._weights[:b] = 1.0

    def _body(self) -> None:
        """Noisy gradient of the padded batch, handed to the optimiser (what the graph records)."""
        assert self._x is not None and self._y is not None
        gradient = self.engine._noisy_gradient(self._x, self._y, loss_fn=self._loss, noise=self.noise.tensors)
        self.engine._apply(gradient)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One logical step on the batch ``(x, y)`` of at most K records (counted by the engine)."""
        self._fill(x, y)
        self.noise.fill()
        if not self.capture:
            self._body()
        elif self.graph is not None:
            self.graph.replay()
        elif self.steps_run < WARMUP_STEPS:
            # Warm-up off the default stream, as CUDA graphs require before a capture.
            side = torch.cuda.Stream(device=self.engine.device)
            side.wait_stream(torch.cuda.current_stream(self.engine.device))
            with torch.cuda.stream(side):
                self._body()
            torch.cuda.current_stream(self.engine.device).wait_stream(side)
        else:
            self.engine.optimizer.zero_grad(set_to_none=True)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._body()
            self.graph = graph
            graph.replay()  # capturing records the step without running it
        self.steps_run += 1


def graphed_step_for(engine: Engine, cuda_graph: bool | str) -> GraphedStep | None:
    """``engine``'s CUDA-graph step if asked for and possible (``DPSGD(cuda_graph=...)``).

    ``True`` refuses a run that cannot use one; ``"auto"`` uses one where it can.
    """
    if cuda_graph not in (True, False, "auto"):
        raise ValueError(f"cuda_graph must be True, False or 'auto', got {cuda_graph!r}")
    fixed = round(engine.expected_batch_size) if engine.sampling == "fixed-size" else None
    capacities = capacity_ladder(engine.n_samples, engine.sample_rate, fixed)
    capacity = capacities[-1]
    obstacles = [
        reason
        for reason, present in (
            (f"a model on a CUDA device, not {engine.device}", engine.device.type != "cuda"),
            ("mode='ghost' (torch.func transforms are not captured)", engine.mode != "ghost"),
            ("distributed=False", engine.distributed),
            (f"max_physical_batch_size=None (one micro-batch of up to {capacity} records)",
             engine.max_physical_batch_size is not None and engine.max_physical_batch_size < capacity),
        )
        if present
    ]
    if cuda_graph is False:
        return None
    if cuda_graph == "auto":
        pays = graph_pays_off(capacity, sum(p.numel() for _, p in engine._params), padded=fixed is None)
        return GraphedStep(engine, capacities) if not obstacles and pays else None
    if obstacles:
        raise ValueError(f"cuda_graph=True needs {obstacles[0]}")
    return GraphedStep(engine, capacities)
