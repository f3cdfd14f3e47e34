"""NEGATIVE CONTROLS FOR TORCH DP-SGD: DELIBERATELY BROKEN ENGINES. NEVER TRAIN OR RELEASE WITH THEM.

Each class is a :class:`privml.torch.DPSGD` that still claims the engine's
guarantee (its ``privacy_`` is the honest engine's, on purpose: that false
claim is what the one-run audits of :mod:`privml.audit._one_run_torch` test)
while one step of DP-SGD is broken:

- :class:`UnclippedLayerDPSGD`: one layer's per-example gradients are left
  out of the clip (its norm is not counted and its gradient is summed raw);
  a record whose gradient lies in that layer moves the sum without bound.
- :class:`HalfNoiseDPSGD`: the noise is ``N(0, s^2 C^2 / 2)``, standard deviation
  scaled by 1/sqrt(2): the effective noise multiplier is s / sqrt(2).
- :class:`ReusedNoiseDPSGD`: the noise is drawn once and added again at every
  step; two steps' released gradients differ by their clipped sums exactly.
- :class:`UncheckedRowsDPSGD`: ghost clipping forced on a model whose forward
  reorders the batch and restores it (as a sort by length and its inverse
  would), with no check of the row assumption. With :class:`FlipModel`
  (``head(mix(x.flip(0)).flip(0))``) row k of ``mix``'s recorded input and
  output gradient belongs to example B-1-k, so each example's norm adds
  layers of two examples (privml issue 29 measured 1.85 C for one added
  record where add/remove allows C). The audited setting uses
  :class:`ShuffledBranchesNet`, the same fault in K branches each reordered
  differently: a record's gradient in each branch is clipped by the norm of
  a row that holds it and other records' other branches, so it contributes
  up to C per branch, sqrt(K) C in all.

:data:`TORCH_CONTROLS` records the setting of each (a tiny model on synthetic
data, m canaries, claimed epsilon 2), and :func:`audit_torch_control` runs a
one-run white-box audit of the broken or the correct engine there.

How far a one-run audit can see. Steinke, Nasr and Jagielski's bound with
m = 1000 canaries certifies about a third of a Gaussian mechanism's epsilon
(:func:`privml.audit._one_run.simulate_gaussian_audit`: eps 3 gives about 0.9,
eps 6 about 2). The f-DP test of the claimed curve (Mahloujifar, Melis and
Chaudhuri 2024; :mod:`privml.audit._one_run_fdp`) is tighter for DP-SGD's
near-Gaussian claims, but a bug flagged at a claim of 2 with m = 1000 must still
reveal canaries almost surely: the unclipped layer (a canary of gradient norm
70 C) and the reused noise (the noise cancels between steps) do. A noise
1/sqrt(2) too small (mu 0.71 where the claim is mu 0.50) is flagged in its own
setting: one full-batch step (the claim is then one Gaussian release) and 10^7
Dirac canaries in a wide table (:class:`DiracNet`). The row-order fault
bounds a canary's own contribution by C per layer whose rows it is mis-paired
in (each row is clipped by a norm that counts the canary's part of it); with
one reordered layer (:class:`FlipModel`, about sqrt(2) C) a one-run audit at
the claim cannot see it, so its setting is :class:`ShuffledBranchesNet` with
64 branches and 20 real records per canary (few canaries share a row): each
sampled canary then moves the sum by several C along its own gradient, which
the white-box score reads. ``TorchControl.flagged`` records which controls
an audit can flag, and the tests and ``benchmarks/one_run_torch.py`` measure
it (10 audits each).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privml._random import RandomState, check_random_state
from privml.audit._one_run_torch import TorchOneRunResult, dpsgd_one_run_audit
from privml.testing.planted import PlantedBug, by_name
from privml.torch._clipping import clip_factors
from privml.torch._dpsgd import DPSGD, LossFn
from privml.torch._ghost.engine import ghost_clipped_sum, ghost_modules
from privml.torch._per_sample import flat_norms, per_example_gradients

__all__ = [
    "BROKEN",
    "TORCH_CONTROLS",
    "ControlNet",
    "DiracNet",
    "FlipModel",
    "HalfNoiseDPSGD",
    "ReusedNoiseDPSGD",
    "ShuffledBranchesNet",
    "TorchControl",
    "UncheckedRowsDPSGD",
    "UnclippedLayerDPSGD",
    "audit_torch_control",
    "control_setting",
]

#: Marker set on every negative control (``getattr(obj, "BROKEN", False)``).
BROKEN = True


class UnclippedLayerDPSGD(DPSGD):
    """BROKEN (negative control): DP-SGD that leaves the parameters of layer ``unclipped`` out of the clip.

    Per-example gradients (``torch.func``) are clipped over every other
    parameter; the named layer's are summed as they are, as a hand-written
    engine that forgot one module's hook would. Never use it.
    """

    BROKEN = True

    def __init__(self, module: nn.Module, *, unclipped: str, **kwargs: Any) -> None:
        super().__init__(module, **kwargs)
        names = [name for name, _ in self._params]
        self.unclipped = unclipped
        if not any(name.startswith(unclipped + ".") for name in names):
            raise ValueError(f"no trained parameter under {unclipped!r}")

    def clipped_sum(
        self, x: torch.Tensor, y: torch.Tensor, *, loss_fn: LossFn | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        if x.shape[0] == 0:
            return {name: torch.zeros_like(p) for name, p in self._params}, torch.zeros(0, device=self.device)
        grads = per_example_gradients(self.module, loss_fn or self.loss_fn, x, y)
        raw = {k for k in grads if k.startswith(self.unclipped + ".")}
        # THE BUG: the layer's gradient is neither counted in the norm nor scaled by the clip factor.
        norms = flat_norms({k: g for k, g in grads.items() if k not in raw})
        factors = clip_factors(norms, self.clip_norm)
        sums = {k: g.sum(0) if k in raw else torch.tensordot(factors.to(g.dtype), g, dims=1) for k, g in grads.items()}
        return {name: sums[name].detach() for name, _ in self._params}, norms


class HalfNoiseDPSGD(DPSGD):
    """BROKEN (negative control): the noise's standard deviation is s C / sqrt(2), the claim is for s C.

    Never use it.
    """

    BROKEN = True

    def _draw_noise(self) -> list[torch.Tensor]:
        # THE BUG: half the variance the accountant assumes.
        return [n / math.sqrt(2.0) for n in super()._draw_noise()]


class ReusedNoiseDPSGD(DPSGD):
    """BROKEN (negative control): one noise draw, added again at every step. Never use it."""

    BROKEN = True

    def _draw_noise(self) -> list[torch.Tensor]:
        # THE BUG: drawn once; later steps reuse it (their differences are noiseless).
        if getattr(self, "_reused", None) is None:
            self._reused = super()._draw_noise()
        return [n.clone() for n in self._reused]


class UncheckedRowsDPSGD(DPSGD):
    """BROKEN (negative control): ghost clipping forced on any model, its row assumption unchecked.

    The seam: the engine is built with ``mode="vmap"`` (so no check made at
    construction or before a ghost step can refuse the model) and its
    :meth:`clipped_sum` calls :func:`privml.torch.ghost_clipped_sum`
    directly, without the engine's probes (:func:`~privml.torch._validation.check_examples_independent`
    and any row probe). With :class:`FlipModel` this is the row-order fault. Never use it.
    """

    BROKEN = True

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        kwargs["mode"] = "vmap"
        super().__init__(module, **kwargs)
        self._unchecked = ghost_modules(self.module)

    def clipped_sum(
        self, x: torch.Tensor, y: torch.Tensor, *, loss_fn: LossFn | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        if x.shape[0] == 0:
            return {name: torch.zeros_like(p) for name, p in self._params}, torch.zeros(0, device=self.device)
        # THE BUG: ghost clipping's rows read as examples though the model reorders them.
        sums, norms = ghost_clipped_sum(self.module, loss_fn or self.loss_fn, x, y, self.clip_norm, self._unchecked)
        return {name: sums[name].detach() for name, _ in self._params}, norms


# ------------------------------------------------------------ models and data of the controls' setting
class ControlNet(nn.Module):
    """A tanh MLP on the first ``n_features`` inputs plus a bias-free linear ``key`` layer on the last m.

    Real records have zero key inputs, so the key layer's m columns are coordinates no real record moves:
    canary i's key input ``a e_i`` (record canaries) or a Dirac canary on its column acts there alone.
    """

    def __init__(self, n_features: int, m: int, *, hidden: int = 16, n_classes: int = 2) -> None:
        super().__init__()
        self.n_features = n_features
        self.body = nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))
        self.key = nn.Linear(m, n_classes, bias=False)
        nn.init.zeros_(self.key.weight)  # a canary's first logits come from the body: its key gradient is large

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x[:, : self.n_features]) + self.key(x[:, self.n_features :])


class DiracNet(nn.Module):
    """A tanh MLP on the features plus a wide table (an ``Embedding``) whose row 0 every record reads.

    The table gives room for m Dirac canaries (m / n_classes + 1 rows) without m input columns: real records
    move only row 0, so a canary on any other coordinate acts there alone.
    """

    def __init__(self, n_features: int, m: int, *, hidden: int = 16, n_classes: int = 2) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))
        self.room = nn.Embedding(m // n_classes + 1, n_classes)
        nn.init.zeros_(self.room.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.room(torch.zeros(x.shape[0], dtype=torch.long, device=x.device))


class FlipModel(nn.Module):
    """``head(tanh(mix(x.flip(0))).flip(0))``: reverses the batch around ``mix`` and restores it.

    The same function of each example as without the flips (so the vmap path is exact), but ghost
    clipping, reading rows as examples, pairs ``mix``'s rows of example B-1-k with the other layers' of k.
    """

    def __init__(self, n_inputs: int, *, hidden: int = 16, n_classes: int = 2) -> None:
        super().__init__()
        self.mix = nn.Linear(n_inputs, hidden)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(x.flip(0))).flip(0))


class ShuffledBranchesNet(nn.Module):
    """ControlNet's body plus K bias-free key branches, branch k applied to the batch in its own order.

    Branch k reorders the rows by a fixed permutation of the batch (drawn from a generator seeded by the batch
    size and k, as a per-branch sort would order them) and restores the order of its output: the same function
    of each example, so the vmap path is exact, while ghost clipping, reading rows as examples, clips each
    branch's part of a record by the norm of a row that mostly holds other records (see the module notes).
    """

    def __init__(self, n_features: int, m: int, *, branches: int = 64, hidden: int = 16, n_classes: int = 2) -> None:
        super().__init__()
        self.n_features = n_features
        self.body = nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))
        branch_list = [nn.Linear(m, n_classes, bias=False) for _ in range(branches)]
        for branch in branch_list:
            nn.init.zeros_(branch.weight)  # as ControlNet's key: a canary's first gradient is large in every branch
        self.keys = nn.ModuleList(branch_list)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x[:, : self.n_features])
        keys, b = x[:, self.n_features :], x.shape[0]
        for k, branch in enumerate(self.keys):
            order = torch.randperm(b, generator=torch.Generator().manual_seed(1000 * b + k)).to(x.device)
            restore = torch.empty_like(order)
            restore[order] = torch.arange(b, device=x.device)
            out = out + branch(keys[order])[restore]
        return out


@dataclass(frozen=True)
class TorchControl(PlantedBug):
    """A planted torch DP-SGD bug and the setting of its one-run audit.

    Attributes
    ----------
    name, bug:
        As :class:`~privml.testing.planted.PlantedBug`.
    canaries:
        ``"dirac"`` (gradient canaries) or ``"records"`` (key-input records, trained through the clip).
    flagged:
        Whether a one-run audit at the claim can flag it (see the module notes); measured by the tests.
    build:
        ``build(broken, n_features, m) -> (model, engine class, extra engine settings)``.
    m, setting, guesses, key_inputs:
        The audit's canaries, the engine's settings (the claim), the guess counts tried (None: the default
        sweep) and whether records carry the m key-input columns (:class:`ControlNet`) or only the features
        (:class:`DiracNet`).
    real_per_canary:
        None: :data:`N_REAL` real records; else that many per canary (the row-order setting, where few
        canaries must share a batch row).
    """

    canaries: str
    flagged: bool
    build: Callable[[bool, int, int], tuple[nn.Module, type[DPSGD], dict[str, Any]]]
    m: int = 1000
    setting: dict[str, Any] = field(default_factory=lambda: dict(SETTING))
    guesses: tuple[int, ...] | None = None
    key_inputs: bool = True
    real_per_canary: int | None = None


#: The controls' common setting: claimed (2, 1e-5) add/remove-one, 10 Poisson steps at q = 0.2.
SETTING: dict[str, Any] = {
    "clip_norm": 1.0, "sample_rate": 0.2, "steps": 10, "target_epsilon": 2.0, "delta": 1e-5,
}
#: Real records, their features, and the key input of a record canary (gradient norm about 0.7 a >> C).
N_REAL, N_FEATURES, KEY_SCALE = 200, 8, 100.0


def control_setting(
    m: int, *, random_state: RandomState = 0, key_inputs: bool = True, n_real: int = N_REAL
) -> tuple[Any, ...]:
    """``(X, y, canary_x, canary_y)``: n_real synthetic real records (zero key inputs) and m key-input canaries.

    ``key_inputs=False``: the records hold the features only, and there are no canary records (None, None).
    """
    rng = check_random_state(random_state)
    a = rng.standard_normal((n_real, N_FEATURES)) / math.sqrt(N_FEATURES)
    if not key_inputs:
        return (torch.tensor(a, dtype=torch.float32), torch.from_numpy((a[:, 0] > 0).astype(np.int64)), None, None)
    X = np.zeros((n_real, N_FEATURES + m))
    X[:, :N_FEATURES] = a
    y = (a[:, 0] > 0).astype(np.int64)
    canary_x = np.zeros((m, N_FEATURES + m))
    canary_x[:, N_FEATURES:] = KEY_SCALE * np.eye(m)
    return (torch.tensor(X, dtype=torch.float32), torch.from_numpy(y),
            torch.tensor(canary_x, dtype=torch.float32), torch.zeros(m, dtype=torch.int64))


def _unclipped(broken: bool, d: int, m: int) -> tuple[nn.Module, type[DPSGD], dict[str, Any]]:
    return ControlNet(d, m), (UnclippedLayerDPSGD if broken else DPSGD), ({"unclipped": "key"} if broken else {})


def _half_noise(broken: bool, d: int, m: int) -> tuple[nn.Module, type[DPSGD], dict[str, Any]]:
    # Ghost clipping: the table's per-example gradients are never formed (vmap would hold B x m of them).
    return DiracNet(d, m), (HalfNoiseDPSGD if broken else DPSGD), {"mode": "ghost"}


#: The half-noise control's setting: one full-batch step, so the claim is one Gaussian release (mu = 1 / s,
#: about 0.50 at (2, 1e-5)) and the bug makes it mu = sqrt(2) / s (about 0.71, epsilon 3.0). Refuting 0.50 from
#: one run takes about 10^7 Dirac canaries and the f-DP test of the claimed curve (Mahloujifar et al. 2024):
#: simulated, 10^6 canaries refute it in 4 of 6 audits, 10^7 in 4 of 4; a few guess counts of the size that
#: test favours keep the union bound small.
HALF_NOISE_SETTING: dict[str, Any] = {
    "clip_norm": 1.0, "sample_rate": 1.0, "steps": 1, "target_epsilon": 2.0, "delta": 1e-5,
}


def _reused_noise(broken: bool, d: int, m: int) -> tuple[nn.Module, type[DPSGD], dict[str, Any]]:
    return ControlNet(d, m), (ReusedNoiseDPSGD if broken else DPSGD), {}


def _row_order(broken: bool, d: int, m: int) -> tuple[nn.Module, type[DPSGD], dict[str, Any]]:
    # The correct engine runs the same model on the per-example path (what it must do with such a model).
    return ShuffledBranchesNet(d, m), (UncheckedRowsDPSGD if broken else DPSGD), ({} if broken else {"mode": "vmap"})


#: Every torch negative control with its setting.
TORCH_CONTROLS: dict[str, TorchControl] = by_name(
    (
        TorchControl("unclipped-layer", "the key layer's per-example gradients are neither clipped nor counted",
                     "records", True, _unclipped),
        TorchControl("half-noise", "noise standard deviation s C / sqrt(2) (claimed: s C)", "dirac", True,
                     _half_noise, m=10_000_000, setting=HALF_NOISE_SETTING, guesses=(500, 1000, 2000, 5000),
                     key_inputs=False),
        TorchControl("reused-noise", "one noise draw added again at every step", "dirac", True, _reused_noise),
        TorchControl("row-order", "ghost clipping, row assumption unchecked, on 64 branches each reordering the "
                     "batch", "records", True, _row_order, real_per_canary=20),
    )
)


def audit_torch_control(
    name: str, *, broken: bool, m: int | None = None, random_state: int = 0, confidence: float = 0.95
) -> TorchOneRunResult:
    """A one-run white-box audit of the broken (or correct) engine of control ``name`` in its setting.

    ``m`` (default: the control's own) is the number of canaries. ``random_state`` seeds the data, the initial
    weights, the canaries' coins and the run: distinct seeds are independent audits.
    """
    if name not in TORCH_CONTROLS:
        raise ValueError(f"unknown control {name!r}; choose from {', '.join(TORCH_CONTROLS)}")
    control = TORCH_CONTROLS[name]
    m_ = control.m if m is None else m
    rng = np.random.default_rng([random_state, 29])
    n_real = N_REAL if control.real_per_canary is None else control.real_per_canary * m_
    X, y, canary_x, canary_y = control_setting(m_, random_state=rng, key_inputs=control.key_inputs, n_real=n_real)
    torch.manual_seed(int(rng.integers(2**62)))
    model, engine_cls, extra = control.build(broken, N_FEATURES, m_)
    records = control.canaries == "records"
    guesses = None if control.guesses is None else [g for g in control.guesses if g <= m_]
    return dpsgd_one_run_audit(
        model, X, y, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), m=m_, white_box=True,
        canary_x=canary_x if records else None, canary_y=canary_y if records else None, engine_cls=engine_cls,
        confidence=confidence, guesses=guesses or None, random_state=rng, **control.setting, **extra,
    )
