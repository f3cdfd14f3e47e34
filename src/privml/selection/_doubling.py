"""The doubling baseline of Accuracy First: independent models at eps_0, 2 eps_0, 4 eps_0, ...

Ligett et al. (2017; Neel's slides, "Naive Search: Doubling") compare noise
reduction with the obvious search: draw a fresh, independent private model at
each level, doubling epsilon, and check each with the same private check. The
models are independent, so publishing the first ``t`` costs the sum of their
budgets (basic composition, Dwork and Roth 2014, Theorem 3.16:
:func:`~privml.selection.independent_prefix_costs`); the check adds
``eps_AT`` as for noise reduction.

Each model is output perturbation (replace-one, L2 sensitivity
``Delta_2 = 2L/(n lambda)``). By default (``noise="best"``) with the best
single-release noise: L2-Laplace (CMS11 Thm 6) for pure DP, the analytic
Gaussian (Balle and Wang 2018, Thm 8) when ``delta > 0``, each model calibrated
at the same delta; doubling is then not handicapped by the sqrt(d) factor of
the per-coordinate Laplace chain. ``noise="chain"`` uses the noise-reduction
chain's own mechanism instead (per-coordinate Laplace with L1 sensitivity
``sqrt(d) Delta_2`` for pure DP; the same analytic Gaussian otherwise): the
like-for-like baseline of Ligett et al., where the two searches differ only in
how the levels' noises are coupled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from privml._validation import check_delta, check_epsilon, check_finite_array, check_positive
from privml.mechanisms import GaussianMechanism, L2LaplaceMechanism, LaplaceMechanism
from privml.mechanisms._base import Mechanism
from privml.selection._ex_post import independent_prefix_costs
from privml.selection._interactive_above_threshold import Release

__all__ = ["DOUBLING_NOISES", "doubling_grid", "independent_releases"]

#: ``"best"``: L2-Laplace / analytic Gaussian; ``"chain"``: the noise-reduction chain's mechanism.
DOUBLING_NOISES: tuple[str, ...] = ("best", "chain")


def doubling_grid(epsilon_min: float, epsilon_max: float) -> tuple[float, ...]:
    """``eps_min, 2 eps_min, 4 eps_min, ...`` up to ``eps_max`` (always at least ``eps_min``).

    Examples
    --------
    >>> doubling_grid(0.1, 1.0)
    (0.1, 0.2, 0.4, 0.8)
    """
    low = check_epsilon(epsilon_min, "epsilon_min")
    high = check_epsilon(epsilon_max, "epsilon_max")
    if high < low:
        raise ValueError(f"epsilon_max must be >= epsilon_min, got {high!r} < {low!r}")
    grid = [low]
    # A relative slack so that eps_max = eps_min * 2^k itself is included despite rounding.
    while grid[-1] * 2.0 <= high * (1.0 + 1e-12):
        grid.append(grid[-1] * 2.0)
    return tuple(grid)


def independent_releases(
    minimiser: np.ndarray,
    *,
    epsilons: Sequence[float],
    sensitivity: float,
    delta: float,
    rng: np.random.Generator,
    noise: str = "best",
) -> Iterator[Release]:
    """Yield ``minimiser + fresh noise`` at each level, lazily, with its basic-composition prefix cost.

    Parameters
    ----------
    minimiser : ndarray
        The exact ERM minimiser ``w*`` (any shape; the noise is on ``vec(w*)``).
    epsilons : sequence of float
        Levels (e.g. :func:`doubling_grid`).
    sensitivity : float
        L2 sensitivity ``Delta_2`` of ``w*`` under replace-one neighbours.
    delta : float
        0: L2-Laplace with scale ``Delta_2 / eps`` (``noise="chain"``:
        per-coordinate Laplace with scale ``sqrt(d) Delta_2 / eps``); > 0:
        analytic Gaussian at ``(eps, delta)``.
    rng : numpy Generator
    noise : {"best", "chain"}, default "best"
        See the module docstring.

    Notes
    -----
    Lazy on purpose: a model after the one that passes the check is never
    drawn, so it can never be published by mistake.
    """
    w = check_finite_array(minimiser, "minimiser")
    sensitivity = check_positive(sensitivity, "sensitivity")
    delta = check_delta(delta)
    if noise not in DOUBLING_NOISES:
        raise ValueError(f"noise must be one of {DOUBLING_NOISES}, got {noise!r}")
    costs = independent_prefix_costs(epsilons, delta)
    for eps, (cost_eps, cost_delta) in zip(epsilons, costs):
        mechanism: Mechanism
        if delta > 0:
            mechanism = GaussianMechanism(epsilon=eps, delta=delta, sensitivity=sensitivity, random_state=rng)
        elif noise == "chain":
            # Laplace needs the L1 sensitivity: ||z||_1 <= sqrt(d) ||z||_2 (as the chain).
            mechanism = LaplaceMechanism(epsilon=eps, sensitivity=math.sqrt(w.size) * sensitivity, random_state=rng)
        else:
            mechanism = L2LaplaceMechanism(epsilon=eps, sensitivity=sensitivity, random_state=rng)
        yield Release(np.asarray(mechanism.randomise(w)), prefix_epsilon=cost_eps, prefix_delta=cost_delta)
