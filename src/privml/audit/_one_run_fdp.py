"""One-run audits under a whole trade-off curve: the f-DP analysis of Mahloujifar, Melis and Chaudhuri (2024).

"Auditing f-Differential Privacy in One Run" (arXiv:2410.22235) bounds the
same event as Steinke, Nasr and Jagielski (:mod:`privml.audit._one_run`): m
canaries, each in with probability 1/2, one run, r guesses of which v are
right. Instead of one (epsilon, delta) pair, the hypothesis is a trade-off
curve f (the mechanism is f-DP with respect to each canary's coin, the other
coins fixed). A curve enters only through its *inverse blow-up*

    g(y) = the least probability, under one world, of an event that has probability y under the other,

(for f-DP, ``g(y) = f(1 - y)``). The paper's recursion (its algorithm for
abstaining auditors, k = 2 outcomes per canary) walks down from v correct
guesses, charging at each level the least mass the curve lets the wrong
guesses keep, and the count is impossible at level ``tau`` when the mass
needed exceeds what r guesses out of m can hold. A count that is impossible
refutes the curve: the run is not f-DP, at confidence ``1 - tau``.

Which curves, and what a rejection proves:

- ``epsilon_delta_inverse(eps, delta)``: the curve of (eps, delta)-DP. A
  rejection refutes (eps, delta)-DP itself, so the largest rejected eps is a
  sound epsilon lower bound, as Steinke et al.'s (never looser in the cases
  tested here; see tests).
- ``profile_inverse(epsilons, deltas)``: the curve of a whole privacy
  profile, e.g. the one the run's own accountant states (delta(eps) on a
  grid, the least delta at each eps: the intersection of the (eps_k,
  delta_k)-DP curves). A rejection refutes the claim as the accountant made
  it. This is the tightest sound test of a DP-SGD run's claim: the
  accountant's curve is much closer to a Gaussian's than any single
  (eps, delta) pair.
- ``gaussian_inverse(mu)``: mu-GDP. The largest rejected mu describes the
  leakage in the Gaussian family; its epsilon at a delta is *not* a sound
  (eps, delta) lower bound for a mechanism that is not Gaussian-shaped, so it
  is reported as mu, never as a refutation of an (eps, delta) claim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

from privml._validation import check_delta

__all__ = [
    "InverseBlowUp",
    "accountant_profile",
    "epsilon_delta_inverse",
    "fdp_count_rejected",
    "fdp_epsilon_lower_bound",
    "gaussian_inverse",
    "gdp_mu_lower_bound",
    "profile_inverse",
]

#: ``g(y)``: the least probability, in one world, of an event of probability y in the other.
InverseBlowUp = Callable[[float], float]

_BISECT_STEPS = 50
_MU_CEILING = 40.0
_EPS_CEILING = 40.0


def gaussian_inverse(mu: float) -> InverseBlowUp:
    """The inverse blow-up of mu-GDP: ``g(y) = Phi(Phi^-1(y) - mu)`` (Dong, Roth and Su 2022)."""
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu must be finite and >= 0, got {mu!r}")

    def g(y: float) -> float:
        if y <= 0.0:
            return 0.0
        if y >= 1.0:
            return 1.0
        return float(ndtr(ndtri(y) - mu))

    return g


def epsilon_delta_inverse(epsilon: float, delta: float) -> InverseBlowUp:
    """The inverse blow-up of (eps, delta)-DP.

    (eps, delta)-DP bounds the other world's probability of an event by both ``e^eps x + delta`` and
    ``1 - e^-eps (1 - delta - x)``; solving each for x gives ``g(y) = max(0, (y - delta) e^-eps,
    1 - delta - e^eps (1 - y))``.
    """
    return profile_inverse([epsilon], [delta])


def profile_inverse(epsilons: Sequence[float] | np.ndarray, deltas: Sequence[float] | np.ndarray) -> InverseBlowUp:
    """The inverse blow-up of a privacy profile: (eps_k, delta_k)-DP for every k at once.

    The largest of the single-pair inverses. Any finite set of pairs the mechanism meets gives a valid curve
    (fewer pairs: a weaker hypothesis, so fewer rejections), which is why a grid of the accountant's
    delta(eps) is sound whatever its spacing.
    """
    eps = np.asarray(epsilons, dtype=float)
    dlt = np.asarray(deltas, dtype=float)
    if eps.ndim != 1 or eps.shape != dlt.shape or eps.size == 0:
        raise ValueError("epsilons and deltas must be 1-D, non-empty and of one length")
    if not (np.all(np.isfinite(eps)) and np.all(eps >= 0)):
        raise ValueError("epsilons must be finite and >= 0")
    for d in dlt:
        check_delta(float(d))
    shrink, grow = np.exp(-eps), np.exp(eps)

    def g(y: float) -> float:
        if y <= 0.0:
            return 0.0
        best = max(float(np.max((y - dlt) * shrink)), float(np.max(1.0 - dlt - grow * (1.0 - y))))
        return min(1.0, max(0.0, best))

    return g


def accountant_profile(accountant: Any, *, epsilon_max: float, points: int = 81) -> InverseBlowUp:
    """The inverse blow-up of the profile a composed accountant states: its delta(eps) on ``points`` epsilons.

    ``accountant`` is a :class:`~privml.accounting.PrivacyAccountant` holding the audited run's events (its
    ``get_delta`` is the claim). The grid runs from 0 to ``epsilon_max``; a coarser grid or a smaller range is
    a weaker (still sound) hypothesis.
    """
    if not (math.isfinite(epsilon_max) and epsilon_max > 0):
        raise ValueError(f"epsilon_max must be finite and > 0, got {epsilon_max!r}")
    grid = np.linspace(0.0, float(epsilon_max), int(points))
    return profile_inverse(grid, [min(1.0, float(accountant.get_delta(float(e)))) for e in grid])


def _check_counts(m: int, guesses: int, correct: int) -> None:
    if not (0 <= correct <= guesses <= m and m >= 1):
        raise ValueError(f"need 0 <= correct <= guesses <= m and m >= 1, got m={m}, guesses={guesses}, "
                         f"correct={correct}")


def fdp_count_rejected(inverse: InverseBlowUp, m: int, guesses: int, correct: int, *, level: float) -> bool:
    """True when ``correct`` right out of ``guesses`` has probability at most ``level`` under every such mechanism.

    The recursion of Mahloujifar, Melis and Chaudhuri (2024), for two outcomes per canary (in or out).
    Masses are per canary: at the top level the right guesses hold ``level * v / m`` and the wrong ones
    ``level * (r - v) / m``; going down one level, the wrong guesses must keep at least the inverse
    blow-up of the right ones' mass (the curve's bound on the other world), and the right ones grow by the
    difference, spread over the guesses still open. The count is impossible when the mass needed at level
    0 exceeds ``r / m``, the share of the canaries guessed on.
    """
    _check_counts(m, guesses, correct)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    r, v = guesses, correct
    if v == 0:
        return False
    tau = level * r / m
    right, wrong = tau * v / r, tau * (r - v) / r
    for i in range(v - 1, -1, -1):
        wrong_next = max(wrong, inverse(right))
        right += (i / (r - i)) * (wrong_next - wrong)
        wrong = wrong_next
        if right + wrong > r / m:  # the masses only grow: stop as soon as the count is impossible
            return True
    return right + wrong > r / m


def _largest_rejected(rejects: Callable[[float], bool], ceiling: float) -> float:
    # Rejection is monotone along each family (a smaller mu or eps is a stronger hypothesis): bisect its edge.
    if not rejects(0.0):
        return 0.0
    if rejects(ceiling):
        return ceiling
    lo, hi = 0.0, ceiling
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if rejects(mid):
            lo = mid
        else:
            hi = mid
    return lo


def gdp_mu_lower_bound(m: int, guesses: int, correct: int, *, confidence: float = 0.95) -> float:
    """The largest mu such that mu-GDP is refuted at ``confidence`` (0.0: none is)."""
    level = 1.0 - confidence
    return _largest_rejected(lambda mu: fdp_count_rejected(gaussian_inverse(mu), m, guesses, correct, level=level),
                             _MU_CEILING)


def fdp_epsilon_lower_bound(m: int, guesses: int, correct: int, *, delta: float = 0.0,
                            confidence: float = 0.95) -> float:
    """The largest epsilon such that (eps, delta)-DP is refuted at ``confidence``, by the f-DP recursion."""
    d = check_delta(delta)
    level = 1.0 - confidence
    return _largest_rejected(
        lambda eps: fdp_count_rejected(epsilon_delta_inverse(eps, d), m, guesses, correct, level=level), _EPS_CEILING
    )
