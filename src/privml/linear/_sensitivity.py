"""Sensitivities and privacy constants of private ERM, as small pure functions.

Everything here is stated for **replace-one** neighbours (same n, one record
replaced; CMS11, Sec. 2), records with ``||x||_2 <= 1`` and the objective
``J(w) = (lambda/2)||w||^2 + (1/n) sum_i loss(w; x_i, y_i)``. Output
perturbation, objective perturbation and private prediction import these
functions, so each formula is written once.

Output perturbation: :func:`erm_sensitivity`, ``2 L / (n lambda)``.

Objective perturbation (CMS11 Algorithm 2; the "loss perturbation" of KST12 /
vdMH20 re-derived for replace-one neighbours): its constants are in
:mod:`privml.linear._objective_perturbation_constants`.

Default regularisation: :func:`l2_for_noise` inverts :func:`erm_sensitivity`
(the lambda at which the noise has a chosen size), and :func:`auto_l2` is the
one ``l2="auto"`` rule every estimator applies (output and objective
perturbation, prediction sensitivity, Accuracy First), each with the noise
of its own mechanism.

References: CMS11 = Chaudhuri, Monteleoni, Sarwate (2011), "Differentially
private empirical risk minimization", JMLR 12. KST12 = Kifer, Smith, Thakurta
(2012), "Private convex empirical risk minimization and high-dimensional
regression", COLT. vdMH20 = van der Maaten, Hannun (2020), "The trade-offs of
private prediction".
"""

from __future__ import annotations

import math

from privml._validation import check_count, check_delta, check_epsilon, check_positive
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma

__all__ = [
    "auto_l2",
    "erm_sensitivity",
    "l2_for_noise",
    "rms_noise_multiplier",
]


def erm_sensitivity(lipschitz: float, n: int, l2: float, *, grad_tol: float = 0.0) -> float:
    """L2 sensitivity ``2 L / (n lambda)`` of the regularised ERM minimiser.

    Parameters
    ----------
    lipschitz : float
        ``L``: bound on the L2 (Frobenius, for a matrix) norm of one record's
        loss gradient, for every parameter and every record with ``||x|| <= 1``.
    n : int
        Number of records (public under replace-one: it never changes).
    l2 : float
        ``lambda > 0``: the objective is lambda-strongly convex.
    grad_tol : float, default 0
        If the released weights are only certified to have
        ``||grad J|| <= grad_tol`` (see :func:`~privml.linear._solvers.minimise_objective`),
        each lies within ``grad_tol / lambda`` of the exact minimiser, so
        ``2 grad_tol / lambda`` is added.

    Returns
    -------
    float
        ``max ||w(D) - w(D')||_2`` over **replace-one** neighbours D, D':
        ``2 L / (n lambda) + 2 grad_tol / lambda``.

    Notes
    -----
    CMS11 Corollary 8 (binary, ``L = 1``) and vdMH20 Lemma 1 / Thm 1
    (multi-class, Frobenius norm): the gradients of ``J_D`` and ``J_D'``
    differ by ``(1/n)(grad loss(w; z) - grad loss(w; z'))``, of norm at most
    ``2L/n``, and a lambda-strongly convex function moves its minimiser by at
    most (gradient change) / lambda (CMS11 Lemma 7). The same strong
    convexity bounds the distance of an approximate minimiser to the exact
    one by its gradient norm over lambda (triangle inequality for the
    ``grad_tol`` term). Add/remove neighbours would change ``n`` and need a
    different argument. (The Chaudhuri lecture's Algorithm 1 among the seeds
    scales the noise by ``1/(lambda n)``; its own Theorem 1 and Chaudhuri et
    al. 2011 need ``2/(lambda n)``, as here: half would under-noise.)

    Examples
    --------
    >>> erm_sensitivity(1.0, 1000, 0.01)
    0.2
    """
    lipschitz = check_positive(lipschitz, "lipschitz")
    n = check_count(n, "n")
    l2 = check_positive(l2, "l2")
    grad_tol = check_positive(grad_tol, "grad_tol", allow_zero=True)
    return 2.0 * lipschitz / (n * l2) + 2.0 * grad_tol / l2



def l2_for_noise(lipschitz: float, n: int, noise_multiplier: float, target: float) -> float:
    """The lambda at which noise of ``noise_multiplier`` sensitivities has size ``target``.

    Solves ``noise_multiplier * erm_sensitivity(L, n, lambda) = target``:
    ``lambda = 2 L noise_multiplier / (n target)``.

    Parameters
    ----------
    lipschitz : float
        ``L`` of the loss.
    n : int
        Number of records (public).
    noise_multiplier : float
        Root-mean-square noise per coordinate, in units of the L2 sensitivity
        (Gaussian: ``sigma / Delta_2``; L2-Laplace in dimension p:
        ``sqrt(p + 1) / epsilon``).
    target : float
        The wanted noise per coordinate. For records with ``||x|| = 1`` and
        isotropic noise this is also the standard deviation of the noise on
        each score ``w.x``, whatever the dimension.

    Returns
    -------
    float

    Notes
    -----
    A function of public quantities only (n, the privacy parameters through
    ``noise_multiplier``, the loss constant), so choosing lambda with it costs
    no privacy. It is the inverse of :func:`erm_sensitivity` (CMS11 Cor. 8,
    replace-one).

    Examples
    --------
    >>> l2_for_noise(1.0, 1000, 2.0, 0.25)
    0.016
    """
    lipschitz = check_positive(lipschitz, "lipschitz")
    n = check_count(n, "n")
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    target = check_positive(target, "target")
    return 2.0 * lipschitz * noise_multiplier / (n * target)


def auto_l2(n: int, lipschitz: float, noise_multiplier: float, target: float) -> float:
    """The ``l2="auto"`` rule: ``lambda = max(1/n, 2 L m / (n tau))``, from public quantities only.

    The lambda at which noise of ``m`` = ``noise_multiplier`` sensitivities
    has size ``tau`` = ``target`` (:func:`l2_for_noise`, the inverse of the
    sensitivity ``2L/(n lambda)`` of :func:`erm_sensitivity`), floored at
    ``1/n``, scikit-learn's default regularisation, which it reaches as
    epsilon grows. Larger lambda shrinks the noise but biases the model
    towards 0; the balance point moves with the noise, i.e. with
    ``1/(n epsilon)`` up to a delta-dependent factor.

    Every estimator with an ``l2="auto"`` setting calls this rule, with the
    noise of its own mechanism:

    - :class:`~privml.linear.OutputPerturbationClassifier` (and Accuracy
      First at its reference epsilon): ``m`` = :func:`rms_noise_multiplier`
      of (epsilon, delta, p), ``tau`` = ``AUTO_SCORE_NOISE``;
    - :class:`~privml.linear.ObjectivePerturbationClassifier`: ``m`` = the
      rms of ``b`` per coordinate, ``tau`` = ``AUTO_FLAT_NOISE``;
    - :class:`~privml.prediction.PredictionSensitivity`: ``m`` = the rms
      noise per logit, ``tau`` = ``AUTO_LOGIT_NOISE``.

    Parameters
    ----------
    n : int
        Number of training records (public).
    lipschitz : float
        ``L`` of the loss.
    noise_multiplier : float
        Root-mean-square noise per coordinate in units of the L2 sensitivity.
    target : float
        The wanted root-mean-square noise per coordinate.

    Returns
    -------
    float
        lambda. Costs no privacy: every argument is public.

    Examples
    --------
    >>> auto_l2(1000, 1.0, 2.0, 0.25)
    0.016
    >>> auto_l2(1000, 1.0, 0.01, 0.25)  # little noise: the 1/n floor
    0.001
    """
    return max(1.0 / check_count(n, "n"), l2_for_noise(lipschitz, n, noise_multiplier, target))


def rms_noise_multiplier(epsilon: float, delta: float, dim: int) -> float:
    """Root-mean-square noise per coordinate, in units of the L2 sensitivity.

    Gaussian (``delta > 0``): ``sigma / Delta_2`` of the analytic calibration
    (Balle and Wang 2018, Thm 8). L2-Laplace (``delta == 0``) in dimension p:
    the norm is Gamma(p, Delta_2/eps), so ``E||z||^2 = p (p + 1) (Delta_2/eps)^2``
    and the per-coordinate rms is ``sqrt(p + 1) / epsilon``. Depends on
    (epsilon, delta, p) only, all public: the ``noise_multiplier`` argument of
    :func:`l2_for_noise`.

    Examples
    --------
    >>> round(rms_noise_multiplier(1.0, 1e-5, 10), 4), round(rms_noise_multiplier(2.0, 0.0, 3), 4)
    (3.7306, 1.0)
    """
    epsilon = check_epsilon(epsilon)
    dim = check_count(dim, "dim")
    if check_delta(delta) > 0:
        return analytic_gaussian_sigma(epsilon, delta, 1.0)
    return math.sqrt(dim + 1.0) / epsilon

