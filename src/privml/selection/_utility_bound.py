"""The a-priori alternative to a search: invert output perturbation's worst-case utility bound.

Without Accuracy First, a user who needs excess empirical risk at most
``alpha`` with probability ``1 - beta`` picks epsilon from a bound that holds
for every dataset (Ligett et al. 2017 compare against exactly this "theory"
baseline). For output perturbation ``w = w* + b``: ``J`` is ``(c + lambda)``-smooth
(``c`` the loss smoothness, ``||x|| <= 1``) and ``grad J(w*) = 0``, so

    J(w* + b) - J(w*) <= ((c + lambda) / 2) ||b||^2      for every dataset.

The bound needs ``||b||^2 <= r^2 = 2 alpha / (c + lambda)`` with probability
``1 - beta``:

* Gaussian ``b ~ N(0, sigma^2 I_d)``: ``||b||^2 / sigma^2`` is chi-square with
  ``d`` degrees of freedom, so ``sigma = r / sqrt(chi2_{1-beta}(d))`` and epsilon
  is the exact (Balle and Wang 2018, Thm 8) epsilon of that sigma at ``delta``;
* L2-Laplace (pure DP, CMS11 Alg. 1): ``||b||`` is Gamma(d, Delta_2/eps)
  exactly, so ``eps = Delta_2 Gamma_{1-beta}(d) / r``.

The minimiser's accuracy does not enter: the bound is worst case, which is
what makes the a-priori epsilon large. Only public quantities are used, so
computing it costs no privacy.
"""

from __future__ import annotations

import math

from scipy import stats

from privml._validation import check_count, check_delta, check_positive, check_probability
from privml.accounting._analytic_gaussian import gaussian_epsilon

__all__ = ["apriori_epsilon_excess_risk"]


def apriori_epsilon_excess_risk(
    alpha: float,
    *,
    dim: int,
    sensitivity: float,
    smoothness: float,
    delta: float = 0.0,
    beta: float = 0.1,
) -> float:
    """Smallest epsilon for which output perturbation's worst-case bound guarantees excess risk ``<= alpha``.

    Parameters
    ----------
    alpha : float
        Target excess empirical risk, > 0.
    dim : int
        Number of released parameters ``d``.
    sensitivity : float
        ``Delta_2 = 2 L / (n lambda)`` (replace-one,
        :func:`~privml.linear._sensitivity.erm_sensitivity`).
    smoothness : float
        ``c + lambda``, the smoothness of ``J``
        (:attr:`~privml.losses.RegularisedObjective.smoothness`).
    delta : float, default 0
        0: L2-Laplace noise (eps-DP); in (0, 1): analytic Gaussian noise.
    beta : float, default 0.1
        Allowed probability of missing the target.

    Returns
    -------
    float
        The epsilon (module docstring for the derivation).

    Examples
    --------
    >>> round(apriori_epsilon_excess_risk(0.5, dim=1, sensitivity=1.0, smoothness=1.0, beta=0.5), 4)
    0.6931
    """
    alpha = check_positive(alpha, "alpha")
    dim = check_count(dim, "dim")
    sensitivity = check_positive(sensitivity, "sensitivity")
    smoothness = check_positive(smoothness, "smoothness")
    delta = check_delta(delta)
    beta = check_probability(beta, "beta")
    if beta >= 1:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    radius = math.sqrt(2.0 * alpha / smoothness)
    if delta == 0:
        return sensitivity * float(stats.gamma.ppf(1.0 - beta, dim)) / radius
    sigma = radius / math.sqrt(float(stats.chi2.ppf(1.0 - beta, dim)))
    return gaussian_epsilon(delta, sensitivity / sigma)
