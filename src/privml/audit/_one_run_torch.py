"""One-run audits of DP-SGD for PyTorch (:class:`privml.torch.DPSGD`, :class:`privml.torch.TorchClassifier`).

Steinke, Nasr and Jagielski (NeurIPS 2023), "Privacy Auditing with One (1)
Training Run", at the run's full size: ONE training run on the user's n
records plus m canary slots, each canary in its slot with probability 1/2
(:mod:`privml.audit._one_run` turns the scores into the bound).

The relation. privml's DP-SGD is analysed under add/remove-one with n public
(the zero-out view, :mod:`privml.neighbouring`): the engine is built for
``n_real + m`` records in every world, and an excluded canary's slot is a null
record whose term in the clipped sum is zero (sampled or not, it adds
nothing). Flipping one coin, the others fixed, is then exactly one
add/remove-one neighbour of the run, so the engine's own ``privacy_`` is the
claim compared. A replace-one engine (or fixed-size sampling, which privml
analyses under replace-one only) is refused: a replace-one claim does not
bound a zero-out step, and converting would test another mechanism.

White-box canaries (the paper's Dirac canaries). Canary i is a fixed vector
of norm C on one coordinate k_i of the flattened parameters. It is a record
of the dataset: the engine's Poisson sampler samples its slot with rate q like
any other, and when an included canary is sampled, C e_{k_i} is added to the
clipped sum before the noise (through the engine's audit-only
``_extra_clipped`` seam; production never sets it). The auditor reads the
released noisy gradients of every step (the outputs DP-SGD's guarantee
covers: every iterate is a function of them), ``x_t,i`` = coordinate k_i of
step t's clipped-and-noised sum in units of C, and scores canary i by two
statistics fixed in advance, each tested at half the level (union bound):

* ``"sum"``: ``sum_t x_t,i``, the total update's alignment with the canary
  (the paper's white-box score);
* ``"likelihood"``: ``sum_t log(1 - q + q exp((x~_t,i - 1/2) / s^2))``, the
  log likelihood ratio of "included" to "excluded" under the claimed noise
  multiplier s, with ``x~`` the steps' values minus their median over the
  run (for q < 1/2 and at least three steps; the median removes what the
  canary does not cause: a slowly moving real gradient on that coordinate,
  or a noise draw that repeats).

Record canaries. Canaries may instead be input records ``(x_i, y_i)``
trained through the model and its clipping like any other record (what a
clipping fault acts on). White-box, each is scored along its own gradient at
the initial parameters (normalised; public: a function of the canary and the
initial weights). Black-box, by the canary's negative loss under the final
model (the paper's black-box score); for :class:`TorchClassifier` the
canaries are out-of-distribution images (pixels i.i.d. N(0, 1)) with random
labels from the public class set.

Cost and guarantee. The audit is one training run on ``n_real + m`` records
(the canaries are the only records added; the real records are untouched)
plus, white-box, m projections of each step's gradient. The run itself is as
private as the engine says for the real records, but the audit is not a
release: it reads the coins (which canaries were trained on) and reports a
test of the claim. Nothing it returns is computed from the real records
without noise except through the DP-trained model and its released gradients.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import clone

from privml._progress import progress_bar
from privml._random import RandomState, check_random_state
from privml._validation import check_count
from privml.accounting._dpsgd import dpsgd_accountant
from privml.audit._one_run import OneRunAudit, audit_from_statistics
from privml.audit._one_run_fdp import InverseBlowUp, accountant_profile
from privml.audit._one_run_result import OneRunFitResult
from privml.neighbouring import Neighbouring

if TYPE_CHECKING:  # torch is imported by the functions that run a model: privml's numpy core stays torch-free
    import torch
    from torch import nn

    from privml.torch._dpsgd import DPSGD

__all__ = [
    "WHITE_BOX_STATISTICS",
    "TorchOneRunResult",
    "dpsgd_one_run_audit",
    "torch_classifier_one_run_audit",
    "white_box_statistics",
]

#: The white-box statistics tried (each at level (1 - confidence) / 2).
WHITE_BOX_STATISTICS = ("sum", "likelihood")

# Settings the audit sets itself: the public n (real records plus canary slots), the seed, eager steps.
_AUDIT_SETTINGS = ("n_samples", "seed", "cuda_graph")


@dataclass(frozen=True, eq=False)
class TorchOneRunResult(OneRunFitResult):
    """A one-run audit of a DP-SGD run on a torch model (see :class:`OneRunFitResult`); the claim is the
    engine's ``privacy_`` and ``statistic`` names the score that gave the bound."""

    statistic: str
    canaries: str
    steps: int
    noise_multiplier: float
    sample_rate: float

    def audited(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "canaries": self.canaries}

    def run_facts(self) -> dict[str, Any]:
        return {"steps": self.steps, "noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate}


def white_box_statistics(x: np.ndarray, *, sample_rate: float, noise_multiplier: float) -> dict[str, np.ndarray]:
    """The white-box scores of m canaries from their per-step values ``x`` (steps, m), in units of C.

    See the module notes: ``"sum"`` (the paper's) and ``"likelihood"`` (median-centred log likelihood
    ratio of the Poisson-sampled Gaussian step under the claimed noise multiplier). Any fixed function of
    the released gradients is a valid score: the choice changes the audit's power, never its soundness.
    """
    values = np.asarray(x, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"x must be (steps, m), got shape {values.shape}")
    q, s = float(sample_rate), float(noise_multiplier)
    centred = values - np.median(values, axis=0) if (q < 0.5 and values.shape[0] >= 3) else values
    # log((1 - q) + q exp((x - 1/2) / s^2)) per step, summed: exact for a canary of norm C in every sampled step
    if q >= 1.0:
        # No subsampling: the likelihood ratio is (sum - T/2) / s^2, the same order as the sum; testing both
        # would halve the level for nothing.
        return {"sum": values.sum(axis=0)}
    shifted = (centred - 0.5) / s**2
    steps = np.logaddexp(np.log1p(-q), np.log(q) + shifted)
    return {"sum": values.sum(axis=0), "likelihood": steps.sum(axis=0)}


def _audit(
    statistics: dict[str, np.ndarray], included: np.ndarray, *, engine: DPSGD, confidence: float,
    guesses: int | Sequence[int] | None, scores_from: str,
) -> tuple[OneRunAudit, str]:
    """The best bound over the statistics, each tested at ``(1 - confidence) / len(statistics)``."""
    claim = engine.privacy_
    return audit_from_statistics(
        statistics, included, confidence=confidence, delta=claim.delta, claimed_epsilon=claim.epsilon,
        guesses=guesses, neighbouring=Neighbouring.ADD_REMOVE_ONE, scores_from=scores_from,
        claim_note="the engine's privacy_ (add/remove-one, n = real records + canary slots, zero-out)",
        claimed_profile=claimed_profile(engine),
    )


def claimed_profile(engine: DPSGD) -> InverseBlowUp:
    """The engine's claim as a curve: its own accountant's delta(eps) after the steps taken (0 to 4x the claim)."""
    plan = engine.plan
    factory = dpsgd_accountant(plan.accountant, neighbouring=plan.neighbouring, replace_one_bound=plan.bound)
    accountant = factory().compose(plan.event_after(engine.steps_taken))
    return accountant_profile(accountant, epsilon_max=max(4.0 * engine.privacy_.epsilon, 1.0))


def _check_engine(engine: DPSGD, n_total: int) -> None:
    if engine.neighbouring is not Neighbouring.ADD_REMOVE_ONE or engine.sampling != "poisson":
        raise ValueError(
            "a one-run audit of DP-SGD needs add/remove-one neighbours with Poisson sampling (each canary slot holds "
            f"the canary or a null record); this engine is {engine.neighbouring.value} with {engine.sampling} sampling"
        )
    if engine.n_samples != n_total:
        raise ValueError(f"the engine must be built for the real records plus the canary slots, n = {n_total}, "
                         f"got n_samples={engine.n_samples}")
    if engine.distributed or engine._graphed is not None:  # noqa: SLF001 - the audit's own engine
        raise ValueError("the one-run audit runs eagerly on one process (no CUDA graph, not distributed)")


def _flat_params(engine: DPSGD) -> tuple[list[str], list[int]]:
    names = [name for name, _ in engine._params]  # noqa: SLF001 - trained parameters, in the engine's order
    sizes = [p.numel() for _, p in engine._params]  # noqa: SLF001
    return names, sizes


class _Projector:
    """Reads each released gradient (an optimiser pre-step hook) and keeps its projections on the canaries."""

    def __init__(self, engine: DPSGD, directions: torch.Tensor | None, coordinates: torch.Tensor | None) -> None:
        self.engine = engine
        self.directions = directions  # (P, m) dense, or None for Dirac coordinates
        self.coordinates = coordinates
        self.rows: list[np.ndarray] = []
        # released gradient = (clipped sum + noise) / (q n): times q n / C, a canary of norm C adds 1 along itself
        self.unit = engine.expected_batch_size / engine.clip_norm

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        import torch  # lazy(extra): torch

        # every trained parameter holds the step's released gradient here (DPSGD._apply sets them all)
        flat = torch.cat([p.grad.reshape(-1) for _, p in self.engine._params if p.grad is not None])  # noqa: SLF001
        if self.coordinates is not None:
            row = flat[self.coordinates]
        else:
            assert self.directions is not None
            row = flat.to(self.directions.dtype) @ self.directions
        self.rows.append(row.detach().double().cpu().numpy() * self.unit)


def _run(
    engine: DPSGD,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    n_real: int,
    included: np.ndarray,
    records: bool,
    coordinates: np.ndarray | None,
    directions: torch.Tensor | None,
    progress: bool,
) -> tuple[np.ndarray | None, float]:
    """Train the engine once over n_real + m slots; returns the per-step projections (white-box) and the time.

    ``X, y`` hold the real records, followed by the m canary records when ``records``. A sampled slot of an
    excluded canary is a null record: it adds nothing to the step.
    """
    import torch  # lazy(extra): torch

    m = included.shape[0]
    device = engine.device
    inc = torch.as_tensor(included, dtype=torch.bool, device=device)
    X, y = X.to(device), y.to(device)
    sampled: list[torch.Tensor] = [torch.zeros(0, dtype=torch.long, device=device)]
    projector = None
    hook = None
    if coordinates is not None or directions is not None:
        coords_t = None if coordinates is None else torch.as_tensor(coordinates, dtype=torch.long, device=device)
        projector = _Projector(engine, directions, coords_t)
        hook = engine.optimizer.register_step_pre_hook(projector)
    if coordinates is not None and not records:
        names, sizes = _flat_params(engine)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        owner = np.searchsorted(offsets, coordinates, side="right") - 1  # which parameter holds each coordinate
        local = torch.as_tensor(coordinates - offsets[owner], dtype=torch.long, device=device)
        owner_t = torch.as_tensor(owner, dtype=torch.long, device=device)
        params = dict(engine._params)  # noqa: SLF001

        def canary_terms() -> dict[str, torch.Tensor]:
            # C e_{k_i} for every included canary sampled in this step: m gradient records of norm C
            chosen = sampled[0]
            terms: dict[str, torch.Tensor] = {}
            for j in torch.unique(owner_t[chosen]).tolist():
                at = local[chosen[owner_t[chosen] == j]]
                p = params[names[j]]
                flat = torch.zeros(p.numel(), dtype=p.dtype, device=device)
                flat.index_add_(0, at, torch.full(at.shape, engine.clip_norm, dtype=p.dtype, device=device))
                terms[names[j]] = flat.view(p.shape)
            return terms

        engine._extra_clipped = canary_terms  # noqa: SLF001 - the audit-only seam
    sampler = engine.sampler(n_local=n_real + m)
    start = time.perf_counter()
    try:
        with progress_bar(len(sampler), desc="DP-SGD (one-run audit)", unit="step", enabled=progress) as bar:
            for batch in sampler:
                batch = batch.to(device)
                slots = batch[batch >= n_real] - n_real
                sampled[0] = slots[inc[slots]]
                rows = batch[batch < n_real]
                if records:
                    rows = torch.cat([rows, n_real + sampled[0]])
                engine.step(X[rows], y[rows])
                bar.update(1)
    finally:
        engine._extra_clipped = None  # noqa: SLF001
        if hook is not None:
            hook.remove()
    seconds = time.perf_counter() - start
    if projector is None:
        return None, seconds
    return np.stack(projector.rows) if projector.rows else np.zeros((0, m)), seconds


def _initial_directions(engine: DPSGD, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(P, m): each record canary's gradient at the initial parameters, normalised (flat, engine order)."""
    import torch  # lazy(extra): torch

    from privml.torch._per_sample import per_example_gradients  # lazy(extra): torch

    grads = per_example_gradients(engine.module, engine.loss_fn, x.to(engine.device), y.to(engine.device))
    flat = torch.cat([grads[name].reshape(x.shape[0], -1) for name, _ in engine._params], dim=1)  # noqa: SLF001
    flat = flat.detach().double()
    norms = flat.norm(dim=1, keepdim=True)
    if not bool(torch.all(norms > 0)):
        raise ValueError("a record canary has a zero gradient at the initial parameters: it has no direction to "
                         "score along")
    return (flat / norms).T.contiguous()


def _negative_losses(engine: DPSGD, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    import torch  # lazy(extra): torch

    module = engine.module
    was_training = module.training
    module.eval()
    out = []
    with torch.no_grad():
        for xb, yb in zip(torch.split(x, 1024), torch.split(y, 1024), strict=True):
            out.append(-engine.loss_fn(module(xb.to(engine.device)), yb.to(engine.device)).double().cpu())
    module.train(was_training)
    return torch.cat(out).numpy()


def _audit_engine(
    engine: DPSGD,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    canary_x: torch.Tensor | None,
    canary_y: torch.Tensor | None,
    m: int,
    white_box: bool,
    rng: np.random.Generator,
    confidence: float,
    guesses: int | Sequence[int] | None,
    progress: bool,
    started: float,
    release: Callable[[torch.Tensor, int], None] | None = None,
    post_processing: AbstractContextManager[None] | None = None,
) -> TorchOneRunResult:
    """The audit of ``engine``'s run. ``release(X, n)``: a release from the run's records before the steps (the
    plan's ``preceding`` event), given the rows of the records in the run and the n slots; ``post_processing``:
    entered around the steps (what makes the released model from the iterates)."""
    import torch  # lazy(extra): torch

    n_real = int(X.shape[0])
    _check_engine(engine, n_real + m)
    included = rng.random(m) < 0.5
    records = canary_x is not None
    coordinates = directions = None
    if canary_x is not None:
        assert canary_y is not None
        X, y = torch.cat([X, canary_x]), torch.cat([y, canary_y])
        # an excluded canary's slot is a null record: zero (its row is never read by a step, which samples the
        # included canaries alone, but a release before the steps reads every row)
        X[n_real:][torch.as_tensor(~included, device=X.device)] = 0
        if white_box:
            directions = _initial_directions(engine, canary_x, canary_y)
        kind = "records"
    else:
        total = sum(_flat_params(engine)[1])
        if m > total:
            raise ValueError(f"m = {m} Dirac canaries need as many coordinates; the model trains {total} parameters")
        coordinates = np.sort(rng.choice(total, size=m, replace=False))
        kind = "dirac"
    if release is not None:
        # Dirac canaries are gradients, not inputs: they add nothing to a release before the steps. The claim still
        # composes that release's event (the engine's plan), so the audit tests a claim that is, if anything, larger
        # than what the canaries face: conservative, never unsound.
        release(X, n_real + m)
    with post_processing or nullcontext():
        x, seconds_fit = _run(engine, X, y, n_real=n_real, included=included, records=records,
                              coordinates=coordinates, directions=directions, progress=progress)
    if white_box:
        assert x is not None
        stats = white_box_statistics(x, sample_rate=engine.sample_rate, noise_multiplier=engine.noise_multiplier)
    else:
        assert canary_x is not None and canary_y is not None
        stats = {"negative-loss": _negative_losses(engine, canary_x, canary_y)}
    audit, name = _audit(stats, included, engine=engine, confidence=confidence, guesses=guesses,
                         scores_from="white-box" if white_box else "black-box")
    return TorchOneRunResult(
        audit=audit, statistic=name, canaries=kind, n_real=n_real, n_train=n_real + m, steps=engine.steps_taken,
        noise_multiplier=engine.noise_multiplier, sample_rate=engine.sample_rate, seconds_fit=seconds_fit,
        seconds_total=time.perf_counter() - started, scores=stats[name], included=included,
    )


def dpsgd_one_run_audit(
    module: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    optimizer: Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer],
    m: int = 1000,
    white_box: bool = True,
    canary_x: torch.Tensor | None = None,
    canary_y: torch.Tensor | None = None,
    engine_cls: type[DPSGD] | None = None,
    confidence: float = 0.95,
    guesses: int | Sequence[int] | None = None,
    random_state: RandomState = None,
    progress: bool = False,
    **settings: Any,
) -> TorchOneRunResult:
    """Audit one DP-SGD run of ``module`` on ``(X, y)`` with m canaries (see the module notes).

    Parameters
    ----------
    module:
        The model, trained in place (pass a fresh one).
    X, y:
        The real training records (tensors).
    optimizer:
        ``optimizer(module.parameters())`` builds the optimiser, e.g.
        ``lambda p: torch.optim.SGD(p, lr=0.5)``.
    m:
        Canaries, each in its slot with probability 1/2; the engine is built for ``len(X) + m`` records.
    white_box:
        Score on the released per-step gradients (True) or the final model's losses (False; needs records).
    canary_x, canary_y:
        m canary records (trained through the model and its clipping); None: Dirac gradient canaries
        (white-box only) on m distinct random coordinates of the trained parameters.
    engine_cls:
        :class:`~privml.torch.DPSGD` (None, the default) or a subclass (the negative controls of
        :mod:`privml.testing.torch_controls`).
    confidence, guesses:
        As :func:`privml.audit.audit_from_scores`.
    random_state:
        Seeds the canaries' coins and coordinates and the engine's sampling and noise.
    **settings:
        The engine's settings (``clip_norm``, ``batch_size`` or ``sample_rate``, ``epochs`` or ``steps``,
        ``target_epsilon`` or ``noise_multiplier``, ``delta``, ``mode``, ...); not ``n_samples``, ``seed``
        or ``cuda_graph``, which the audit sets.
    """
    started = time.perf_counter()
    m_ = check_count(m, "m")
    clash = sorted(set(settings) & set(_AUDIT_SETTINGS))
    if clash:
        raise ValueError(f"the audit sets {', '.join(clash)} itself (n = real records + canary slots)")
    if not white_box and canary_x is None:
        raise ValueError("a black-box audit needs canary records (canary_x, canary_y): Dirac canaries are gradients")
    if (canary_x is None) != (canary_y is None):
        raise ValueError("give both canary_x and canary_y, or neither")
    if canary_x is not None and (canary_x.shape[0] != m_ or canary_y.shape[0] != m_):  # type: ignore[union-attr]
        raise ValueError(f"canary_x and canary_y must hold m = {m_} records")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    from privml.torch._dpsgd import DPSGD  # lazy(extra): torch

    rng = check_random_state(random_state)
    seed = int(rng.integers(2**62))
    engine = (engine_cls or DPSGD)(module, optimizer=optimizer(module.parameters()), n_samples=int(X.shape[0]) + m_,
                        seed=seed, cuda_graph=False, **settings)
    return _audit_engine(engine, X, y, canary_x=canary_x, canary_y=canary_y, m=m_, white_box=white_box, rng=rng,
                         confidence=confidence, guesses=guesses, progress=progress, started=started)


def ood_canaries(
    m: int, input_shape: Sequence[int], n_classes: int, *, random_state: RandomState = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """m out-of-distribution images (pixels i.i.d. N(0, 1)) with labels drawn uniformly from ``n_classes``.

    Public: drawn from the auditor's own randomness, never from the data.
    """
    import torch  # lazy(extra): torch

    rng = check_random_state(random_state)
    x = rng.standard_normal((check_count(m, "m"), *input_shape)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(rng.integers(n_classes, size=m).astype(np.int64))


def torch_classifier_one_run_audit(
    estimator: Any,
    X: Any,
    y: Any,
    *,
    m: int = 1000,
    white_box: bool = False,
    confidence: float = 0.95,
    guesses: int | Sequence[int] | None = None,
    random_state: RandomState = None,
    progress: bool = False,
) -> TorchOneRunResult:
    """Audit one fit of a :class:`~privml.torch.TorchClassifier` on ``(X, y)`` plus m canary slots.

    The run is the estimator's own (its model, optimiser and DP-SGD settings, via ``fit``'s builders), on
    ``len(X) + m`` records, eager steps. White-box: Dirac gradient canaries; black-box: out-of-distribution
    images with random labels (:func:`ood_canaries`), scored by their loss under the released model. The
    estimator is cloned; its public class set must be given (``classes=...``).

    What the model reads is what ``fit`` gives it (:class:`~privml.torch.ScatterClassifier`: the images'
    normalised ScatterNet features, the canaries' alike), and the run is ``fit``'s: a release before the steps
    (ScatterClassifier's private feature mean, over the real records and the included record canaries) and
    the post-processing of the steps (its weight average) are applied as a fit applies them. The claim is the
    engine's, which composes that release with the steps.
    """
    import torch  # lazy(extra): torch

    started = time.perf_counter()
    m_ = check_count(m, "m")
    est = clone(estimator)
    if est.classes is None:
        raise ValueError("the estimator needs its public class set (classes=...): the canaries' labels come from it")
    if est.epsilon is not None and np.isinf(est.epsilon):
        raise ValueError("the non-private baseline (epsilon=inf) runs no DP-SGD: nothing to audit against a claim")
    if Neighbouring.parse(est.neighbouring) is not Neighbouring.ADD_REMOVE_ONE or est.sampling != "poisson":
        raise ValueError("a one-run audit of DP-SGD needs add/remove-one neighbours with Poisson sampling (each canary "
                         f"slot holds the canary or a null record); this estimator is {est.neighbouring} with "
                         f"{est.sampling} sampling")
    est._check_fit_settings()  # noqa: SLF001 - the estimator's own checks, before anything is built
    X_t = est._images(X)  # noqa: SLF001
    classes, y_t = est._labels(y)  # noqa: SLF001
    if X_t.shape[0] != y_t.shape[0]:
        raise ValueError(f"X has {X_t.shape[0]} rows but y has {y_t.shape[0]}")
    n_total = int(X_t.shape[0]) + m_
    est._check_plan(n_total)  # noqa: SLF001
    rng = check_random_state(random_state)
    if est.random_state is None:
        est.set_params(random_state=int(rng.integers(2**62)))
    device = est._device()  # noqa: SLF001
    with est._threads():  # noqa: SLF001
        # what the model reads, as fit computes it (ScatterClassifier: the normalised features), canaries alike
        inputs = est._inputs(X_t, device).to(device)  # noqa: SLF001
        canary_x = canary_y = None
        if not white_box:
            canary_images, canary_y = ood_canaries(m_, tuple(est.input_shape), len(classes), random_state=rng)
            canary_x = est._inputs(canary_images, device).to(device)  # noqa: SLF001
        torch.manual_seed(int(est.random_state))
        module, optimizer = est._new_model(len(classes), device)  # noqa: SLF001
        engine = est._engine(module, optimizer, n_total, device, cuda_graph=False)  # noqa: SLF001
        # the run is fit's: its release before the steps (the plan's preceding event) over the run's records, and
        # its post-processing (the audited model, black-box, is the one a fit releases)
        return _audit_engine(
            engine, inputs, y_t, canary_x=canary_x, canary_y=canary_y, m=m_, white_box=white_box, rng=rng,
            confidence=confidence, guesses=guesses, progress=progress, started=started,
            release=lambda X, n: est._release_preceding(engine, X, n),  # noqa: SLF001
            post_processing=est._post_processing(engine, optimizer),  # noqa: SLF001
        )
