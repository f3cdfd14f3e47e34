"""Gaussian differential privacy (GDP): exact accounting for compositions of Gaussian mechanisms.

A mechanism is mu-GDP when distinguishing M(D) from M(D') is at least as hard
as distinguishing N(0, 1) from N(mu, 1) (Dong, Roth and Su 2019/2022,
"Gaussian Differential Privacy", Definition 2.6). The Gaussian mechanism with
noise multiplier s is exactly (1/s)-GDP (their Theorem 2.7), and composing
mechanisms that are mu_i-GDP gives exactly sqrt(sum mu_i^2)-GDP (their
Corollary 3.3 of arXiv:1905.02383; Corollary 2 of the JRSS-B version), also
under adaptive composition. So for Gaussian mechanisms this accountant is not
a bound but the exact privacy profile; its (epsilon, delta) curve is the
Gaussian one of :mod:`privml.accounting._analytic_gaussian`.
"""

from __future__ import annotations

import math

from privml.accounting._accountant import PrivacyAccountant, flatten
from privml.accounting._analytic_gaussian import gaussian_delta, gaussian_epsilon
from privml.accounting._events import DpEvent, GaussianEvent

__all__ = ["GaussianDPAccountant"]


class GaussianDPAccountant(PrivacyAccountant):
    """Exact accountant for (adaptive) compositions of Gaussian mechanisms.

    Notes
    -----
    Each ``GaussianEvent`` with noise multiplier ``s`` (noise standard
    deviation over the L2 sensitivity, measured under the ledger's
    neighbouring relation) contributes ``mu_i^2 = 1 / s^2``; the ledger is
    ``mu = sqrt(sum_i count_i / s_i^2)``-GDP (Dong, Roth and Su 2019,
    Theorem 2.7 and Corollary 3.3). (epsilon, delta) come from the exact
    Gaussian curve delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)
    (Balle and Wang 2018, Theorem 8; Dong, Roth and Su 2019, Corollary 2.13),
    via :func:`~privml.accounting._analytic_gaussian.gaussian_epsilon` and
    :func:`~privml.accounting._analytic_gaussian.gaussian_delta`.

    Only ``GaussianEvent`` and Self/Composed events of them are supported;
    this accountant is meant to be exact, and is so only for Gaussians.
    ``PoissonSampledEvent`` is refused (``supports`` is False): the GDP
    treatment of subsampled Gaussians (the central-limit approximation of
    Dong, Roth and Su 2019 for noisy SGD, used by Bu et al. 2020) is an
    approximation, not a guarantee, and under-reports epsilon at practical
    step counts; use the RDP or PLD accountant. Laplace, exponential and
    (eps, delta) events are refused as well.

    With ``delta = 0``, :meth:`get_epsilon` returns ``inf``: the Gaussian
    curve has delta > 0 at every finite epsilon.

    Examples
    --------
    >>> from privml.accounting._events import GaussianEvent
    >>> acc = GaussianDPAccountant().compose(GaussianEvent(3.0), count=9)
    >>> acc.mu
    1.0
    """

    name = "gdp"

    def __init__(self) -> None:
        super().__init__()
        self._mu_squared = 0.0

    @property
    def mu(self) -> float:
        """The composed GDP parameter ``sqrt(sum count_i / s_i^2)``."""
        return math.sqrt(self._mu_squared)

    def supports(self, event: DpEvent) -> bool:
        """Gaussian events and compositions of them only."""
        return all(isinstance(base, GaussianEvent) for base, _ in flatten(event))

    def _compose(self, event: DpEvent, count: int) -> None:
        for base, n in flatten(event, count):
            assert isinstance(base, GaussianEvent)
            self._mu_squared += n / base.noise_multiplier**2

    def _get_epsilon(self, delta: float) -> float:
        if self._mu_squared == 0:
            return 0.0
        if delta == 0:
            return math.inf
        return gaussian_epsilon(delta, self.mu)

    def _get_delta(self, epsilon: float) -> float:
        if self._mu_squared == 0:
            return 0.0
        return gaussian_delta(epsilon, self.mu)

    def __repr__(self) -> str:
        return f"GaussianDPAccountant(mu={self.mu!r}, events={len(self._events)})"
