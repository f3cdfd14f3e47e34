"""NEGATIVE CONTROLS: DELIBERATELY BROKEN IMPLEMENTATIONS. NEVER TRAIN OR RELEASE WITH THEM.

Every class here claims a privacy guarantee it does not have. They exist so
that the audits of :mod:`privml.audit._epsilon_lower_bound` can be shown to
have power: an audit that never fails proves nothing until it has caught a
planted bug. Each control reintroduces a bug seen in published reference
code (facebookresearch/private_prediction, read against its paper) or a classic mistake:

- :class:`PerTensorClippingDPSGD`: the weight and bias tensors are clipped
  to C each while the accountant assumes one clip of the whole gradient;
  real sensitivity ``sqrt(2) C``.
- :class:`UnclippedDPSGD`: no clipping at all (noise still ``s C``); real
  sensitivity up to the loss's Lipschitz constant.
- :class:`HalfSensitivityOutputPerturbation`: noise for ``L / (n lambda)``,
  the add/remove bound, under replace-one neighbours; really ``2 epsilon``.
- :class:`ReusedThresholdAboveThreshold`: keeps answering against the same
  noisy threshold after a positive answer instead of halting; the loss grows
  with the number of positive answers.
- :class:`UnhalvedSubsampleAggregate`: votes sampled with ``exp(eps_q
  votes)`` instead of ``exp(eps_q votes / 2)``; really ``2 eps_q`` per answer.

:data:`CONTROLS` records, for each, the setting where the audit tells it from
the correct implementation, and :func:`audit_control` runs it.

They are not exported from :mod:`privml.audit`, their class names say what
is wrong, and :attr:`BROKEN` is set on each. Their ``privacy_`` and
``event`` attributes report the *claimed* guarantee on purpose: that false
claim is what the audits test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from privml._random import RandomState, check_random_state
from privml._validation import check_finite
from privml.audit._canaries import Canary
from privml.audit._epsilon_lower_bound import AuditResult, audit_epsilon, audit_mechanism
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._dpsgd_steps import clipped_gradient_sum
from privml.linear._output_perturbation import OutputPerturbationClassifier
from privml.losses import Loss
from privml.mechanisms import AboveThreshold, ExponentialMechanism
from privml.neighbouring import Neighbouring
from privml.prediction._aggregate import SubsampleAndAggregate
from privml.testing.planted import PlantedBug, by_name

__all__ = [
    "BROKEN",
    "CONTROLS",
    "Control",
    "audit_control",
    "control_data",
    "HalfSensitivityOutputPerturbation",
    "PerTensorClippingDPSGD",
    "ReusedThresholdAboveThreshold",
    "UnclippedDPSGD",
    "UnhalvedSubsampleAggregate",
    "answer_stream",
]

#: Marker set on every negative control (``getattr(obj, "BROKEN", False)``).
BROKEN = True


class PerTensorClippingDPSGD(DPSGDClassifier):
    """BROKEN (negative control): DP-SGD that clips the weight and bias tensors separately.

    The model is read as a weight tensor (every feature but the last) and a
    bias tensor (the last feature, the constant of
    :func:`privml.data.add_bias_feature`). Each per-example gradient block is
    clipped to C on its own, as facebookresearch/private_prediction's
    ``modules.py`` does per parameter tensor, while the accountant assumes one
    clip of the whole gradient. A record then moves the clipped sum by up to
    ``sqrt(2) C`` (add/remove) instead of C: the effective noise multiplier is
    ``s / sqrt(2)`` and the claimed epsilon is too small. Never use it.
    """

    BROKEN = True

    def _clipped_sum(
        self, loss: Loss, weights: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float, row_norms: np.ndarray
    ) -> np.ndarray:
        if X.shape[0] == 0:
            return np.zeros_like(weights)
        residuals = loss._score_gradients(X @ weights, y)  # noqa: SLF001 - same use as clipped_gradient_sum
        residual_norms = np.abs(residuals) if residuals.ndim == 1 else np.linalg.norm(residuals, axis=1)
        total = np.zeros_like(weights)
        for block in (slice(0, X.shape[1] - 1), slice(X.shape[1] - 1, X.shape[1])):
            part = X[:, block]
            norms = np.linalg.norm(part, axis=1) * residual_norms
            # THE BUG: each tensor's gradient gets the whole budget C.
            factors = clip / np.maximum(norms, clip)
            scaled = residuals * factors if residuals.ndim == 1 else residuals * factors[:, None]
            total[block] = part.T @ scaled
        return total


class UnclippedDPSGD(DPSGDClassifier):
    """BROKEN (negative control): DP-SGD with the clipping step left out.

    Noise is still ``N(0, s^2 C^2)`` and the accountant still assumes
    sensitivity C, but a per-example gradient of a linear model can be as
    long as the loss's Lipschitz constant (1 for the logistic loss with
    ``||x|| <= 1``), so with the default ``C = 0.1`` one record moves the sum
    ten times further than accounted for. Never use it.
    """

    BROKEN = True

    def _clipped_sum(
        self, loss: Loss, weights: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float, row_norms: np.ndarray
    ) -> np.ndarray:
        # THE BUG: a clip at the largest double never binds.
        return clipped_gradient_sum(loss, weights, X, y, float(np.finfo(np.float64).max), row_norms=row_norms)[0]


class HalfSensitivityOutputPerturbation(OutputPerturbationClassifier):
    """BROKEN (negative control): output perturbation calibrated to half the sensitivity.

    Uses ``L / (n lambda)``, the sensitivity of the minimiser when a record is
    *added or removed*, for replace-one neighbours, where one record leaves
    and another arrives and the minimiser moves by up to ``2 L / (n lambda)``
    (CMS11 Cor. 8). The claimed epsilon is half the real one for L2-Laplace
    noise (pure DP). Never use it.
    """

    BROKEN = True

    def _sensitivity(self, loss: Loss, n: int, l2: float, tol: float) -> float:
        # THE BUG: half of the replace-one sensitivity.
        return super()._sensitivity(loss, n, l2, tol) / 2.0


class ReusedThresholdAboveThreshold(AboveThreshold):
    """BROKEN (negative control): AboveThreshold that reuses its noisy threshold after a positive answer.

    Instead of halting after the first True (Dwork and Roth 2014, Alg. 1) or
    drawing a new threshold and paying again, it keeps answering every query
    against the same ``T_hat``, while :attr:`event` still claims epsilon for
    the whole run. Each positive answer leaks like a fresh AboveThreshold, so
    the loss grows with the number of positives; with queries pushed up on
    some and down on others by the neighbour, the pattern of answers
    identifies the dataset (Lyu, Su and Li 2017, Section 4, the variants with
    unbounded positive answers). Never use it.
    """

    BROKEN = True

    def query(self, value: float) -> bool:
        value = check_finite(value, "value")
        self._n_queries += 1
        # THE BUG: no halt; the shared threshold noise is reused for every later answer.
        return bool(value + self._rng.laplace(0.0, self.query_scale) >= self._noisy_threshold)


class UnhalvedSubsampleAggregate(SubsampleAndAggregate):
    """BROKEN (negative control): subsample-and-aggregate voting with ``exp(epsilon_q * votes)``.

    The reference code of vdMH20 samples a label with probability
    proportional to ``exp(epsilon_q votes_c)``. Under replace-one one record
    changes one teacher's vote, moving one count down and another up, so the
    exponential mechanism's bound (McSherry and Talwar 2007, Thm 6) needs
    ``exp(epsilon_q votes_c / 2)``; the unhalved vote is ``2 epsilon_q``-DP
    while the guarantee still claims ``epsilon_q`` per answer (the
    reference code of vdMH20 does this). Planted here by declaring the counts monotone, the one case
    where the factor 2 may be dropped. Never use it.
    """

    BROKEN = True

    def _mechanism(self, epsilon_query: float, rng: np.random.Generator) -> ExponentialMechanism:
        # THE BUG: replace-one vote counts are not monotone (one falls, one rises).
        return ExponentialMechanism(
            epsilon=epsilon_query,
            sensitivity=1.0,
            monotonic=True,
            neighbouring=Neighbouring.REPLACE_ONE,
            random_state=rng,
        )


def answer_stream(mechanism: Any, values: np.ndarray) -> np.ndarray:
    """Answers of an AboveThreshold-like mechanism to ``values`` (False after it halts)."""
    answers = np.zeros(len(values), dtype=bool)
    for i, value in enumerate(values):
        if getattr(mechanism, "halted", False):
            break
        answers[i] = mechanism.query(float(value))
    return answers


# ------------------------------------------------------- where each is caught
@dataclass(frozen=True)
class Control(PlantedBug):
    """A planted bug (name, bug: :class:`~privml.testing.planted.PlantedBug`) and the setting where an audit
    tells it from the correct implementation.

    Attributes
    ----------
    setting : str
        The audited setting, in one line.
    claimed_epsilon : float
    default_trials : int
        Trials per world at which the broken version's bound exceeds the
        claim (checked by the test suite with the default seed).
    run : callable
        ``run(broken, trials, random_state, n_jobs) -> AuditResult``.
    """

    setting: str
    claimed_epsilon: float
    default_trials: int
    run: Callable[[bool, int, RandomState, int], AuditResult]


def control_data(n: int, *, bias: bool, random_state: RandomState = 0) -> tuple[np.ndarray, np.ndarray]:
    """Small two-feature binary data for the controls: one informative feature and a second that is
    constant (0.5, a bias feature) or zero (a direction no record uses, where a canary acts alone).

    Two dimensions keep L2-Laplace noise audible: in d dimensions its
    projection on the canary direction has privacy loss near epsilon only
    far in the tails (a mass shrinking with d), so pure-DP audits need d small.
    """
    rng = check_random_state(random_state)
    a = rng.uniform(-1.0, 1.0, n)
    if bias:
        X = np.column_stack([a * np.sqrt(0.75), np.full(n, 0.5)])
        y = (a > 0).astype(np.int64)
    else:
        X = np.column_stack([a, np.zeros(n)])
        y = (a + 0.3 * rng.standard_normal(n) > 0).astype(np.int64)
    return X, y


# Equal weight and bias parts: per-tensor clipping then gives the canary the full sqrt(2) C.
_DIAGONAL = np.array([1.0, 1.0]) / np.sqrt(2.0)
_DIAGONAL_CANARY = Canary(_DIAGONAL, 1, _DIAGONAL.copy(), 0, "diagonal")


def _per_tensor(broken: bool, trials: int, random_state: RandomState, n_jobs: int) -> AuditResult:
    X, y = control_data(20, bias=True)
    cls = PerTensorClippingDPSGD if broken else DPSGDClassifier
    # One full-batch step of the direct design: a single L2-Laplace release of the clipped sum.
    model = cls(
        epsilon=2.0, delta=0.0, design="direct", batch_size=X.shape[0] + 1, clip_norm=0.1,
        learning_rate=1.0, averaging="none", classes=(0, 1),
    )
    return audit_epsilon(
        model, X, y, trials=trials, canary=_DIAGONAL_CANARY, score="weights-distance",
        random_state=random_state, n_jobs=n_jobs,
    )


def _no_clipping(broken: bool, trials: int, random_state: RandomState, n_jobs: int) -> AuditResult:
    X, y = control_data(20, bias=True)
    cls = UnclippedDPSGD if broken else DPSGDClassifier
    # A small learning rate keeps the weights near 0, where the logistic gradient is 0.5 = 50 C.
    model = cls(epsilon=1.0, delta=1e-5, clip_norm=0.01, learning_rate=1.0, epochs=10, classes=(0, 1))
    return audit_epsilon(model, X, y, trials=trials, canary=_DIAGONAL_CANARY, random_state=random_state, n_jobs=n_jobs)


def _half_sensitivity(broken: bool, trials: int, random_state: RandomState, n_jobs: int) -> AuditResult:
    X, y = control_data(50, bias=False)
    cls = HalfSensitivityOutputPerturbation if broken else OutputPerturbationClassifier
    # Huber hinge: the canary's gradient stays at its Lipschitz bound 1, so the mirror canary
    # moves the minimiser by exactly the sensitivity 2L/(n lambda) along the empty direction.
    model = cls(epsilon=1.0, delta=0.0, loss="huber", classes=(0, 1))
    return audit_epsilon(
        model, X, y, trials=trials, canary="clipbkd", canary_label=1, score="weights-distance",
        random_state=random_state, n_jobs=n_jobs,
    )


_AT_QUERIES = 100


def _reused_threshold(broken: bool, trials: int, random_state: RandomState, n_jobs: int) -> AuditResult:
    cls = ReusedThresholdAboveThreshold if broken else AboveThreshold
    half = _AT_QUERIES // 2
    # Sensitivity-1 queries: 0 on D; +1 then -1 on D' (a record counted by the first half only).
    values_out = np.zeros(_AT_QUERIES)
    values_in = np.concatenate([np.ones(half), -np.ones(_AT_QUERIES - half)])

    def trial(inserted: bool, rng: np.random.Generator) -> float:
        mechanism = cls(epsilon=1.0, threshold=0.0, sensitivity=1.0, random_state=rng)
        answers = answer_stream(mechanism, values_in if inserted else values_out)
        return float(answers[:half].sum() - answers[half:].sum())

    claimed = cls(epsilon=1.0, threshold=0.0, sensitivity=1.0, random_state=0).privacy
    details = {"mechanism": cls.__name__, "queries": _AT_QUERIES}
    return audit_mechanism(
        trial, claimed=claimed, trials=trials, random_state=random_state, n_jobs=n_jobs, details=details
    )


class _RecordLabel(ClassifierMixin, BaseEstimator):
    """Teacher that predicts the label of its first training record (one record per part here)."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> _RecordLabel:
        self.classes_ = np.unique(y)
        self.label_ = np.asarray(y)[0]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.label_)


def _unhalved_vote(broken: bool, trials: int, random_state: RandomState, n_jobs: int) -> AuditResult:
    cls = UnhalvedSubsampleAggregate if broken else SubsampleAndAggregate
    # Eight one-record teachers: votes 3:5 for label 1 on D, 4:4 on D' (one record's label replaced).
    # On D label 1 is rare for the broken vote (e^-4 odds), which is where its ratio e^(2 eps) shows.
    X = np.tile([[1.0, 0.0]], (8, 1))
    y_out = np.array([1, 1, 1, 0, 0, 0, 0, 0])
    y_in = np.array([1, 1, 1, 1, 0, 0, 0, 0])

    def build(rng: Any) -> SubsampleAndAggregate:
        return cls(estimator=_RecordLabel(), n_models=8, epsilon=2.0, budget=1, classes=(0, 1), random_state=rng)

    def trial(inserted: bool, rng: np.random.Generator) -> float:
        model = build(rng).fit(X, y_in if inserted else y_out)
        return float(model.predict(X[:1])[0])

    claimed = build(0).fit(X, y_out).privacy_
    details = {"mechanism": cls.__name__, "teachers": 8}
    return audit_mechanism(
        trial, claimed=claimed, trials=trials, random_state=random_state, n_jobs=n_jobs, details=details
    )


#: Every negative control with the setting where it is caught.
CONTROLS: dict[str, Control] = by_name(
    (
        Control(
            "per-tensor-clipping",
            "weight and bias tensors clipped to C each, accounted as one clip (sensitivity sqrt(2) C)",
            "DP-SGD direct design, one full-batch step, pure DP (L2-Laplace), 2 features, diagonal canary, "
            "white-box distance statistic",
            2.0, 5000, _per_tensor,
        ),
        Control(
            "no-clipping",
            "per-example gradients not clipped (noise still calibrated to C = 0.01)",
            "DP-SGD Poisson design (q = 1, 10 steps), delta = 1e-5, 2 features, diagonal canary",
            1.0, 60, _no_clipping,
        ),
        Control(
            "half-sensitivity",
            "output perturbation noise for L/(n lambda) under replace-one (half of 2L/(n lambda))",
            "output perturbation, pure DP (L2-Laplace), Huber loss, 2 features, ClipBKD mirror canary, "
            "white-box distance statistic",
            1.0, 1000, _half_sensitivity,
        ),
        Control(
            "reused-threshold",
            "AboveThreshold reuses its noisy threshold after a positive answer instead of halting",
            f"{_AT_QUERIES} sensitivity-1 queries, 0 on D, +1 / -1 halves on D'",
            1.0, 1000, _reused_threshold,
        ),
        Control(
            "unhalved-vote",
            "subsample-and-aggregate samples prop. to exp(eps_q votes): the exponential mechanism's 2 dropped",
            "8 one-record teachers, votes 3:5 on D and 4:4 on D', one query, budget 1",
            2.0, 1000, _unhalved_vote,
        ),
    )
)


def audit_control(
    name: str, *, broken: bool, trials: int | None = None, random_state: RandomState = 0, n_jobs: int = 1
) -> AuditResult:
    """Audit the correct (``broken=False``) or broken implementation of control ``name`` in its setting.

    The correct implementation's bound stays below the claimed epsilon (it
    is DP); the broken one's exceeds it at the default trial count.
    """
    if name not in CONTROLS:
        raise ValueError(f"unknown control {name!r}; choose from {', '.join(CONTROLS)}")
    control = CONTROLS[name]
    return control.run(broken, control.default_trials if trials is None else trials, random_state, n_jobs)
