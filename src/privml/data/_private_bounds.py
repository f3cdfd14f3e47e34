"""Private bounds: each numeric column's range estimated with DP quantiles, a stated part of the budget.

The linear models need every feature on a public scale (:mod:`privml.data._schema`).
Where no public range is known, :class:`PrivateRanges` estimates one per
column from the data *privately*: a low and a high quantile of each column,
each chosen by the exponential mechanism (McSherry and Talwar 2007) over a
**public** grid of candidate values, with the rank utility of Smith (2011,
"Privacy-preserving statistical estimation with optimal convergence rates",
Sec. 3): a candidate ``g`` scores ``-| #{i : x_i < g} - q n |``, the distance
of its rank from the target rank ``q n``. Values are then clipped to the
released range and mapped onto ``[-1, 1]`` as a schema's numeric column is;
the released ranges are a DP output, so the encoding that uses them is
post-processing and the model trained on it composes with them.

Sensitivity, stated per relation (``n`` is the number of training rows):

- **replace-one** (same ``n``, one record replaced): moving one value changes
  each count ``#{x_i < g}`` by at most 1 and leaves ``q n`` fixed, so each
  utility moves by at most ``Delta_u = 1``.
- **add/remove-one with n public** (privml's zero-out view: one record
  replaced by a null record that contributes to no count): each count drops
  by 0 or 1, ``q n`` is fixed: ``Delta_u = 1``. (Classic add/remove, where
  ``n`` changes too, gives ``max(q, 1 - q) <= 1``.)

In neither relation do the utilities all move in one direction (a candidate
below the target rank gains where one above it loses), so the mechanism's
sharper monotone form does not apply: each selection uses
``exp(epsilon u / 2)`` and is epsilon-DP under both relations (McSherry and
Talwar 2007, Theorem 6; Dwork and Roth 2014, Theorem 3.10).
``tests/data/test_private_bounds.py`` checks the ratio exactly on enumerated
neighbours of each relation, and that the monotone form would break it.

A record takes part in every column, so the ``2 d`` selections of ``d``
columns compose: each gets ``epsilon / (2 d)`` and the ranges are
epsilon-DP by basic composition (Dwork and Roth 2014, Theorem 3.16).
:func:`compose_with_model` adds them to the guarantee of the model trained
on the encoded data, under the model's relation (the ranges hold under
both).

The grid :data:`DEFAULT_GRID` is public and wide: 0 and ``+-10^(k/16)`` for
``10^-3 <= |g| <= 10^8`` (16 points a decade, neighbours a factor 1.15
apart); values beyond it are clipped to its ends. Its coarseness is the
price of a small candidate set: the mechanism's rank error grows with
``log(candidates) / epsilon``.

What it costs in accuracy, from public inputs only: with probability at
least ``1 - beta`` a selection's rank is within
``(2 / epsilon_q) (ln m + ln(1 / beta))`` of the best candidate's
(``m`` candidates, ``epsilon_q = epsilon / (2 d)``; Dwork and Roth 2014,
Theorem 3.11). :meth:`PrivateRanges.rank_error` computes it, and
:meth:`PrivateRanges.fit` warns (:class:`WeakBoundsWarning`) when it
reaches the ``q n`` rows between a target quantile and the end of the data:
then a bound may land anywhere on the grid, far outside the data, and a
model trained on features so scaled may be no better than predicting the
majority class. The warning is a function of ``n``, ``d``, ``epsilon`` and
the grid, never of the values. On small data a column's range is only as
good as ``epsilon / (2 d)`` allows; where its documented range is known, a
schema costs nothing and is better.

Examples
--------
>>> import numpy as np
>>> X = np.random.default_rng(0).normal(50.0, 10.0, size=(5000, 1))
>>> ranges = PrivateRanges(epsilon=1.0, random_state=0).fit(X)
>>> bool(20.0 <= ranges.lower_[0] < 50.0 < ranges.upper_[0] <= 80.0)
True
>>> str(ranges.privacy_)
'(1, 0)-DP under replace-one neighbours [basic]'
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from privml._random import RandomState, check_random_state
from privml._validation import check_epsilon
from privml.accounting._composition import basic_composition
from privml.data._schema import Label, Numeric, Schema
from privml.exceptions import PrivmlWarning
from privml.guarantee import PrivacyGuarantee
from privml.mechanisms import ExponentialMechanism
from privml.neighbouring import Neighbouring

__all__ = [
    "DEFAULT_GRID", "DEFAULT_QUANTILES", "PrivateRanges", "WeakBoundsWarning", "compose_with_model", "dp_quantile",
]


class WeakBoundsWarning(PrivmlWarning):
    """Private ranges whose budget cannot place them near the data at this ``n`` (computed from public inputs)."""


def _log_grid(low_exponent: int, high_exponent: int, per_decade: int) -> np.ndarray:
    steps = np.arange(low_exponent * per_decade, high_exponent * per_decade + 1) / per_decade
    positive = 10.0**steps
    return np.concatenate([-positive[::-1], [0.0], positive])


#: The public candidate values of every quantile: 0 and ``+-10^(k/16)`` for ``10^-3 <= |g| <= 10^8`` (355 values).
DEFAULT_GRID: np.ndarray = _log_grid(-3, 8, 16)
#: The quantiles whose values become a column's lower and upper bound: 5% of each tail is clipped, which a
#: linear model barely notices, and the target ranks lie 0.05 n rows from the ends of the data, where the
#: mechanism's rank error must stay (WeakBoundsWarning).
DEFAULT_QUANTILES = (0.05, 0.95)
#: The failure probability of the rank-error bound that WeakBoundsWarning compares with 0.05 n.
WARNING_BETA = 0.05


def _check_grid(grid: ArrayLike | None) -> np.ndarray:
    values = DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64)
    if values.ndim != 1 or values.size < 2 or not np.all(np.isfinite(values)) or np.any(np.diff(values) <= 0):
        raise ValueError("grid must be at least two finite values in increasing order")
    return values


def rank_utilities(values: np.ndarray, q: float, grid: np.ndarray, *, n: int | None = None) -> np.ndarray:
    """``-| #{x_i < g_j} - q n |`` for each candidate ``g_j``: Smith (2011)'s rank utility, sensitivity 1
    under replace-one and under add/remove-one with ``n`` public (see the module's notes).

    ``n`` defaults to ``len(values)``; the zero-out view passes the public ``n`` of a dataset one of whose
    records is null (absent from ``values``, counted by no candidate).
    """
    below = np.searchsorted(np.sort(values), grid, side="left")  # #{x_i < g_j}
    return -np.abs(below - q * (values.size if n is None else n))


def dp_quantile(
    values: ArrayLike,
    q: float,
    *,
    epsilon: float,
    grid: ArrayLike | None = None,
    neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
    random_state: RandomState = None,
) -> float:
    """An epsilon-DP estimate of the ``q``-quantile of ``values``: one candidate of the public ``grid``, chosen
    by the exponential mechanism on :func:`rank_utilities` (sensitivity 1 under either relation).

    >>> median = dp_quantile(np.arange(1000.0), 0.5, epsilon=1.0, random_state=0)
    >>> bool(400.0 < median < 600.0), bool(median in DEFAULT_GRID)
    (True, True)
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("values must be a non-empty array of finite numbers")
    candidates = _check_grid(grid)
    mechanism = ExponentialMechanism(epsilon=epsilon, sensitivity=1.0, neighbouring=neighbouring,
                                     random_state=random_state)
    return float(candidates[mechanism.select(rank_utilities(x, q, candidates))])


class PrivateRanges:
    """Per-column ranges from DP quantiles (:func:`dp_quantile`), and the encoding that uses them.

    The parameters are keyword-only.

    Parameters
    ----------
    epsilon : float
        The budget of all the ranges together; each of the ``2 d`` quantiles
        gets ``epsilon / (2 d)`` (basic composition).
    quantiles : (float, float), default (0.01, 0.99)
        The quantiles that become each column's lower and upper bound.
    grid : array, optional
        Public candidate values, increasing (default :data:`DEFAULT_GRID`).
        Never derive it from the data.
    neighbouring : {"replace-one", "add/remove-one"}
        The relation :attr:`privacy_` is stated under (the selections are
        epsilon-DP under both; choose the model's).
    random_state : None, int, Generator or SeedSequence

    Attributes
    ----------
    lower_, upper_ : ndarray of shape (d,)
        The released ranges (a DP output), ``lower_ < upper_``.
    privacy_ : PrivacyGuarantee
        ``(epsilon, 0)``, basic composition of the ``2 d`` selections.
    """

    def __init__(
        self,
        *,
        epsilon: float,
        quantiles: tuple[float, float] = DEFAULT_QUANTILES,
        grid: ArrayLike | None = None,
        neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        low, high = quantiles
        if not 0.0 <= low < high <= 1.0:
            raise ValueError(f"quantiles must be (low, high) with 0 <= low < high <= 1, got {quantiles!r}")
        self.quantiles = (float(low), float(high))
        self.grid = _check_grid(grid)
        self.neighbouring = Neighbouring.parse(neighbouring)
        self.random_state = random_state

    def fit(self, X: ArrayLike) -> PrivateRanges:
        """Choose each column's range privately; sets ``lower_``, ``upper_`` and ``privacy_``."""
        data = np.asarray(X, dtype=np.float64)
        if data.ndim != 2 or data.shape[0] == 0 or data.shape[1] == 0 or not np.all(np.isfinite(data)):
            raise ValueError("X must be a non-empty 2-D array of finite numbers")
        d = data.shape[1]
        share = self.epsilon / (2 * d)
        rng = check_random_state(self.random_state)  # one stream: every selection draws fresh noise
        lower, upper = np.empty(d), np.empty(d)
        for j in range(d):
            low, high = sorted(
                dp_quantile(data[:, j], q, epsilon=share, grid=self.grid, neighbouring=self.neighbouring,
                            random_state=rng)
                for q in self.quantiles
            )
            if high == low:  # post-processing of the released values: widen to the next public candidate
                above = self.grid[self.grid > low]
                high = float(above[0]) if above.size else low + 1.0
            lower[j], upper[j] = low, high
        error, margin = self.rank_error(n_columns=d), self._margin(data.shape[0])
        if error >= margin:
            warnings.warn(
                f"private bounds: at epsilon {self.epsilon:g} for {d} column{'s' if d != 1 else ''} of "
                f"{data.shape[0]} rows, each quantile's rank may be off by {error:.0f} rows (95% bound), more than "
                f"the {margin:.0f} between its target and the end of the data: a range may fall far outside the "
                "values, and the model may be no better than predicting the majority class; give a schema with "
                "public ranges, or a larger part of the budget (--bounds private:FRACTION)",
                WeakBoundsWarning,
                stacklevel=2,
            )
        total = basic_composition([share], [0.0], counts=[2 * d])
        self.lower_, self.upper_ = lower, upper
        self.privacy_ = PrivacyGuarantee(total.epsilon, 0.0, self.neighbouring, accountant="basic")
        return self

    def rank_error(self, *, n_columns: int, beta: float = WARNING_BETA) -> float:
        """How many rows a selection's rank may be off the best candidate's, with probability ``1 - beta``:
        ``(2 / epsilon_q) (ln m + ln(1 / beta))`` with ``epsilon_q = epsilon / (2 n_columns)`` (Dwork and Roth
        2014, Theorem 3.11; sensitivity 1). Public: a function of the budget, the grid and the width only."""
        if n_columns < 1 or not 0.0 < beta < 1.0:
            raise ValueError("n_columns must be >= 1 and beta in (0, 1)")
        share = self.epsilon / (2 * n_columns)
        return 2.0 / share * (math.log(self.grid.size) + math.log(1.0 / beta))

    def _margin(self, n_rows: int) -> float:
        """The rows between the nearer target rank and the end of the data."""
        return min(self.quantiles[0], 1.0 - self.quantiles[1]) * n_rows

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Each column clipped to its released range and mapped onto ``[-1, 1]`` (a per-record map)."""
        data = np.asarray(X, dtype=np.float64)
        if data.ndim != 2 or data.shape[1] != self.lower_.size:
            raise ValueError(f"X must have {self.lower_.size} columns, got shape {data.shape}")
        clipped = np.clip(data, self.lower_, self.upper_)
        return 2.0 * (clipped - self.lower_) / (self.upper_ - self.lower_) - 1.0

    def to_schema(self, names: Sequence[str], label: Label | None = None) -> Schema:
        """The released ranges as a schema of numeric columns (what a model file carries to ``predict``/``serve``)."""
        if len(names) != self.lower_.size:
            raise ValueError(f"names must name the {self.lower_.size} columns, got {len(names)}")
        columns = tuple(Numeric(name=name, lower=float(lo), upper=float(hi))
                        for name, lo, hi in zip(names, self.lower_, self.upper_, strict=True))
        return Schema(columns=columns, label=label)

    def describe(self) -> dict[str, Any]:
        """The mechanism and its split of the budget, for a printed result (public inputs and DP outputs only)."""
        d = self.lower_.size
        return {
            "epsilon": self.privacy_.epsilon,
            "delta": 0.0,
            "mechanism": (f"exponential-mechanism quantiles {self.quantiles[0]:g} and {self.quantiles[1]:g} "
                          f"(Smith 2011) of {d} column{'s' if d != 1 else ''} over a public grid of "
                          f"{self.grid.size} values, epsilon {self.privacy_.epsilon / (2 * d):.4g} each"),
        }


def compose_with_model(bounds: PrivacyGuarantee, model: PrivacyGuarantee) -> PrivacyGuarantee:
    """The guarantee of private ranges followed by a model trained on data they encoded: basic composition
    (adaptive: the model is fitted after the ranges are released), stated under the model's relation.

    The ranges' selections are epsilon-DP under replace-one and under add/remove-one with n public (module
    notes), so their guarantee is restated under whichever relation the model's holds.
    """
    if bounds.delta != 0.0:
        raise ValueError("private ranges are pure epsilon-DP: their delta must be 0")
    restated = dataclasses.replace(bounds, neighbouring=model.neighbouring)
    total = basic_composition([restated.epsilon, model.epsilon], [restated.delta, model.delta])
    return PrivacyGuarantee(total.epsilon, total.delta, model.neighbouring,
                            accountant=f"basic(private bounds, {model.accountant})")
