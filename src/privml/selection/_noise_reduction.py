"""Noise reduction: a chain of ever less noisy releases of one vector, where
publishing the first k costs only the privacy of the k-th.

Koufogiannis, Han and Pappas (2017, "Gradual release of sensitive data under
differential privacy", Journal of Privacy and Confidentiality 7(2)) show that
the Laplace mechanism can be "relaxed" from eps_t to eps_{t+1} > eps_t with no
loss of accuracy, through a lazy Markov chain; Ligett, Neel, Roth, Waggoner and
Wu (2017, "Accuracy First", NeurIPS; Neel's slides, "Noise Reduction
[Koufogiannis 2017]") use it to search the privacy levels of private ERM.

Construction (generated backwards, from the least noisy release):

* Laplace, per coordinate, for L1 sensitivity ``Delta_1``:
  ``theta_T = v + Lap(Delta_1 / eps_T)``; for ``t = T-1, ..., 1``, with
  probability ``(eps_t / eps_{t+1})^2`` set ``theta_t = theta_{t+1}``, else
  ``theta_t = theta_{t+1} + Lap(Delta_1 / eps_t)``.
* Gaussian, for L2 sensitivity ``Delta_2`` at a fixed delta:
  ``theta_T = v + N(0, sigma_T^2 I)``; ``theta_t = theta_{t+1} + N(0, (sigma_t^2 -
  sigma_{t+1}^2) I)``, with ``sigma_t`` the analytic Gaussian calibration of
  ``(eps_t, delta)`` (Balle and Wang 2018, Theorem 8).

Theorem (noise reduction). For every ``t``, releasing ``theta_1, ..., theta_t``
is ``eps_t``-DP (Laplace) or ``(eps_t, delta)``-DP (Gaussian) under the
neighbouring relation that ``Delta`` is measured in. Proof: (i) the marginal of
``theta_t`` is exactly ``v + Lap(Delta_1 / eps_t)`` per coordinate, resp.
``v + N(0, sigma_t^2 I)``: for Laplace, the characteristic function of the
increment, ``r + (1 - r) / (1 + b_t^2 s^2)`` with ``r = (b_{t+1} / b_t)^2 =
(eps_t / eps_{t+1})^2``, equals ``(1 + b_{t+1}^2 s^2) / (1 + b_t^2 s^2)``, the
ratio of the two Laplace characteristic functions; for the Gaussian, variances
of independent terms add. So ``theta_t`` alone is the Laplace mechanism (Dwork
and Roth 2014, Theorem 3.6), resp. the analytic Gaussian mechanism. (ii)
``theta_1, ..., theta_{t-1}`` are produced from ``theta_t`` by a Markov kernel
that does not look at the data, so they are post-processing of ``theta_t``
(Dwork and Roth 2014, Proposition 2.1). The tests check (i) by
Kolmogorov-Smirnov on every marginal and (ii) by testing that each increment is
independent of the later releases, and catch a wrong coin, a wrong variance and
shared (perfectly correlated) noise.

Which chain
-----------
Laplace needs the **L1** sensitivity. For output perturbation only an L2 bound
``Delta_2 = 2L/(n lambda)`` is known, and ``||z||_1 <= sqrt(d) ||z||_2`` gives
``Delta_1 = sqrt(d) Delta_2``: the noise norm is then about ``sqrt(2) d
Delta_2 / eps``, sqrt(2) times that of the single-release L2-Laplace
mechanism (which has no known noise-reduction chain). The Gaussian chain's
noise norm is about ``sqrt(d) sigma``, ``sigma`` growing like
``sqrt(2 ln(1.25/delta)) Delta_2 / eps``; it is the practical choice once
``d`` exceeds a few times ``ln(1/delta)`` (d = 105 on Adult: 3.4 times less
noise norm at eps = 1, delta = 1e-6), at the price of a delta. Use Laplace
when pure eps-DP is required or the dimension is small.

Every chain here is generated eagerly and stores only noisy values (never
``v``); its arrays are read-only. Holding the whole chain is fine, *releasing*
an element is what costs privacy: callers must publish a prefix only (as
:class:`~privml.selection.InteractiveAboveThreshold`
does) and drop the rest. Sampling is numpy floating point (see the Mironov
2012 caveat in :mod:`privml.mechanisms`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from privml._random import RandomState, check_random_state
from privml._validation import check_epsilon, check_finite_array, check_positive, check_positive_delta
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.guarantee import PrivacyGuarantee
from privml.mechanisms import sample_noise
from privml.neighbouring import Neighbouring

__all__ = [
    "NoiseReductionChain",
    "check_epsilon_grid",
    "gaussian_increment_std",
    "gaussian_noise_reduction",
    "laplace_keep_probability",
    "laplace_noise_reduction",
]

NoiseKind = Literal["laplace", "gaussian"]


def check_epsilon_grid(epsilons: ArrayLike, name: str = "epsilons") -> tuple[float, ...]:
    """Validate a privacy grid: finite, > 0 and strictly increasing (at least one level)."""
    raw = np.asarray(epsilons, dtype=np.float64)
    if raw.ndim != 1 or raw.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {raw.shape}")
    grid = tuple(check_epsilon(float(e), name) for e in raw)
    if any(b <= a for a, b in zip(grid, grid[1:])):
        raise ValueError(f"{name} must be strictly increasing, got {list(grid)!r}")
    return grid


def laplace_keep_probability(epsilon: float, epsilon_next: float) -> float:
    """Probability ``(eps_t / eps_{t+1})^2`` that ``theta_t`` repeats ``theta_{t+1}`` (per coordinate).

    It is the ratio of the squared Laplace scales, ``(b_{t+1} / b_t)^2``: the
    weight of the atom at 0 in the increment that turns Lap(b_{t+1}) into
    Lap(b_t) (Koufogiannis, Han and Pappas 2017; see the module docstring).
    """
    return (epsilon / epsilon_next) ** 2


def gaussian_increment_std(sigma: float, sigma_next: float) -> float:
    """Standard deviation ``sqrt(sigma_t^2 - sigma_{t+1}^2)`` of the Gaussian chain's backward step."""
    return math.sqrt(sigma * sigma - sigma_next * sigma_next)


@dataclass(frozen=True, eq=False)
class NoiseReductionChain:
    """Releases ``theta_1, ..., theta_T`` of one vector at increasing privacy levels.

    Build it with :func:`laplace_noise_reduction` or
    :func:`gaussian_noise_reduction`. ``chain[t]`` (0-based) is the release at
    ``epsilons[t]``; iterating goes from the most private to the least.

    Attributes
    ----------
    epsilons : tuple of float
        The strictly increasing grid ``eps_1 < ... < eps_T``.
    delta : float
        0 for the Laplace chain; the common delta of the Gaussian chain.
    sensitivity : float
        ``Delta_1`` (Laplace) or ``Delta_2`` (Gaussian) of the released vector.
    noise : {"laplace", "gaussian"}
    scales : tuple of float
        Laplace scales ``Delta_1 / eps_t`` or Gaussian ``sigma_t`` (decreasing).
    neighbouring : Neighbouring
        The relation ``sensitivity`` is measured under.

    Notes
    -----
    Privacy (module docstring, "Theorem (noise reduction)"): publishing
    ``chain[0], ..., chain[t]`` is ``(epsilons[t], delta)``-DP under
    ``neighbouring`` (:meth:`prefix_guarantee`); anything beyond the
    published prefix must not be released.
    """

    epsilons: tuple[float, ...]
    delta: float
    sensitivity: float
    noise: NoiseKind
    scales: tuple[float, ...]
    neighbouring: Neighbouring
    _releases: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self._releases)

    def __getitem__(self, t: int) -> np.ndarray:
        return self._releases[t]

    def __iter__(self):
        return iter(self._releases)

    def prefix_guarantee(self, t: int) -> PrivacyGuarantee:
        """Guarantee of publishing ``chain[0..t]``: ``(epsilons[t], delta)``, accountant ``"noise-reduction"``."""
        if not -len(self) <= t < len(self):
            raise IndexError(f"t must index the chain of length {len(self)}, got {t}")
        return PrivacyGuarantee(self.epsilons[t], self.delta, self.neighbouring, accountant="noise-reduction")


@lru_cache(maxsize=64)
def _calibrate(grid: tuple[float, ...], delta: float, sensitivity: float) -> tuple[float, ...]:
    # Each level is a bisection on the exact Gaussian curve; experiments rerun the same
    # (public) grid many times, so the calibration is memoised.
    return tuple(analytic_gaussian_sigma(eps, delta, sensitivity) for eps in grid)


def _frozen(value: np.ndarray) -> np.ndarray:
    # np.asarray: a 0-d input comes back from numpy arithmetic as a scalar, not an array.
    array = np.asarray(value)
    array.setflags(write=False)
    return array


def laplace_noise_reduction(
    value: ArrayLike,
    *,
    epsilons: Sequence[float] | np.ndarray,
    sensitivity: float,
    neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
    random_state: RandomState = None,
) -> NoiseReductionChain:
    """The Laplace noise-reduction chain of ``value`` (any shape), per coordinate.

    Parameters
    ----------
    value : array_like
        ``v = f(D)``, finite.
    epsilons : sequence of float
        Strictly increasing privacy levels ``eps_1 < ... < eps_T``.
    sensitivity : float
        **L1** sensitivity ``Delta_1`` of ``f`` under ``neighbouring``. For an
        L2 bound ``Delta_2`` on ``d`` coordinates pass ``sqrt(d) Delta_2``.
    neighbouring : Neighbouring or str, default replace-one
    random_state : None, int or numpy Generator

    Returns
    -------
    NoiseReductionChain
        ``chain[t] ~ v + Lap(Delta_1 / eps_t)`` per coordinate; publishing
        ``chain[0..t]`` is ``eps_t``-DP (Koufogiannis, Han and Pappas 2017;
        Ligett et al. 2017; module docstring for the proof).

    Examples
    --------
    >>> chain = laplace_noise_reduction([0.0, 1.0], epsilons=[0.1, 1.0], sensitivity=1.0, random_state=0)
    >>> len(chain), chain.scales, chain.prefix_guarantee(0).epsilon
    (2, (10.0, 1.0), 0.1)
    """
    grid = check_epsilon_grid(epsilons)
    sensitivity = check_positive(sensitivity, "sensitivity")
    relation = Neighbouring.parse(neighbouring)
    v = check_finite_array(value, "value")
    rng = check_random_state(random_state)
    scales = tuple(sensitivity / eps for eps in grid)
    releases = [v + sample_noise("laplace", scales[-1], v.shape, rng)]
    for t in range(len(grid) - 2, -1, -1):
        following = releases[-1]
        keep = rng.random(v.shape) < laplace_keep_probability(grid[t], grid[t + 1])
        fresh = following + sample_noise("laplace", scales[t], v.shape, rng)
        releases.append(np.where(keep, following, fresh))
    releases.reverse()
    return NoiseReductionChain(
        grid, 0.0, sensitivity, "laplace", scales, relation, tuple(_frozen(r) for r in releases)
    )


def gaussian_noise_reduction(
    value: ArrayLike,
    *,
    epsilons: Sequence[float] | np.ndarray,
    delta: float,
    sensitivity: float,
    neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
    random_state: RandomState = None,
) -> NoiseReductionChain:
    """The Gaussian noise-reduction chain of ``value`` (any shape).

    Parameters
    ----------
    value : array_like
        ``v = f(D)``, finite.
    epsilons : sequence of float
        Strictly increasing privacy levels; each is calibrated at ``delta``.
    delta : float
        In (0, 1); the same for every level.
    sensitivity : float
        **L2** sensitivity ``Delta_2`` of ``f`` under ``neighbouring``.
    neighbouring : Neighbouring or str, default replace-one
    random_state : None, int or numpy Generator

    Returns
    -------
    NoiseReductionChain
        ``chain[t] ~ v + N(0, sigma_t^2 I)`` with ``sigma_t`` the analytic
        calibration of ``(eps_t, delta)`` (Balle and Wang 2018, Thm 8);
        publishing ``chain[0..t]`` is ``(eps_t, delta)``-DP (module docstring).

    Raises
    ------
    ValueError
        If two levels are so close that their calibrated sigmas coincide.

    Examples
    --------
    >>> chain = gaussian_noise_reduction(0.0, epsilons=[0.5, 1.0], delta=1e-5, sensitivity=1.0, random_state=0)
    >>> round(chain.scales[1], 4), chain.prefix_guarantee(1).delta
    (3.7306, 1e-05)
    """
    grid = check_epsilon_grid(epsilons)
    delta = check_positive_delta(delta)
    sensitivity = check_positive(sensitivity, "sensitivity")
    relation = Neighbouring.parse(neighbouring)
    v = check_finite_array(value, "value")
    rng = check_random_state(random_state)
    sigmas = _calibrate(grid, delta, sensitivity)
    for t in range(len(grid) - 1):
        if not sigmas[t] > sigmas[t + 1]:
            raise ValueError(
                f"epsilons {grid[t]!r} and {grid[t + 1]!r} calibrate to the same sigma; use a coarser grid"
            )
    releases = [v + sample_noise("gaussian", sigmas[-1], v.shape, rng)]
    for t in range(len(grid) - 2, -1, -1):
        step = gaussian_increment_std(sigmas[t], sigmas[t + 1])
        releases.append(releases[-1] + sample_noise("gaussian", step, v.shape, rng))
    releases.reverse()
    return NoiseReductionChain(
        grid, delta, sensitivity, "gaussian", sigmas, relation, tuple(_frozen(r) for r in releases)
    )
