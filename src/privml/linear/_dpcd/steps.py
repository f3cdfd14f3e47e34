"""The building blocks of a DP-CD step: prox, clipping thresholds and clipping,
block smoothness constants and the default step scale; see :mod:`privml.linear._dpcd`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import (
    check_positive,
)
from privml.losses import Loss, check_feature_bounds

#: The rules for sharing the clipping threshold among blocks (see :func:`clip_thresholds`).
CLIPPINGS: tuple[str, ...] = ("uniform", "lipschitz")

#: Default step scale, per unit of ``max(1, ||b||^2)`` (see :func:`default_gamma`).
AVERAGE_STEP = 6.0
#: Default bound on the noise standard deviation the steps add to a score, in logits.
SCORE_NOISE = 2.5


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


def _prox_block(values: np.ndarray, step: float, l1: float, l2: float) -> np.ndarray:
    """:func:`prox` of one block (a fresh 1-D array, a scalar step), without conversions: the inner loop's."""
    if l1:
        values = np.sign(values) * np.maximum(np.abs(values) - step * l1, 0.0)
    if l2:
        values /= 1.0 + step * l2
    return values
