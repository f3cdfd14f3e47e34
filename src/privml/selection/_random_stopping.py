"""Private selection from private candidates: Liu and Talwar's random stopping.

Liu and Talwar (2019), "Private selection from private candidates" (STOC),
Section 3. A candidate algorithm ``Q`` (for instance: draw hyper-parameters,
train a private model on one part of the data, score it privately on
another) returns a noisy score and an output. Random stopping runs ``Q``
again and again, keeps the output with the best score, and after each run
stops with probability ``gamma``; with ``delta > 0`` it also stops after
``T`` runs. Only the best output and its score are released. The number of
runs depends on the coin flips alone, never on the data, but it must stay
hidden: the bounds below hold for the best of a *random* number of runs;
given that it was k, the output is the best of k, which costs up to
``k epsilon_1`` (a review measured a log-ratio of 2.0 against a claimed 1.0).

Guarantee (for any neighbouring relation under which ``Q`` is private):

- ``Q`` epsilon_1-DP, no cap: the selection is ``3 epsilon_1``-DP (Liu and
  Talwar 2019, Section 3, the random-stopping theorem for pure DP).
- ``Q`` (epsilon_1, delta_1)-DP, cap ``T = ceil(max(ln(1/delta_2) / gamma,
  1 + 1/(e gamma)))``: the selection is
  ``(3 epsilon_1 + 3 sqrt(2 delta_1), sqrt(2 delta_1) T / gamma + delta_2)``-DP
  (Liu and Talwar 2019, Theorem 3.4). Statements of the theorem differ on the
  ``1 / gamma`` in the delta term; privml charges the larger form, so the
  charge is valid under either, at the price of a smaller ``delta_1`` (at
  epsilon = 1, delta = 1e-5 and gamma = 0.2, ``T = 62`` and
  ``delta_1 = 1.3e-16`` instead of ``3.3e-15``).

:class:`RandomStopping` solves for the per-candidate budget that makes the
total exactly a target (epsilon, delta): ``delta_2 = delta / 2`` and
``sqrt(2 delta_1) T / gamma = delta / 2``, then ``epsilon_1`` from
``3 epsilon_1 + 3 sqrt(2 delta_1) = epsilon``. Papernot and Steinke (2022,
"Hyperparameter tuning with Renyi differential privacy") generalise the
stopping distribution and give tighter Renyi-DP bounds; this module
implements the original theorem only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from privml._random import RandomState, check_random_state
from privml._validation import check_delta, check_epsilon
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

__all__ = ["MIN_CANDIDATE_EPSILON", "RandomStopping", "RandomStoppingOutcome"]

#: A selection whose candidates would each get less epsilon than this is refused (nothing useful is left).
MIN_CANDIDATE_EPSILON = 1e-6

OutputT = TypeVar("OutputT")


@dataclass(frozen=True)
class RandomStoppingOutcome(Generic[OutputT]):
    """What a random-stopping selection releases: the best output, its score, and nothing else.

    Attributes
    ----------
    output :
        The output of the best-scoring run of the candidate algorithm.
    score : float
        Its (noisy) score, as the candidate algorithm released it.
    runs : int
        How many times the candidate algorithm ran: a function of the coin
        flips only, but **not covered by the guarantee**: publishing it with
        the output voids the bound (see the module docstring). For
        diagnostics inside the trust boundary; never print or store it.
    privacy : PrivacyGuarantee
        The guarantee of the whole selection.
    """

    output: OutputT
    score: float
    runs: int
    privacy: PrivacyGuarantee


@dataclass(frozen=True)
class RandomStopping:
    """Liu and Talwar's random stopping at a total budget (epsilon, delta).

    Every parameter is checked at construction, before any candidate runs.

    Parameters
    ----------
    epsilon : float
        Total epsilon of the selection, > 0.
    delta : float, default 0
        Total delta, in [0, 1). 0: pure DP, no cap on the number of runs.
    stop_probability : float, default 0.2
        ``gamma`` in (0, 1]: the probability of stopping after each run
        (expected number of runs ``1 / gamma`` without a cap).
    neighbouring : Neighbouring or str, default replace-one
        The relation under which the candidate algorithm is private; the
        selection's guarantee holds under the same relation.

    Attributes
    ----------
    candidate_epsilon, candidate_delta : float
        ``(epsilon_1, delta_1)``: the budget each run of the candidate
        algorithm must meet, under ``neighbouring``, its score included.
    max_runs : int or None
        The cap ``T`` (None when ``delta = 0``).

    Raises
    ------
    ValueError
        On a bad parameter, or when ``epsilon`` is too small to leave each
        candidate :data:`MIN_CANDIDATE_EPSILON` at this delta.

    Examples
    --------
    >>> selection = RandomStopping(epsilon=1.0, delta=1e-5)
    >>> round(selection.candidate_epsilon, 6), selection.max_runs
    (0.333333, 62)
    >>> print(selection.privacy)
    (1, 1e-05)-DP under replace-one neighbours [liu-talwar]
    >>> outcome = selection.run(lambda rng: (rng.random(), "a model"), random_state=0)
    >>> outcome.output, 1 <= outcome.runs <= 62
    ('a model', True)
    """

    epsilon: float
    delta: float = 0.0
    stop_probability: float = 0.2
    neighbouring: Neighbouring | str = Neighbouring.REPLACE_ONE
    candidate_epsilon: float = field(init=False)
    candidate_delta: float = field(init=False)
    max_runs: int | None = field(init=False)

    def __post_init__(self) -> None:
        epsilon = check_epsilon(self.epsilon)
        delta = check_delta(self.delta)
        gamma = self.stop_probability
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma <= 1:
            raise ValueError(f"stop_probability must be in (0, 1], got {gamma!r}")
        gamma = float(gamma)
        if delta == 0:
            eps1, delta1, cap = epsilon / 3.0, 0.0, None
        else:
            delta2 = delta / 2.0
            cap = math.ceil(max(math.log(1.0 / delta2) / gamma, 1.0 + 1.0 / (math.e * gamma)))
            delta1 = (delta / 2.0 * gamma / cap) ** 2 / 2.0
            eps1 = (epsilon - 3.0 * math.sqrt(2.0 * delta1)) / 3.0
        if eps1 < MIN_CANDIDATE_EPSILON:
            raise ValueError(f"epsilon = {epsilon:g} is too small for a private selection at delta = {delta:g}")
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "stop_probability", gamma)
        object.__setattr__(self, "neighbouring", Neighbouring.parse(self.neighbouring))
        object.__setattr__(self, "candidate_epsilon", eps1)
        object.__setattr__(self, "candidate_delta", delta1)
        object.__setattr__(self, "max_runs", cap)

    @property
    def privacy(self) -> PrivacyGuarantee:
        """The guarantee of the whole selection (Liu and Talwar 2019, Section 3 and Theorem 3.4).

        ``3 epsilon_1 + 3 sqrt(2 delta_1)`` and, with a cap,
        ``sqrt(2 delta_1) T / gamma + delta / 2``: the target up to rounding.
        """
        eps1, delta1, cap = self.candidate_epsilon, self.candidate_delta, self.max_runs
        total_epsilon = 3.0 * eps1 + 3.0 * math.sqrt(2.0 * delta1)
        total_delta = 0.0 if cap is None else math.sqrt(2.0 * delta1) * cap / self.stop_probability + self.delta / 2.0
        relation = Neighbouring.parse(self.neighbouring)
        return PrivacyGuarantee(total_epsilon, total_delta, relation, accountant="liu-talwar")

    @property
    def expected_runs(self) -> float:
        """``E[runs]``: ``1 / gamma`` uncapped, ``(1 - (1 - gamma)^T) / gamma`` with the cap ``T``."""
        gamma = self.stop_probability
        if self.max_runs is None:
            return 1.0 / gamma
        return (1.0 - (1.0 - gamma) ** self.max_runs) / gamma

    def run(
        self, candidate: Callable[[np.random.Generator], tuple[float, OutputT]], random_state: RandomState = None
    ) -> RandomStoppingOutcome[OutputT]:
        """Run ``candidate`` until the coin says stop; release the best output and its score.

        Parameters
        ----------
        candidate : callable
            ``candidate(rng) -> (score, output)``: one run of the candidate
            algorithm, drawing its randomness from ``rng``. It must be
            (:attr:`candidate_epsilon`, :attr:`candidate_delta`)-DP under
            :attr:`neighbouring` as a whole, the score included (e.g. a model
            trained at that budget on one part of the data and scored with
            Laplace noise on a disjoint part: parallel composition). The
            selection cannot check this; it is the caller's proof obligation.
        random_state : None, int or numpy Generator
            Source of the stopping coins (and of ``candidate``'s randomness).

        Returns
        -------
        RandomStoppingOutcome
            The best output (ties: the earliest), its score, the number of
            runs and :attr:`privacy`. The other runs' scores and outputs are
            not kept: the theorem covers the best one only.
        """
        if not callable(candidate):
            raise TypeError(f"candidate must be callable, got {type(candidate).__name__}")
        rng = check_random_state(random_state)
        best: tuple[float, OutputT] | None = None
        runs = 0
        while True:
            runs += 1
            score, output = candidate(rng)
            score = float(score)
            if not math.isfinite(score):
                raise ValueError(f"candidate scores must be finite, got {score!r}")
            if best is None or score > best[0]:
                best = (score, output)
            # The stopping coin is drawn after every run, even the last one allowed.
            if rng.random() < self.stop_probability or (self.max_runs is not None and runs >= self.max_runs):
                break
        assert best is not None  # at least one run
        return RandomStoppingOutcome(output=best[1], score=best[0], runs=runs, privacy=self.privacy)
