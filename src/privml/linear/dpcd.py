"""Differentially private (proximal) coordinate descent: DP-CD.

Mangold, Bellet, Salmon and Tommasi, "Differentially Private Coordinate
Descent for Composite Empirical Risk Minimization", ICML 2022 (Algorithm 1),
minimises the composite objective

    F(theta) = (1/n) sum_i loss(theta; x_i, y_i) + psi(theta),

    psi(theta) = l1 ||theta||_1 + (l2/2) ||theta||_2^2     (l1, l2 >= 0; the default is a light ridge),

by T outer iterations of K randomised proximal block steps::

    for t = 1..T:
        theta <- w_bar
        for k = 1..K:
            j ~ uniform{1..B}                                  (data-independent)
            g_j = (1/n) sum_i clip(grad_{theta_j} loss_i, C_j)  (L2 clipping per record)
            theta_j <- prox_{eta_j psi}(theta_j - eta_j (g_j + N(0, sigma_j^2 I)))
        w_bar <- (1/K) sum_{k=1..K} theta^k                    (average of the inner iterates)
    release w_bar

with step sizes ``eta_j = gamma / M_j`` from block smoothness constants
``M_j`` of the loss, computed from **public** per-feature bounds
``|x_j| <= b_j`` (never from the data).

Blocks. For a one-output loss (binary logistic, squared) the ``B = d`` blocks
are the coordinates, as in the paper. For a k-class model the default
(``blocks="feature"``) makes the ``B = d`` rows ``W[j, :]`` the blocks: a
step updates all k class weights of feature ``j`` from one softmax
evaluation, clipping each record's k-vector ``x_ij (p_i - e_{y_i})`` in L2
norm, with ``M_j = b_j^2 / 2`` (:func:`block_smoothness`). This is block
coordinate descent (Richtarik and Takac 2014), and the paper's analysis
carries over with blocks for coordinates. ``blocks="entry"`` keeps the
paper's literal form: ``B = d k`` entries ``W[j, c]`` (flat index ``j k + c``,
the order of :mod:`privml.losses`), one per step, ``M_j = b_j^2 / 4``. A row
costs what one entry costs (one softmax over the records), and its L2 clip
at ``C / sqrt(d)`` lets through about ``sqrt(k / 2)`` times more of the
typical softmax gradient (two dominant classes) than per-entry clips at
``C / sqrt(d k)`` for the same noise. On a validation split of MNIST at
epsilon = 1 (default ``gamma``, 10 passes): 86.6% accuracy by rows in 13 s,
74.7% by entries in 56 s; the former defaults (entries, ``gamma = 1``) gave
21.9% test accuracy. A step touches only the records with ``x_ij != 0``:
O(nnz_j k), so sparse features (image pixels) are cheap.

Privacy (replace-one neighbours)
--------------------------------
Replacing one record changes one of the n clipped terms of ``g_j`` by a
vector of L2 norm at most ``2 C_j``, so ``g_j`` has L2 sensitivity
``Delta_j = 2 C_j / n`` whatever the loss and whatever the block width:
clipping, not a Lipschitz constant, bounds it (the squared loss of
:class:`DPCDRegressor` has none). Adding isotropic ``N(0, sigma_j^2 I)`` with
``sigma_j = s Delta_j`` makes each step a Gaussian mechanism that is exactly
``(1/s)``-GDP (Dong, Roth and Su 2019, Theorem 2.7, in any dimension: the two
output distributions differ by a shift of L2 norm at most ``Delta_j``); the
block sequence is drawn independently of the data, so the ``T K`` steps are
an adaptive composition of Gaussian mechanisms, exactly ``sqrt(T K)/s``-GDP
(Dong, Roth and Su 2019, Corollary 3.3). The prox, the averaging and the
restarts are post-processing. ``calibration="gdp"`` (default) therefore takes
``s = sqrt(T K) / mu`` with ``mu = gaussian_mu(epsilon, delta)``, the largest
mu whose exact Gaussian curve meets (epsilon, delta) (Balle and Wang 2018,
Theorem 8). ``calibration="closed_form"`` uses the paper's Theorem 4.1,
``sigma_j^2 = 12 C_j^2 T K log(1/delta) / (n^2 epsilon^2)``, valid for
epsilon < 1 and delta < 1/3 only; it is kept for comparison and is always
noisier (``fit_info_`` reports both noise levels and their ratio).

Step sizes and clipping shares depend on ``M_j``, which DP-CD's convergence
analysis needs as block-wise smoothness constants (for one block per step,
the block descent lemma of Nesterov 2012 / Richtarik-Takac 2014 is what the
analysis of serial randomised coordinate descent uses; see
:meth:`privml.losses.Loss.coordinate_smoothness`). They never enter a
sensitivity: wrong bounds slow or destabilise convergence but cannot weaken
privacy. The same holds for the default step scale ``gamma``
(:func:`default_gamma`): a public function of ``n``, epsilon, delta, ``T``,
``K``, ``C`` and the bounds, which corrects the worst case in ``M_j`` to the
average curvature of unit-norm records and limits the noise the steps add to
the scores.

Defaults of :class:`DPCDClassifier` (tuned on a validation split of MNIST's
training set, held out from its test set; checked on digits): rows as blocks,
``T = 10`` passes, ``C = 0.5``, ``gamma`` from :func:`default_gamma`, a light
ridge ``l2 = 1e-5``. :class:`DPCDRegressor` keeps the paper's conservative
``gamma = 1`` and ``C = 1``: the squared loss has no bounded curvature factor
to exploit, and its scale is the target's.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin

from privml._deprecation import RenamedParams, warn_renamed
from privml._progress import progress_bar
from privml._random import RandomState, check_random_state
from privml._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_fitted,
    check_positive,
    check_positive_delta,
    check_X,
    check_y,
)
from privml.accounting.analytic_gaussian import gaussian_mu
from privml.accounting.calibration import make_accountant
from privml.accounting.events import GaussianEvent, SelfComposedEvent
from privml.data.preprocessing import project_to_unit_ball
from privml.exceptions import PrivacyLeakWarning
from privml.guarantee import PrivacyGuarantee
from privml.linear.base import PrivateLinearClassifier, make_loss
from privml.losses import Loss, MultinomialLogisticLoss, SquaredLoss, check_feature_bounds
from privml.mechanisms import sample_noise
from privml.neighbouring import Neighbouring
from privml.release import partition_info

__all__ = [
    "BLOCKS",
    "CALIBRATIONS",
    "CLIPPINGS",
    "PENALTIES",
    "DPCDClassifier",
    "DPCDRegressor",
    "DPCDResult",
    "block_smoothness",
    "clip_block_gradients",
    "clip_coordinate_gradients",
    "clip_thresholds",
    "closed_form_applies",
    "closed_form_noise_multiplier",
    "coordinate_sensitivity",
    "default_gamma",
    "dp_coordinate_descent",
    "dpcd_guarantee",
    "gdp_noise_multiplier",
    "prox",
]

#: Values of the deprecated ``penalty`` parameter (now ``l1`` and ``l2``; see :func:`_renamed_settings`).
PENALTIES: tuple[str, ...] = ("none", "l1", "l2")
CLIPPINGS: tuple[str, ...] = ("uniform", "lipschitz")
CALIBRATIONS: tuple[str, ...] = ("gdp", "closed_form")
BLOCKS: tuple[str, ...] = ("feature", "entry")

#: Mangold et al. (ICML 2022), Theorem 4.1: sigma_j^2 = 12 L_j^2 T K log(1/delta) / (n eps)^2
#: for L_j-component-Lipschitz losses; clipping at C_j plays the role of L_j.
CLOSED_FORM_CONSTANT = 12.0

#: Default step scale, per unit of ``max(1, ||b||^2)`` (see :func:`default_gamma`).
AVERAGE_STEP = 6.0
#: Default bound on the noise standard deviation the steps add to a score, in logits.
SCORE_NOISE = 2.5

# The released epsilon is recomputed by the accountant from the noise actually
# used; a relative margin far below any meaningful precision keeps that
# recomputation from rounding above the target.
_GDP_ROUNDING_MARGIN = 1e-9


# --------------------------------------------------------------------------- building blocks
def prox(values: ArrayLike, step: ArrayLike, *, l1: float = 0.0, l2: float = 0.0) -> np.ndarray:
    """Proximal operator ``prox_{step psi}`` of ``psi(u) = l1 |u| + (l2/2) u^2``, elementwise.

    Parameters
    ----------
    values : array_like
        Points ``v`` (one per coordinate).
    step : array_like
        Step sizes ``eta >= 0`` (broadcast against ``values``).
    l1, l2 : float, default 0
        Strengths of the L1 and (squared) L2 penalties, ``>= 0``.

    Returns
    -------
    numpy.ndarray
        ``argmin_u (u - v)^2 / 2 + step psi(u)``, which is
        ``sign(v) max(|v| - step l1, 0) / (1 + step l2)``: soft-thresholding,
        then shrinkage (the elastic-net prox; Parikh and Boyd 2014, Sec. 6.5).

    Notes
    -----
    Data-independent post-processing: it costs no privacy.

    Examples
    --------
    >>> prox([3.0, -0.5], 1.0, l1=1.0).tolist()
    [2.0, -0.0]
    >>> prox([3.0], 1.0, l2=2.0).tolist()
    [1.0]
    """
    v = np.asarray(values, dtype=np.float64)
    step = np.asarray(step, dtype=np.float64)
    out = np.sign(v) * np.maximum(np.abs(v) - step * l1, 0.0) if l1 else v.copy()
    return out / (1.0 + step * l2) if l2 else out


def clip_thresholds(clip_norm: float, clipping: str, smoothness: ArrayLike) -> np.ndarray:
    """Per-block clipping thresholds ``C_j`` with ``sum_j C_j^2 = C^2``.

    Parameters
    ----------
    clip_norm : float
        Overall threshold ``C > 0``.
    clipping : {"uniform", "lipschitz"}
        ``C_j = C / sqrt(B)``, or ``C_j = C sqrt(M_j / sum_l M_l)`` (the
        "Lipschitz clipping" of Mangold et al. 2022's experiments and slides),
        which gives blocks with larger (public) scale a larger share.
    smoothness : array_like, shape (B,)
        Block smoothness constants ``M_j`` (:func:`block_smoothness`; a block
        is a coordinate, or a feature's row of class weights), computed from
        public bounds.

    Returns
    -------
    numpy.ndarray, shape (B,)

    Notes
    -----
    Data-independent (``M`` comes from public feature bounds), so it costs no
    privacy; each ``C_j`` sets the L2 sensitivity ``2 C_j / n`` of its block
    step (:func:`coordinate_sensitivity`).
    """
    c = check_positive(clip_norm, "clip_norm")
    m = np.asarray(smoothness, dtype=np.float64)
    if clipping == "uniform":
        return np.full(m.shape, c / math.sqrt(m.size))
    if clipping == "lipschitz":
        return c * np.sqrt(m / m.sum())
    raise ValueError(f"clipping must be one of {CLIPPINGS}, got {clipping!r}")


def clip_coordinate_gradients(gradients: np.ndarray, threshold: float) -> np.ndarray:
    """Clip per-example coordinate gradients to ``[-threshold, threshold]``.

    Parameters
    ----------
    gradients : numpy.ndarray, shape (n,)
        ``d loss(theta; x_i, y_i) / d theta_j`` for every record ``i``.
    threshold : float
        The coordinate's clipping threshold ``C_j > 0``.

    Returns
    -------
    numpy.ndarray, shape (n,)

    Notes
    -----
    A per-record map: after it, one record contributes at most ``threshold``
    in absolute value to the sum over records, so under replace-one
    neighbours the averaged coordinate gradient has sensitivity
    ``2 threshold / n`` (:func:`coordinate_sensitivity`; Mangold et al. 2022
    with clipping in place of component Lipschitzness), whatever the loss.
    """
    return np.clip(gradients, -threshold, threshold)


def clip_block_gradients(gradients: np.ndarray, threshold: float) -> np.ndarray:
    """Clip each record's block gradient to L2 norm ``threshold``.

    Parameters
    ----------
    gradients : numpy.ndarray, shape (n,) or (n, w)
        Row ``i``: ``d loss(theta; x_i, y_i) / d theta_B`` for the block ``B``
        being updated (``w`` coordinates; shape ``(n,)`` means ``w = 1``).
    threshold : float
        The block's clipping threshold ``C_j > 0``.

    Returns
    -------
    numpy.ndarray, same shape
        Each row times ``min(1, C_j / ||row||)``. For ``w = 1`` this is
        :func:`clip_coordinate_gradients`.

    Notes
    -----
    A per-record map: after it, one record contributes a vector of L2 norm at
    most ``threshold`` to the sum over records, so under replace-one
    neighbours the averaged block gradient has L2 sensitivity
    ``2 threshold / n`` (:func:`coordinate_sensitivity`), whatever the loss.
    """
    g = np.asarray(gradients, dtype=np.float64)
    if g.ndim == 1:
        return clip_coordinate_gradients(g, threshold)
    norms = np.linalg.norm(g, axis=1)
    return g * (threshold / np.maximum(norms, threshold))[:, None]


def block_smoothness(loss: Loss, feature_bounds: ArrayLike, *, by_feature: bool) -> np.ndarray:
    """Smoothness constant ``M_j`` of each block DP-CD updates, from public bounds.

    Parameters
    ----------
    loss : Loss
    feature_bounds : array_like, shape (d,)
        Public bounds ``|x_j| <= b_j``.
    by_feature : bool
        True: the blocks are the rows ``W[j, :]`` of a k-class model (one per
        feature). False: single coordinates (``d k`` of them, flat index
        ``j k + c``; ``d`` for a one-output loss).

    Returns
    -------
    numpy.ndarray
        Rows: ``M_j = L'' b_j^2`` with ``L''`` = :attr:`Loss.smoothness`
        (``1/2`` for the softmax): the Hessian block of row ``j`` is
        ``(1/n) sum_i x_ij^2 (diag(p_i) - p_i p_i^T)``, whose largest
        eigenvalue is at most ``b_j^2 / 2`` (Gershgorin, see
        :attr:`~privml.losses.MultinomialLogisticLoss.smoothness`).
        Coordinates: :meth:`Loss.coordinate_smoothness`.

    Notes
    -----
    Public (bounds only), so it costs no privacy; it sets step sizes and
    clipping shares, never a sensitivity.
    """
    if by_feature:
        return loss.smoothness * check_feature_bounds(feature_bounds) ** 2
    return np.asarray(loss.coordinate_smoothness(feature_bounds), dtype=np.float64)


def default_gamma(sigma: ArrayLike, smoothness: ArrayLike, *, visits: float, feature_bounds: ArrayLike) -> float:
    """The step scale ``gamma`` DP-CD uses when none is given: public, from the noise and the bounds.

    Parameters
    ----------
    sigma : array_like, shape (blocks,)
        Noise standard deviation of each block's steps (per coordinate).
    smoothness : array_like, shape (blocks,)
        Block smoothness constants ``M_j`` (:func:`block_smoothness`).
    visits : float
        Expected number of steps on each block, ``T K / blocks``.
    feature_bounds : array_like, shape (d,)
        Public bounds ``|x_j| <= b_j``.

    Returns
    -------
    float
        ``min(AVERAGE_STEP * max(1, ||b||^2), SCORE_NOISE / (sqrt(visits) max_j sigma_j / M_j))``.

    Notes
    -----
    Two public limits on the steps ``eta_j = gamma / M_j``:

    - **Curvature.** ``M_j`` bounds the curvature of the worst dataset, with
      every record at ``|x_ij| = b_j``. Records lie in the unit ball, so the
      block curvatures of any dataset sum to at most ``L'' E||x||^2 <=
      L'' min(1, ||b||^2)``: on average a block's curvature is about
      ``M_j / max(1, ||b||^2)`` (all features alike), and a logistic loss is
      flatter still where the model is confident. ``gamma =
      AVERAGE_STEP * max(1, ||b||^2)`` steps for that average. Blocks that are
      steeper than average (a bias feature) may overshoot; clipping bounds
      each move by ``eta_j C_j`` and the averaging of each pass damps it.
    - **Noise.** Block ``j`` receives about ``visits`` noisy steps, each
      adding ``N(0, (eta_j sigma_j)^2)`` per coordinate, so the score
      ``x . w_c`` of a record with ``||x|| <= 1`` carries noise of standard
      deviation at most ``sqrt(visits) max_j eta_j sigma_j``. The second
      term keeps that below ``SCORE_NOISE`` (in logits). Since
      ``sigma_j`` grows as ``sqrt(T K)`` and falls as ``n mu``, this is the
      limit that binds at small ``n epsilon`` and many passes.

    ``AVERAGE_STEP`` and ``SCORE_NOISE`` were tuned on a validation split
    of MNIST's training set (never its test set) and checked on digits.
    Neither limit reads the data: the default costs no privacy.
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    m = np.asarray(smoothness, dtype=np.float64)
    bounds = check_feature_bounds(feature_bounds)
    curvature = AVERAGE_STEP * max(1.0, float(np.sum(bounds**2)))
    spread = math.sqrt(max(visits, 1.0)) * float(np.max(sigma / m))
    return curvature if spread == 0.0 else min(curvature, SCORE_NOISE / spread)


def coordinate_sensitivity(clip_threshold: ArrayLike, n_samples: int) -> np.ndarray:
    """Replace-one L2 sensitivity ``2 C_j / n`` of a clipped, averaged block gradient.

    Parameters
    ----------
    clip_threshold : array_like
        Clipping thresholds ``C_j``.
    n_samples : int
        Number of records ``n`` (public under replace-one: it never changes).

    Returns
    -------
    numpy.ndarray
        ``Delta_j = 2 C_j / n``.

    Notes
    -----
    Neighbouring relation: replace-one. ``g_j = (1/n) sum_i clip_i`` with
    ``||clip_i||_2 <= C_j`` (a scalar for a coordinate, a k-vector for a row
    ``W[j, :]``; :func:`clip_block_gradients`); replacing record ``i`` moves
    ``clip_i`` to some ``clip_i'`` with ``||clip_i - clip_i'||_2 <=
    ||clip_i|| + ||clip_i'|| <= 2 C_j`` and leaves the other terms alone, hence
    moves ``g_j`` by at most ``2 C_j / n`` in L2 norm, for every value of the
    current iterate (Mangold et al. 2022, proof of Theorem 4.1, with the
    component-Lipschitz constant ``L_j`` replaced by the clip ``C_j``). The
    Gaussian noise added to a block is isotropic with the same ``sigma_j`` on
    each of its coordinates, so only this L2 bound matters.
    """
    return 2.0 * np.asarray(clip_threshold, dtype=np.float64) / n_samples


@lru_cache(maxsize=256)
def _cached_gaussian_mu(epsilon: float, delta: float) -> float:
    # A pure function of two floats, evaluated by bisection: audits and
    # benchmarks that refit at one budget should not redo the search.
    return gaussian_mu(epsilon, delta)


def gdp_noise_multiplier(epsilon: float, delta: float, steps: int) -> float:
    """Noise multiplier ``s`` making ``steps`` Gaussian coordinate steps (epsilon, delta)-DP.

    Parameters
    ----------
    epsilon : float
        Target epsilon, > 0.
    delta : float
        Target delta in (0, 1).
    steps : int
        Number of noisy coordinate steps ``T K``.

    Returns
    -------
    float
        ``s = sqrt(steps) / gaussian_mu(epsilon, delta)`` (times ``1 + 1e-9``,
        so that the accountant's recomputed epsilon cannot round above the
        target); step ``j`` adds ``N(0, (s Delta_j)^2)``.

    Notes
    -----
    Neighbouring relation: replace-one; sensitivity ``Delta_j = 2 C_j / n``
    per step (:func:`coordinate_sensitivity`). Each step is a Gaussian
    mechanism, exactly ``1/s``-GDP (Dong, Roth and Su 2019, Theorem 2.7);
    ``steps`` adaptive Gaussian steps are exactly ``sqrt(steps)/s``-GDP
    (their Corollary 3.3); mu-GDP is (epsilon, delta)-DP iff delta is at
    least the Gaussian curve (Balle and Wang 2018, Theorem 8; Dong, Roth and
    Su, Corollary 2.13), which :func:`~privml.accounting.analytic_gaussian.gaussian_mu`
    inverts. Exact: no smaller multiplier is private for this composition.

    Examples
    --------
    >>> round(gdp_noise_multiplier(1.0, 1e-5, 1), 4)  # one step: the analytic Gaussian
    3.7306
    """
    epsilon = check_epsilon(epsilon)
    delta = check_positive_delta(delta)
    steps = check_count(steps, "steps")
    return math.sqrt(steps) / _cached_gaussian_mu(epsilon, delta) * (1.0 + _GDP_ROUNDING_MARGIN)


def closed_form_noise_multiplier(epsilon: float, delta: float, steps: int) -> float:
    """Noise multiplier of the closed-form calibration of Mangold et al. (2022), Theorem 4.1.

    Parameters
    ----------
    epsilon, delta : float
        Target budget; the theorem needs ``epsilon < 1`` and ``delta < 1/3``
        (this function computes the formula for any positive values: check
        :func:`closed_form_applies` before relying on it).
    steps : int
        Number of noisy coordinate steps ``T K``.

    Returns
    -------
    float
        ``s = sigma_j / Delta_j = sqrt(3 T K log(1/delta)) / epsilon``, from
        ``sigma_j^2 = 12 C_j^2 T K log(1/delta) / (n^2 epsilon^2)`` and
        ``Delta_j = 2 C_j / n``.

    Notes
    -----
    Neighbouring relation: replace-one (the paper's "datasets differing on
    at most one element"), sensitivity ``2 C_j / n``. The theorem is proved by
    Renyi-DP composition (Mironov 2017) and a loose conversion; it is valid for
    ``epsilon < 1, delta < 1/3`` only, and is always noisier than the exact
    :func:`gdp_noise_multiplier` (about 1.6 x at epsilon = 1, delta = 1e-5,
    whatever ``T K``: both scale as ``sqrt(T K)``).
    Mangold et al.'s slides (CAp 2021) write ``8 Delta_2(grad_j l)^2 T K log(1/delta)
    / (n^2 eps^2)`` with ``Delta_2`` the per-record sensitivity, i.e. ``2 C_j``
    under clipping.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_positive_delta(delta)
    steps = check_count(steps, "steps")
    return math.sqrt(CLOSED_FORM_CONSTANT / 4.0 * steps * math.log(1.0 / delta)) / epsilon


def closed_form_applies(epsilon: float, delta: float) -> bool:
    """Whether Theorem 4.1 of Mangold et al. (2022) covers (epsilon, delta): eps < 1, delta < 1/3."""
    return epsilon < 1.0 and delta < 1.0 / 3.0


def dpcd_guarantee(noise_multiplier: float, steps: int, delta: float, *, accountant: str = "gdp") -> PrivacyGuarantee:
    """The (epsilon, delta) guarantee of ``steps`` DP-CD steps with noise multiplier ``s``.

    Parameters
    ----------
    noise_multiplier : float
        ``s = sigma_j / Delta_j``, the same for every coordinate.
    steps : int
        Number of noisy coordinate steps ``T K``.
    delta : float
        The delta at which epsilon is reported, in (0, 1).
    accountant : str
        ``"gdp"`` (exact, Dong, Roth and Su 2019, Cor. 3.3) or ``"rdp"``
        (Mironov 2017, the technique of Mangold et al.'s proof), or any name
        :func:`~privml.accounting.make_accountant` accepts that supports
        Gaussian events.

    Returns
    -------
    PrivacyGuarantee
        Under replace-one neighbours, with sensitivity ``2 C_j / n`` per step
        (:func:`coordinate_sensitivity`): the ledger is ``steps`` adaptive
        Gaussian mechanisms ``GaussianEvent(s, replace-one)``.
    """
    step = GaussianEvent(noise_multiplier, Neighbouring.REPLACE_ONE)
    acc = make_accountant(accountant)
    acc.compose(SelfComposedEvent(step, check_count(steps, "steps")))
    return PrivacyGuarantee(
        epsilon=float(acc.get_epsilon(delta)),
        delta=float(delta),
        neighbouring=Neighbouring.REPLACE_ONE,
        accountant=acc.name,
    )


@lru_cache(maxsize=256)
def _cached_guarantee(noise_multiplier: float, steps: int, delta: float, accountant: str) -> PrivacyGuarantee:
    # Refits at one budget (audits, benchmarks) repeat the same bisection; the
    # guarantee is immutable, so sharing it is safe.
    return dpcd_guarantee(noise_multiplier, steps, delta, accountant=accountant)


# --------------------------------------------------------------------------- the algorithm
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


def _renamed_settings(old: dict[str, Any], l2: float) -> dict[str, Any]:
    """New-name settings for the deprecated ``clip``, ``penalty`` and ``alpha`` (one release).

    ``penalty="l2"`` with ``alpha`` is ``l2=alpha``; ``"l1"`` is ``l1=alpha, l2=0``;
    ``"none"`` is ``l1=0, l2=0``. A missing ``alpha`` is the current ``l2``
    (which the old ``alpha`` default equals).
    """
    out: dict[str, Any] = {}
    if "clip" in old:
        out["clip_norm"] = old["clip"]
    if "penalty" in old or "alpha" in old:
        penalty = _check_choice(old.get("penalty", "l2"), "penalty", PENALTIES)
        alpha = old.get("alpha", l2)
        out.update({"l2": alpha} if penalty == "l2" else {"l1": alpha if penalty == "l1" else 0.0, "l2": 0.0})
    return out


#: Deprecated DP-CD parameter -> its replacement (accepted for one release).
_RENAMED = {"clip": "clip_norm", "alpha": "l2 (or l1, with penalty='l1')",
            "penalty": "l1 and l2 (penalty='none' is l2=0)"}


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
    **deprecated: Any,
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
    **deprecated :
        ``clip``, ``penalty`` and ``alpha``, accepted with a FutureWarning for one release.
    feature_bounds : None, "data" or array_like, shape (d,)
        Public bounds ``|x_j| <= b_j``; None means all 1 (true for rows in the
        unit ball). ``"data"`` reads them from ``X`` with a
        :class:`~privml.exceptions.PrivacyLeakWarning`.
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
    with ``x_ij != 0``, from cached scores ``X theta``, plus one ``O(n d k)``
    refresh of the scores per outer iteration (which also stops rounding
    drift).
    """
    unknown = sorted(set(deprecated) - set(_RENAMED))
    if unknown:
        raise TypeError(f"dp_coordinate_descent got an unexpected keyword argument {unknown[0]!r}")
    for name in deprecated:
        warn_renamed("dp_coordinate_descent", name, _RENAMED[name], stacklevel=2)
    renamed = _renamed_settings(deprecated, l2)
    settings = _check_settings(
        epsilon=epsilon,
        delta=delta,
        passes=passes,
        inner_steps=inner_steps,
        gamma=gamma,
        clip_norm=renamed.get("clip_norm", clip_norm),
        clipping=clipping,
        l1=renamed.get("l1", l1),
        l2=renamed.get("l2", l2),
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

    state: _BlockState
    if by_feature:
        state = _SoftmaxRows(X, y, k)
    elif isinstance(loss, MultinomialLogisticLoss):
        state = _SoftmaxScores(X, y, k)
    else:
        state = _Scores(X, y, loss)
    theta = np.zeros((n_blocks, width))
    w_bar = np.zeros((n_blocks, width))
    l1, l2 = settings.l1, settings.l2
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
        "l1": l1,
        "l2": l2,
    }
    return DPCDResult(weights=w_bar.reshape(-1), guarantee=guarantee, info=info)


def _prox_block(values: np.ndarray, step: float, l1: float, l2: float) -> np.ndarray:
    """:func:`prox` of one block (a fresh 1-D array, a scalar step), without conversions: the inner loop's."""
    if l1:
        values = np.sign(values) * np.maximum(np.abs(values) - step * l1, 0.0)
    if l2:
        values /= 1.0 + step * l2
    return values


class _BlockState(ABC):
    """What the inner loop needs from a model: clipped block gradients and cheap moves.

    ``block_gradient(j, C_j)`` returns ``(1/n) sum_i clip(grad_i of block j, C_j)``
    (shape ``(width,)``, L2 clipping per record), computed from cached scores
    ``X theta``; ``block_move(j, change)`` adds ``change`` to block ``j`` and
    updates the cache. Only records with ``x_ij != 0`` have a non-zero gradient
    on a block of feature ``j`` (every loss here is a function of the scores,
    so that gradient is ``x_ij`` times a per-record residual) or see their
    scores move, so both cost O(nnz_j width) on sparse features such as
    image pixels; the mean still divides by ``n``.
    """

    @abstractmethod
    def reset(self, theta: np.ndarray) -> None:
        """Recompute the cached scores exactly for parameters ``theta``."""

    @abstractmethod
    def block_gradient(self, j: int, threshold: float) -> np.ndarray | float:
        """Mean over records of the block-``j`` gradients, each clipped to L2 norm ``threshold``."""

    @abstractmethod
    def block_move(self, j: int, change: np.ndarray) -> None:
        """Add ``change`` to block ``j`` and update the cached scores."""


class _Columns:
    """Each feature's non-zero records: ``rows[j]`` (None when every record is non-zero) and ``values[j]``."""

    def __init__(self, X: np.ndarray) -> None:
        n, d = X.shape
        self.rows: list[np.ndarray | None] = []
        self.values: list[np.ndarray] = []
        for start in range(0, d, 256):  # transpose a slab at a time: no second copy of X
            slab = np.ascontiguousarray(X[:, start : start + 256].T)
            for column in slab:
                nonzero = np.flatnonzero(column)
                if nonzero.size == n:
                    self.rows.append(None)
                    self.values.append(column.copy())
                else:
                    self.rows.append(nonzero)
                    self.values.append(column[nonzero])


class _Scores(_BlockState):
    """Cached scores ``X theta`` of a one-output model (binary, regression): O(nnz_j) per step."""

    def __init__(self, X: np.ndarray, y: np.ndarray, loss: Loss) -> None:
        self._X, self._y, self._loss = X, y, loss
        self._n = X.shape[0]
        self._columns = _Columns(X)
        self._scores = np.zeros(self._n)

    def reset(self, theta: np.ndarray) -> None:
        # Recomputed once per outer iteration: O(n d), and no rounding drift.
        self._scores = self._X @ theta

    def block_gradient(self, j: int, threshold: float) -> float:
        rows, values = self._columns.rows[j], self._columns.values[j]
        if rows is None:
            per_example = self._loss._score_gradients(self._scores, self._y) * values
        else:
            per_example = self._loss._score_gradients(self._scores[rows], self._y[rows]) * values
        return float(clip_coordinate_gradients(per_example, threshold).sum()) / self._n

    def block_move(self, j: int, change: np.ndarray) -> None:
        rows, values = self._columns.rows[j], self._columns.values[j]
        if rows is None:
            self._scores += change[0] * values
        else:
            self._scores[rows] += change[0] * values


class _SoftmaxRows(_BlockState):
    """Cached class-major scores ``(X W)^T`` of a k-class softmax model, for steps on a row ``W[j, :]``.

    The block gradient of record ``i`` is ``x_ij (p_i - e_{y_i})``, of norm
    ``|x_ij| ||p_i - e_{y_i}||``: computing the softmax of the ``nnz_j``
    records with ``x_ij != 0`` (from their cached scores, shifted by their
    maximum: exact, nothing accumulates) gives all ``k`` entries at once, and
    the move changes only those records' scores. O(nnz_j k) per step, in
    preallocated buffers, a chunk of records at a time so that the
    temporaries stay in cache (a dense column of MNIST's size otherwise runs
    about three times slower).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, k: int, *, chunk: int | None = None) -> None:
        n = X.shape[0]
        self._X, self._y, self._k, self._n = X, y, k, n
        self._columns = _Columns(X)
        self._scores = np.zeros((k, n))
        self._chunk = max(1, chunk if chunk is not None else 65536 // k)
        c = min(self._chunk, n)
        self._gathered = np.empty(k * n)  # the current block's records' scores, chunk after chunk
        self._work = np.empty(k * c)  # residuals, then the score change, of one chunk
        self._per_record = np.empty(c)
        self._per_record_b = np.empty(c)
        self._index = np.arange(c)
        self._current = -1  # block whose records' scores sit in _gathered

    def reset(self, W: np.ndarray) -> None:
        self._scores = np.ascontiguousarray((self._X @ W).T)
        self._current = -1

    def _chunk_scores(self, rows: np.ndarray | None, lo: int, hi: int, gather: bool) -> np.ndarray:
        """Scores ``(k, hi - lo)`` of records ``lo:hi`` of the block: a view (dense column) or gathered."""
        if rows is None:
            return self._scores[:, lo:hi]
        k = self._k
        region = self._gathered[k * lo : k * hi].reshape(k, hi - lo)
        if gather:
            np.take(self._scores, rows[lo:hi], axis=1, out=region)
        return region

    def block_gradient(self, j: int, threshold: float) -> np.ndarray:
        rows, values = self._columns.rows[j], self._columns.values[j]
        m, k = values.size, self._k
        gather = self._current != j
        self._current = -1 if rows is None else j
        g = np.zeros(k)
        for lo in range(0, m, self._chunk):
            hi = min(lo + self._chunk, m)
            w = hi - lo
            x = values[lo:hi]
            scores = self._chunk_scores(rows, lo, hi, gather)
            labels = self._y[lo:hi] if rows is None else self._y[rows[lo:hi]]
            residual = self._work[: k * w].reshape(k, w)
            top = self._per_record[:w]
            np.max(scores, axis=0, out=top)
            np.subtract(scores, top, out=residual)
            np.exp(residual, out=residual)
            total = self._per_record_b[:w]
            np.sum(residual, axis=0, out=total)
            residual /= total
            residual[labels, self._index[:w]] -= 1.0  # p_i - e_{y_i}, one column per record
            # Per-record L2 clipping of x_ij (p_i - e_{y_i}): weight x_ij min(1, C_j / norm_i).
            norm = np.einsum("ci,ci->i", residual, residual, out=top)
            np.sqrt(norm, out=norm)
            norm *= np.abs(x)
            np.maximum(norm, threshold, out=norm)  # C_j / max(norm, C_j) = min(1, C_j / norm), no 0/0
            np.divide(threshold, norm, out=norm)
            norm *= x
            g += residual @ norm
        return g / self._n

    def block_move(self, j: int, change: np.ndarray) -> None:
        rows, values = self._columns.rows[j], self._columns.values[j]
        m, k = values.size, self._k
        gather = self._current != j
        for lo in range(0, m, self._chunk):
            hi = min(lo + self._chunk, m)
            delta = self._work[: k * (hi - lo)].reshape(k, hi - lo)
            np.multiply.outer(change, values[lo:hi], out=delta)
            scores = self._chunk_scores(rows, lo, hi, gather)
            scores += delta
            if rows is not None:
                self._scores[:, rows[lo:hi]] = scores
        # A dense column moved every record: the gathered scores of any block are stale.
        self._current = -1 if rows is None else j


class _SoftmaxScores(_BlockState):
    """Cached scores of a k-class softmax model for one entry ``W[j, c]`` per step (``blocks="entry"``).

    ``d loss_i / d W[j, c] = (p_ic - [y_i = c]) x_ij`` needs the one column
    ``p_c = exp(s_c - lse)``; keeping ``lse = logsumexp(s)`` current after a
    change of column c by ``delta_i`` costs O(n) too:
    ``lse += log1p(p_c expm1(delta))``. Where that argument nears -1 (cancellation)
    the rows are recomputed exactly.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, k: int) -> None:
        self._X = X
        self._Xt = np.ascontiguousarray(X.T)  # row j is feature j: contiguous O(n) column reads
        self._k = k
        self._onehot = (np.arange(k)[:, None] == y[None, :]).astype(np.float64)  # (k, n)
        self._scores = np.zeros((k, X.shape[0]))  # class-major: each class row contiguous
        self._lse = np.zeros(X.shape[0])
        self._p: np.ndarray | None = None
        self._p_output = -1

    def _exact_lse(self, rows: np.ndarray | slice) -> np.ndarray:
        s = self._scores[:, rows]
        top = s.max(axis=0)
        return top + np.log(np.exp(s - top).sum(axis=0))

    def reset(self, W: np.ndarray) -> None:
        self._scores = np.ascontiguousarray((self._X @ W).T)
        self._lse = self._exact_lse(slice(None))
        self._p_output = -1

    def coordinate_gradients(self, column: np.ndarray, output: int) -> np.ndarray:
        self._p = np.exp(self._scores[output] - self._lse)
        self._p_output = output
        return (self._p - self._onehot[output]) * column

    def move(self, column: np.ndarray, output: int, change: float) -> None:
        delta = change * column
        p = self._p if self._p_output == output else np.exp(self._scores[output] - self._lse)
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = 1.0 + p * np.expm1(delta)  # sum_c' exp(s_c' new) / sum_c' exp(s_c' old)
        self._scores[output] += delta
        # Cancellation (ratio near 0), overflow (inf) or 0 * inf (nan): recompute those rows.
        stable = (ratio >= 1e-3) & (ratio < np.inf)
        if stable.all():
            self._lse += np.log(ratio)
        else:
            self._lse[stable] += np.log(ratio[stable])
            unstable = ~stable
            self._lse[unstable] = self._exact_lse(unstable)
        self._p_output = -1

    def block_gradient(self, j: int, threshold: float) -> float:
        feature, output = divmod(j, self._k)
        per_example = self.coordinate_gradients(self._Xt[feature], output)
        return float(clip_coordinate_gradients(per_example, threshold).mean())

    def block_move(self, j: int, change: np.ndarray) -> None:
        feature, output = divmod(j, self._k)
        self.move(self._Xt[feature], output, float(change[0]))


# --------------------------------------------------------------------------- estimators
_DPCD_PARAMS = (
    "epsilon",
    "delta",
    "passes",
    "inner_steps",
    "gamma",
    "clip_norm",
    "clipping",
    "l1",
    "l2",
    "calibration",
    "progress",
)


#: Every fact a DP-CD run reports is a public setting or a function of public ones
#: (feature bounds taken from the data are flagged by ``feature_bounds_from_data``
#: and warned about when they are inferred).
_RELEASED_INFO = frozenset({
    "calibration", "passes", "inner_steps", "steps", "gamma", "gamma_default", "blocks", "n_coordinates",
    "n_blocks", "block_size", "noise_multiplier", "noise_multiplier_gdp", "noise_multiplier_closed_form",
    "noise_ratio_closed_form_to_gdp", "closed_form_applies", "mu", "sensitivity", "sigma", "sigma_gdp",
    "sigma_closed_form", "clip_thresholds", "step_sizes", "coordinate_smoothness", "feature_bounds",
    "feature_bounds_from_data", "l1", "l2",
})


class _DPCDMixin(RenamedParams):
    """Hyper-parameter handling shared by the two DP-CD estimators."""

    released_info = _RELEASED_INFO
    _renamed_params = _RENAMED

    def _translate_renamed(self, old: dict[str, Any]) -> dict[str, Any]:
        return _renamed_settings(old, self.l2)  # type: ignore[attr-defined]

    def _check_hyperparameters(self) -> _Settings:
        params = {name: getattr(self, name) for name in _DPCD_PARAMS}
        # Only the classifier has a choice of blocks (one-output models have one coordinate per feature).
        return _check_settings(blocks=getattr(self, "blocks", "feature"), **params)

    def _fit_dpcd(self, X: np.ndarray, y: np.ndarray, loss: Loss, rng: np.random.Generator) -> DPCDResult:
        settings = self._check_hyperparameters()
        X, y = loss.check_data(X, y)
        bounds, from_data = _resolve_feature_bounds(self.feature_bounds, X)  # type: ignore[attr-defined]
        return _run(X, y, loss, settings, bounds, from_data, rng)


class DPCDClassifier(_DPCDMixin, PrivateLinearClassifier):
    """Linear classifier trained by DP coordinate descent (Mangold et al. 2022).

    Binary: logistic loss on y in {-1, +1}, weights ``(d,)``, one coordinate
    per step. More classes: multinomial logistic loss, weights ``W`` of shape
    ``(d, k)``, one row ``W[j, :]`` per step by default (``blocks``).
    Minimises ``(1/n) sum_i loss + psi`` privately; see :mod:`privml.linear.dpcd`.

    Parameters
    ----------
    epsilon : float
        Privacy budget, > 0 (required).
    delta : float, default 1e-5
        > 0 (Gaussian noise); should be well below 1/n.
    passes : int, default 10
        Outer iterations ``T``. Each costs about one pass over the non-zero
        features (``k`` scores each); more passes help at large epsilon and
        cost time, while the default ``gamma`` shrinks the steps to keep the
        noise in check.
    inner_steps : int or None, default None
        Inner iterations ``K``; None means the number of blocks (``d``, or
        ``d k`` with ``blocks="entry"``).
    gamma : float or None, default None
        Step scale, ``eta_j = gamma / M_j``. None: :func:`default_gamma`, a
        public function of ``n``, epsilon, delta, ``T``, ``K``, ``C`` and the
        feature bounds (``fit_info_["gamma"]`` reports the value used).
    clip_norm : float, default 0.5
        Overall clipping threshold ``C`` (``sum_j C_j^2 = C^2`` over blocks).
        With rows in the unit ball, ``C_j = C / sqrt(d)`` is about the size of
        a typical record's ``|x_ij|``.
    clipping : {"uniform", "lipschitz"}, default "uniform"
        ``C_j = C / sqrt(B)`` or ``C sqrt(M_j / sum M)`` over the ``B`` blocks.
    l2 : float, default 1e-5
        Ridge strength lambda >= 0: ``psi`` has the term ``(l2/2) ||w||_2^2``,
        applied by its prox. The steps are large (rows in the unit ball
        spread over many features, and a good model has large weights), so
        the shrinkage ``1 / (1 + eta_j l2)`` of each step bites much harder
        than ``l2`` suggests: keep it small.
    l1 : float, default 0
        Lasso strength >= 0: the term ``l1 ||w||_1`` of ``psi`` (soft-thresholding).
    feature_bounds : None, "data" or array_like of shape (d,), default None
        **Public** bounds ``|x_j| <= b_j`` (capped at 1). None: all 1, implied
        by ``||x|| <= 1``. ``"data"`` reads them from the training data and
        warns (:class:`~privml.exceptions.PrivacyLeakWarning`).
    calibration : {"gdp", "closed_form"}, default "gdp"
        Exact GDP composition, or the paper's Theorem 4.1 (epsilon < 1 only).
    blocks : {"feature", "entry"}, default "feature"
        k classes: update a feature's row ``W[j, :]`` per step (L2 clipping of
        each record's k-vector, ``M_j = b_j^2 / 2``), or a single entry
        ``W[j, c]`` as in the paper (``M_j = b_j^2 / 4``). Same privacy
        accounting either way; rows are much more accurate (see the module
        notes). Ignored for two classes.
    classes : sequence or None, default None
        The public class set (taken from y with a warning if None).
    random_state : None, int, SeedSequence or Generator, default None
    progress : bool, default False
        Progress bar on stderr.
    **deprecated :
        ``clip`` (now ``clip_norm``), ``penalty`` and ``alpha`` (now ``l1``/``l2``),
        accepted with a FutureWarning for one release.

    Attributes
    ----------
    weights_, coef_, classes_, n_features_in_ :
        As in :class:`~privml.linear.base.PrivateLinearClassifier`.
    privacy_ : PrivacyGuarantee
        Replace-one; accountant ``"gdp"`` (or ``"rdp"`` for the closed form).
    fit_info_ : dict
        Public diagnostics: the ``gamma`` used, both noise multipliers and
        per-block noise scales (``sigma_gdp``, ``sigma_closed_form``) and
        their ratio, sensitivities, clipping thresholds, step sizes, counts.

    Notes
    -----
    Neighbouring relation: replace-one. L2 sensitivity ``2 C_j / n`` of each
    clipped block step (:func:`coordinate_sensitivity`), whatever the width
    of the block. Guarantee: exact GDP composition of the ``T K`` Gaussian
    steps (Dong, Roth and Su 2019, Corollary 3.3), see
    :func:`gdp_noise_multiplier`. The defaults read only public quantities.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 3)) / 2
    >>> y = (X[:, 0] > 0).astype(int)
    >>> clf = DPCDClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y)
    >>> clf.privacy_.accountant, clf.privacy_.epsilon <= 1.0
    ('gdp', True)
    """

    method = "dpcd"
    requires_delta = True

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 1e-5,
        passes: int = 10,
        inner_steps: int | None = None,
        gamma: float | None = None,
        clip_norm: float = 0.5,
        clipping: str = "uniform",
        l2: float = 1e-5,
        l1: float = 0.0,
        feature_bounds: Any = None,
        calibration: str = "gdp",
        blocks: str = "feature",
        classes: Any = None,
        random_state: RandomState = None,
        progress: bool = False,
        **deprecated: Any,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.passes = passes
        self.inner_steps = inner_steps
        self.gamma = gamma
        self.clip_norm = clip_norm
        self.clipping = clipping
        self.l2 = l2
        self.l1 = l1
        self.feature_bounds = feature_bounds
        self.calibration = calibration
        self.blocks = blocks
        self.classes = classes
        self.random_state = random_state
        self.progress = progress
        self._take_renamed(deprecated)

    def _fit_private(
        self, X: np.ndarray, y: np.ndarray, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, PrivacyGuarantee, dict]:
        result = self._fit_dpcd(X, y, make_loss(n_classes), rng)
        weights = result.weights if n_classes == 2 else result.weights.reshape(X.shape[1], n_classes)
        return weights, result.guarantee, result.info


class DPCDRegressor(_DPCDMixin, RegressorMixin, BaseEstimator):
    """Least-squares linear regression trained by DP coordinate descent (Mangold et al. 2022).

    Minimises ``(1/(2n)) sum_i (w.x_i - y_i)^2 + psi(w)`` privately, the
    setting of Mangold et al. (2022)'s experiments. No intercept is
    fitted: append a constant feature (:func:`privml.data.add_bias_feature`).
    Each row of ``X`` is projected onto the unit ball (a per-record map, no
    privacy cost); targets are used as given.

    Parameters
    ----------
    epsilon, delta, passes, inner_steps, gamma, clip_norm, clipping, l2, l1,
    feature_bounds, calibration, random_state, progress, **deprecated :
        As in :class:`DPCDClassifier` (``M_j = b_j^2`` for the squared loss),
        but with the paper's conservative defaults ``gamma = 1``, ``C = 1``,
        ``l2 = 1e-3``: the squared loss has no bounded residual to make
        :func:`default_gamma`'s average-curvature step safe, and its scores
        are in the target's units, not logits. ``gamma=None`` applies
        :func:`default_gamma` all the same.

    Attributes
    ----------
    weights_ : numpy.ndarray, shape (d,)
    coef_ : numpy.ndarray, shape (d,)
        The same weights (scikit-learn's layout); ``intercept_`` is 0.
    n_features_in_ : int
    privacy_ : PrivacyGuarantee
    fit_info_ : dict
        Public diagnostics, as for :class:`DPCDClassifier`.

    Notes
    -----
    Neighbouring relation: replace-one. The squared loss has no Lipschitz
    constant (its gradient ``(w.x - y) x_j`` grows with ``w`` and ``y``), so
    the clipping to ``[-C_j, C_j]`` is what bounds the sensitivity of each step
    by ``2 C_j / n``; choose ``C`` near the typical size of the coordinate
    gradients (too small biases the solution, too large adds noise).
    Guarantee: exact GDP composition of the ``T K`` Gaussian steps (Dong, Roth
    and Su 2019, Corollary 3.3), see :func:`gdp_noise_multiplier`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(2000, 2)) / 2
    >>> reg = DPCDRegressor(epsilon=5.0, l2=0.0, random_state=0).fit(X, X @ [1.0, -1.0])
    >>> reg.score(X, X @ [1.0, -1.0]) > 0.5
    True
    """

    method = "dpcd-regressor"

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 1e-5,
        passes: int = 10,
        inner_steps: int | None = None,
        gamma: float = 1.0,
        clip_norm: float = 1.0,
        clipping: str = "uniform",
        l2: float = 1e-3,
        l1: float = 0.0,
        feature_bounds: Any = None,
        calibration: str = "gdp",
        random_state: RandomState = None,
        progress: bool = False,
        **deprecated: Any,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.passes = passes
        self.inner_steps = inner_steps
        self.gamma = gamma
        self.clip_norm = clip_norm
        self.clipping = clipping
        self.l2 = l2
        self.l1 = l1
        self.feature_bounds = feature_bounds
        self.calibration = calibration
        self.random_state = random_state
        self.progress = progress
        self._take_renamed(deprecated)

    def _validate_X(self, X: Any, *, fitted: bool) -> np.ndarray:
        X = check_X(X, n_features=self.n_features_in_ if fitted else None, owner=type(self).__name__)
        return project_to_unit_ball(X)

    def fit(self, X: Any, y: Any) -> DPCDRegressor:
        """Train privately on (X, y); every check runs before any noise is drawn."""
        self._check_hyperparameters()
        X = self._validate_X(X, fitted=False)
        y = check_y(y, X.shape[0], numeric=True)
        rng = check_random_state(self.random_state)
        result = self._fit_dpcd(X, y, SquaredLoss(), rng)
        self.n_features_in_ = X.shape[1]
        self.weights_ = np.asarray(result.weights, dtype=np.float64)
        self.privacy_ = result.guarantee
        self.fit_info_, self.nonprivate_diagnostics_ = partition_info(result.info, self.released_info)
        return self

    def _check_fitted(self) -> None:
        check_fitted(self, "weights_")

    @property
    def coef_(self) -> np.ndarray:
        self._check_fitted()
        return self.weights_

    @property
    def intercept_(self) -> float:
        self._check_fitted()
        return 0.0

    def predict(self, X: Any) -> np.ndarray:
        """Predictions ``x.w`` for each row (rows projected onto the unit ball first)."""
        self._check_fitted()
        return self._validate_X(X, fitted=True) @ self.weights_

    # ------------------------------------------------------------ model file
    def _model_arrays(self) -> dict[str, np.ndarray]:
        """Arrays saved in the model file by :func:`privml.io.save_model`."""
        self._check_fitted()
        return {"weights": self.weights_}

    def _restore_arrays(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        self.weights_ = np.asarray(arrays["weights"], dtype=np.float64)
        self.n_features_in_ = int(self.weights_.shape[0])
        self.privacy_ = PrivacyGuarantee.from_dict(metadata["privacy"])
        self.fit_info_, _ = partition_info(metadata.get("fit_info", {}), self.released_info)
        self.nonprivate_diagnostics_ = {}
