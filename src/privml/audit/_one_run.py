"""One-run privacy auditing: many canaries, each in or out by a coin flip, one training run.

Steinke, Nasr and Jagielski (NeurIPS 2023), "Privacy Auditing with One (1)
Training Run". The auditor draws m canaries and includes each one
independently with probability 1/2 (S_i in {-1, +1}); the mechanism runs
once; from its output alone the auditor scores every canary, guesses "in" on
the k+ highest scores and "out" on the k- lowest, and abstains on the rest.
With r = k+ + k- guesses and W correct ones, the paper's main theorem
(Theorem 3; Proposition 5 states the delta > 0 form used here) says that for
an (epsilon, delta)-DP mechanism, DP under adding or removing one canary with
everything else fixed,

    P[W >= v] <= P[Binomial(r, q) >= v] + 2 m delta max_{1<=i<=v} P[v - i <= Binomial(r, q) < v] / i,
    q = e^eps / (1 + e^eps).

The first term is what r independent eps-DP randomised responses give: the
guesses do no better than that *without* group privacy, because the analysis
goes through the link between DP and generalisation (each guess is about one
canary's coin, and DP limits each coin's influence on the whole output). The
second term pays for delta, linearly in m. The audit reports the largest
epsilon whose bound the observed count rejects: a one-sided test of
"the mechanism is (eps, delta)-DP" at level 1 - confidence, inverted.

Which analysis. ``epsilon_lower`` is the Steinke et al. (eps, delta)
analysis exactly, sound for every (eps, delta)-DP mechanism. Given the run's
claimed privacy profile (``claimed_profile``: its accountant's delta(eps)),
:func:`audit_from_scores` also tests the whole claim with the f-DP analysis
of Mahloujifar, Melis and Chaudhuri (2024), "Auditing f-Differential Privacy
in One Run" (:mod:`privml.audit._one_run_fdp`), and reports the largest mu
whose mu-GDP the count refutes: a DP-SGD claim is a curve much closer to a
Gaussian's than to one (eps, delta) pair, and refuting the curve the
accountant stated refutes the claim.

What an audit proves. The coins S must be independent of everything but the
output, and the guesses a function of the output and of public information
(the canaries themselves, never S). A bound above the claimed epsilon says,
at the stated confidence, that the implementation does not meet its claim
(under add/remove of one canary); a bound below it proves nothing: the
audit is a test, and it is itself not differentially private (it reads S).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import expit

from privml._random import RandomState, check_random_state
from privml._validation import check_count, check_delta, check_epsilon, check_finite_array
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.audit._one_run_fdp import InverseBlowUp, fdp_count_rejected, gdp_mu_lower_bound
from privml.neighbouring import Neighbouring

__all__ = [
    "SCORE_KINDS",
    "OneRunAudit",
    "audit_from_scores",
    "audit_from_statistics",
    "default_guess_counts",
    "idealised_bound",
    "idealised_curve",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
    "simulate_gaussian_audit",
]

SCORE_KINDS = ("black-box", "white-box")

# Epsilon at which e^eps / (1 + e^eps) rounds to 1.0 in float64: no count can reject beyond it.
_EPS_CEILING = 40.0
# Grid points scanned before bisecting (the delta term is not proven monotone in epsilon).
_SCAN_POINTS = 256
_BISECT_STEPS = 60


def _check_confidence(confidence: object) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating, np.integer)):
        raise TypeError(f"confidence must be a number in (0, 1), got {confidence!r}")
    c = float(confidence)
    if not 0 < c < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return c


def _check_counts(m: object, guesses: object, correct: object) -> tuple[int, int, int]:
    m_ = check_count(m, "m")
    r = check_count(guesses, "guesses", minimum=0)
    v = check_count(correct, "correct", minimum=0)
    if r > m_:
        raise ValueError(f"guesses must be <= m (one guess per canary at most), got {r} guesses for m = {m_}")
    if v > r:
        raise ValueError(f"correct must be <= guesses, got {v} correct of {r}")
    return m_, r, v


def _p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    # Steinke et al. Theorem 3 / Proposition 5: the probability bound of >= v correct of r under (eps, delta)-DP.
    if v == 0:
        return 1.0
    q = float(expit(epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0.0:
        return min(1.0, tail)
    i = np.arange(1, v + 1)
    # cumsum(pmf(v - 1), ..., pmf(v - i)) = P[v - i <= Binomial(r, q) < v]
    window = np.cumsum(stats.binom.pmf(v - i, r, q))
    alpha = float(np.max(window / i))
    return min(1.0, tail + 2.0 * m * delta * alpha)


def one_run_p_value(m: int, guesses: int, correct: int, *, epsilon: float, delta: float = 0.0) -> float:
    """Upper bound on P[at least ``correct`` of ``guesses`` right] for an (epsilon, delta)-DP mechanism.

    Steinke, Nasr and Jagielski (2023), Theorem 3 (delta = 0: the Binomial(r, e^eps / (1 + e^eps)) tail) and
    Proposition 5 (delta > 0: plus ``2 m delta max_i P[v - i <= Binomial < v] / i``). ``epsilon`` may be 0.
    """
    m_, r, v = _check_counts(m, guesses, correct)
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    return _p_value(m_, r, v, eps, check_delta(delta))


def one_run_epsilon_lower_bound(
    m: int, guesses: int, correct: int, *, delta: float = 0.0, confidence: float = 0.95
) -> float:
    """The largest epsilon that ``correct`` right guesses out of ``guesses`` reject at ``confidence``.

    Every epsilon in ``[0, result)`` has ``one_run_p_value(...) <= 1 - confidence``: a mechanism claiming any
    of them is refuted at that level (the hypotheses tested are (eps, delta)-DP with this ``delta``). The
    search scans a grid of epsilons from 0 and bisects the first crossing, so the result is the start of the
    first epsilon the count does not reject (not merely some crossing: with delta > 0 the bound is not known
    to be monotone in epsilon). Returns 0.0 when even epsilon = 0 is not rejected (chance-level guessing).

    Parameters
    ----------
    m:
        Number of canaries, each included independently with probability 1/2 (enters the delta term only).
    guesses:
        r = k+ + k-, the canaries guessed on (the rest abstained).
    correct:
        v, the guesses that matched the canary's inclusion.
    delta:
        The delta of the (eps, delta)-DP hypotheses, in [0, 1).
    confidence:
        1 - beta, in (0, 1).
    """
    m_, r, v = _check_counts(m, guesses, correct)
    d = check_delta(delta)
    level = 1.0 - _check_confidence(confidence)
    if v == 0 or _p_value(m_, r, v, 0.0, d) > level:
        return 0.0
    # delta = 0: the binomial tail grows with q (stochastic order), so one bisection finds the crossing.
    grid = np.linspace(0.0, _EPS_CEILING, (_SCAN_POINTS if d > 0 else 1) + 1)
    lo, hi = 0.0, _EPS_CEILING
    for eps in grid[1:]:
        if _p_value(m_, r, v, float(eps), d) > level:
            hi = float(eps)
            break
        lo = float(eps)
    else:  # rejected up to the ceiling (cannot happen for r >= 1, kept as a stop)
        return lo
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if _p_value(m_, r, v, mid, d) <= level:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class OneRunAudit:
    """Result of a one-run audit (Steinke, Nasr and Jagielski 2023).

    Attributes
    ----------
    m:
        Canaries drawn (each included with probability 1/2).
    guesses, correct:
        r = ``guesses_in + guesses_out`` and the number right, for the guess count reported.
    guesses_in, guesses_out:
        k+ (top scores guessed "in") and k- (bottom scores guessed "out").
    epsilon_lower:
        The epsilon lower bound at ``confidence`` (with ``delta``), after the multiple-comparison correction
        over the ``tried`` guess counts.
    confidence, delta:
        The audit's confidence (1 - beta) and the delta of the hypotheses tested.
    claimed_epsilon:
        The guarantee the audited run claims under ``neighbouring`` (None: none compared).
    neighbouring:
        The relation ``epsilon_lower`` is a bound under: what one canary's coin switches between (its
        absence or a null record: add/remove-one; a counterpart record: replace-one).
    scores_from:
        ``"black-box"`` (scores from the released output only, e.g. the canary's loss) or ``"white-box"``
        (from internals, e.g. the model updates' alignment with a gradient canary).
    tried:
        Number of guess counts tried; each was tested at ``1 - (1 - confidence) / tried`` (union bound).
    claim_note:
        How the claimed epsilon was brought to ``neighbouring`` (empty when it was stated under it).
    claim_rejected:
        Whether the f-DP analysis (Mahloujifar, Melis and Chaudhuri 2024) refutes the claimed privacy profile
        at ``confidence`` for some tried guess count (None: no profile given).
    mu_lower:
        The largest mu whose mu-GDP that analysis refutes (None: not computed). A description of the leakage
        in the Gaussian family, not an (eps, delta) bound for a mechanism that is not Gaussian-shaped.
    """

    m: int
    guesses: int
    correct: int
    epsilon_lower: float
    confidence: float
    delta: float
    claimed_epsilon: float | None = None
    neighbouring: str = Neighbouring.ADD_REMOVE_ONE.value
    scores_from: str = "black-box"
    guesses_in: int = 0
    guesses_out: int = 0
    tried: int = 1
    claim_note: str = ""
    claim_rejected: bool | None = None
    mu_lower: float | None = None

    @property
    def exceeds_claim(self) -> bool:
        """True when the audit refutes the claim (at the stated confidence): the (eps, delta) lower bound is above
        the claimed epsilon, or the f-DP test rejects the claimed privacy profile."""
        above = self.claimed_epsilon is not None and self.epsilon_lower > self.claimed_epsilon
        return above or bool(self.claim_rejected)

    def to_dict(self) -> dict[str, Any]:
        """Plain fields for JSON (every one a public input or a count from the audit's own test)."""
        out = asdict(self)
        out["exceeds_claim"] = self.exceeds_claim
        return out


def default_guess_counts(m: int) -> list[int]:
    """The guess counts r tried when none are given: 10, 20, 50, 100, ... up to m, and m itself.

    Fixed before the run (a function of m alone), so the union bound over them is valid.
    """
    m_ = check_count(m, "m")
    counts: set[int] = set()
    base = 10
    while base <= m_:
        for f in (1, 2, 5):
            if f * base <= m_:
                counts.add(f * base)
        base *= 10
    counts.add(m_)
    return sorted(counts)


def _guess_pairs(m: int, guesses: int | Sequence[int] | Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    # Each total r is tried both as a symmetric split (ceil(r/2) "in", floor(r/2) "out") and as "in" only:
    # black-box scores separate included canaries (low loss) better than excluded ones, white-box both ways.
    if guesses is None:
        totals: list[Any] = default_guess_counts(m)
    elif isinstance(guesses, (int, np.integer)):
        totals = [guesses]  # check_count below refuses a bool
    else:
        totals = list(guesses)
        if not totals:
            raise ValueError("guesses must name at least one guess count")
    pairs: list[tuple[int, int]] = []
    for item in totals:
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ValueError(f"a guess pair must be (k_plus, k_minus), got {item!r}")
            kp = check_count(item[0], "k_plus", minimum=0)
            km = check_count(item[1], "k_minus", minimum=0)
            candidates = [(kp, km)]
        else:
            r = check_count(item, "guesses")
            candidates = [((r + 1) // 2, r // 2), (r, 0)]
        for kp, km in candidates:
            if kp + km == 0 or kp + km > m:
                raise ValueError(f"guesses must be between 1 and m = {m}, got k+ = {kp}, k- = {km}")
            if (kp, km) not in pairs:
                pairs.append((kp, km))
    return pairs


def _correct_guesses(order: np.ndarray, included: np.ndarray, k_plus: int, k_minus: int) -> int:
    """Right guesses: "in" on the k+ first of ``order`` (highest score first), "out" on the k- last."""
    m = included.shape[0]
    top, bottom = order[:k_plus], order[m - k_minus:] if k_minus else order[:0]
    return int(included[top].sum() + (~included[bottom]).sum())


def _check_scores(scores: object, included: object) -> tuple[np.ndarray, np.ndarray]:
    """(scores, inclusion bits as bools), one of each per canary, at least one canary."""
    s = check_finite_array(scores, "scores", ndim=1)
    inc = np.asarray(included)
    if inc.ndim != 1 or inc.shape[0] != s.shape[0]:
        raise ValueError(f"included must be 1-D with one bit per score ({s.shape[0]}), got shape {inc.shape}")
    if inc.dtype != bool:
        if not np.all(np.isin(inc, (0, 1))):
            raise ValueError("included must hold only 0/1 or booleans")
        inc = inc.astype(bool)
    if s.shape[0] == 0:
        raise ValueError("scores must hold at least one canary")
    return s, inc


def audit_from_scores(
    scores: object,
    included: object,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    claimed_epsilon: float | None = None,
    guesses: int | Sequence[int] | Sequence[tuple[int, int]] | None = None,
    neighbouring: Neighbouring | str = Neighbouring.ADD_REMOVE_ONE,
    scores_from: str = "black-box",
    claim_note: str = "",
    claimed_profile: InverseBlowUp | None = None,
) -> OneRunAudit:
    """Turn each canary's score and inclusion bit into the best valid epsilon lower bound.

    Guesses: the k+ highest scores are guessed "in", the k- lowest "out" (higher score = more likely
    included; pass ``-loss`` for a loss). Ties are broken by canary index, which is fixed before the run
    and so independent of the coins.

    Multiple comparisons: reporting the best of K counts swept on the same run would overstate the
    confidence, so each tried (k+, k-) is tested at ``(1 - confidence) / K`` (a union bound over counts fixed
    before the scores are seen: by default :func:`default_guess_counts`, each r split evenly and all "in").

    Parameters
    ----------
    scores:
        One finite score per canary (1-D); m = its length.
    included:
        The canaries' inclusion bits (bool or 0/1), drawn independently with probability 1/2.
    delta, confidence:
        The hypotheses' delta and the audit's confidence.
    claimed_epsilon:
        The run's claimed epsilon under ``neighbouring`` (None: no comparison).
    guesses:
        None (the default sweep), one total r, a list of totals, or a list of explicit (k+, k-) pairs.
    neighbouring:
        The relation one coin flip realises, which must be the claim's: add/remove-one when an excluded
        canary is absent (or, zero-out, a null record), replace-one when it is replaced by a counterpart
        record (Theorem 3 needs only that flipping one coin, the others fixed, is one (eps, delta)-DP step).
        A claim stated under another relation must be converted first (:mod:`privml.neighbouring`; say how
        in ``claim_note``).
    scores_from:
        ``"black-box"`` or ``"white-box"``.
    claimed_profile:
        The claim as a whole curve (:func:`privml.audit._one_run_fdp.profile_inverse` of the accountant's
        delta(eps)), or None. Given, three analyses share the level: the (eps, delta) bound, the f-DP test of
        the profile (``claim_rejected``) and the mu-GDP bound (``mu_lower``), each guess count tested at
        ``(1 - confidence) / (3 K)``.
    """
    s, inc = _check_scores(scores, included)
    m = int(s.shape[0])
    d = check_delta(delta)
    c = _check_confidence(confidence)
    claim = None if claimed_epsilon is None else check_epsilon(claimed_epsilon, "claimed_epsilon", allow_inf=True)
    rel = Neighbouring.parse(neighbouring)
    if scores_from not in SCORE_KINDS:
        raise ValueError(f"scores_from must be one of {SCORE_KINDS}, got {scores_from!r}")
    pairs = _guess_pairs(m, guesses)
    analyses = 1 if claimed_profile is None else 3
    level = (1.0 - c) / (len(pairs) * analyses)
    order = np.argsort(-s, kind="stable")  # highest score first; ties by index
    best: tuple[float, int, int, int] | None = None
    rejected, mu = False, 0.0
    for kp, km in pairs:
        v = _correct_guesses(order, inc, kp, km)
        eps = one_run_epsilon_lower_bound(m, kp + km, v, delta=d, confidence=1.0 - level)
        if best is None or eps > best[0]:
            best = (eps, kp, km, v)
        if claimed_profile is not None:
            rejected = rejected or fdp_count_rejected(claimed_profile, m, kp + km, v, level=level)
            mu = max(mu, gdp_mu_lower_bound(m, kp + km, v, confidence=1.0 - level))
    assert best is not None
    eps, kp, km, v = best
    return OneRunAudit(
        m=m, guesses=kp + km, correct=v, epsilon_lower=eps, confidence=c, delta=d, claimed_epsilon=claim,
        neighbouring=rel.value, scores_from=scores_from, guesses_in=kp, guesses_out=km,
        tried=len(pairs) * analyses, claim_note=claim_note,
        claim_rejected=None if claimed_profile is None else rejected,
        mu_lower=None if claimed_profile is None else mu,
    )


def audit_from_statistics(
    statistics: dict[str, np.ndarray],
    included: object,
    *,
    confidence: float = 0.95,
    **options: Any,
) -> tuple[OneRunAudit, str]:
    """The best audit over several scores of the same canaries, each tested at ``(1 - confidence) / K``.

    ``statistics`` maps a name to one score per canary (K fixed before the run, e.g.
    :func:`privml.audit._one_run_torch.white_box_statistics`); ``options`` are :func:`audit_from_scores`'s
    (delta, claim, profile, guesses, relation, ...). Returns the audit with the highest epsilon bound and the
    name of its statistic; the claim counts as refuted (``claim_rejected``) when the f-DP test refutes it for
    any statistic, and ``mu_lower`` is the largest over them (all under the same union bound).
    """
    if not statistics:
        raise ValueError("statistics must name at least one score")
    c = _check_confidence(confidence)
    level = (1.0 - c) / len(statistics)
    best: tuple[OneRunAudit, str] | None = None
    rejected, mu = False, 0.0
    for name, scores in statistics.items():
        result = audit_from_scores(scores, included, confidence=1.0 - level, **options)
        rejected, mu = rejected or bool(result.claim_rejected), max(mu, result.mu_lower or 0.0)
        if best is None or result.epsilon_lower > best[0].epsilon_lower:
            best = (result, name)
    assert best is not None
    result, name = best
    profiled = result.claim_rejected is not None
    return replace(result, confidence=c, tried=result.tried * len(statistics),
                   claim_rejected=rejected if profiled else None, mu_lower=mu if profiled else None), name


def idealised_curve(epsilon: float, m: int, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Lower bound against the number of guesses r = 1..m in the idealised setting.

    The idealised setting of Steinke et al. (their Section 7, first figures): the mechanism is eps-DP and the
    auditor's guesses are as good as eps-DP allows, each right with probability e^eps / (1 + e^eps)
    (randomised response); the count of correct guesses is its expectation, rounded down to an integer
    (conservative by under one guess), and the bound is taken at delta = 0, one guess count at a time (no
    multiple-comparison correction: this is the theory's curve, not an audit). Returns (r, bound).
    """
    eps = check_epsilon(epsilon)
    m_ = check_count(m, "m")
    c = _check_confidence(confidence)
    q = float(expit(eps))
    rs = np.arange(1, m_ + 1)
    bounds = np.array([one_run_epsilon_lower_bound(m_, int(r), int(math.floor(r * q)), confidence=c) for r in rs])
    return rs, bounds


def idealised_bound(epsilon: float, m: int, confidence: float = 0.95) -> float:
    """The best lower bound over r of :func:`idealised_curve`: what a perfect auditor of an eps-DP mechanism
    could certify with m canaries (Steinke et al. 2023, the idealised setting of Section 7)."""
    return float(np.max(idealised_curve(epsilon, m, confidence)[1]))


def simulate_gaussian_audit(
    epsilon: float,
    m: int,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses: int | Sequence[int] | Sequence[tuple[int, int]] | None = None,
    random_state: RandomState = None,
) -> OneRunAudit:
    """A one-run audit of the Gaussian mechanism, simulated directly (white-box canaries).

    Canary i lives on its own coordinate: the mechanism releases ``y = s + N(0, sigma^2 I_m)`` with s_i = 1
    when canary i is included (probability 1/2) and 0 otherwise. Adding or removing one canary moves y by 1
    in L2 norm, so with sigma from the analytic Gaussian calibration (Balle and Wang 2018) at (epsilon,
    delta) the release is exactly (epsilon, delta)-DP under add/remove; the score of canary i is y_i.
    The audit's bound must stay at or below ``epsilon`` (with probability >= confidence).
    """
    eps = check_epsilon(epsilon)
    m_ = check_count(m, "m")
    d = check_delta(delta)
    if d == 0:
        raise ValueError("delta must be > 0 for the Gaussian mechanism (it is never pure DP)")
    rng = check_random_state(random_state)
    sigma = analytic_gaussian_sigma(eps, d, 1.0)
    included = rng.random(m_) < 0.5
    scores = included.astype(float) + sigma * rng.standard_normal(m_)
    return audit_from_scores(scores, included, delta=d, confidence=confidence, claimed_epsilon=eps,
                             guesses=guesses, scores_from="white-box")
