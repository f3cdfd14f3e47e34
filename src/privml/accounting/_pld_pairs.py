"""Dominating pairs of the events the PLD accountant supports, one per neighbouring direction.

Each event is replaced by a pair (P, Q) whose hockey-stick curve dominates the
mechanism's for every eps, in the sense of Zhu, Dong and Wang 2022 ("Optimal
accounting of differential privacy via characteristic function", AISTATS,
Definition 7). Such pairs compose by product (ibid., Theorem 10), and Poisson
subsampling at rate q under add/remove-one neighbours is dominated by
((1-q)Q + qP, Q) when removing and (Q, (1-q)Q + qP) when adding (ibid.,
Theorem 11). The pairs here are the shifted Gaussian and Laplace noises, the
four-outcome (eps, delta) pair of Kairouz, Oh and Viswanath 2015 (Theorem 2.5)
and the replace-one Poisson-subsampled Gaussian of
:class:`_ReplaceOnePoissonGaussianPair` (derived there). Each pair reports the
tails of its privacy loss on a grid, from which
:mod:`privml.accounting._pld_discretisation` builds the discrete PLD.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, ndtr, ndtri

from privml.accounting._events import (
    DpEvent,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
)
from privml.neighbouring import Neighbouring


# --------------------------------------------------------------- noise pairs
def _inverse_mixture_loss(u: np.ndarray, q: float) -> np.ndarray:
    """Solve log(1 - q + q e^v) = u for v (the log-ratio of the two mixture components).

    Returns -inf where u <= log(1 - q), the infimum of the left-hand side.
    Written as log((1-q)/q) + d + log(1 - e^-d) with d = u - log(1-q) so that
    neither the cancellation e^u - (1-q) nor an overflow of e^u occurs.
    """
    if q == 1.0:
        return u
    d = u - math.log1p(-q)
    positive = d > 0
    safe = np.where(positive, d, 1.0)
    v = math.log((1.0 - q) / q) + safe + np.log(-np.expm1(-safe))
    return np.where(positive, v, -np.inf)


def _mixture_loss(v: np.ndarray | float, q: float) -> np.ndarray:
    """log(1 - q + q e^v), stable for every q in (0, 1] and large v."""
    if q == 1.0:
        return np.asarray(v, dtype=np.float64)
    return np.logaddexp(math.log1p(-q), math.log(q) + np.asarray(v, dtype=np.float64))


def _split_tails(z: np.ndarray, small: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(survival, cdf) of a symmetric law from its smaller tail ``small`` = F(-|z|).

    Taking the small tail directly and 1 - small for the other keeps relative
    accuracy where it matters (in both tails) and 1e-16 absolute elsewhere.
    """
    survival = np.where(z > 0, small, 1.0 - small)
    cdf = np.where(z < 0, small, 1.0 - small)
    return survival, cdf


@dataclass(frozen=True)
class _ShiftedNoisePair(ABC):
    """Dominating pair of an additive-noise mechanism with sensitivity 1, optionally Poisson subsampled.

    With A = noise centred at 1 and B = noise centred at 0 (a function of
    sensitivity Delta plus noise of scale ``scale`` * Delta, rescaled by Delta),
    the pair is (P, Q) = ((1-q) B + q A, B) for ``remove`` and
    (B, (1-q) B + q A) otherwise (Zhu, Dong, Wang 2022, Theorem 11; q = 1 is
    the plain mechanism, whose two directions coincide by the reflection
    o -> 1 - o). The log-ratio r(o) = log(A(o)/B(o)) is non-decreasing in o, so
    the privacy loss, +-log(1 - q + q e^r(o)), is monotone in the output and
    every set {L > l} is a half-line of outputs.
    """

    scale: float
    sampling_probability: float
    remove: bool

    @staticmethod
    @abstractmethod
    def _standard_tails(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(survival, cdf) of the unit-scale noise at ``z``."""

    @abstractmethod
    def _log_ratio(self, o: float) -> float:
        """r(o) = log(A(o) / B(o))."""

    @abstractmethod
    def _above(self, v: np.ndarray) -> np.ndarray:
        """x with {o : r(o) > v} = {o > x} (x may be +-inf)."""

    @abstractmethod
    def _below(self, v: np.ndarray) -> np.ndarray:
        """x with {o : r(o) < v} = {o < x} (x may be +-inf)."""

    @abstractmethod
    def _quantile(self, tail: float) -> float:
        """z with P(unit noise > z) <= tail."""

    def _mixture_tails(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """Survival and cdf at x of B and of the mixture (1-q) B + q A."""
        q = self.sampling_probability
        sf_b, cdf_b = self._standard_tails(x / self.scale)
        sf_a, cdf_a = self._standard_tails((x - 1.0) / self.scale)
        return sf_b, cdf_b, (1.0 - q) * sf_b + q * sf_a, (1.0 - q) * cdf_b + q * cdf_a

    def tails(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """P(L > l), P(L <= l), Q(L > l), Q(L <= l) at each grid loss l."""
        q = self.sampling_probability
        if self.remove:
            # L = log(1 - q + q e^r) > l  <=>  r > v(l)  <=>  o > x
            x = self._above(_inverse_mixture_loss(losses, q))
            sf_b, cdf_b, sf_mix, cdf_mix = self._mixture_tails(x)
            return sf_mix, cdf_mix, sf_b, cdf_b
        # L = -log(1 - q + q e^r) > l  <=>  r < v(-l)  <=>  o < x
        x = self._below(_inverse_mixture_loss(-losses, q))
        sf_b, cdf_b, sf_mix, cdf_mix = self._mixture_tails(x)
        return cdf_b, sf_b, cdf_mix, sf_mix

    def loss_range(self, tail: float) -> tuple[float, float]:
        """Losses outside this interval have P-mass at most ``tail`` on each side."""
        q = self.sampling_probability
        z = self._quantile(tail)
        if self.remove:  # P = (1-q) B + q A puts at most `tail` below -z s and above 1 + z s
            low, high = self._log_ratio(-z * self.scale), self._log_ratio(1.0 + z * self.scale)
            return float(_mixture_loss(low, q)), float(_mixture_loss(high, q))
        low, high = self._log_ratio(-z * self.scale), self._log_ratio(z * self.scale)
        return -float(_mixture_loss(high, q)), -float(_mixture_loss(low, q))


@dataclass(frozen=True)
class _GaussianPair(_ShiftedNoisePair):
    """A = N(1, s^2), B = N(0, s^2): r(o) = (2o - 1) / (2 s^2)."""

    @staticmethod
    def _standard_tails(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _split_tails(z, ndtr(-np.abs(z)))

    def _log_ratio(self, o: float) -> float:
        return (2.0 * o - 1.0) / (2.0 * self.scale**2)

    def _above(self, v: np.ndarray) -> np.ndarray:
        return 0.5 + self.scale**2 * v

    _below = _above

    def _quantile(self, tail: float) -> float:
        return -float(ndtri(tail))


@dataclass(frozen=True)
class _LaplacePair(_ShiftedNoisePair):
    """A = Lap(1, b), B = Lap(0, b): r(o) = clip(2o - 1, -1, 1) / b, with atoms at r = +-1/b."""

    @staticmethod
    def _standard_tails(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _split_tails(z, 0.5 * np.exp(-np.abs(z)))

    def _log_ratio(self, o: float) -> float:
        return min(max(2.0 * o - 1.0, -1.0), 1.0) / self.scale

    def _above(self, v: np.ndarray) -> np.ndarray:
        # clip(2o - 1, -1, 1) > w: empty for w >= 1 (the atom at 1 is not above),
        # everything for w < -1, else o > (1 + w) / 2.
        w = self.scale * v
        return np.where(w >= 1.0, np.inf, np.where(w < -1.0, -np.inf, 0.5 * (1.0 + w)))

    def _below(self, v: np.ndarray) -> np.ndarray:
        w = self.scale * v
        return np.where(w > 1.0, np.inf, np.where(w <= -1.0, -np.inf, 0.5 * (1.0 + w)))

    def _quantile(self, tail: float) -> float:
        return math.log(0.5 / tail)


@dataclass(frozen=True)
class _FinitePair:
    """A pair of distributions on finitely many outcomes (with +-inf losses allowed)."""

    p: tuple[float, ...]
    q: tuple[float, ...]

    def _losses(self) -> np.ndarray:
        p, q = np.array(self.p), np.array(self.q)
        log_ratio = np.log(np.where(p > 0, p, 1.0)) - np.log(np.where(q > 0, q, 1.0))
        return np.where(p == 0, -np.inf, np.where(q == 0, np.inf, log_ratio))

    def tails(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        above = self._losses()[None, :] > losses[:, None]
        p, q = np.array(self.p), np.array(self.q)
        return (
            np.sum(np.where(above, p, 0.0), axis=1),
            np.sum(np.where(above, 0.0, p), axis=1),
            np.sum(np.where(above, q, 0.0), axis=1),
            np.sum(np.where(above, 0.0, q), axis=1),
        )

    def loss_range(self, tail: float) -> tuple[float, float]:
        del tail  # finitely many atoms: nothing to truncate
        losses = self._losses()
        finite = losses[np.isfinite(losses)]
        return float(finite.min()), float(finite.max())


def _epsilon_delta_pairs(epsilon: float, delta: float, q: float) -> tuple[_FinitePair, _FinitePair]:
    """Dominating pairs of an (epsilon, delta)-DP step, Poisson subsampled at rate q.

    Every (epsilon, delta)-DP mechanism is a post-processing of the four-outcome
    pair P = (delta, (1-delta) e^eps/(1+e^eps), (1-delta)/(1+e^eps), 0),
    Q = reversed: its privacy region is exactly the (eps, delta) one, so it
    dominates every (eps, delta)-DP mechanism (Kairouz, Oh and Viswanath 2015,
    "The composition theorem for differential privacy", ICML, Theorem 2.5,
    applied to the mechanism of eqs. (12)-(13) in the proof of Theorem 3.3),
    under whichever relation the guarantee holds for. Subsampling mixes it as
    in Theorem 11 of Zhu, Dong and Wang 2022 (add/remove-one neighbours only).
    """
    big, small = (1.0 - delta) * expit(epsilon), (1.0 - delta) * expit(-epsilon)
    p = np.array([delta, big, small, 0.0])
    q_ = np.array([0.0, small, big, delta])
    mixed = q * p + (1.0 - q) * q_
    remove = _FinitePair(tuple(mixed), tuple(q_))
    add = _FinitePair(tuple(q_), tuple(mixed))
    return remove, add


@dataclass(frozen=True)
class _ReplaceOnePoissonGaussianPair:
    """Dominating pair of the Poisson-subsampled Gaussian under replace-one neighbours.

    In units of one record's contribution bound C (noise std ``scale`` * C,
    sampling rate q < 1):

        P = (1-q) N(0, s^2) + q N(1, s^2),   Q = (1-q) N(0, s^2) + q N(-1, s^2).

    Why it dominates. Neighbours D, D' differ in one record, x in D and x' in
    D'; its clipped gradient is u in D and v in D' (||u||, ||v|| <= 1). The
    other records are sampled by the same independent coins in both, so
    their noisy sum is a common independent term: post-processing of the pair
    A_u = (1-q) N(0, s^2 I) + q N(u, s^2 I) vs A_v. For gamma >= 1 the
    advanced joint convexity identity of Balle, Barthe and Gaboardi 2018
    (Theorem 2, an equality for mixtures with a common component) gives

        H_gamma(A_u || A_v) = q H_g(N_u || (1 - b) N_0 + b N_v),  g = 1 + (gamma - 1) / q,  b = gamma / g.

    Writing the right side under N_u, with z ~ N(0, I),
    H_g = E[(1 - c1 X - c2 Y)_+] with c1 = g - gamma, c2 = gamma >= 0,
    X = exp(-u.z/s - |u|^2/2s^2), Y = exp((v-u).z/s - |v-u|^2/2s^2), and for
    any event S, P(S) - c1 E[X 1_S] - c2 E[Y 1_S] is at most
    Phi(-t) - c1 Phi(-t - |u|/s) - c2 Phi(-t - |v-u|/s) where P(S) = Phi(-t)
    (each expectation is smallest on the set of that probability where the
    lognormal is smallest). That bound grows with |u| <= 1 and
    |v - u| <= 2 and is attained at u = e, v = -e, where X and Y are both
    decreasing in e.z: so H_gamma(A_u || A_v) <= H_gamma(P || Q) for every
    gamma >= 1. For gamma < 1, H_gamma(A || B) = 1 - gamma + gamma
    H_{1/gamma}(B || A), the family is closed under swapping u and v, and
    P, Q are mirror images (H(P||Q) = H(Q||P)), so the bound holds for every
    gamma >= 0: (P, Q) is a dominating pair in the sense of Zhu, Dong and Wang
    2022 (Definition 7), it composes adaptively (ibid., Theorem 10), and it is
    tight (attained when the replaced gradient flips from +C e to -C e). It
    is the pair dp_accounting builds for its REPLACE adjacency with sampling
    (its GaussianPrivacyLoss), and the substitution case discussed by Lebeda,
    Regehr, Kamath and Steinke 2024.

    The loss L(o) = log(1 + r e^(o/s^2)) - log(1 + r e^(-o/s^2)) with
    r = q e^(-1/(2 s^2)) / (1 - q) is odd and increasing in the output o, so
    every set {L > l} is a half-line and one direction suffices.
    """

    scale: float
    sampling_probability: float

    @property
    def _log_r(self) -> float:
        q, s = self.sampling_probability, self.scale
        return math.log(q) - math.log1p(-q) - 0.5 / (s * s)

    def loss(self, o: np.ndarray | float) -> np.ndarray:
        """L(o), the log-likelihood ratio log(P/Q) at output o (odd in o)."""
        o = np.asarray(o, dtype=np.float64)
        u = np.abs(o) / self.scale**2
        log_r = self._log_r
        small = u < 30.0
        us = np.where(small, u, 0.0)
        r = math.exp(log_r)
        with np.errstate(over="ignore"):
            near = np.log1p(2.0 * r * np.sinh(us) / (1.0 + r * np.exp(-us)))
        far = np.logaddexp(0.0, log_r + u) - np.log1p(np.exp(log_r - u))
        return np.sign(o) * np.where(small, near, far)

    def _output_at(self, losses: np.ndarray) -> np.ndarray:
        """o with L(o) = l: the positive root w = e^(o/s^2) of r w^2 + (1 - e^l) w - r e^l = 0."""
        log_r = self._log_r
        level = np.asarray(losses, dtype=np.float64)
        pos = level > 0
        a = np.abs(level)
        one_minus = -np.expm1(-a)  # 1 - e^-|level|
        root = np.log(one_minus + np.sqrt(one_minus**2 + 4.0 * np.exp(2.0 * log_r - a)))
        # level > 0: log w = level + root - log 2r; level < 0: log w = log 2r + level - root (the other root form)
        log_w = np.where(pos, a + root - math.log(2.0) - log_r, math.log(2.0) + log_r - a - root)
        log_w = np.where(level == 0, 0.0, log_w)
        return self.scale**2 * log_w

    def tails(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """P(L > l), P(L <= l), Q(L > l), Q(L <= l) at each grid loss l."""
        q, s = self.sampling_probability, self.scale
        x = self._output_at(losses)
        sf_0, cdf_0 = _split_tails(x / s, ndtr(-np.abs(x / s)))
        z_p, z_q = (x - 1.0) / s, (x + 1.0) / s
        sf_p, cdf_p = _split_tails(z_p, ndtr(-np.abs(z_p)))
        sf_q, cdf_q = _split_tails(z_q, ndtr(-np.abs(z_q)))
        return (
            (1.0 - q) * sf_0 + q * sf_p,
            (1.0 - q) * cdf_0 + q * cdf_p,
            (1.0 - q) * sf_0 + q * sf_q,
            (1.0 - q) * cdf_0 + q * cdf_q,
        )

    def loss_range(self, tail: float) -> tuple[float, float]:
        """P puts at most ``tail`` below -z s and above 1 + z s (both its components do)."""
        z = -float(ndtri(tail))
        low, high = self.loss(np.array([-z * self.scale, 1.0 + z * self.scale]))
        return float(low), float(high)


_Loss = _ShiftedNoisePair | _FinitePair | _ReplaceOnePoissonGaussianPair


def _event_pairs(event: DpEvent) -> tuple[_Loss, _Loss] | None:
    """(remove-direction pair, add-direction pair) of a base event, or None if unsupported.

    Sensitivity is 1 in units of the event's noise multiplier; the pairs hold
    under the event's own neighbouring relation. Nested Poisson subsampling
    multiplies the rates (a record survives both independent coin flips with
    probability q1 q2). A Poisson-sampled event under replace-one has a
    dominating pair here only for a Gaussian inner event
    (:class:`_ReplaceOnePoissonGaussianPair`, symmetric, so both directions
    are the same pair); fixed-size sampling without replacement has none
    (its worst case is not symmetric, see :class:`PLDAccountant`).
    """
    q = 1.0
    replace_one = False
    while isinstance(event, PoissonSampledEvent):
        q *= event.sampling_probability
        replace_one = replace_one or event.neighbouring is Neighbouring.REPLACE_ONE
        event = event.event
    if replace_one:
        if not isinstance(event, GaussianEvent):
            return None
        if q == 1.0:  # every record used: the Gaussian with sensitivity 2 (a replaced gradient flips)
            pair: _Loss = _GaussianPair(scale=event.noise_multiplier / 2.0, sampling_probability=1.0, remove=True)
        else:
            pair = _ReplaceOnePoissonGaussianPair(scale=event.noise_multiplier, sampling_probability=q)
        return pair, pair
    if isinstance(event, (GaussianEvent, LaplaceEvent)):
        kind = _GaussianPair if isinstance(event, GaussianEvent) else _LaplacePair
        remove = kind(scale=event.noise_multiplier, sampling_probability=q, remove=True)
        # q = 1: the plain mechanism is symmetric, so one pair serves both directions
        add = remove if q == 1.0 else kind(scale=event.noise_multiplier, sampling_probability=q, remove=False)
        return remove, add
    if isinstance(event, EpsilonDeltaEvent):
        return _epsilon_delta_pairs(event.epsilon, event.delta, q)
    if isinstance(event, ExponentialEvent):
        # epsilon-DP (McSherry and Talwar 2007, Theorem 6): the (epsilon, 0) pair dominates it
        return _epsilon_delta_pairs(event.epsilon, 0.0, q)
    return None
