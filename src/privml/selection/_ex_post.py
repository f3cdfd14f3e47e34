"""Ex-post privacy: a privacy loss that depends on the output, and its ledger entries.

Ligett, Neel, Roth, Waggoner and Wu (2017, "Accuracy First"; Neel's slides,
"An adaptive definition of differential privacy") define the ex-post privacy
loss of an output ``o`` as ``Loss(o) = max_{D ~ D'} log(P[A(D) = o] /
P[A(D') = o])``, and call ``A`` ``E(o)``-ex-post DP when ``Loss(o) <= E(o)``
for every ``o``. A search that stops early has a small ``E(o)``; one that runs
long pays more, and the bill is known only when it stops.

This module states what one search costs:

* releases: the cost of the prefix of released models, either a
  noise-reduction chain (``eps_t``: :func:`noise_reduction_prefix_costs`) or
  independent releases (basic composition, ``sum eps_s`` and ``sum delta_s``:
  :func:`independent_prefix_costs`; Dwork and Roth 2014, Theorem 3.16);
* the private accuracy check: ``eps_AT`` for InteractiveAboveThreshold,
  whatever the number of checks (the slides' Algorithm 2 and its theorem:
  ``eps_AT + eps_t`` when the prefix is ``eps_t``-DP).

With a Gaussian chain the prefix is ``(eps_t, delta)``-DP rather than pure. The
slides' proof bounds the stopping probability pointwise, ``P_D[stop at t |
prefix] <= e^eps_AT P_D'[stop at t | prefix]``; writing ``g = min(1, e^eps_AT
P_D'[stop at t | prefix])``, a [0, 1]-valued function of the prefix, the
(eps_t, delta) guarantee of the prefix gives ``E_D[g] <= e^eps_t E_D'[g] +
delta``, so every set of outcomes stopping at ``t`` has probability at most
``e^(eps_AT + eps_t) P_D'[.] + delta``: the ex-post guarantee is ``(eps_AT +
eps_t, delta)``. :class:`ExPostCost` records it. The failure outcome (no model
passed, all ``T`` released) is an outcome like any other and costs
``eps_AT + eps_T``: never "-1" (the pitfall of Ligett et al.'s reference scripts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from privml._validation import check_count, check_delta, check_epsilon
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

__all__ = [
    "EX_POST_ACCOUNTANT",
    "ExPostCost",
    "independent_prefix_costs",
    "noise_reduction_prefix_costs",
]

#: ``PrivacyGuarantee.accountant`` of an ex-post guarantee.
EX_POST_ACCOUNTANT = "ex-post"


def noise_reduction_prefix_costs(epsilons: Sequence[float], delta: float = 0.0) -> tuple[tuple[float, float], ...]:
    """Cost ``(eps_t, delta)`` of publishing the first ``t`` releases of a noise-reduction chain.

    The chain's prefix is a post-processing of its last element
    (:mod:`privml.selection._noise_reduction`, "Theorem (noise reduction)").
    """
    delta = check_delta(delta)
    return tuple((check_epsilon(e, "epsilons"), delta) for e in epsilons)


def independent_prefix_costs(epsilons: Sequence[float], delta: float = 0.0) -> tuple[tuple[float, float], ...]:
    """Cost ``(sum_{s<=t} eps_s, t delta)`` of the first ``t`` of independent releases.

    Basic composition (Dwork and Roth 2014, Theorem 3.16); the doubling
    baseline of Ligett et al. (2017) pays this.
    """
    delta = check_delta(delta)
    costs, total = [], 0.0
    for t, e in enumerate(epsilons, start=1):
        total += check_epsilon(e, "epsilons")
        costs.append((total, min(1.0, t * delta)))
    return tuple(costs)


@dataclass(frozen=True)
class ExPostCost:
    """The ex-post privacy loss of one interactive search.

    Attributes
    ----------
    at_epsilon : float
        Budget of the private accuracy check (InteractiveAboveThreshold).
    release_epsilon, release_delta : float
        Cost of the released prefix (see :func:`noise_reduction_prefix_costs`,
        :func:`independent_prefix_costs`).
    n_released : int
        How many models were published.
    passed : bool
        Whether the last published model passed the check (False: the search
        ran out and every model was published).
    neighbouring : Neighbouring
        The relation both costs are stated under.

    Notes
    -----
    Ex-post guarantee ``(at_epsilon + release_epsilon, release_delta)`` under
    ``neighbouring`` (Ligett et al. 2017, the ex-post AboveThreshold theorem
    of the slides' Algorithm 2; the delta argument is in the module
    docstring). It holds for this outcome only: it is not an a-priori
    guarantee of the search.
    """

    at_epsilon: float
    release_epsilon: float
    release_delta: float
    n_released: int
    passed: bool
    neighbouring: Neighbouring = Neighbouring.REPLACE_ONE

    def __post_init__(self) -> None:
        check_epsilon(self.at_epsilon, "at_epsilon")
        check_epsilon(self.release_epsilon, "release_epsilon")
        if not 0 <= self.release_delta <= 1 or math.isnan(self.release_delta):
            raise ValueError(f"release_delta must be in [0, 1], got {self.release_delta!r}")
        check_count(self.n_released, "n_released")
        object.__setattr__(self, "neighbouring", Neighbouring.parse(self.neighbouring))

    @property
    def epsilon(self) -> float:
        """``at_epsilon + release_epsilon``."""
        return self.at_epsilon + self.release_epsilon

    @property
    def delta(self) -> float:
        """``release_delta`` (the check itself is pure)."""
        return self.release_delta

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """The ex-post ``(epsilon, delta)`` as a :class:`~privml.PrivacyGuarantee`, accountant ``"ex-post"``."""
        return PrivacyGuarantee(self.epsilon, self.delta, self.neighbouring, accountant=EX_POST_ACCOUNTANT)
