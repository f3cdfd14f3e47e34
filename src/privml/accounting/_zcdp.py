"""Zero-concentrated differential privacy (zCDP): per-mechanism rho and the zCDP accountant.

A mechanism is rho-zCDP when D_alpha(M(D) || M(D')) <= rho * alpha for every
alpha > 1 and every ordered pair of neighbouring datasets (Bun and Steinke
2016, "Concentrated Differential Privacy: Simplifications, Extensions, and
Lower Bounds", Definition 1.1 with xi = 0). It is the RDP curve alpha -> rho
alpha, so rho adds under adaptive composition (Bun and Steinke 2016,
Lemma 1.7) and the (epsilon, delta) conversion is that of RDP optimised over a
continuum of orders.

As everywhere in privml, noise is a multiplier of sensitivity and the
sensitivity is measured under the neighbouring relation of the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize_scalar

from privml._validation import check_delta, check_epsilon, check_positive
from privml.accounting._accountant import PrivacyAccountant, flatten
from privml.accounting._events import DpEvent, EpsilonDeltaEvent, ExponentialEvent, GaussianEvent, LaplaceEvent
from privml.accounting._rdp_conversion import _check_target_epsilon, _improved_epsilons, _improved_log_deltas

__all__ = [
    "ZCDPAccountant",
    "zcdp_exponential",
    "zcdp_gaussian",
    "zcdp_pure",
    "zcdp_to_delta",
    "zcdp_to_epsilon",
]

# Orders are searched as t = log(alpha - 1): alpha from 1 + 2e-9 to 1 + 1e13 covers
# rho from ~1e18 down to ~1e-26 at any delta >= 1e-300; a grid finds the basin,
# Brent's method polishes it. Any alpha gives a valid bound, so the search only
# affects tightness.
_T_GRID = np.linspace(-20.0, 30.0, 1001)
_T_XTOL = 1e-10


def zcdp_gaussian(noise_multiplier: float) -> float:
    """rho of the Gaussian mechanism: ``1 / (2 s^2)``.

    Parameters
    ----------
    noise_multiplier:
        ``s = sigma / Delta_2`` > 0.

    Returns
    -------
    float
        ``1 / (2 s^2)``.

    Notes
    -----
    Neighbouring relation: the one ``Delta_2`` is measured under.
    Sensitivity: L2 ``Delta_2``. Reference: Bun and Steinke (2016),
    Proposition 1.6 (exact: the Gaussian's RDP curve is alpha / (2 s^2)).

    Examples
    --------
    >>> zcdp_gaussian(2.0)
    0.125
    """
    s = check_positive(noise_multiplier, "noise_multiplier")
    return 1.0 / (2.0 * s * s)


def zcdp_pure(epsilon: float) -> float:
    """rho implied by pure epsilon-DP: ``epsilon^2 / 2``.

    Notes
    -----
    Neighbouring relation: whichever the epsilon-DP guarantee holds for.
    Sensitivity: none (a property of the output distributions). Reference:
    Bun and Steinke (2016), Proposition 1.4. Used for Laplace events and
    (epsilon, 0) events. For the Laplace mechanism this is not tight: its
    zCDP parameter is reported to be epsilon + e^-epsilon - 1 (Harrison and
    Manurangsi, FORC 2026), which privml does not use yet.

    Examples
    --------
    >>> zcdp_pure(1.0)
    0.5
    """
    eps = check_epsilon(epsilon)
    return eps * eps / 2.0


def zcdp_exponential(epsilon: float) -> float:
    """rho of the exponential mechanism run at ``epsilon``: ``epsilon^2 / 8``.

    Notes
    -----
    Neighbouring relation: the one the utility sensitivity ``Delta_u`` is
    measured under. Sensitivity: the utility's, ``Delta_u`` (selection
    probability proportional to exp(eps u / (2 Delta_u))). Reference: the
    mechanism is eps-bounded range, and eps-bounded range implies
    eps^2/8-zCDP (Cesar and Rogers 2021, Lemma 3.2): four times less than
    :func:`zcdp_pure`.

    Examples
    --------
    >>> zcdp_exponential(2.0)
    0.5
    """
    eps = check_epsilon(epsilon)
    return eps * eps / 8.0


def _search(objective_of_alpha: Callable[[np.ndarray], np.ndarray], extra_alpha: float | None) -> float:
    """min over alpha > 1 of a per-order objective: grid over log(alpha - 1), then Brent."""
    alphas = 1.0 + np.exp(_T_GRID)
    values = objective_of_alpha(alphas)
    best = int(np.argmin(values))
    lo, hi = _T_GRID[max(best - 1, 0)], _T_GRID[min(best + 1, _T_GRID.size - 1)]
    candidates = [float(values[best])]
    if math.isfinite(candidates[0]) and lo < hi:
        polished = minimize_scalar(
            lambda t: float(objective_of_alpha(np.array([1.0 + math.exp(t)]))[0]),
            bounds=(lo, hi),
            method="bounded",
            options={"xatol": _T_XTOL},
        )
        candidates.append(float(polished.fun))
    if extra_alpha is not None:
        candidates.append(float(objective_of_alpha(np.array([extra_alpha]))[0]))
    return min(candidates)


def zcdp_to_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon that rho-zCDP certifies at ``delta``.

    Parameters
    ----------
    rho:
        The zCDP parameter, >= 0.
    delta:
        Target delta in [0, 1). ``delta = 0`` gives ``inf`` unless rho = 0:
        zCDP with rho > 0 never implies pure DP.

    Returns
    -------
    float
        ``min over alpha > 1 of alpha rho + log(1 - 1/alpha) - (log delta + log alpha) / (alpha - 1)``.

    Notes
    -----
    Neighbouring relation: that of the zCDP guarantee. Reference: Canonne,
    Kamath and Steinke (2020), Corollary 13 (the improved RDP conversion of
    their Proposition 12 applied to the curve alpha rho, optimised over
    alpha), computed with :func:`privml.accounting._rdp_conversion.rdp_to_epsilon`'s
    per-order formula. Always at most Bun and Steinke (2016),
    Proposition 1.3, ``rho + 2 sqrt(rho log(1/delta))``: the order
    alpha = 1 + sqrt(log(1/delta) / rho) that gives that bound is always
    among the candidates.

    Examples
    --------
    >>> round(zcdp_to_epsilon(0.5, 1e-5), 4) < round(0.5 + 2 * math.sqrt(0.5 * math.log(1e5)), 4)
    True
    """
    rho = check_positive(rho, "rho", allow_zero=True)
    delta = check_delta(delta)
    if rho == 0:
        return 0.0
    if delta == 0:
        return math.inf
    bun_steinke_alpha = 1.0 + math.sqrt(math.log(1.0 / delta) / rho)
    # zCDP is the RDP curve alpha -> alpha rho.
    return _search(lambda a: _improved_epsilons(a, a * rho, delta), bun_steinke_alpha)


def zcdp_to_delta(rho: float, epsilon: float) -> float:
    """Smallest delta that rho-zCDP certifies at ``epsilon``.

    Parameters
    ----------
    rho:
        The zCDP parameter, >= 0.
    epsilon:
        Target epsilon >= 0.

    Returns
    -------
    float
        ``min over alpha > 1 of exp((alpha-1)(alpha rho - eps + log(1 - 1/alpha))) / alpha``, at most 1.

    Notes
    -----
    The inverse of :func:`zcdp_to_epsilon` (Canonne, Kamath and Steinke 2020,
    Corollary 13), also never above the total-variation bound
    sqrt(1 - e^-rho) (see :func:`privml.accounting._rdp_conversion.rdp_to_delta`).
    """
    rho = check_positive(rho, "rho", allow_zero=True)
    epsilon = _check_target_epsilon(epsilon)
    if rho == 0:
        return 0.0
    log_delta = _search(lambda a: _improved_log_deltas(a, a * rho, epsilon), None)
    return min(1.0, math.exp(log_delta))


def _event_rho(event: DpEvent) -> float:
    if isinstance(event, GaussianEvent):
        return zcdp_gaussian(event.noise_multiplier)
    if isinstance(event, ExponentialEvent):
        return zcdp_exponential(event.epsilon)
    if isinstance(event, LaplaceEvent):
        return zcdp_pure(event.epsilon)
    assert isinstance(event, EpsilonDeltaEvent) and event.delta == 0
    return zcdp_pure(event.epsilon)


def _supported_base(event: DpEvent) -> bool:
    if isinstance(event, (GaussianEvent, LaplaceEvent, ExponentialEvent)):
        return True
    return isinstance(event, EpsilonDeltaEvent) and event.delta == 0


class ZCDPAccountant(PrivacyAccountant):
    """Privacy accountant that adds zCDP parameters rho.

    Notes
    -----
    Supported events and their rho:

    - ``GaussianEvent``: ``1/(2 s^2)`` (Bun and Steinke 2016, Prop. 1.6);
    - ``LaplaceEvent`` and ``EpsilonDeltaEvent`` with ``delta == 0``:
      ``eps^2/2`` (Bun and Steinke 2016, Prop. 1.4);
    - ``ExponentialEvent``: ``eps^2/8`` (Cesar and Rogers 2021, Lemma 3.2);
    - ``SelfComposedEvent`` / ``ComposedEvent`` of these: rho adds (Bun and
      Steinke 2016, Lemma 1.7).

    ``PoissonSampledEvent`` is refused (``supports`` is False): zCDP does not
    amplify cleanly under subsampling. The subsampled Gaussian's RDP curve
    is far below alpha / (2 s^2) at small orders but approaches
    alpha / (2 s^2) + log q as alpha grows, so the smallest rho it satisfies
    is the unsampled 1 / (2 s^2); use the RDP or PLD accountant. Events
    with ``delta > 0`` are refused too. All events share the ledger's
    neighbouring relation, under which each sensitivity is measured.

    The (epsilon, delta) conversion is :func:`zcdp_to_epsilon` (Canonne,
    Kamath and Steinke 2020, Corollary 13). With ``delta = 0``,
    :meth:`get_epsilon` returns ``inf`` (rho > 0 never implies pure DP).

    Examples
    --------
    >>> from privml.accounting._events import GaussianEvent
    >>> acc = ZCDPAccountant().compose(GaussianEvent(2.0), count=4)
    >>> acc.rho
    0.5
    """

    name = "zcdp"

    def __init__(self) -> None:
        super().__init__()
        self._rho = 0.0

    @property
    def rho(self) -> float:
        """The composed zCDP parameter."""
        return self._rho

    def supports(self, event: DpEvent) -> bool:
        """Gaussian, Laplace, exponential and pure (eps, 0) events, composed freely; no subsampling."""
        return all(_supported_base(base) for base, _ in flatten(event))

    def _compose(self, event: DpEvent, count: int) -> None:
        for base, n in flatten(event, count):
            self._rho += n * _event_rho(base)

    def _get_epsilon(self, delta: float) -> float:
        return zcdp_to_epsilon(self._rho, delta)

    def _get_delta(self, epsilon: float) -> float:
        return zcdp_to_delta(self._rho, epsilon)

    def __repr__(self) -> str:
        return f"ZCDPAccountant(rho={self._rho!r}, events={len(self._events)})"
