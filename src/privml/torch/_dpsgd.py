"""DP-SGD for any PyTorch module: Poisson sampling, flat clipping, one noise draw per step.

:class:`DPSGD` wraps a module and any :class:`torch.optim.Optimizer`. Each
*logical* step (Abadi et al. 2016, Algorithm 1):

1. takes a Poisson sample of the training set (each record independently
   with probability q; :class:`~privml.torch.PoissonSampler`);
2. splits it into *physical* micro-batches of at most
   ``max_physical_batch_size`` records (memory only);
3. computes, per micro-batch, the sum of the per-example gradients each
   clipped as a whole to L2 norm C: by ghost clipping for Linear, Conv1d/2d/3d (grouped too),
   GroupNorm, LayerNorm and Embedding layers (:mod:`privml.torch._ghost`), or
   by ``torch.func`` per-example gradients for any layer
   (:mod:`privml.torch._per_sample`);
4. adds the micro-batch sums, then N(0, s^2 C^2 I) once;
5. divides by the *expected* batch size q n and hands the result to the
   optimiser as the gradient (one ``optimizer.step()``);
6. counts one step for the accountant.

Privacy: add/remove-one neighbours by default. The clipped sum has L2
sensitivity C (flat clipping of the whole per-example gradient), so each
step is the sampled Gaussian mechanism with noise multiplier s (Mironov,
Talwar and Zhang 2019); T steps compose adaptively and are accounted by RDP
(Mironov 2017; conversion of Balle et al. 2020, Thm 21) or PLD (Koskela et
al. 2020), via :func:`privml.accounting.dpsgd_event`. Dividing by the
realised batch size would release it, and it moves with the added record;
dividing by ``q n`` (n public, as in Abadi et al. and Opacus) is
post-processing.

With ``neighbouring="replace-one"`` the guarantee is for datasets of the same
n that differ in one record: a replaced record moves the clipped sum by up to
2C, only in the steps that sample it. Poisson steps are then accounted by
the dominating pair (1-q) N(0, s^2) + q N(1, s^2) vs (1-q) N(0, s^2) + q N(-1, s^2)
(:class:`privml.accounting._pld._ReplaceOnePoissonGaussianPair`) or by group
privacy (``replace_one_bound="group"``); ``sampling="fixed-size"`` draws
exactly b records without replacement per step, divides by b, and is
accounted by Wang, Balle and Kasiviswanathan 2019 (RDP).

The checks of the engine's arguments and its plan live in :mod:`privml.torch._dpsgd_setup`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from privml._progress import progress_bar
from privml._validation import check_positive
from privml.accounting._dpsgd import plan_dpsgd
from privml.accounting._events import DpEvent
from privml.exceptions import BudgetExhausted
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring
from privml.torch._clipping import MODES, Mode
from privml.torch._dpsgd_setup import (
    check_distributed_sampling,
    check_precisions,
    cross_entropy_per_example,
    init_distributed,
    module_device,
    resolve_mode,
    shards_total,
)
from privml.torch._ghost.engine import ghost_clipped_sum
from privml.torch._ghost.row_probe import ghost_rows_hold
from privml.torch._graphs import graphed_step_for
from privml.torch._noise import RandomSource
from privml.torch._per_sample import vmap_clipped_sum
from privml.torch._phases import phase
from privml.torch._sampling import FixedSizeSampler, PoissonSampler, micro_batches
from privml.torch._validation import check_examples_independent, validate_model

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _detached(t: torch.Tensor) -> torch.Tensor:
    """``t`` outside any autograd graph: itself when it is in none (no operation issued)."""
    return t.detach() if t.requires_grad or t.grad_fn is not None else t


class DPSGD:
    """Differentially private training of a PyTorch module (DP-SGD of Abadi et al. 2016).

    Parameters
    ----------
    module:
        The model; validated by :func:`~privml.torch.validate_model` (no layer
        may mix examples). Its parameters are trained in place.
    optimizer:
        Any optimiser over ``module``'s parameters; it receives the noisy,
        normalised gradient in ``.grad`` and steps once per logical step.
    n_samples:
        n, the number of training records (public; in data-parallel training
        the global n).
    clip_norm:
        C > 0, the bound on each example's whole gradient (all parameters).
    sample_rate, batch_size:
        The Poisson rate q, or the expected batch size q n (give one). For
        ``sampling="fixed-size"``, b = q n must be a whole number.
    epochs, steps:
        The planned number of logical steps T (or epochs, T = round(epochs / q)).
        Needed with ``target_epsilon``; with only ``noise_multiplier`` the
        run is open-ended and :attr:`epsilon` reports what was spent.
    noise_multiplier:
        s: the noise on the clipped sum is N(0, s^2 C^2 I).
    target_epsilon:
        Calibrate s to the smallest value meeting (target_epsilon, delta)
        over T steps (:func:`privml.accounting.calibrate_dpsgd`). With both,
        s is checked against the target. Either way a budgeted run refuses
        step T + 1 with :class:`~privml.exceptions.BudgetExhausted`.
    delta:
        delta > 0 of the guarantee.
    accountant:
        ``"pld"`` (tightest; default) or ``"rdp"`` (the only one for
        fixed-size sampling).
    neighbouring:
        ``"add/remove-one"`` (default; n public, zero-out view) or
        ``"replace-one"`` (same n, one record replaced by any other).
    sampling:
        ``"poisson"`` (default) or ``"fixed-size"`` (replace-one only; not
        with ``distributed``): each logical batch is exactly b = q n records
        drawn without replacement (:class:`~privml.torch.FixedSizeSampler`),
        and :meth:`step` refuses a batch of another size.
    replace_one_bound:
        ``"tight"`` (default) or ``"group"``: how a replace-one guarantee of
        Poisson sampling is derived (the dominating pair, or group privacy
        (2 eps, (1 + e^eps) delta) from add/remove-one).
    loss_fn:
        Per-example losses ``(B,)`` from outputs and targets (default
        cross-entropy). It must not average over the batch.
    mode:
        ``"ghost"`` (ghost clipping; supported layers only), ``"vmap"``
        (``torch.func`` per-example gradients; any layer that does not mix
        examples) or ``"auto"`` (ghost when every parameterised layer is
        supported).
    max_physical_batch_size:
        Largest micro-batch computed at once (None: the whole logical batch).
    secure_noise:
        Draw the noise and the sampling coins securely (from ``os.urandom``
        on CPU, from generators keyed afresh from it on a GPU; see
        :mod:`privml.torch._noise`) instead of from seeded generators.
    seed:
        Seed of the sampling and noise generators (reproducible runs; a CUDA
        run draws other numbers than a CPU run of the same seed); None draws
        it from the OS. Ignored by ``secure_noise``.
    precision:
        ``"fp32"`` (default) or ``"bf16"``: the forward and backward passes
        run under :func:`torch.autocast` in bfloat16 (CUDA, or CPU), while the
        per-example norms, clipping, noise and the update stay in float32 (the
        norms and the clipped sum are formed from the same float32 values, so
        the passes' rounding does not touch the sensitivity bound C).
    clip_precision:
        The arithmetic of the per-example norms and the clipped sum
        (:mod:`privml.torch._ghost.precision`): ``"fp32"`` (default: full
        float32, TF32 turned off while they are formed) or ``"tf32"`` (ghost
        clipping only): privml rounds each layer's input and output gradient
        to TF32 itself, so the products may run on a GPU's TF32 tensor cores
        with the same result as without, and it bounds the sum's last
        rounding. Either way each example is clipped over its norm plus a
        proven bound on the floating-point error that could hide part of it,
        so the sensitivity stays C; on the benchmark models the clip shrinks
        in effect by 0.03% to 0.7% (``"fp32"``) and 0.1% to 1% (``"tf32"``).
        On a CPU ``"tf32"`` only adds work.
    distributed:
        Data-parallel training over an initialised ``torch.distributed``
        group (see :mod:`privml.torch._distributed`).
    cuda_graph:
        Run each step as a replay of a CUDA graph over the batch padded to a
        public capacity (:mod:`privml.torch._graphs`): the same release, far
        fewer host-side launches. CUDA models, ``mode="ghost"``, no
        micro-batches; the first steps run eagerly to warm up.
    preceding:
        A release from the same records before the first step, under the
        same relation (e.g. ScatterClassifier's private feature mean): the
        noise is calibrated to the budget of both, and ``privacy_`` counts it
        (:func:`privml.accounting.plan_dpsgd`).

    Attributes
    ----------
    noise_multiplier:
        The s in use (calibrated or given).
    steps_taken:
        Logical steps done (= optimiser steps = steps accounted for).

    Notes
    -----
    Privacy: (epsilon, delta)-DP under ``neighbouring`` (add/remove-one by
    default) for the model after any number of steps up to T, by the sampled
    Gaussian mechanism (Mironov, Talwar and Zhang 2019) composed over the
    steps taken, or under replace-one by the analyses in the module notes.
    Sensitivity: C, the clip of each example's whole flattened gradient
    (2C between replace-one neighbours).
    Only the noisy gradients leave a step: per-example norms, losses and the
    realised batch size are private and never reported.

    Examples
    --------
    >>> import torch
    >>> from privml.torch import DPSGD, TramerBonehCNN
    >>> model = TramerBonehCNN()
    >>> engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), n_samples=1000,
    ...                clip_norm=0.1, batch_size=50, steps=2, target_epsilon=1.0, seed=0)
    >>> X, y = torch.randn(1000, 1, 28, 28), torch.randint(0, 10, (1000,))
    >>> for batch in engine.sampler():
    ...     engine.step(X[batch], y[batch])
    >>> engine.steps_taken, engine.epsilon <= 1.0
    (2, True)
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        optimizer: torch.optim.Optimizer,
        n_samples: int,
        clip_norm: float,
        sample_rate: float | None = None,
        batch_size: float | None = None,
        epochs: float | None = None,
        steps: int | None = None,
        noise_multiplier: float | None = None,
        target_epsilon: float | None = None,
        delta: float = 1e-5,
        accountant: str = "pld",
        neighbouring: str = "add/remove-one",
        sampling: str = "poisson",
        replace_one_bound: str = "tight",
        loss_fn: LossFn | None = None,
        mode: Mode = "auto",
        max_physical_batch_size: int | None = None,
        secure_noise: bool = False,
        seed: int | None = None,
        distributed: bool = False,
        precision: str = "fp32",
        cuda_graph: bool | str = False,
        clip_precision: str = "fp32",
        preceding: DpEvent | None = None,
    ) -> None:
        self.module = validate_model(module)
        self.optimizer = optimizer
        if not (isinstance(n_samples, int) and n_samples >= 1):
            raise ValueError(f"n_samples must be a positive int, got {n_samples!r}")
        self.n_samples = n_samples
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        # Every DP-SGD privacy rule (rate, steps, sampler, relation, bound, accountant, noise) is checked once there.
        self.plan = plan_dpsgd(
            n_samples, delta=delta, epsilon=target_epsilon, sample_rate=sample_rate, batch_size=batch_size,
            epochs=epochs, steps=steps, accountant=accountant, neighbouring=neighbouring, sampling=sampling,
            replace_one_bound=replace_one_bound, noise_multiplier=noise_multiplier, preceding=preceding,
        )
        check_distributed_sampling(self.plan.sampling, distributed)
        self.sample_rate = self.plan.sample_rate
        self.expected_batch_size = self.sample_rate * n_samples  # q n: the public divisor of every step
        self.planned_steps, self.delta, self.neighbouring = self.plan.steps, self.plan.delta, self.plan.neighbouring
        self.accountant, self.sampling, self.replace_one_bound = accountant, sampling, replace_one_bound
        self.target_epsilon, self.noise_multiplier = self.plan.target_epsilon, self.plan.noise_multiplier
        self.loss_fn = loss_fn or cross_entropy_per_example
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self._requested_mode = mode
        self.mode, self._ghost = resolve_mode(self.module, mode)
        if max_physical_batch_size is not None and not (
            isinstance(max_physical_batch_size, int) and max_physical_batch_size >= 1
        ):
            raise ValueError(f"max_physical_batch_size must be a positive int or None, got {max_physical_batch_size!r}")
        self.max_physical_batch_size = max_physical_batch_size
        self.precision, self.clip_precision = check_precisions(precision, clip_precision, self.mode)
        self.secure_noise = bool(secure_noise)
        self.distributed = bool(distributed)
        self.device = module_device(module)
        self.rank, self.world_size = init_distributed(self.module, self.distributed)
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 1
        # Every draw happens on the model's device. Sampling streams differ across ranks
        # (independent coins on disjoint shards); only rank 0 draws noise, from its own stream.
        self._noise = RandomSource(self.device, seed=int(seed), secure=self.secure_noise)
        self._sampling = RandomSource(self.device, seed=int(seed) + 1 + self.rank, secure=self.secure_noise)
        self.steps_taken = 0
        self._released = False  # within a step: whether its noisy sum was formed (then it counts, see step)
        self._independence_checked = False  # ghost clipping's probe of the model and loss (see clipped_sum)
        self._guarantee_cache: tuple[int, PrivacyGuarantee] | None = None
        self._params = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self._graphed = graphed_step_for(self, cuda_graph)
        # AUDIT ONLY (privml.audit._one_run_torch): terms added to each step's clipped sum before the noise, the
        # gradient canaries of a one-run audit (records of norm C sampled like any other). Production never sets it.
        self._extra_clipped: Callable[[], dict[str, torch.Tensor]] | None = None

    # ------------------------------------------------------------ privacy
    @property
    def privacy_event_(self) -> DpEvent:
        """The event accounted for so far: the plan's ``preceding`` release, if any, then ``steps_taken`` sampled
        Gaussian steps (empty before the first, without one)."""
        return self.plan.event_after(self.steps_taken)

    @property
    def privacy_(self) -> PrivacyGuarantee:
        """(epsilon spent so far, delta) under the engine's neighbouring relation, with the accountant's name."""
        if self._guarantee_cache is None or self._guarantee_cache[0] != self.steps_taken:
            self._guarantee_cache = (self.steps_taken, self.plan.guarantee_after(self.steps_taken))
        return self._guarantee_cache[1]

    @property
    def epsilon(self) -> float:
        """Epsilon spent so far at :attr:`delta`."""
        return self.privacy_.epsilon

    @property
    def noise_std(self) -> float:
        """Standard deviation s C of the noise on each coordinate of the clipped sum."""
        return self.noise_multiplier * self.clip_norm

    # ------------------------------------------------------------ steps
    def sampler(self, n_local: int | None = None, steps: int | None = None) -> PoissonSampler | FixedSizeSampler:
        """The batch sampler over this rank's ``n_local`` records (default n) for the remaining planned steps.

        Poisson (:class:`~privml.torch.PoissonSampler`), or for
        ``sampling="fixed-size"`` batches of exactly b = q n records drawn
        without replacement (:class:`~privml.torch.FixedSizeSampler`).
        """
        if steps is None:
            if self.planned_steps is None:
                raise ValueError("no planned number of steps: pass steps")
            steps = self.planned_steps - self.steps_taken
        n = self.n_samples if n_local is None else n_local
        if self.sampling == "fixed-size":
            if n != self.n_samples:
                raise ValueError(f"fixed-size batches are drawn from all n_samples={self.n_samples} records, not {n}")
            return FixedSizeSampler(
                n=n,
                batch_size=round(self.expected_batch_size),
                steps=steps,
                generator=self._sampling.generator,
                secure=self.secure_noise,
            )
        return PoissonSampler(
            n=n, sample_rate=self.sample_rate, steps=steps, generator=self._sampling.generator, secure=self.secure_noise
        )

    def clipped_sum(
        self, x: torch.Tensor, y: torch.Tensor, *, loss_fn: LossFn | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Sum of the flat-clipped per-example gradients of a batch, by micro-batches, and the norms.

        The norms are private (a diagnostic for tests inside the trust
        boundary); the sum has sensitivity C under add/remove-one neighbours.
        ``loss_fn`` replaces the engine's (the padded step weighs its losses).
        """
        if self.mode == "ghost" and not self._independence_checked and x.shape[0]:
            check_examples_independent(self.module, self.loss_fn, x, y)  # before any step is released
            # A model whose rows are not its examples runs on the vmap path under mode="auto" (said once).
            if not ghost_rows_hold(self.module, self.loss_fn, self._ghost, x, y, requested=self._requested_mode,
                                   clip_precision=self.clip_precision):
                self.mode, self._ghost, self._graphed = "vmap", [], None
            self._independence_checked = True
        loss_fn = loss_fn or self.loss_fn
        sums: dict[str, torch.Tensor] | None = None
        norms = []
        parts = micro_batches(torch.arange(x.shape[0], device=x.device), self.max_physical_batch_size)
        for part in parts:
            # One micro-batch is the whole batch: skip the gather (a copy of every input).
            xb, yb = (x, y) if len(parts) == 1 else (x[part], y[part])
            with self._autocast():
                if self.mode == "ghost":
                    partial, n = ghost_clipped_sum(
                        self.module, loss_fn, xb, yb, self.clip_norm, self._ghost, clip_precision=self.clip_precision
                    )
                else:
                    partial, n = vmap_clipped_sum(self.module, loss_fn, xb, yb, self.clip_norm)
            if sums is None:  # the first micro-batch's sums are fresh tensors: accumulate into them
                # (ghost sums are formed without a graph: detaching them would only cost a launch each on a GPU)
                sums = {name: _detached(partial[name]) for name, _ in self._params}
            else:
                for name in sums:
                    sums[name] += _detached(partial[name])
            norms.append(_detached(n))
        if sums is None:  # an empty batch
            sums = {name: torch.zeros_like(p) for name, p in self._params}
        return sums, torch.cat(norms) if norms else torch.zeros(0, device=self.device)

    def _autocast(self) -> Any:
        """bfloat16 autocast of the forward and backward passes (``precision="bf16"``), else nothing.

        The ghost rules and the vmap path upcast what they record to float32
        before forming norms and sums, so clipping, noise and the update are float32.
        """
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def _noisy_gradient(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        loss_fn: LossFn | None = None,
        noise: list[torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """``(clipped sum + N(0, s^2 C^2 I)) / (q n)`` for one logical batch (no step, nothing counted).

        Privacy: the clipped sum has L2 sensitivity C under add/remove-one
        neighbours, so with a Poisson-sampled batch this is one release of
        the sampled Gaussian mechanism with noise multiplier s (Mironov,
        Talwar and Zhang 2019); dividing by the public q n is
        post-processing. Each call is a release that is not counted here,
        hence private: :meth:`step` calls it and counts the step. In data-parallel
        training the per-rank clipped sums are all-reduced and the noise is
        added once, by rank 0 (see :mod:`privml.torch._distributed`). The
        padded step passes its weighted ``loss_fn`` and the ``noise`` it drew
        outside its CUDA graph (:mod:`privml.torch._graphs`).
        """
        sums, _ = self.clipped_sum(x, y, loss_fn=loss_fn)
        if self._extra_clipped is not None:  # audit only: see __init__
            for name, term in self._extra_clipped().items():
                sums[name] = sums[name] + term
        self._released = True  # the noisy sum is formed from here on: step() counts it, whatever happens next
        tensors = [sums[name] for name, _ in self._params]
        if self.rank == 0:
            torch._foreach_add_(tensors, self._draw_noise() if noise is None else noise)
        if self.distributed:
            for tensor in tensors:
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        torch._foreach_div_(tensors, self.expected_batch_size)
        return sums

    def _draw_noise(self) -> list[torch.Tensor]:
        """N(0, s^2 C^2) for every coordinate of every trained parameter, shaped like each."""
        with phase("noise"):
            return self._noise.normal_like([p for _, p in self._params], self.noise_std)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One logical DP-SGD step on a Poisson sample ``(x, y)`` (possibly empty), counted once.

        Raises
        ------
        BudgetExhausted
            when the planned steps of a budgeted run (``target_epsilon``) are
            all taken; nothing is computed or released.
        """
        if self.sampling == "fixed-size" and x.shape[0] != round(self.expected_batch_size):
            # b is public and the accounting assumes exactly b records: refuse anything else, before computing
            raise ValueError(
                f"fixed-size sampling: a batch must hold exactly {round(self.expected_batch_size)} records, "
                f"got {x.shape[0]}"
            )
        planned = self.planned_steps
        if self.target_epsilon is not None and planned is not None and self.steps_taken >= planned:
            raise BudgetExhausted(
                f"all {self.planned_steps} planned steps are taken (epsilon={self.epsilon:.4g} of "
                f"target {self.target_epsilon:g}); another step would exceed the budget"
            )
        self.module.train()
        # Batches gathered on the device (fit's path) stay there; others are moved once, here.
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self._released = False
        try:
            if self._graphed is not None and self._graphed.fits(x.shape[0]):
                self._graphed(x, y)  # a replay runs no Python: the step is counted once it returns
            else:
                self._apply(self._noisy_gradient(x, y))
            self._released = True
        finally:
            # Counted once the noisy sum is formed, even if the step then fails (say in the optimiser): it may have
            # been read. The gradient is cleared either way, so a failed step leaves none behind.
            for _, p in self._params:  # every parameter _apply gave a gradient (the optimiser's among them)
                p.grad = None
            if self._released:
                self.steps_taken += 1

    def _apply(self, gradient: dict[str, torch.Tensor]) -> None:
        """Hand the noisy gradient to the optimiser and take its step."""
        with phase("optimizer"):
            for name, p in self._params:
                p.grad = gradient[name]
            self.optimizer.step()

    def fit(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        *,
        progress: bool = False,
        on_epoch: Callable[[int, DPSGD], Any] | None = None,
    ) -> DPSGD:
        """Run the remaining planned steps on this rank's records ``(X, y)``.

        The progress bar (stderr) advances by steps and shows, after each
        epoch (``1 / q`` steps), the epsilon spent so far; ``on_epoch(epoch,
        engine)`` is called there too (e.g. to evaluate on public test data).
        """
        # q n normalises the sum and n enters the guarantee: they must describe the data trained on. Across ranks
        # the shards must add up to n: every rank given the whole set would sample each record world_size times
        # per step (a record's term would be world_size C). Disjointness itself is the caller's (shard_bounds).
        total = shards_total(int(X.shape[0]), self.device) if self.distributed else int(X.shape[0])
        if total != self.n_samples:
            where = f"the ranks' shards hold {total}" if self.distributed else f"X has {total}"
            raise ValueError(f"{where} records but the engine was built for n_samples={self.n_samples}")
        # Moved once (a no-op when already there); every batch is then gathered on the device.
        X, y = X.to(self.device), y.to(self.device)
        sampler = self.sampler(n_local=int(X.shape[0]))
        per_epoch = max(1, round(1 / self.sample_rate))
        # The bar shows epsilon after about ten epochs of the run at most (and after the last step):
        # each showing composes every step so far, which costs more than an epoch of a small model.
        shown_every = max(1, math.ceil(len(sampler) / per_epoch / 10))
        start = time.perf_counter()
        with progress_bar(len(sampler), desc="DP-SGD", unit="step", enabled=progress) as bar:
            for batch in sampler:
                self.step(X[batch], y[batch])
                bar.update(1)
                if (progress or on_epoch is not None) and (
                    self.steps_taken % per_epoch == 0 or self.steps_taken == self.planned_steps
                ):
                    # Accounting the steps so far costs a composition: only when someone looks.
                    epoch = math.ceil(self.steps_taken / per_epoch)
                    last = self.steps_taken == self.planned_steps
                    if progress and (epoch % shown_every == 0 or last):
                        bar.set_postfix_str(f"epoch {epoch} eps={self.epsilon:.3g}")
                    if on_epoch is not None:
                        on_epoch(epoch, self)
        self.train_seconds_ = time.perf_counter() - start
        return self

    def info(self) -> dict[str, Any]:
        """Data-independent facts about the run (safe to publish with the model)."""
        guarantee = self.privacy_
        return {
            "noise_multiplier": self.noise_multiplier,
            "noise_std": self.noise_std,
            "clip_norm": self.clip_norm,
            "sample_rate": self.sample_rate,
            "expected_batch_size": self.expected_batch_size,
            "steps": self.steps_taken,
            "planned_steps": self.planned_steps,
            "epochs": self.steps_taken * self.sample_rate,
            "mode": self.mode,
            "accountant": guarantee.accountant,
            "epsilon": guarantee.epsilon,
            "delta": guarantee.delta,
            "neighbouring": guarantee.neighbouring.value,
            "sampling": self.sampling,
            **({"bound": self.plan.bound} if self.neighbouring is Neighbouring.REPLACE_ONE else {}),
            "world_size": self.world_size,
            "secure_noise": self.secure_noise,
            "precision": self.precision,
            "clip_precision": self.clip_precision,
        }
