"""What a one-run audit of a linear method tests: the fitted model's claim, as one pair and as a curve.

:func:`linear_claim` reads a fitted privml linear estimator (or Accuracy
First) and returns what :func:`privml.audit.audit_from_scores`
compares the canaries' count against:

* ``epsilon`` and ``delta``: the (eps, delta) pair Steinke, Nasr and
  Jagielski's analysis tests;
* ``profile``: the claim as a whole trade-off curve for the f-DP test of
  Mahloujifar, Melis and Chaudhuri (2024), built from the estimator's own
  accountant, and only from what it states. A refuted curve refutes the
  claim only if the curve *is* the claim, so each method gets the curve its
  accountant stands behind:

  ========================  ==========================================================
  method (accountant)       claimed curve
  ========================  ==========================================================
  DP-SGD, ``poisson``       the accountant's delta(eps) for the run's own event (PLD
  (``pld`` / ``rdp``)       or RDP, add/remove-one or replace-one as fitted)
  DP-CD (``gdp``)           mu-GDP with the fit's ``mu = sqrt(steps) / s`` (exact)
  anything else             the one (eps, delta) pair stated: output and objective
                            perturbation (single release), DP-SGD ``linear`` /
                            ``direct`` (basic composition), DP-CD ``rdp``
  ========================  ==========================================================

Accuracy First (Ligett et al. 2017) states an **ex-post** guarantee: the
epsilon it reports depends on where its search stopped. Which epsilon the
audit may compare against:

* ``delta = 0`` (the Laplace chain, the default): the guarantee is a
  pointwise bound on the privacy loss, ``P[o | D] <= e^{E(o)} P[o | D']``
  for every output o and neighbours D, D', with ``E(o)`` the ex-post
  epsilon of that output. Steinke et al.'s proof of Theorem 3 conditions on
  the output: given o (and the coins already read), each canary's coin is
  right with probability at most ``e^eps / (1 + e^eps)`` because the
  likelihood ratio of o is at most ``e^eps``; with the ratio bounded by
  ``e^{E(o)}`` the same step gives ``e^{E(o)} / (1 + e^{E(o)})``, so given o
  the correct count is dominated by ``Binomial(r, q(E(o)))``. A test at level
  alpha for every o is a test at level alpha overall: comparing the (delta =
  0) bound with the **ex-post epsilon of the observed run** is sound. The
  f-DP test is not applied (its analysis is not stated for an
  output-dependent curve).
* ``delta > 0`` (the Gaussian chain): the ex-post loss exceeds ``E(o)`` with
  probability up to delta, which is not a pointwise bound, and Steinke et
  al.'s delta term is proven for a fixed (eps, delta) only. The audit then
  compares against the mechanism's **worst case**, ``(eps_AT + eps_max,
  delta)``, the (eps, delta)-DP guarantee of the whole search whatever it
  published (every prefix is a post-processing of the full chain and the
  check), which the observed ex-post epsilon can only undercut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privml.accounting._dpsgd import dpsgd_accountant
from privml.audit._one_run_fdp import InverseBlowUp, accountant_profile, epsilon_delta_inverse, gaussian_inverse
from privml.linear._dpcd.estimators import DPCDClassifier
from privml.linear._dpsgd import DPSGDClassifier
from privml.neighbouring import Neighbouring
from privml.selection._accuracy_first import AccuracyFirstClassifier

__all__ = ["OneRunClaim", "linear_claim"]

#: How far the accountant's curve is sampled: eps from 0 to this multiple of the claim (at least 1).
PROFILE_SPAN = 4.0


@dataclass(frozen=True, eq=False)
class OneRunClaim:
    """The claim a one-run audit compares against (``epsilon`` None: no claim, a baseline).

    ``profile`` is the claim's inverse blow-up for the f-DP test (None: not tested); ``note`` says where the
    numbers come from when it is not simply the fit's ``privacy_``.
    """

    epsilon: float | None
    delta: float
    note: str = ""
    profile: InverseBlowUp | None = None


def _dpsgd_profile(model: DPSGDClassifier, relation: Neighbouring) -> InverseBlowUp | None:
    info = model.fit_info_
    if info["design"] != "poisson" or model.accountant not in ("pld", "rdp"):
        return None
    factory = dpsgd_accountant(model.accountant, neighbouring=relation, replace_one_bound=model.replace_one_bound)
    accountant = factory().compose(model.privacy_event_)
    return accountant_profile(accountant, epsilon_max=max(PROFILE_SPAN * model.privacy_.epsilon, 1.0))


def _accuracy_first_claim(model: AccuracyFirstClassifier, n_train: int) -> OneRunClaim:
    ex_post = model.privacy_
    if ex_post.delta == 0:
        return OneRunClaim(
            float(ex_post.epsilon),
            0.0,
            note=(
                "Accuracy First's ex-post epsilon of this run (pure: a pointwise bound on the privacy loss of the "
                "observed output, so Theorem 3 holds given the output); no f-DP test"
            ),
        )
    worst = model._planned_guarantee(n_train)  # noqa: SLF001 - the search's worst case, from public settings
    return OneRunClaim(
        float(worst.epsilon),
        float(worst.delta),
        note=(
            f"Accuracy First's worst case eps_AT + eps_max (the run's ex-post epsilon "
            f"{ex_post.epsilon:.4g} at delta > 0 is not a pointwise bound)"
        ),
        profile=epsilon_delta_inverse(float(worst.epsilon), float(worst.delta)),
    )


def linear_claim(model: Any, relation: Neighbouring, n_train: int) -> OneRunClaim:
    """The claim of a fitted linear estimator (see the module notes), under ``relation``.

    ``relation`` is the one the canaries were placed for; a fit whose guarantee is stated under another is
    refused (its claim would not bound one coin's flip). ``n_train`` is the records the fit saw.
    """
    guarantee = getattr(model, "privacy_", None)
    if guarantee is None or not math.isfinite(guarantee.epsilon):  # the baseline: its leakage, no claim
        return OneRunClaim(None, 0.0, note="not private: no claim to compare")
    if guarantee.neighbouring is not relation:
        raise RuntimeError(
            f"the fit states its guarantee under {guarantee.neighbouring.value}, the canaries were "
            f"placed for {relation.value}"
        )
    if isinstance(model, AccuracyFirstClassifier):
        return _accuracy_first_claim(model, n_train)
    epsilon, delta = float(guarantee.epsilon), float(guarantee.delta)
    profile: InverseBlowUp | None = None
    if isinstance(model, DPSGDClassifier):
        profile = _dpsgd_profile(model, relation)
    elif isinstance(model, DPCDClassifier) and guarantee.accountant == "gdp":
        profile = gaussian_inverse(float(model.fit_info_["mu"]))
    return OneRunClaim(epsilon, delta, profile=profile or epsilon_delta_inverse(epsilon, delta))
