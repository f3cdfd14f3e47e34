"""Per-query randomisation for a budget of B private predictions (pure functions).

A private-prediction model answers at most ``B`` queries, and the (epsilon,
delta) guarantee covers all ``B`` answers together. Each answer is one run of
a mechanism on the training data (the query point is public), so the question
is how much each answer may cost such that ``B`` adaptively chosen answers
compose to (epsilon, delta). This module answers it for the two methods of
van der Maaten and Hannun (2020, "vdMH20"), each under several composition
theorems, and picks the tightest:

Prediction sensitivity (vdMH20 Sec. 3.2, App. C.1, Thm 5-6): noise on logits
of L2 sensitivity ``Delta``, in units of ``Delta`` (a *noise multiplier*):

- ``delta = 0``: L2-Laplace at ``epsilon / B`` per query,
  :func:`laplace_noise_multiplier` (basic composition, Dwork and Roth 2014,
  Thm 3.16; the L2-Laplace mechanism is CMS11's, vdMH20 Thm 5).
- ``delta > 0``, Gaussian noise, three calibrations:

  * ``"basic"`` (:func:`gaussian_noise_multiplier_basic`): analytic Gaussian
    at ``(epsilon/B, delta/B)`` per query (vdMH20 Eq. 53);
  * ``"advanced"`` (:func:`gaussian_noise_multiplier_advanced`): per-query
    ``(epsilon_q, delta_q)`` from advanced composition with the delta split
    between the queries and the slack chosen to minimise the noise (vdMH20
    Thm 6, Eq. 47-52);
  * ``"gdp"`` (:func:`gaussian_noise_multiplier_gdp`): exact Gaussian-DP
    composition, ``sigma / Delta = sqrt(B) / mu(epsilon, delta)`` (Dong, Roth
    and Su 2022). Never noisier than the other two (see its notes).

Subsample-and-aggregate (Dwork and Feldman 2018; vdMH20 App. C.2, Thm 7-8):
the per-query epsilon ``epsilon_q`` of an exponential mechanism over vote
counts, then ``beta = epsilon_q / 2``:

- ``"basic"``: ``epsilon / B`` (:func:`vote_epsilon_basic`);
- ``"advanced"``: the inverse of advanced composition of ``B`` pure
  ``epsilon_q``-DP steps (:func:`vote_epsilon_advanced`; vdMH20 Thm 8);
- ``"zcdp"``: each query is ``epsilon_q``-bounded range, hence
  ``epsilon_q^2 / 8``-zCDP (Cesar and Rogers 2021, Lemma 3.2), and ``B``
  queries are ``B epsilon_q^2 / 8``-zCDP (:func:`vote_epsilon_zcdp`).

Every function here depends on (epsilon, delta, B) only, all public, so
calling it costs no privacy. Neighbouring relation of every statement:
whichever one the per-query sensitivity is measured under (replace-one in
:mod:`privml.prediction`); the composition theorems are relation-agnostic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize_scalar

from privml._validation import MAX_BUDGET, check_count, check_delta, check_epsilon
from privml.accounting._analytic_gaussian import gaussian_mu
from privml.accounting._composition import advanced_composition_per_step_epsilon
from privml.accounting._parameter_search import calibrate_parameter
from privml.accounting._zcdp import zcdp_exponential, zcdp_to_epsilon

__all__ = [
    "PREDICTION_ACCOUNTANTS",
    "SENSITIVITY_ACCOUNTANTS",
    "VOTE_ACCOUNTANTS",
    "PredictionNoise",
    "VoteCalibration",
    "calibrate_prediction_noise",
    "calibrate_vote_epsilon",
    "gaussian_noise_multiplier_advanced",
    "gaussian_noise_multiplier_basic",
    "gaussian_noise_multiplier_gdp",
    "gaussian_noise_multipliers",
    "laplace_noise_multiplier",
    "vote_epsilon_advanced",
    "vote_epsilon_basic",
    "vote_epsilon_zcdp",
    "vote_epsilons",
]

#: Accountants of prediction sensitivity, in the order "auto" breaks ties.
SENSITIVITY_ACCOUNTANTS = ("gdp", "basic", "advanced")
#: Accountants of subsample-and-aggregate, in the order "auto" breaks ties.
VOTE_ACCOUNTANTS = ("zcdp", "basic", "advanced")
#: Every accountant a private predictor may be asked for ("auto": the tightest for its method).
PREDICTION_ACCOUNTANTS = ("auto", *sorted(set(SENSITIVITY_ACCOUNTANTS) | set(VOTE_ACCOUNTANTS)))

# The advanced-composition noise is minimised over the share of delta given
# to the slack delta'; every share is valid, so the search affects only
# tightness. A coarse grid finds the basin (the curve is flat near its
# minimum), a bounded Brent search polishes it.
_SPLIT_GRID = np.linspace(0.05, 0.95, 19)
_SPLIT_XTOL = 1e-4
# Relative precision of the zCDP inversion (calibrate_parameter returns the safe end).
_ZCDP_RTOL = 1e-9


def _check_budget_args(epsilon: float, delta: float, budget: int) -> tuple[float, float, int]:
    return check_epsilon(epsilon), check_delta(delta), check_count(budget, "budget", maximum=MAX_BUDGET)


def _require_delta(delta: float, what: str) -> None:
    if delta == 0:
        raise ValueError(f"{what} needs delta > 0, got 0")


# ---------------------------------------------------------------- prediction sensitivity
def laplace_noise_multiplier(epsilon: float, budget: int) -> float:
    """L2-Laplace scale per query, in units of the L2 sensitivity: ``B / epsilon``.

    Parameters
    ----------
    epsilon : float
        Total epsilon over the budget, > 0.
    budget : int
        Number of answers B >= 1.

    Returns
    -------
    float
        ``b / Delta``: noise with density proportional to ``exp(-||z|| / b)``,
        ``b = Delta B / epsilon``, makes each answer ``(epsilon / B)``-DP.

    Notes
    -----
    Each answer is the L2-Laplace mechanism on a function of L2 sensitivity
    ``Delta`` (CMS11 Thm 6; vdMH20 Thm 5), ``(epsilon/B)``-DP; B answers
    compose to epsilon-DP (basic composition, Dwork and Roth 2014,
    Thm 3.16), under the relation ``Delta`` is measured in.

    Examples
    --------
    >>> laplace_noise_multiplier(1.0, 100)
    100.0
    """
    epsilon, _, budget = _check_budget_args(epsilon, 0.0, budget)
    return budget / epsilon


def gaussian_noise_multiplier_basic(epsilon: float, delta: float, budget: int) -> float:
    """Gaussian ``sigma / Delta`` per query under basic composition.

    Each answer is the analytic Gaussian mechanism at ``(epsilon/B, delta/B)``
    (Balle and Wang 2018, Thm 8; vdMH20 Eq. 53); B answers compose to
    ``(epsilon, delta)`` (Dwork and Roth 2014, Thm 3.16). Sensitivity: L2,
    ``Delta``, under whichever relation it is measured.

    Examples
    --------
    >>> round(gaussian_noise_multiplier_basic(1.0, 1e-5, 1), 4)
    3.7306
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    _require_delta(delta, "Gaussian noise")
    return 1.0 / gaussian_mu(epsilon / budget, delta / budget)


@dataclass(frozen=True)
class AdvancedSplit:
    """Per-query guarantee chosen by :func:`gaussian_noise_multiplier_advanced`.

    Attributes
    ----------
    noise_multiplier : float
        ``sigma / Delta`` of the analytic Gaussian at ``(epsilon_query, delta_query)``.
    epsilon_query, delta_query : float
        Per-query guarantee.
    delta_slack : float
        ``delta'`` of advanced composition; ``B delta_query + delta_slack = delta``.
    """

    noise_multiplier: float
    epsilon_query: float
    delta_query: float
    delta_slack: float


def _advanced_at(epsilon: float, delta: float, budget: int, share: float) -> AdvancedSplit:
    """The split giving ``share`` of delta to the slack and the rest to the B queries."""
    slack = share * delta
    delta_query = (delta - slack) / budget
    epsilon_query = advanced_composition_per_step_epsilon(epsilon, budget, slack)
    return AdvancedSplit(1.0 / gaussian_mu(epsilon_query, delta_query), epsilon_query, delta_query, slack)


def gaussian_noise_multiplier_advanced(epsilon: float, delta: float, budget: int) -> AdvancedSplit:
    """Gaussian ``sigma / Delta`` per query under advanced composition, best delta split.

    Parameters
    ----------
    epsilon : float
        Total epsilon, > 0.
    delta : float
        Total delta in (0, 1).
    budget : int
        Number of answers B >= 1.

    Returns
    -------
    AdvancedSplit
        The noise multiplier and the per-query guarantee it meets.

    Notes
    -----
    B adaptively composed ``(epsilon_q, delta_q)``-DP answers are
    ``(epsilon_q sqrt(2B ln(1/delta')) + B epsilon_q (e^epsilon_q - 1), B delta_q + delta')``-DP
    (Dwork, Rothblum and Vadhan 2010, Thm III.3; Dwork and Roth 2014,
    Thm 3.20). For a share ``s`` of delta given to ``delta'``,
    ``epsilon_q`` is the exact inverse of that bound
    (:func:`~privml.accounting._composition.advanced_composition_per_step_epsilon`)
    and each answer is the analytic Gaussian at ``(epsilon_q, (1 - s) delta / B)``
    (Balle and Wang 2018, Thm 8). vdMH20 (Thm 6, Eq. 47-52) solve the same
    bound through the quadratic obtained from ``e^x - 1 <= 2x`` and choose the
    split that minimises sigma; the exact inverse is never noisier. Every
    share is valid, so the search over it (a grid, then Brent) affects only
    tightness. Sensitivity: L2 ``Delta``, any relation.

    Examples
    --------
    >>> split = gaussian_noise_multiplier_advanced(1.0, 1e-5, 10_000)
    >>> split.noise_multiplier < gaussian_noise_multiplier_basic(1.0, 1e-5, 10_000)
    True
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    _require_delta(delta, "Gaussian noise")
    grid = [_advanced_at(epsilon, delta, budget, share) for share in _SPLIT_GRID]
    best = int(np.argmin([g.noise_multiplier for g in grid]))
    lo = _SPLIT_GRID[max(best - 1, 0)]
    hi = _SPLIT_GRID[min(best + 1, _SPLIT_GRID.size - 1)]
    polished = minimize_scalar(
        lambda share: _advanced_at(epsilon, delta, budget, share).noise_multiplier,
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": _SPLIT_XTOL},
    )
    candidate = _advanced_at(epsilon, delta, budget, float(polished.x))
    return min(grid[best], candidate, key=lambda g: g.noise_multiplier)


def gaussian_noise_multiplier_gdp(epsilon: float, delta: float, budget: int) -> float:
    """Gaussian ``sigma / Delta`` per query under exact Gaussian-DP composition.

    Returns
    -------
    float
        ``sqrt(B) / mu``, ``mu = gaussian_mu(epsilon, delta)``.

    Notes
    -----
    One answer with noise ``N(0, sigma^2 I)`` on a function of L2 sensitivity
    ``Delta`` is ``(Delta/sigma)``-GDP (Dong, Roth and Su 2022, Thm 2.7 of
    arXiv:1905.02383); B adaptively composed answers are exactly
    ``(sqrt(B) Delta/sigma)``-GDP (their Cor. 3.3), whose (epsilon, delta)
    curve is that of :func:`~privml.accounting._analytic_gaussian.gaussian_mu`
    (their Cor. 2.13; Balle and Wang 2018, Thm 8). Since that curve is the
    exact privacy profile of the composition, any other valid accounting of
    the same B Gaussian answers (basic, advanced) certifies at most what it
    certifies: this multiplier is never larger than theirs. Sensitivity: L2
    ``Delta``, any relation.

    Examples
    --------
    >>> round(gaussian_noise_multiplier_gdp(1.0, 1e-5, 100), 3)
    37.306
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    _require_delta(delta, "Gaussian noise")
    return math.sqrt(budget) / gaussian_mu(epsilon, delta)


def gaussian_noise_multipliers(epsilon: float, delta: float, budget: int) -> dict[str, float]:
    """``sigma / Delta`` of all three Gaussian calibrations, keyed by accounting name."""
    return {
        "gdp": gaussian_noise_multiplier_gdp(epsilon, delta, budget),
        "basic": gaussian_noise_multiplier_basic(epsilon, delta, budget),
        "advanced": gaussian_noise_multiplier_advanced(epsilon, delta, budget).noise_multiplier,
    }


@dataclass(frozen=True)
class PredictionNoise:
    """Noise added to each answer of prediction sensitivity.

    Attributes
    ----------
    accountant : str
        ``"basic"``, ``"advanced"`` or ``"gdp"``: the composition that certifies the total.
    distribution : str
        ``"l2-laplace"`` (``delta = 0``) or ``"gaussian"``.
    noise_multiplier : float
        Noise scale in units of the L2 sensitivity: ``sigma / Delta``
        (Gaussian) or ``b / Delta`` (L2-Laplace, density ``exp(-||z|| / b)``).
    epsilon, delta : float
        The total guarantee over ``budget`` answers.
    budget : int
        B.
    candidates : dict
        The noise multiplier of every applicable accounting (for comparison).
    """

    accountant: str
    distribution: str
    noise_multiplier: float
    epsilon: float
    delta: float
    budget: int
    candidates: dict[str, float] = field(default_factory=dict)


def _check_accountant(accountant: object, choices: tuple[str, ...]) -> str:
    if accountant != "auto" and accountant not in choices:
        # The choices of this method: the command line's --accountant lists every method's
        # (zcdp is subsample-and-aggregate's only).
        raise ValueError(f"accountant must be 'auto' or, for this method, one of {', '.join(choices)}; "
                         f"got {accountant!r}")
    return str(accountant)


def _pick(candidates: dict[str, float], requested: str, better: Callable[[float], float]) -> str:
    """The requested accountant, or for "auto" the best candidate (ties: dict order)."""
    if requested != "auto":
        return requested
    return min(candidates, key=lambda name: better(candidates[name]))


def calibrate_prediction_noise(
    epsilon: float, delta: float, budget: int, accountant: str = "auto"
) -> PredictionNoise:
    """Per-query noise of prediction sensitivity for ``budget`` answers at (epsilon, delta).

    Parameters
    ----------
    epsilon : float
        Total epsilon over the budget, > 0.
    delta : float
        Total delta in [0, 1). 0 gives L2-Laplace noise (pure DP, basic
        composition only); > 0 Gaussian noise.
    budget : int
        Number of answers B >= 1.
    accountant : {"auto", "basic", "advanced", "gdp"}
        ``"auto"`` takes the smallest noise ("gdp" whenever delta > 0, by
        :func:`gaussian_noise_multiplier_gdp`'s argument).

    Returns
    -------
    PredictionNoise

    Notes
    -----
    Statements and theorems: see :func:`laplace_noise_multiplier` and the
    three ``gaussian_noise_multiplier_*`` functions. Multiply the noise
    multiplier by the L2 sensitivity of one answer under the chosen
    neighbouring relation (:func:`privml.prediction.logit_sensitivity`,
    replace-one).

    Examples
    --------
    >>> noise = calibrate_prediction_noise(1.0, 1e-5, 100)
    >>> noise.accountant, round(noise.noise_multiplier, 3)
    ('gdp', 37.306)
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    requested = _check_accountant(accountant, SENSITIVITY_ACCOUNTANTS)
    if delta == 0:
        if requested not in ("auto", "basic"):
            raise ValueError(f"accountant={requested!r} needs delta > 0; with delta = 0 only 'basic' applies")
        multiplier = laplace_noise_multiplier(epsilon, budget)
        return PredictionNoise("basic", "l2-laplace", multiplier, epsilon, delta, budget, {"basic": multiplier})
    candidates = gaussian_noise_multipliers(epsilon, delta, budget)
    chosen = _pick(candidates, requested, better=lambda sigma: sigma)
    return PredictionNoise(chosen, "gaussian", candidates[chosen], epsilon, delta, budget, candidates)


# ---------------------------------------------------------------- subsample-and-aggregate
def vote_epsilon_basic(epsilon: float, budget: int) -> float:
    """Per-query epsilon ``epsilon / B`` (basic composition, Dwork and Roth 2014, Thm 3.16; vdMH20 Thm 7).

    Examples
    --------
    >>> vote_epsilon_basic(1.0, 100)
    0.01
    """
    epsilon, _, budget = _check_budget_args(epsilon, 0.0, budget)
    return epsilon / budget


def vote_epsilon_advanced(epsilon: float, delta: float, budget: int) -> float:
    """Largest per-query epsilon whose B-fold advanced composition is (epsilon, delta).

    Notes
    -----
    Each query is pure ``epsilon_q``-DP, so the whole delta is the slack
    ``delta'`` of Dwork, Rothblum and Vadhan (2010, Thm III.3):
    ``epsilon_q sqrt(2B ln(1/delta)) + B epsilon_q (e^epsilon_q - 1) <= epsilon``,
    inverted exactly (vdMH20 Thm 8 solves the quadratic relaxation of the
    same bound, which is never larger). Any neighbouring relation.

    Examples
    --------
    >>> vote_epsilon_advanced(1.0, 1e-5, 10_000) > vote_epsilon_basic(1.0, 10_000)
    True
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    _require_delta(delta, "advanced composition")
    return advanced_composition_per_step_epsilon(epsilon, budget, delta)


def _largest_zcdp_rho(epsilon: float, delta: float) -> float:
    """Largest rho whose (epsilon, delta) conversion is at most ``epsilon`` (safe end of a bisection)."""
    # rho + 2 sqrt(rho ln(1/delta)) <= epsilon at this rho, and the improved
    # conversion is never larger, so it is feasible: a valid lower hint.
    log_inv = math.log(1.0 / delta)
    lower = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2
    return calibrate_parameter(
        lambda rho: zcdp_to_epsilon(rho, delta),
        target=epsilon,
        increasing=True,
        lower=lower,
        upper=max(epsilon, 2 * lower),
        tolerance=_ZCDP_RTOL,
    ).value


def vote_epsilon_zcdp(epsilon: float, delta: float, budget: int) -> float:
    """Largest per-query epsilon of an exponential mechanism such that B queries are (epsilon, delta)-DP via zCDP.

    Notes
    -----
    One query is the exponential mechanism at ``epsilon_q``, which is
    ``epsilon_q``-bounded range and hence ``epsilon_q^2 / 8``-zCDP (Cesar and
    Rogers 2021, Lemma 3.2; :func:`~privml.accounting._zcdp.zcdp_exponential`).
    zCDP adds up under adaptive composition (Bun and Steinke 2016,
    Lemma 1.7), so B queries are ``rho = B epsilon_q^2 / 8``-zCDP, converted
    to (epsilon, delta) with Canonne, Kamath and Steinke (2020), Cor. 13
    (:func:`~privml.accounting._zcdp.zcdp_to_epsilon`). The largest feasible
    rho is found by bisection (safe end), then
    ``epsilon_q = sqrt(8 rho / B)``. Any neighbouring relation.

    Examples
    --------
    >>> vote_epsilon_zcdp(1.0, 1e-5, 10_000) > vote_epsilon_advanced(1.0, 1e-5, 10_000)
    True
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    _require_delta(delta, "zCDP accounting")
    rho = _largest_zcdp_rho(epsilon, delta)
    epsilon_query = math.sqrt(8.0 * rho / budget)
    # zcdp_exponential is the per-query cost this inverts; rounding in the
    # square root must not push B of them over rho.
    while budget * zcdp_exponential(epsilon_query) > rho:
        epsilon_query = math.nextafter(epsilon_query, 0.0)
    return epsilon_query


def vote_epsilons(epsilon: float, delta: float, budget: int) -> dict[str, float]:
    """Per-query epsilon of every accounting applicable at ``delta`` (only "basic" when delta = 0)."""
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    if delta == 0:
        return {"basic": vote_epsilon_basic(epsilon, budget)}
    return {
        "zcdp": vote_epsilon_zcdp(epsilon, delta, budget),
        "basic": vote_epsilon_basic(epsilon, budget),
        "advanced": vote_epsilon_advanced(epsilon, delta, budget),
    }


@dataclass(frozen=True)
class VoteCalibration:
    """Per-query privacy of subsample-and-aggregate.

    Attributes
    ----------
    accountant : str
        ``"basic"``, ``"advanced"`` or ``"zcdp"``.
    epsilon_query : float
        epsilon_q: each answer is an epsilon_q-DP (and epsilon_q-bounded-range)
        exponential mechanism over the vote counts.
    epsilon, delta : float
        The total guarantee over ``budget`` answers.
    budget : int
        B.
    candidates : dict
        epsilon_q of every applicable accounting (larger is better).
    """

    accountant: str
    epsilon_query: float
    epsilon: float
    delta: float
    budget: int
    candidates: dict[str, float] = field(default_factory=dict)

    @property
    def beta(self) -> float:
        """Inverse temperature of the vote: ``epsilon_q / 2`` (one record moves two counts)."""
        return self.epsilon_query / 2.0


def calibrate_vote_epsilon(epsilon: float, delta: float, budget: int, accountant: str = "auto") -> VoteCalibration:
    """Per-query epsilon of subsample-and-aggregate for ``budget`` answers at (epsilon, delta).

    Parameters
    ----------
    epsilon : float
        Total epsilon, > 0.
    delta : float
        Total delta in [0, 1); 0 allows only basic composition.
    budget : int
        Number of answers B >= 1.
    accountant : {"auto", "basic", "advanced", "zcdp"}
        ``"auto"`` takes the largest per-query epsilon (the least noisy vote).

    Returns
    -------
    VoteCalibration

    Notes
    -----
    See :func:`vote_epsilon_basic`, :func:`vote_epsilon_advanced` and
    :func:`vote_epsilon_zcdp` for the theorems. The per-query mechanism and
    its sensitivity are stated in :mod:`privml.prediction._aggregate`.

    Examples
    --------
    >>> cal = calibrate_vote_epsilon(1.0, 0.0, 10)
    >>> cal.accountant, cal.epsilon_query, cal.beta
    ('basic', 0.1, 0.05)
    """
    epsilon, delta, budget = _check_budget_args(epsilon, delta, budget)
    requested = _check_accountant(accountant, VOTE_ACCOUNTANTS)
    if delta == 0 and requested not in ("auto", "basic"):
        raise ValueError(f"accountant={requested!r} needs delta > 0; with delta = 0 only 'basic' applies")
    candidates = vote_epsilons(epsilon, delta, budget)
    chosen = _pick(candidates, requested, better=lambda eps_q: -eps_q)
    return VoteCalibration(chosen, candidates[chosen], epsilon, delta, budget, candidates)
