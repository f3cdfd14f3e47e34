"""DP-CD itself (Mangold et al. 2022, Algorithm 1): validated settings and the
solver :func:`dp_coordinate_descent`, the only place noise is drawn; see :mod:`privml.linear._dpcd`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privml._progress import progress_bar
from privml._random import RandomState, check_random_state
from privml._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_positive,
)
from privml.data._preprocessing import project_to_unit_ball
from privml.exceptions import PrivacyLeakWarning
from privml.guarantee import PrivacyGuarantee
from privml.linear._dpcd.cache import _BlockState, _Scores, _SoftmaxRows, _SoftmaxScores
from privml.linear._dpcd.calibration import (
    _cached_guarantee,
    closed_form_applies,
    closed_form_noise_multiplier,
    coordinate_sensitivity,
    gdp_noise_multiplier,
)
from privml.linear._dpcd.steps import CLIPPINGS, _prox_block, block_smoothness, clip_thresholds, default_gamma
from privml.losses import Loss, MultinomialLogisticLoss, check_feature_bounds
from privml.mechanisms import sample_noise

CALIBRATIONS: tuple[str, ...] = ("gdp", "closed_form")
BLOCKS: tuple[str, ...] = ("feature", "entry")


@dataclass(frozen=True)
class DPCDResult:
    """Outcome of :func:`dp_coordinate_descent`.

    Attributes
    ----------
    weights : numpy.ndarray
        The released average ``w_bar_T``, flat, shape ``(p,)``.
    guarantee : PrivacyGuarantee
        Its privacy guarantee.
    info : dict
        Public diagnostics only (noise scales, clipping thresholds, step
        sizes, counts): nothing computed from the private data, so it may be
        released with the model.
    """

    weights: np.ndarray
    guarantee: PrivacyGuarantee
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Settings:
    """Validated hyper-parameters of one DP-CD run (everything public)."""

    epsilon: float
    delta: float
    passes: int
    inner_steps: int | None
    gamma: float | None
    clip_norm: float
    clipping: str
    l1: float
    l2: float
    calibration: str
    progress: bool
    blocks: str = "feature"


def _check_choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_settings(
    *,
    epsilon: object,
    delta: object,
    passes: object,
    inner_steps: object,
    gamma: object,
    clip_norm: object,
    clipping: object,
    l1: object,
    l2: object,
    calibration: object,
    progress: object,
    blocks: object = "feature",
) -> _Settings:
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    if dlt == 0:
        raise ValueError("DP coordinate descent adds Gaussian noise and needs delta > 0, got 0")
    calibration = _check_choice(calibration, "calibration", CALIBRATIONS)
    if calibration == "closed_form" and not closed_form_applies(eps, dlt):
        raise ValueError(
            "the closed-form calibration (Mangold et al. 2022, Theorem 4.1) holds only for epsilon < 1 and "
            f"delta < 1/3, got epsilon={eps!r}, delta={dlt!r}; use calibration='gdp' (exact, always valid)"
        )
    if not isinstance(progress, bool | np.bool_):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    return _Settings(
        epsilon=eps,
        delta=dlt,
        passes=check_count(passes, "passes"),
        inner_steps=None if inner_steps is None else check_count(inner_steps, "inner_steps"),
        gamma=None if gamma is None else check_positive(gamma, "gamma"),
        clip_norm=check_positive(clip_norm, "clip_norm"),
        clipping=_check_choice(clipping, "clipping", CLIPPINGS),
        l1=check_positive(l1, "l1", allow_zero=True),
        l2=check_positive(l2, "l2", allow_zero=True),
        calibration=calibration,
        progress=bool(progress),
        blocks=_check_choice(blocks, "blocks", BLOCKS),
    )


def _resolve_feature_bounds(feature_bounds: Any, X: np.ndarray) -> tuple[np.ndarray, bool]:
    """Public bounds ``b`` with ``|x_j| <= b_j``; ``("data")`` reads them from X, with a warning."""
    d = X.shape[1]
    if feature_bounds is None:
        # ||x||_2 <= 1 implies |x_j| <= 1: public by construction.
        return np.ones(d), False
    if isinstance(feature_bounds, str):
        if feature_bounds != "data":
            raise ValueError(
                f"feature_bounds must be None, 'data' or one positive bound per feature, got {feature_bounds!r}"
            )
        warnings.warn(
            "feature_bounds='data' reads the per-feature maxima |x_j| from the private training data; they "
            "set the step sizes (and, with clipping='lipschitz', the clipping thresholds), so the released "
            "model leaks them outside the stated guarantee. Pass public bounds instead.",
            PrivacyLeakWarning,
            stacklevel=4,
        )
        bounds = np.abs(X).max(axis=0)
        # A feature that is zero everywhere never moves: any positive bound will do.
        return np.where(bounds > 0, bounds, 1.0), True
    bounds = check_feature_bounds(feature_bounds)
    if bounds.shape != (d,):
        raise ValueError(f"feature_bounds must hold one bound per feature ({d}), got shape {bounds.shape}")
    # Rows are in the unit ball, so no |x_j| exceeds 1: a larger bound only shrinks the step.
    return np.minimum(bounds, 1.0), False


def dp_coordinate_descent(
    X: np.ndarray,
    y: np.ndarray,
    loss: Loss,
    *,
    epsilon: float,
    delta: float,
    passes: int = 10,
    inner_steps: int | None = None,
    gamma: float | None = 1.0,
    clip_norm: float = 1.0,
    clipping: str = "uniform",
    l1: float = 0.0,
    l2: float = 1e-3,
    feature_bounds: Any = None,
    calibration: str = "gdp",
    blocks: str = "feature",
    random_state: RandomState = None,
    progress: bool = False,
) -> DPCDResult:
    """Run DP-CD (Mangold et al. 2022, Algorithm 1) on ``(X, y)`` for ``loss``.

    Parameters
    ----------
    X : numpy.ndarray, shape (n, d)
        Finite features. Each row is projected onto the unit ball first (a
        per-record map: no privacy cost), so ``|x_ij| <= 1`` and the default
        bounds hold. Privacy does not depend on the features' scale (clipping
        bounds the sensitivity); the bounds only set step sizes.
    y : numpy.ndarray, shape (n,)
        Labels or targets in the form ``loss`` expects.
    loss : Loss
        :class:`~privml.losses.LogisticLoss`, :class:`~privml.losses.MultinomialLogisticLoss`,
        :class:`~privml.losses.SquaredLoss` (any :class:`~privml.losses.Loss`).
    epsilon, delta : float
        Privacy budget; ``delta > 0`` (Gaussian noise).
    passes : int
        Outer iterations ``T``.
    inner_steps : int, optional
        Inner iterations ``K``; default ``B``, the number of blocks (``d``, or
        ``d k`` for a k-class model with ``blocks="entry"``), so one outer
        iteration costs about one full-gradient evaluation.
    gamma : float or None
        Step scale: ``eta_j = gamma / M_j``; None: :func:`default_gamma`.
    clip_norm : float
        Overall clipping threshold ``C`` (``sum_j C_j^2 = C^2`` over blocks).
    clipping : {"uniform", "lipschitz"}
        See :func:`clip_thresholds`.
    l1, l2 : float
        Strengths of ``psi(theta) = l1 ||theta||_1 + (l2/2) ||theta||_2^2`` (see :func:`prox`).
    feature_bounds : None, "data" or array_like, shape (d,)
        Public bounds ``|x_j| <= b_j``; None means all 1 (true for rows in the
        unit ball). ``"data"`` reads them from ``X`` with a
        :class:`~privml.exceptions.PrivacyLeakWarning`. Values outside the
        bounds are clipped to them (after the unit-ball projection), without
        an error: an error would depend on the private data.
    calibration : {"gdp", "closed_form"}
        Exact Gaussian-DP composition (default) or the paper's Theorem 4.1.
    blocks : {"feature", "entry"}
        For a k-class loss: a feature's row ``W[j, :]`` per step (default) or
        one entry ``W[j, c]``; see the module notes. No effect for one output.
    random_state : None, int, SeedSequence or Generator
    progress : bool
        Show a progress bar (on stderr) over the outer iterations.

    Returns
    -------
    DPCDResult

    Notes
    -----
    Neighbouring relation: replace-one. Sensitivity: ``2 C_j / n`` in L2 per
    block step (:func:`coordinate_sensitivity`), from clipping alone. Privacy: exact GDP
    composition of ``T K`` Gaussian mechanisms (Dong, Roth and Su 2019,
    Theorem 2.7 and Corollary 3.3; :func:`gdp_noise_multiplier`), reported by
    the ``"gdp"`` accountant; or Mangold et al. (2022), Theorem 4.1
    (:func:`closed_form_noise_multiplier`), reported by the ``"rdp"``
    accountant on the same ledger (their proof technique; never above the
    theorem's epsilon). All arguments are validated before any noise is drawn.

    Cost: ``T K`` steps of ``O(nnz_j)`` (``O(nnz_j k)`` for a row of k
    classes; ``O(n)`` for an entry) each, where ``nnz_j`` counts the records
    with ``x_ij != 0``, from cached scores ``X theta``, plus one refresh of
    the scores per outer iteration (which also stops rounding drift):
    ``O(nnz k)`` for rows of k classes (from the non-zeros of ``X``),
    ``O(n d k)`` otherwise (``k = 1`` for one output).
    """
    # long-function: most of its length is the numpy-style docstring (parameters, guarantee, references); the code is
    # validation and one call to _run.
    settings = _check_settings(
        epsilon=epsilon,
        delta=delta,
        passes=passes,
        inner_steps=inner_steps,
        gamma=gamma,
        clip_norm=clip_norm,
        clipping=clipping,
        l1=l1,
        l2=l2,
        calibration=calibration,
        progress=progress,
        blocks=blocks,
    )
    X, y = loss.check_data(X, y)
    X = project_to_unit_ball(X)
    bounds, bounds_from_data = _resolve_feature_bounds(feature_bounds, X)
    rng = check_random_state(random_state)
    return _run(X, y, loss, settings, bounds, bounds_from_data, rng)


def _run(
    X: np.ndarray,
    y: np.ndarray,
    loss: Loss,
    settings: _Settings,
    bounds: np.ndarray,
    bounds_from_data: bool,
    rng: np.random.Generator,
) -> DPCDResult:
    """The algorithm on validated inputs; the only place noise is drawn."""
    # Features clipped to their public bounds, so |x_ij| <= b_j holds as M_j (step sizes) and, with
    # clipping="lipschitz", C_j assume: a per-record map (no privacy cost), never a data-dependent error. The
    # guarantee never rested on it (each gradient coordinate is clipped to C_j); the steps did. A no-op for
    # the default bounds (rows in the unit ball) and for feature_bounds="data".
    X = np.clip(X, -bounds, bounds)
    n, d = X.shape
    k = loss.n_outputs or 1
    p = d * k
    by_feature = k > 1 and settings.blocks == "feature"
    n_blocks, width = (d, k) if by_feature else (p, 1)
    T = settings.passes
    K = n_blocks if settings.inner_steps is None else settings.inner_steps
    steps = T * K

    M = block_smoothness(loss, bounds, by_feature=by_feature)
    C = clip_thresholds(settings.clip_norm, settings.clipping, M)
    sensitivity = coordinate_sensitivity(C, n)
    s_gdp = gdp_noise_multiplier(settings.epsilon, settings.delta, steps)
    s_closed = closed_form_noise_multiplier(settings.epsilon, settings.delta, steps)
    if settings.calibration == "gdp":
        s, guarantee = s_gdp, _cached_guarantee(s_gdp, steps, settings.delta, "gdp")
    else:
        s, guarantee = s_closed, _cached_guarantee(s_closed, steps, settings.delta, "rdp")
    sigma = s * sensitivity
    # The step scale may depend on the noise (public: it is a function of n, epsilon,
    # delta, T, K, C and the bounds), never on the data.
    gamma = settings.gamma
    if gamma is None:
        gamma = default_gamma(sigma, M, visits=steps / n_blocks, feature_bounds=bounds)
    eta = gamma / M

    # The whole randomness is drawn up front and does not look at the data:
    # the block schedule is data-independent, which the composition needs.
    # Block j gets N(0, sigma_j^2 I_width) (isotropic: its sensitivity is an L2 bound).
    schedule = rng.integers(0, n_blocks, size=(T, K))
    noise = sample_noise("gaussian", sigma[schedule][:, :, None], (T, K, width), rng)

    w_bar = _descend(_block_state(X, y, loss, k, by_feature), schedule, noise, eta, C, settings, d, k)

    info = {
        "calibration": settings.calibration,
        "passes": T,
        "inner_steps": K,
        "steps": steps,
        "gamma": gamma,
        "gamma_default": settings.gamma is None,
        "blocks": "feature" if by_feature else "entry",
        "n_coordinates": p,
        "n_blocks": n_blocks,
        "block_size": width,
        "noise_multiplier": s,
        "noise_multiplier_gdp": s_gdp,
        "noise_multiplier_closed_form": s_closed,
        "noise_ratio_closed_form_to_gdp": s_closed / s_gdp,
        "closed_form_applies": closed_form_applies(settings.epsilon, settings.delta),
        "mu": math.sqrt(steps) / s,
        "sensitivity": sensitivity.tolist(),
        "sigma": sigma.tolist(),
        "sigma_gdp": (s_gdp * sensitivity).tolist(),
        "sigma_closed_form": (s_closed * sensitivity).tolist(),
        "clip_thresholds": C.tolist(),
        "step_sizes": eta.tolist(),
        "coordinate_smoothness": M.tolist(),
        "feature_bounds": bounds.tolist(),
        "feature_bounds_from_data": bounds_from_data,
        "l1": settings.l1,
        "l2": settings.l2,
    }
    return DPCDResult(weights=w_bar.reshape(-1), guarantee=guarantee, info=info)


def _descend(
    state: _BlockState,
    schedule: np.ndarray,
    noise: np.ndarray,
    eta: np.ndarray,
    C: np.ndarray,
    settings: _Settings,
    d: int,
    k: int,
) -> np.ndarray:
    """The T outer and K inner iterations of :func:`_run` on a pre-drawn schedule and noise; returns ``w_bar``."""
    T, K = schedule.shape
    n_blocks, width = eta.size, noise.shape[2]
    l1, l2 = settings.l1, settings.l2
    theta = np.zeros((n_blocks, width))
    w_bar = np.zeros((n_blocks, width))
    eta_list, clip_list = eta.tolist(), C.tolist()  # Python floats: cheaper to index in the loop
    bar = progress_bar(T, desc="DP-CD passes", unit="pass", enabled=settings.progress)
    try:
        for t in range(T):
            theta[:] = w_bar
            # Flat order j k + c in every layout: (d, k) blocks, or p entries of width 1.
            state.reset(theta.reshape(d, k) if k > 1 else theta.reshape(d))
            # Running sums of the inner iterates theta^1..theta^K, updated lazily:
            # block j is constant between two of its updates.
            total = np.zeros((n_blocks, width))
            since = np.ones(n_blocks, dtype=np.int64)
            for step in range(K):
                j = int(schedule[t, step])
                g = state.block_gradient(j, clip_list[j])
                old = theta[j]  # a view: read before theta[j] is overwritten
                new = old - eta_list[j] * (g + noise[t, step])
                if l1 or l2:
                    new = _prox_block(new, eta_list[j], l1, l2)
                total[j] += old * (step + 1 - since[j])
                since[j] = step + 1
                change = new - old
                theta[j] = new
                if change.any():
                    state.block_move(j, change)
            total += theta * (K + 1 - since)[:, None]
            w_bar = total / K
            bar.update(1)
    finally:
        bar.close()
    return w_bar


def _block_state(X: np.ndarray, y: np.ndarray, loss: Loss, k: int, by_feature: bool) -> _BlockState:
    """The score cache for the blocks: softmax rows, softmax entries, or one-output scores."""
    if by_feature:
        return _SoftmaxRows(X, y, k)
    if isinstance(loss, MultinomialLogisticLoss):
        return _SoftmaxScores(X, y, k)
    return _Scores(X, y, loss)
