"""DP-CD's privacy calibration: per-step sensitivity, noise multipliers and the guarantee.

Exact Gaussian-DP composition (Dong, Roth and Su 2019) or the closed form of
Mangold et al. (2022), Theorem 4.1; see :mod:`privml.linear._dpcd`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import (
    check_count,
    check_epsilon,
    check_positive_delta,
)
from privml.accounting._analytic_gaussian import gaussian_mu
from privml.accounting._calibration import make_accountant
from privml.accounting._events import GaussianEvent, SelfComposedEvent
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

#: Mangold et al. (ICML 2022), Theorem 4.1: sigma_j^2 = 12 L_j^2 T K log(1/delta) / (n eps)^2
#: for L_j-component-Lipschitz losses; clipping at C_j plays the role of L_j.
CLOSED_FORM_CONSTANT = 12.0


# The released epsilon is recomputed by the accountant from the noise actually
# used; a relative margin far below any meaningful precision keeps that
# recomputation from rounding above the target.
_GDP_ROUNDING_MARGIN = 1e-9


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
    Su, Corollary 2.13), which :func:`~privml.accounting._analytic_gaussian.gaussian_mu`
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
