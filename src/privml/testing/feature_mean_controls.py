"""NEGATIVE CONTROLS OF THE PRIVATE FEATURE MEAN: DELIBERATELY BROKEN RELEASES. NEVER TRAIN WITH THEM.

:func:`privml.torch._feature_mean.private_feature_mean` releases ``R (sum_i u_i + N(0, s^2 I)) / n``, each
term ``u_i`` a record's feature vector clipped to norm R = sqrt(d) and divided by R, and claims
:func:`~privml.torch._feature_mean.feature_mean_event` (``GaussianEvent(s)`` under add/remove-one,
``GaussianEvent(s / 2)`` under replace-one). Two bugs are planted here, each a function with its signature
built from its two pieces (:func:`~privml.torch._feature_mean.clipped_term_sum`, the deterministic sum, and
:func:`~privml.torch._feature_mean.noisy_mean`, the release), so no copy of the mechanism drifts from it:

- :func:`unclipped_feature_mean`: the rows are divided by R but never clipped; a record of norm a R moves
  the sum by a, not 1 (unbounded sensitivity).
- :func:`half_noise_feature_mean`: noise std s / 2 drawn while the event still states s: the real
  Gaussian parameter is twice the claimed one.

:class:`FeatureMeanAudit` runs the audit of the product rule on a pair of neighbouring feature sets, the
real mechanism or a control: one record far outside the norm bound (the canary) in D', a null record
(zero-out view; n public) or the canary's mirror (replace-one: the term moves from u to -u) in D. The
statistic is the released mean projected on the canary's direction, times n / R; its lower bound on epsilon
at the claimed delta is :func:`privml.audit.audit_mechanism`'s (Clopper-Pearson). Each trial draws the
release's noise from a fresh :class:`~privml.torch._noise.RandomSource` seed; the deterministic sum is
computed once per world (it draws nothing), so a trial costs one noise draw of d values and the audit runs
the mechanism tens of thousands of times on real-sized inputs. Nothing in privml imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privml.accounting._gdp import GaussianDPAccountant
from privml.audit._epsilon_lower_bound import AuditResult, audit_mechanism
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring
from privml.testing.planted import PlantedBug, by_name
from privml.torch._feature_mean import clipped_term_sum, feature_mean_event, noisy_mean
from privml.torch._noise import RandomSource

__all__ = [
    "BROKEN",
    "FEATURE_MEAN_CONTROLS",
    "FeatureMeanAudit",
    "FeatureMeanControl",
    "claimed_guarantee",
    "half_noise_feature_mean",
    "unclipped_feature_mean",
    "unclipped_term_sum",
]

#: Marker set on every negative control (``getattr(obj, "BROKEN", False)``).
BROKEN = True

#: A deterministic part of a feature-mean release: the (d,) float64 sum the noise is added to.
TermSum = Callable[[torch.Tensor], torch.Tensor]


def unclipped_term_sum(features: torch.Tensor) -> torch.Tensor:
    """BROKEN: the sum of ``x_i / R`` with no clip (a record of norm a R contributes a term of norm a)."""
    flat = features.reshape(int(features.shape[0]), -1).to(torch.float64)
    # THE BUG: no min(1, R / ||x_i||) factor.
    return (flat / math.sqrt(flat.shape[1])).sum(dim=0)


def _release(
    term_sum: TermSum, noise_scale: float, features: torch.Tensor, noise_multiplier: float, source: RandomSource
) -> torch.Tensor:
    n = int(features.shape[0])
    if n < 1:
        raise ValueError("the private feature mean needs at least one record")
    return noisy_mean(term_sum(features), n=n, shape=tuple(features.shape[1:]),
                      noise_multiplier=noise_multiplier * noise_scale, source=source)


def unclipped_feature_mean(features: torch.Tensor, *, noise_multiplier: float, source: RandomSource) -> torch.Tensor:
    """BROKEN (negative control): :func:`~privml.torch._feature_mean.private_feature_mean` without the clip.

    The noise is still s in units of the bound R, but nothing bounds a record's term. Never use it.
    """
    return _release(unclipped_term_sum, 1.0, features, noise_multiplier, source)


def half_noise_feature_mean(features: torch.Tensor, *, noise_multiplier: float, source: RandomSource) -> torch.Tensor:
    """BROKEN (negative control): the feature mean with noise std ``noise_multiplier / 2`` (claimed: the whole).

    Never use it.
    """
    # THE BUG: half the stated standard deviation (the event still says noise_multiplier).
    return _release(clipped_term_sum, 0.5, features, noise_multiplier, source)


@dataclass(frozen=True)
class FeatureMeanControl(PlantedBug):
    """A planted bug of the private feature mean: the broken function and its two pieces.

    Attributes
    ----------
    name, bug:
        As :class:`~privml.testing.planted.PlantedBug`.
    mean:
        The broken function (private_feature_mean's signature).
    term_sum, noise_scale:
        Its deterministic sum and the noise std it draws per unit of the stated noise multiplier:
        ``mean(X, noise_multiplier=s, source=g) == noisy_mean(term_sum(X), ..., noise_multiplier=noise_scale s,
        source=g)``.
    """

    mean: Callable[..., torch.Tensor]
    term_sum: TermSum
    noise_scale: float


#: Every planted bug of the private feature mean, by name.
FEATURE_MEAN_CONTROLS: dict[str, FeatureMeanControl] = by_name(
    (
        FeatureMeanControl("unclipped-mean", "rows divided by R = sqrt(d) but not clipped to norm R",
                           unclipped_feature_mean, unclipped_term_sum, 1.0),
        FeatureMeanControl("half-noise-mean", "noise std s / 2 drawn while the event states s",
                           half_noise_feature_mean, clipped_term_sum, 0.5),
    )
)


def claimed_guarantee(noise_multiplier: float, neighbouring: Neighbouring | str, delta: float) -> PrivacyGuarantee:
    """What the feature mean claims at ``delta``: its event's exact Gaussian (epsilon, delta) curve (GDP)."""
    return GaussianDPAccountant().compose(feature_mean_event(noise_multiplier, neighbouring)).guarantee(delta)


class FeatureMeanAudit:
    """Audits of the feature mean (correct or broken) on ``base`` plus one record: the canary or its neighbour.

    Parameters
    ----------
    base:
        The feature sets' common records (n - 1, ...), on any device.
    canary:
        The audited record, shaped like one record; the worst case for the clip lies far outside norm R.

    The two worlds (n records each): D' = base + canary; D = base + a zero record (add/remove-one, the
    zero-out view: a null record's term is 0 and n stays public) or base + the canary's mirror ``-canary``
    (replace-one). Each world's deterministic sum is the base's sum (computed once per term sum and kept)
    plus the record's term: the terms are per row, so this is the sum over the world's records.
    """

    def __init__(self, base: torch.Tensor, canary: torch.Tensor) -> None:
        if tuple(canary.shape) != tuple(base.shape[1:]):
            raise ValueError(f"the canary has shape {tuple(canary.shape)}, a record {tuple(base.shape[1:])}")
        self.base = base
        self.canary = canary.to(base.device, base.dtype)
        self.n = int(base.shape[0]) + 1
        flat = self.canary.reshape(-1).to(torch.float64)
        self.direction = flat / torch.linalg.vector_norm(flat)
        self.bound = math.sqrt(flat.numel())
        self._base_sums: dict[TermSum, torch.Tensor] = {}

    def world_sums(self, term_sum: TermSum, neighbouring: Neighbouring | str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum over D, sum over D')`` of ``term_sum``'s terms under ``neighbouring``."""
        if term_sum not in self._base_sums:
            self._base_sums[term_sum] = term_sum(self.base)
        relation = Neighbouring.parse(neighbouring)
        other = -self.canary if relation is Neighbouring.REPLACE_ONE else torch.zeros_like(self.canary)
        base = self._base_sums[term_sum]
        return base + term_sum(other[None]), base + term_sum(self.canary[None])

    def statistic(self, released: torch.Tensor) -> float:
        """The released mean projected on the canary's direction, times n / R (the noisy sum's projection)."""
        return float(released.reshape(-1).to(torch.float64) @ self.direction) * self.n / self.bound

    def run(
        self,
        control: str | None,
        *,
        noise_multiplier: float,
        neighbouring: Neighbouring | str = "add/remove-one",
        delta: float = 1e-5,
        trials: int,
        confidence: float = 0.95,
        random_state: Any = 0,
    ) -> AuditResult:
        """Audit the correct mechanism (``control=None``) or control ``control`` against the claim at ``delta``.

        ``trials`` releases per world; the first half choose the threshold, the rest bound epsilon.
        """
        if control is not None and control not in FEATURE_MEAN_CONTROLS:
            raise ValueError(f"unknown control {control!r}; choose from {', '.join(FEATURE_MEAN_CONTROLS)}")
        term_sum, scale = ((clipped_term_sum, 1.0) if control is None
                           else (FEATURE_MEAN_CONTROLS[control].term_sum, FEATURE_MEAN_CONTROLS[control].noise_scale))
        relation = Neighbouring.parse(neighbouring)
        sums = self.world_sums(term_sum, relation)
        shape = tuple(self.canary.shape)

        def trial(inserted: bool, rng: np.random.Generator) -> float:
            source = RandomSource(self.base.device, seed=int(rng.integers(2**63)))
            released = noisy_mean(sums[int(inserted)], n=self.n, shape=shape,
                                  noise_multiplier=noise_multiplier * scale, source=source)
            return self.statistic(released)

        details = {
            "mechanism": control or "private_feature_mean", "noise_multiplier": noise_multiplier,
            "n": self.n, "d": int(self.direction.numel()),
            "canary_norm_over_bound": float(torch.linalg.vector_norm(self.canary.double())) / self.bound,
        }
        return audit_mechanism(trial, claimed=claimed_guarantee(noise_multiplier, relation, delta), trials=trials,
                               confidence=confidence, random_state=random_state, details=details)
