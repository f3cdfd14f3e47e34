"""The discrete privacy loss distribution on a grid, and its pessimistic connect-the-dots discretisation.

A :class:`_DiscretePLD` holds P-masses at losses on the grid h*Z plus a mass at
+inf; its hockey-stick divergence is
delta(eps) = sum_{l > eps} p_l (1 - e^(eps - l)) + p_inf (Sommer, Meiser and
Mohammadi 2019, "Privacy loss classes", Section 4.4), and its epsilon at a
delta is solved exactly between grid points.

:func:`_discretise` puts a dominating pair (:mod:`privml.accounting._pld_pairs`)
on the grid by connect-the-dots: the outputs with loss in (l_i, l_{i+1}] carry
P-mass a and Q-mass b, computed exactly from the noise CDFs, and are replaced
by P-mass alpha at l_i and beta at l_{i+1} with alpha + beta = a and
alpha e^(-l_i) + beta e^(-l_{i+1}) = b, so the discrete pair dominates the
true one (Doroshenko, Ghazi, Kamath, Kumar and Manurangsi 2022, "Connect the
dots", PETS, Algorithm 1 and its pessimistic-estimate guarantee in Section 3).
Truncated tails are never dropped: upper-tail P-mass goes to +inf, lower-tail
P-mass is moved up to the lowest grid point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privml.accounting._pld_pairs import _Loss

# Width, in loss units, of the chunks in which reverse sums of p e^(-l) are
# rescaled: e^(-200) is far from double underflow even times tiny masses.
_RESCALE_WIDTH = 200.0


# ------------------------------------------------------------ discrete PLD
@dataclass(frozen=True, eq=False)
class _DiscretePLD:
    """P-masses ``probs`` at losses (offset + i) * h, plus ``inf_mass`` at loss +inf.

    The Q-mass of each point is implied (p e^-l); whatever Q-mass is not
    represented sits at loss -inf, where it never contributes to delta.
    ``max_loss`` is the largest loss the exact composition of the discretised
    steps can reach (+inf if any step has mass at +inf): delta(max_loss) = 0,
    which the FFT's tail bounds alone could not certify.
    """

    offset: int
    probs: np.ndarray
    inf_mass: float
    h: float
    max_loss: float = math.inf

    @property
    def losses(self) -> np.ndarray:
        return (self.offset + np.arange(self.probs.size)) * self.h

    def delta(self, epsilon: float) -> float:
        """delta(eps) = sum_{l > eps} p_l (1 - e^(eps - l)) + p_inf."""
        losses = self.losses
        above = losses > epsilon
        body = float(np.sum(self.probs[above] * -np.expm1(epsilon - losses[above])))
        return min(1.0, self.inf_mass + body)

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 with delta(eps) <= ``delta``, solved exactly between grid points.

        On (l_{j-1}, l_j] the curve is delta(eps) = p_inf + A_j - e^(eps - l_j) C_j
        with A_j = sum_{i >= j} p_i and C_j = sum_{i >= j} p_i e^(l_j - l_i).
        """
        if self.inf_mass > delta:
            return max(0.0, self.max_loss)
        start = max(0, -self.offset)  # first grid loss >= 0: eps < 0 is never reported
        if start >= self.probs.size:
            return 0.0
        above_or_at = np.cumsum(self.probs[start:][::-1])[::-1]
        # delta(l_j) >= p_inf + (1 - e^-1) A_{j+k} for k h >= 1, so every j whose
        # A_{j+k} exceeds `bound` is below the answer: skip them (large windows).
        k = math.ceil(1.0 / self.h)
        bound = (delta - self.inf_mass) / -math.expm1(-k * self.h)
        skip = max(0, int(np.searchsorted(-above_or_at, -bound, side="left")) - k)
        above_or_at = above_or_at[skip:]
        losses = self.losses[start + skip :]
        weighted = _weighted_tail_sums(self.probs[start + skip :], losses, self.h)
        # delta at each grid point l_j comes from the masses strictly above it
        at_grid = np.full(losses.size, self.inf_mass)
        at_grid[:-1] += above_or_at[1:] - math.exp(-self.h) * weighted[1:]
        j = int(np.argmax(at_grid <= delta))  # the last grid point always qualifies
        slack = self.inf_mass + above_or_at[j] - delta
        if slack <= 0:  # only at the lowest non-negative grid point: the answer is below 0
            return 0.0
        eps = float(losses[j]) + math.log(min(1.0, slack / weighted[j]))
        return max(0.0, min(eps, self.max_loss))


def _weighted_tail_sums(probs: np.ndarray, losses: np.ndarray, h: float) -> np.ndarray:
    """C_j = sum_{i >= j} p_i e^(l_j - l_i), without overflow or underflow.

    Summing from the top keeps relative accuracy in the tail. The sums are
    formed in chunks of loss width _RESCALE_WIDTH, each rescaled to its first
    loss, so no exponential leaves [e^-200, e^200] (one chunk for any
    realistic epsilon).
    """
    weighted = np.empty_like(probs)
    chunk = max(1, int(_RESCALE_WIDTH / h))
    carry, carry_loss = 0.0, 0.0
    for first in range(((probs.size - 1) // chunk) * chunk, -1, -chunk):
        part = slice(first, min(first + chunk, probs.size))
        shift = losses[part] - losses[first]
        partial = np.cumsum((probs[part] * np.exp(-shift))[::-1])[::-1]
        if carry > 0:
            partial += carry * math.exp(-(carry_loss - losses[first]))
        weighted[part] = partial * np.exp(shift)
        carry, carry_loss = float(weighted[first]), float(losses[first])
    return weighted


def _bucket_masses(survival: np.ndarray, cdf: np.ndarray) -> np.ndarray:
    """Mass of each (l_i, l_{i+1}], differencing whichever tail is the small one."""
    from_top = survival[:-1] - survival[1:]
    from_bottom = cdf[1:] - cdf[:-1]
    return np.maximum(np.where(survival[:-1] <= 0.5, from_top, from_bottom), 0.0)


def _connect_the_dots(p_mass: np.ndarray, q_mass: np.ndarray, losses: np.ndarray, h: float) -> np.ndarray:
    """Split each bucket's (P, Q) mass onto its two end points, preserving both.

    beta = (a - b e^(l_i)) / (1 - e^-h) solves alpha + beta = a,
    alpha e^(-l_i) + beta e^(-l_i - h) = b. Clipping to [0, a] only absorbs
    round-off (both are >= 0 in exact arithmetic).
    """
    with np.errstate(divide="ignore"):
        q_scaled = np.exp(np.log(q_mass) + losses[:-1])  # b e^(l_i) <= a: never overflows
    beta = np.clip((p_mass - q_scaled) / -math.expm1(-h), 0.0, p_mass)
    probs = np.zeros(losses.size)
    probs[:-1] += p_mass - beta
    probs[1:] += beta
    return probs


def _discretise(pair: _Loss, h: float, tail: float) -> _DiscretePLD:
    """Pessimistic connect-the-dots PLD of ``pair`` on the grid h*Z.

    P-mass above the grid (at most ``tail``, plus any +inf atom) goes to +inf;
    P-mass below it (at most ``tail``) is moved up to the lowest grid point.
    """
    low, high = pair.loss_range(tail)
    first = math.floor(low / h)
    last = max(math.ceil(high / h), first + 1)
    losses = np.arange(first, last + 1) * h
    p_above, p_below, q_above, q_below = pair.tails(losses)
    probs = _connect_the_dots(_bucket_masses(p_above, p_below), _bucket_masses(q_above, q_below), losses, h)
    probs[0] += p_below[0]
    inf_mass = float(min(1.0, p_above[-1]))
    return _DiscretePLD(first, probs, inf_mass, h, float(losses[-1]) if inf_mass == 0 else math.inf)
