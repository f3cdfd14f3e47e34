"""Privacy constants of objective perturbation: CMS11 Algorithm 2 and KST12 / vdMH20 loss perturbation.

Everything here is stated for **replace-one** neighbours (same n, one record
replaced; CMS11, Sec. 2), records with ``||x||_2 <= 1`` and the objective
``J(w) = (lambda/2)||w||^2 + (1/n) sum_i loss(w; x_i, y_i)``, as small pure
functions that :mod:`privml.linear._objective_perturbation` imports.

Objective perturbation (minimise ``J(w) + (1/n) b.w + (Delta/2)||w||^2``):

- :func:`cms11_constants`: CMS11 Algorithm 2 exactly as the paper states it.
- :func:`jacobian_epsilon`, :func:`jacobian_strong_convexity`,
  :func:`objective_gaussian_sigma` and :func:`kst12_constants`: the "loss
  perturbation" constants of KST12 / vdMH20 re-derived for replace-one
  neighbours. The derivation is in :mod:`privml.linear._objective_perturbation`;
  the facts used here are

  * the Jacobian factor of the change of variables ``b -> w`` is at most
    ``exp(r log(1 + a / (n Lambda)))`` with ``a = min(beta, t / r)``, where
    ``Lambda = lambda + Delta``, ``r`` bounds the rank, ``beta`` the largest
    eigenvalue and ``t`` the trace of one record's loss Hessian
    (:func:`hessian_trace_bound`);
  * the two noise vectors that give the same output on neighbours differ by
    ``s = grad loss(w; z) - grad loss(w; z')``: ``||s|| <= 2 L``, with a
    direction that depends on the output, which
    :func:`objective_gaussian_sigma` pays for with a union bound over the
    ``g`` directions a record's gradient can take (:func:`gradient_directions`).

References: CMS11 = Chaudhuri, Monteleoni, Sarwate (2011), "Differentially
private empirical risk minimization", JMLR 12. KST12 = Kifer, Smith, Thakurta
(2012), "Private convex empirical risk minimization and high-dimensional
regression", COLT. vdMH20 = van der Maaten, Hannun (2020), "The trade-offs of
private prediction".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from privml._validation import check_count, check_delta, check_epsilon, check_positive, check_positive_delta
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.losses import Loss, MarginLoss, MultinomialLogisticLoss

#: Share of epsilon the Jacobian factor may use before Delta is added
#: (CMS11 Alg. 2 and KST12 Thm 2 both spend half).
DEFAULT_JACOBIAN_SHARE = 0.5


# --------------------------------------------------------------------------
# Constants of a loss that objective perturbation needs.


def hessian_trace_bound(loss: Loss) -> float:
    """Bound ``t`` on the trace of one record's loss Hessian, for ``||x|| <= 1``.

    Binary margin losses: ``phi''(z) ||x||^2 <= smoothness`` (rank one).
    Multinomial logistic: ``tr((x x^T) kron A) = ||x||^2 tr(A)`` with
    ``A = diag(p) - p p^T``, and ``tr(A) = 1 - sum_c p_c^2 <= 1 - 1/k``
    (Cauchy-Schwarz: ``sum p_c^2 >= 1/k``). Any other loss: the generic
    ``rank * smoothness``, always valid.

    Used by :func:`jacobian_epsilon`: with ``k`` classes the trace bound
    ``1 - 1/k`` is ``(k-1)/2`` times smaller than ``rank * smoothness``.
    """
    if isinstance(loss, MarginLoss):
        return float(loss.smoothness)
    if isinstance(loss, MultinomialLogisticLoss):
        return 1.0 - 1.0 / loss.n_classes
    return float(loss.hessian_rank * loss.smoothness)


def gradient_directions(loss: Loss) -> int:
    """Number ``g`` of vectors whose convex hull with 0 holds every gradient of one record.

    For a record ``z`` there are fixed ``G_1..G_g`` (depending on ``z`` only,
    not on ``w``), each of norm ``<= L`` when ``||x|| <= 1``, such that
    ``grad loss(w; z)`` lies in ``conv{0, G_1, ..., G_g}`` for every ``w``:

    * margin loss ``phi(y w.x)`` with ``phi' in [-L, 0]`` (logistic, Huber
      hinge: non-increasing in the margin): ``phi'(z) y x = |phi'| (-y x)``,
      so g = 1 with ``G_1 = -L y x``;
    * multinomial logistic: ``x (p - e_y)^T = sum_c p_c x (e_c - e_y)^T``,
      a convex combination of the ``k - 1`` vectors ``x (e_c - e_y)^T``,
      ``c != y``, of norm ``sqrt(2) ||x|| <= L``: g = k - 1.

    :func:`objective_gaussian_sigma` takes a union bound over these ``g``
    directions for each of the two records a replacement touches.

    Raises
    ------
    TypeError
        For a loss this is not known for.
    """
    if isinstance(loss, MarginLoss):
        return 1
    if isinstance(loss, MultinomialLogisticLoss):
        return loss.n_classes - 1
    raise TypeError(
        f"the gradient directions of {type(loss).__name__} are not known; objective perturbation needs them"
    )



# --------------------------------------------------------------------------
# CMS11 Algorithm 2.


@dataclass(frozen=True)
class ObjectivePerturbationConstants:
    """The parameters of one run of objective perturbation.

    Attributes
    ----------
    extra_l2 : float
        ``Delta >= 0``, the extra regularisation added to the objective.
    epsilon_jacobian : float
        Privacy loss charged to the Jacobian of ``b -> w`` (at most this, for
        every output).
    epsilon_noise : float
        Privacy loss charged to the noise density (``epsilon - epsilon_jacobian``
        for kst12; ``eps'`` for cms11).
    noise : {"l2-laplace", "gaussian"}
        Distribution of ``b``.
    noise_scale : float
        L2-Laplace: ``s`` with density proportional to ``exp(-||b|| / s)``.
        Gaussian: the per-coordinate standard deviation ``sigma``.
    noise_sensitivity : float
        ``2 L``: the largest ``||b_D(w) - b_D'(w)||`` over replace-one
        neighbours.
    """

    extra_l2: float
    epsilon_jacobian: float
    epsilon_noise: float
    noise: Literal["l2-laplace", "gaussian"]
    noise_scale: float
    noise_sensitivity: float


def cms11_constants(
    epsilon: float, n: int, l2: float, smoothness: float, lipschitz: float = 1.0
) -> ObjectivePerturbationConstants:
    """Constants of CMS11 Algorithm 2 (objective perturbation, epsilon-DP), as the paper states it.

    ``eps' = eps - log(1 + 2c/(n lambda) + c^2/(n lambda)^2)``; if ``eps' > 0``
    then ``Delta = 0``, else ``Delta = c / (n (e^(eps/4) - 1)) - lambda`` and
    ``eps' = eps / 2``. ``b`` has density proportional to
    ``exp(-(eps'/2) ||b||)``: L2-Laplace with scale ``2 L / eps'`` (CMS11 has
    ``L = 1``).

    Parameters
    ----------
    epsilon : float
        Target epsilon > 0 (pure DP).
    n : int
        Number of records.
    l2 : float
        ``lambda > 0``.
    smoothness : float
        ``c``: bound on the loss's second derivative ``|l''(z)|`` (logistic
        1/4, Huber ``1/(2h)``).
    lipschitz : float, default 1
        Bound on ``|l'(z)|`` (CMS11 assume 1).

    Returns
    -------
    ObjectivePerturbationConstants

    Notes
    -----
    Privacy: epsilon-DP under **replace-one** neighbours for a binary linear
    model whose loss ``l(y w.x)`` is convex and twice differentiable with
    ``|l'| <= L``, ``|l''| <= c``, and ``||x|| <= 1`` (CMS11 Theorem 9 with
    Algorithm 2, JMLR version). The log term is CMS11's bound on the Jacobian
    ratio for a rank-two change (one record removed, one added); the
    one-sided bound of :func:`jacobian_epsilon` halves it (see
    :mod:`privml.linear._objective_perturbation`), but this function keeps the
    published constants. The noise part: ``||b - b'|| <= 2L`` under
    replace-one, so density ``exp(-eps' ||b|| / (2L))`` costs ``eps'``.

    Examples
    --------
    >>> c = cms11_constants(1.0, 1000, 0.01, 0.25)
    >>> round(c.epsilon_noise, 6), c.extra_l2, c.noise_scale == 2 / c.epsilon_noise
    (0.950615, 0.0, True)
    """
    epsilon = check_epsilon(epsilon)
    n = check_count(n, "n")
    l2 = check_positive(l2, "l2")
    c = check_positive(smoothness, "smoothness")
    lipschitz = check_positive(lipschitz, "lipschitz")
    ratio = c / (n * l2)
    epsilon_jacobian = math.log1p(2.0 * ratio + ratio * ratio)
    epsilon_noise = epsilon - epsilon_jacobian
    extra_l2 = 0.0
    if epsilon_noise <= 0:
        extra_l2 = c / (n * math.expm1(epsilon / 4.0)) - l2
        epsilon_noise = epsilon / 2.0
        ratio = c / (n * (l2 + extra_l2))
        epsilon_jacobian = math.log1p(2.0 * ratio + ratio * ratio)
    sensitivity = 2.0 * lipschitz
    return ObjectivePerturbationConstants(
        extra_l2=extra_l2,
        epsilon_jacobian=epsilon_jacobian,
        epsilon_noise=epsilon_noise,
        noise="l2-laplace",
        noise_scale=sensitivity / epsilon_noise,
        noise_sensitivity=sensitivity,
    )


# --------------------------------------------------------------------------
# Loss perturbation (KST12 / vdMH20) re-derived for replace-one neighbours.


def _curvature_per_direction(smoothness: float, rank: int, trace: float) -> tuple[float, int]:
    """``(a, r)`` with ``a = min(beta, t / r)``, the Hessian bounds checked: with r eigenvalues in [0, beta]
    summing to at most t, ``sum log(1 + e_i / (n Lambda)) <= r log(1 + a / (n Lambda))`` (concavity of log)."""
    smoothness = check_positive(smoothness, "smoothness")
    rank = check_count(rank, "rank")
    trace = check_positive(trace, "trace")
    return min(smoothness, trace / rank), rank


def jacobian_epsilon(n: int, strong_convexity: float, smoothness: float, rank: int, trace: float) -> float:
    """Bound on the log Jacobian ratio of objective perturbation, replace-one.

    Parameters
    ----------
    n : int
        Number of records.
    strong_convexity : float
        ``Lambda = lambda + Delta > 0``, the total L2 coefficient.
    smoothness : float
        ``beta``: bound on the largest eigenvalue of one record's loss Hessian.
    rank : int
        ``r``: bound on its rank.
    trace : float
        ``t``: bound on its trace (:func:`hessian_trace_bound`; ``r * beta``
        is always valid).

    Returns
    -------
    float
        ``epsilon_J = r log(1 + min(beta, t/r) / (n Lambda))``.

    Notes
    -----
    With the objective multiplied by n, the map from output ``w`` to noise
    ``b`` has Jacobian ``C + H_z`` on D and ``C + H_z'`` on D', where ``C``
    (the shared records' Hessians plus ``n Lambda I``) is ``>= n Lambda I`` and
    ``H_z, H_z'`` are the replaced records' PSD Hessians. Since
    ``det(C + H_z') >= det(C)``, the ratio is at most
    ``det(I + C^-1/2 H_z C^-1/2)``, a product over at most ``r`` eigenvalues
    ``e_i <= beta/(n Lambda)`` with ``sum e_i <= t/(n Lambda)``, hence the
    bound (and symmetrically from below). This is the bound of vdMH20
    Lemma 2 / Eq. 29 (there with ``a = beta``), one-sided, which is why it
    needs no factor 2 for replace-one where CMS11 Thm 9 has one.

    Examples
    --------
    >>> round(jacobian_epsilon(1000, 0.01, 0.25, 1, 0.25), 6)  # log(1.025)
    0.024693
    """
    n = check_count(n, "n")
    strong_convexity = check_positive(strong_convexity, "strong_convexity")
    a, rank = _curvature_per_direction(smoothness, rank, trace)
    return rank * math.log1p(a / (n * strong_convexity))


def jacobian_strong_convexity(epsilon_jacobian: float, n: int, smoothness: float, rank: int, trace: float) -> float:
    """Smallest ``Lambda`` with ``jacobian_epsilon(n, Lambda, ...) <= epsilon_jacobian``.

    ``Lambda = a / (n (exp(epsilon_J / r) - 1))`` with ``a = min(beta, t/r)``:
    the inverse of :func:`jacobian_epsilon` (same assumptions: replace-one,
    ``||x|| <= 1``). Objective perturbation sets ``Delta = max(0, Lambda - lambda)``.

    Examples
    --------
    >>> lam = jacobian_strong_convexity(0.5, 1000, 0.25, 1, 0.25)
    >>> round(jacobian_epsilon(1000, lam, 0.25, 1, 0.25), 12)
    0.5
    """
    epsilon_jacobian = check_epsilon(epsilon_jacobian, "epsilon_jacobian")
    n = check_count(n, "n")
    a, rank = _curvature_per_direction(smoothness, rank, trace)
    return a / (n * math.expm1(epsilon_jacobian / rank))


def objective_gaussian_sigma(epsilon_noise: float, delta: float, lipschitz: float, directions: int) -> float:
    """Standard deviation of Gaussian ``b`` for objective perturbation, replace-one.

    Parameters
    ----------
    epsilon_noise : float
        ``eps_b > 0``: the epsilon left for the noise after the Jacobian.
    delta : float
        Target delta in (0, 1).
    lipschitz : float
        ``L``.
    directions : int
        ``g`` of :func:`gradient_directions`.

    Returns
    -------
    float
        ``analytic_gaussian_sigma(eps_b, delta / (2 g), 2 L)``.

    Notes
    -----
    The noise vectors that produce the same output ``w`` on replace-one
    neighbours differ by ``s = grad loss(w; z) - grad loss(w; z')``, with
    ``||s|| <= 2L`` but a direction that depends on ``w``, hence on ``b``: the
    Gaussian mechanism's fixed-shift analysis does not apply as is. The
    pointwise log density ratio is ``(2 b.s + ||s||^2) / (2 sigma^2)``. Each
    record's gradient lies in the convex hull of 0 and ``g`` fixed vectors
    ``G_j`` of norm ``<= L`` (:func:`gradient_directions`), so
    ``b.s <= M + M' := max_j (b.G_j)^+ + max_j (-b.G'_j)^+``, and each
    ``b.G_j`` is ``N(0, sigma^2 ||G_j||^2)`` whatever ``w`` is. With
    ``||s||^2 <= 4L^2`` the log ratio is at most ``mu R + mu^2/2``, where
    ``mu = 2L/sigma`` and ``R = (M + M') / (2 L sigma)``; since ``R > r``
    needs ``M > L sigma r`` or ``M' > L sigma r``, the union bound gives
    ``P[R > r] <= 2 g P[Z > r]`` for a standard normal Z. The hockey-stick
    divergence is ``int_t^inf mu e^(eps - mu r - mu^2/2) P[R > r] dr``
    (``t = eps/mu - mu/2``), so it is at most ``2 g`` times the Gaussian mechanism's
    ``delta(eps_b)`` (Balle and Wang 2018, Thm 8). Calibrating that curve at
    ``delta / (2 g)`` makes the noise term (eps_b, delta); the Jacobian adds
    ``eps_J`` pointwise. KST12 Thm 2 pays for the same sign uncertainty with
    the two-sided tail behind its ``log(2/delta)`` (one record, g = 1).

    Examples
    --------
    >>> from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
    >>> objective_gaussian_sigma(1.0, 1e-5, 1.0, 1) == analytic_gaussian_sigma(1.0, 5e-6, 2.0)
    True
    """
    epsilon_noise = check_epsilon(epsilon_noise, "epsilon_noise")
    delta = check_positive_delta(delta)
    lipschitz = check_positive(lipschitz, "lipschitz")
    directions = check_count(directions, "directions")
    return analytic_gaussian_sigma(epsilon_noise, delta / (2 * directions), 2.0 * lipschitz)


def kst12_constants(
    epsilon: float,
    delta: float,
    n: int,
    l2: float,
    *,
    lipschitz: float,
    smoothness: float,
    rank: int,
    trace: float,
    directions: int,
    jacobian_share: float = DEFAULT_JACOBIAN_SHARE,
) -> ObjectivePerturbationConstants:
    """Constants of objective ("loss") perturbation for replace-one neighbours.

    Parameters
    ----------
    epsilon : float
        Target epsilon > 0.
    delta : float
        Target delta in [0, 1): 0 draws L2-Laplace ``b`` (pure DP), > 0 Gaussian ``b``.
    n : int
        Number of records.
    l2 : float
        ``lambda > 0``.
    lipschitz, smoothness, rank, trace : float, float, int, float
        ``L``, ``beta``, ``r``, ``t`` of the loss for ``||x|| <= 1``
        (``loss.lipschitz``, ``loss.smoothness``, ``loss.hessian_rank``,
        :func:`hessian_trace_bound`).
    directions : int
        ``g`` of :func:`gradient_directions` (used when ``delta > 0``).
    jacobian_share : float, default 0.5
        Largest fraction of epsilon the Jacobian may use; ``Delta`` is added
        only when ``lambda`` alone would exceed it.

    Returns
    -------
    ObjectivePerturbationConstants

    Notes
    -----
    1. ``Lambda_J = jacobian_strong_convexity(share * eps)``;
       ``Delta = max(0, Lambda_J - lambda)``.
    2. ``eps_J = jacobian_epsilon(n, lambda + Delta, ...)`` (at most
       ``share * eps``, smaller when lambda is large), ``eps_b = eps - eps_J``.
    3. ``delta = 0``: ``b`` L2-Laplace with scale ``2L / eps_b``; the density
       ratio at ``b`` vs ``b + s``, ``||s|| <= 2L``, is at most ``e^eps_b``.
       ``delta > 0``: ``sigma = objective_gaussian_sigma(eps_b, delta, L, g)``.

    Privacy: (epsilon, delta)-DP under **replace-one** neighbours for the
    exact minimiser of ``J(w) + (1/n) b.w + (Delta/2)||w||^2`` with a convex,
    twice differentiable loss of a linear model, ``||x|| <= 1``. Derivation
    and comparison with KST12 Thm 2 and vdMH20 Thm 3-4 in
    :mod:`privml.linear._objective_perturbation`.

    Examples
    --------
    >>> c = kst12_constants(1.0, 0.0, 1000, 0.01, lipschitz=1.0, smoothness=0.25, rank=1,
    ...                     trace=0.25, directions=1)
    >>> c.extra_l2, round(c.epsilon_jacobian, 6), round(c.noise_scale, 6)  # 2 / (1 - log 1.025)
    (0.0, 0.024693, 2.050636)
    """
    # long-function: most of its length is the numpy-style docstring (parameters, guarantee, references); the code is
    # argument checks and the theorem's constants, one after the other.
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    n = check_count(n, "n")
    l2 = check_positive(l2, "l2")
    lipschitz = check_positive(lipschitz, "lipschitz")
    share = check_positive(jacobian_share, "jacobian_share")
    if not share < 1:
        raise ValueError(f"jacobian_share must be in (0, 1), got {share!r}")
    directions = check_count(directions, "directions")
    needed = jacobian_strong_convexity(share * epsilon, n, smoothness, rank, trace)
    extra_l2 = max(0.0, needed - l2)
    epsilon_jacobian = jacobian_epsilon(n, l2 + extra_l2, smoothness, rank, trace)
    # Rounding in exp/log could put eps_J a hair above the share; the noise
    # gets what is left, so the total is exactly epsilon either way.
    epsilon_noise = epsilon - epsilon_jacobian
    sensitivity = 2.0 * lipschitz
    if delta == 0:
        return ObjectivePerturbationConstants(
            extra_l2, epsilon_jacobian, epsilon_noise, "l2-laplace", sensitivity / epsilon_noise, sensitivity
        )
    sigma = objective_gaussian_sigma(epsilon_noise, delta, lipschitz, directions)
    return ObjectivePerturbationConstants(extra_l2, epsilon_jacobian, epsilon_noise, "gaussian", sigma, sensitivity)
