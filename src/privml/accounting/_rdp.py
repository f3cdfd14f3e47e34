"""Rényi differential privacy: per-mechanism curves, conversions, and the RDP accountant.

A mechanism M is (alpha, r)-RDP when D_alpha(M(D) || M(D')) <= r for every
ordered pair of neighbouring datasets (Mironov 2017, "Rényi Differential
Privacy", Definition 4). Its *RDP curve* is r as a function of the order
alpha > 1; curves of adaptively composed mechanisms add order by order
(Mironov 2017, Proposition 1), and a curve is turned into an (epsilon, delta)
guarantee by a conversion (:func:`~privml.accounting._rdp_conversion.rdp_to_epsilon`,
:func:`~privml.accounting._rdp_conversion.rdp_to_delta`).

The closed-form curves live in :mod:`privml.accounting._rdp_curves`, the
Poisson-sampled Gaussian's in :mod:`privml.accounting._rdp_poisson_gaussian`
and the conversions in :mod:`privml.accounting._rdp_conversion`; this module
holds the accountant, :class:`RDPAccountant`.

Conventions used by every function here:

- Noise is a *noise multiplier*: the noise scale divided by the sensitivity,
  which is measured under the neighbouring relation the guarantee is stated
  for (see :mod:`privml.accounting._events`). A curve holds for whichever
  relation the sensitivity was measured under, except the sampled
  Gaussians, whose noise is stated against one record's contribution and
  whose relation is the sampled event's (:func:`~privml.accounting._rdp_poisson_gaussian.rdp_sampled_gaussian` is
  add/remove-one; the replace-one curves are in
  :mod:`privml.accounting._rdp_replace_one`).
- ``orders`` are Rényi orders alpha > 1; ``inf`` is allowed and means the
  max-divergence (the alpha -> inf limit of D_alpha), i.e. a pure epsilon-DP
  bound.
- Curves are numpy arrays of the same length as ``orders``; ``inf`` marks an
  order at which the mechanism has no finite guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np

from privml._validation import check_delta
from privml.accounting._accountant import PrivacyAccountant, flatten
from privml.accounting._events import (
    DpEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SampledWithoutReplacementEvent,
)
from privml.accounting._rdp_conversion import (
    _best,
    _classic_epsilons,
    _classic_log_deltas,
    _improved_epsilons,
    _improved_log_deltas,
)
from privml.accounting._rdp_curves import (
    DEFAULT_ORDERS,
    _check_orders,
    rdp_exponential,
    rdp_gaussian,
    rdp_laplace,
    rdp_pure,
)
from privml.accounting._rdp_poisson_gaussian import rdp_sampled_gaussian
from privml.accounting._rdp_replace_one import (
    rdp_poisson_gaussian_replace_one,
    rdp_sampled_without_replacement_gaussian,
)
from privml.neighbouring import Neighbouring

__all__ = [
    "RDPAccountant",
]

Conversion = Literal["improved", "classic"]


# --------------------------------------------------------------------------- accountant
def _supported_base(event: DpEvent) -> bool:
    if isinstance(event, (GaussianEvent, LaplaceEvent, ExponentialEvent)):
        return True
    if isinstance(event, EpsilonDeltaEvent):
        return event.delta == 0
    if isinstance(event, (PoissonSampledEvent, SampledWithoutReplacementEvent)):
        return isinstance(event.event, GaussianEvent)
    return False


@lru_cache(maxsize=1024)
def _event_curve(event: DpEvent, orders: tuple[float, ...]) -> np.ndarray:
    """The RDP curve of one supported base event, cached (events are frozen and hashable)."""
    if isinstance(event, GaussianEvent):
        curve = rdp_gaussian(event.noise_multiplier, orders)
    elif isinstance(event, PoissonSampledEvent):
        inner = event.event
        assert isinstance(inner, GaussianEvent)
        if event.neighbouring is Neighbouring.REPLACE_ONE:
            curve = rdp_poisson_gaussian_replace_one(event.sampling_probability, inner.noise_multiplier, orders)
        else:
            curve = rdp_sampled_gaussian(event.sampling_probability, inner.noise_multiplier, orders)
    elif isinstance(event, SampledWithoutReplacementEvent):
        inner = event.event
        assert isinstance(inner, GaussianEvent)
        curve = rdp_sampled_without_replacement_gaussian(
            event.sample_size, event.population, inner.noise_multiplier, orders
        )
    elif isinstance(event, LaplaceEvent):
        curve = rdp_laplace(event.noise_multiplier, orders)
    elif isinstance(event, ExponentialEvent):
        curve = rdp_exponential(event.epsilon, orders)
    else:
        assert isinstance(event, EpsilonDeltaEvent) and event.delta == 0
        curve = rdp_pure(event.epsilon, orders)
    curve.setflags(write=False)
    return curve


class RDPAccountant(PrivacyAccountant):
    """Privacy accountant that adds RDP curves and converts the total to (epsilon, delta).

    Parameters
    ----------
    orders:
        Rényi orders > 1 at which curves are tracked; defaults to
        :data:`~privml.accounting._rdp_curves.DEFAULT_ORDERS`, the grid of dp_accounting 0.6. The order
        alpha = inf is always tracked as well (its value is the sum of the
        pure-DP epsilons, ``inf`` once any Gaussian is composed).
    conversion:
        ``"improved"`` (Canonne, Kamath and Steinke 2020, Proposition 12;
        Balle et al. 2020, Theorem 21; the default) or ``"classic"``
        (Mironov 2017, Proposition 3 / the moments accountant of Abadi et
        al. 2016), kept for comparison.

    Notes
    -----
    Supported events and the curve each contributes:

    - ``GaussianEvent``: :func:`~privml.accounting._rdp_curves.rdp_gaussian` (Mironov 2017, Prop. 7);
    - ``PoissonSampledEvent`` of a ``GaussianEvent``:
      :func:`~privml.accounting._rdp_poisson_gaussian.rdp_sampled_gaussian`
      (Mironov, Talwar and Zhang 2019) under add/remove-one; under
      replace-one, :func:`~privml.accounting._rdp_replace_one.rdp_poisson_gaussian_replace_one`
      (the Rényi divergence of the replace-one dominating pair);
    - ``SampledWithoutReplacementEvent`` of a ``GaussianEvent`` (replace-one):
      :func:`~privml.accounting._rdp_replace_one.rdp_sampled_without_replacement_gaussian`
      (Wang, Balle and Kasiviswanathan 2019, Theorem 9 and its Gaussian refinement);
    - ``LaplaceEvent``: :func:`~privml.accounting._rdp_curves.rdp_laplace` (Mironov 2017, Prop. 6);
    - ``ExponentialEvent``: :func:`~privml.accounting._rdp_curves.rdp_exponential` (Cesar and Rogers 2021);
    - ``EpsilonDeltaEvent`` with ``delta == 0``: :func:`~privml.accounting._rdp_curves.rdp_pure`;
    - ``SelfComposedEvent`` / ``ComposedEvent`` of the above: curves add
      (Mironov 2017, Proposition 1), ``count`` copies as one multiplication.

    Approximate-DP events (delta > 0) and Poisson sampling of anything but a
    Gaussian are refused with :class:`~privml.exceptions.UnsupportedEventError`.
    Every event's sensitivity is measured under the ledger's single
    neighbouring relation. Curves are cached per event, so 14040 DP-SGD steps
    cost one curve evaluation.

    With ``delta = 0``, :meth:`get_epsilon` returns the alpha = inf value:
    the basic-composition epsilon when only pure-DP events were composed, and
    ``inf`` otherwise (finite-order RDP never implies pure DP).

    Examples
    --------
    >>> from privml.accounting._dpsgd import dpsgd_event
    >>> acc = RDPAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14040))
    >>> round(acc.get_epsilon(1e-5), 4)
    2.5944
    """

    name = "rdp"

    def __init__(
        self, *, orders: Sequence[float] = DEFAULT_ORDERS, conversion: Conversion = "improved"
    ) -> None:
        super().__init__()
        if conversion not in ("improved", "classic"):
            raise ValueError(f"conversion must be 'improved' or 'classic', got {conversion!r}")
        self._conversion: Conversion = conversion
        self._orders = _check_orders(orders)
        grid = self._orders if np.isinf(self._orders).any() else np.append(self._orders, np.inf)
        self._grid: tuple[float, ...] = tuple(float(a) for a in grid)
        self._grid_array = np.array(self._grid)
        self._curve = np.zeros(len(self._grid))

    @property
    def orders(self) -> np.ndarray:
        """The Rényi orders requested at construction."""
        return self._orders

    @property
    def conversion(self) -> Conversion:
        """``"improved"`` or ``"classic"``."""
        return self._conversion

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP curve at :attr:`orders` (a copy)."""
        index = [self._grid.index(float(a)) for a in self._orders]
        return self._curve[index].copy()

    def supports(self, event: DpEvent) -> bool:
        """Gaussian, sampled Gaussian (Poisson or fixed-size), Laplace, exponential and pure (eps, 0) events."""
        return all(_supported_base(base) for base, _ in flatten(event))

    def _compose(self, event: DpEvent, count: int) -> None:
        for base, n in flatten(event, count):
            self._curve = self._curve + n * _event_curve(base, self._grid)

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """Epsilon at ``delta`` and the order that attains it (``(0.0, inf)`` before any event)."""
        delta = check_delta(delta)
        if not self._events:
            return 0.0, math.inf
        per_order = _improved_epsilons if self._conversion == "improved" else _classic_epsilons
        return _best(self._grid_array, per_order(self._grid_array, self._curve, delta))

    def _get_epsilon(self, delta: float) -> float:
        return self.get_epsilon_and_order(delta)[0]

    def _get_delta(self, epsilon: float) -> float:
        per_order = _improved_log_deltas if self._conversion == "improved" else _classic_log_deltas
        log_delta, _ = _best(self._grid_array, per_order(self._grid_array, self._curve, epsilon))
        return math.exp(log_delta)

    def __repr__(self) -> str:
        return f"RDPAccountant(orders={len(self._orders)}, conversion={self._conversion!r}, events={len(self._events)})"
