"""The noise of the three DP-SGD designs on a linear model, and the plan of a fit.

Each design of :class:`privml.linear.DPSGDClassifier` fixes its noise,
and the guarantee that noise buys, from n and the hyper-parameters alone,
before training: ``poisson`` is DP-SGD, planned by
:func:`privml.accounting.plan_dpsgd` (shared with the torch engine);
``linear`` composes
amplified (eps_0, delta_0) steps by basic composition (Li, Qardaji and Su
2012; Dwork and Roth 2014); ``direct`` makes one pass over disjoint batches
with parallel composition (McSherry 2009; Balle and Wang 2018 for the
analytic Gaussian). A missing noise multiplier is calibrated to the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privml.accounting._analytic_gaussian import analytic_gaussian_sigma, gaussian_epsilon
from privml.accounting._calibration import make_accountant
from privml.accounting._events import (
    DpEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)
from privml.accounting._parameter_search import calibrate_parameter
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

# The basic composition of the ``linear`` design spends T q delta_0 in total;
# asking for delta_0 = delta / (T q) exactly can round one ulp above delta, and
# the basic accountant then certifies nothing. This margin keeps the sum below.
_DELTA_SPLIT_MARGIN = 1.0 - 1e-9
# Relative excess noise of the direct design over the analytic calibration, for
# the same reason in the other direction (see _direct_noise).
_SIGMA_MARGIN = 1.0 + 1e-9


@dataclass(frozen=True)
class _Noise:
    """The noise of every step and the guarantee it buys, fixed before training.

    ``multiplier`` is in units of C: the Gaussian's standard deviation, or the
    L2-Laplace scale, is ``multiplier * C``. ``sensitivity`` is the L2
    sensitivity of the clipped sum in units of C under ``guarantee``'s relation.
    """

    kind: str  # "gaussian" or "l2-laplace"
    multiplier: float
    sensitivity: float
    event: DpEvent
    guarantee: PrivacyGuarantee
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Plan:
    """Everything a fit decides from n and the hyper-parameters alone."""

    design: str
    steps: int
    sample_rate: float  # Poisson rate q (poisson, linear); b / n (fixed-size); share of the data per step (direct)
    batch_size: float  # expected (Poisson), exact (fixed-size) or mean (direct) batch size
    epochs: float
    noise: _Noise
    sampling: str = "poisson"  # "poisson", "fixed-size" (design poisson) or "partition" (direct)


def _account(event: DpEvent, accountant: str, delta: float) -> PrivacyGuarantee:
    return make_accountant(accountant).compose(event).guarantee(delta)


def _check_budget(guarantee: PrivacyGuarantee, epsilon: float) -> None:
    if not guarantee.epsilon <= epsilon:
        raise ValueError(
            f"noise_multiplier is too small for the budget: the {guarantee.accountant} accountant certifies "
            f"epsilon={guarantee.epsilon:.6g} at delta={guarantee.delta:g}, above epsilon={epsilon:g}; "
            "raise noise_multiplier or leave it None to calibrate it"
        )


def _linear_noise(epsilon: float, delta: float, noise_multiplier: float | None, q: float, steps: int) -> _Noise:
    """The lecture's second design: amplified (eps_0, delta_0) steps, composed linearly.

    Each step releases the clipped sum of a Poisson sample plus noise that
    makes it (eps_0, delta_0)-DP with respect to the sample (add/remove-one,
    L2 sensitivity C): Gaussian with the analytic calibration (Balle and Wang
    2018, Thm 8) for delta > 0, L2-Laplace of scale C / eps_0 for delta = 0
    (pure eps_0-DP; the argument of CMS11's output perturbation). Sampling at
    rate q makes a step (log(1 + q (e^eps_0 - 1)), q delta_0)-DP (Li, Qardaji
    and Su 2012, Thm 1; Balle, Barthe and Gaboardi 2018, Thm 8), which is the
    Poisson version of the seed lecture's Theorem 3 (2 gamma eps_0 for a
    without-replacement sample of fraction gamma and eps_0 < 1, a looser
    bound). T steps compose by basic composition (Dwork and Roth 2014,
    Thm 3.16), the "linear composition" of the lecture: the basic accountant
    applies both theorems to the event. delta_0 = delta / (T q) spends the
    whole delta; eps_0 is the largest per-step epsilon whose total is at most
    epsilon, by :func:`privml.accounting._parameter_search.calibrate_parameter`.
    """
    gaussian = delta > 0
    # Cap delta_0 below 1 (the Gaussian needs it) when T q < delta: a few
    # steps at a tiny rate then spend less than delta, which is still safe.
    step_delta = min(delta / (steps * q) * _DELTA_SPLIT_MARGIN, 0.5) if gaussian else 0.0
    if noise_multiplier is None:

        def total_epsilon(step_epsilon: float) -> float:
            return _account(_linear_event(step_epsilon, step_delta, q, steps), "basic", delta).epsilon

        step_epsilon = calibrate_parameter(
            total_epsilon, target=epsilon, increasing=True, upper=max(1.0, epsilon), tolerance=1e-6
        ).value
        # The analytic sigma is rounded up, so the step is at most step_epsilon-DP as claimed.
        noise_multiplier = analytic_gaussian_sigma(step_epsilon, step_delta, 1.0) if gaussian else 1.0 / step_epsilon
    else:
        step_epsilon = gaussian_epsilon(step_delta, 1.0 / noise_multiplier) if gaussian else 1.0 / noise_multiplier
    noise = "gaussian" if gaussian else "l2-laplace"
    event = _linear_event(step_epsilon, step_delta, q, steps)
    guarantee = _account(event, "basic", delta)
    info = {"step_epsilon": step_epsilon, "step_delta": step_delta}
    return _Noise(noise, noise_multiplier, 1.0, event, guarantee, info)


def _linear_event(step_epsilon: float, step_delta: float, q: float, steps: int) -> DpEvent:
    step: DpEvent = EpsilonDeltaEvent(step_epsilon, step_delta, Neighbouring.ADD_REMOVE_ONE)
    if q < 1:
        step = PoissonSampledEvent(q, step)
    return SelfComposedEvent(step, steps)


def _direct_noise(epsilon: float, delta: float, noise_multiplier: float | None) -> _Noise:
    """The lecture's first design: one pass over disjoint batches, parallel composition.

    Neighbouring: replace-one (n and the partition are fixed; the partition
    is drawn independently of the data). The clipped sum of a batch has L2
    sensitivity 2C (one term of norm <= C replaced by another), so
    N(0, sigma^2 I) with sigma from the analytic Gaussian at sensitivity 2C
    (Balle and Wang 2018, Thm 8) makes a step (epsilon, delta)-DP; for
    delta = 0 the L2-Laplace noise of scale 2C / epsilon makes it
    epsilon-DP. Normalising by the batch size b afterwards is
    post-processing (equivalently: sensitivity 2C / b for the mean).

    Parallel composition: a record lies in exactly one batch, so for two
    neighbours differing in it every other step has the same conditional
    distribution given the earlier outputs, i.e. is (0, 0)-DP for that pair,
    and adaptive basic composition (Dwork and Roth 2014, Thm 3.16) gives the
    one step's (epsilon, delta) for the whole run (McSherry 2009, Thm 4, for
    the pure case). The accountant is GDP for Gaussian noise (exact: Dong,
    Roth and Su 2019, Thm 2.7) and basic for L2-Laplace, composed once.
    """
    if delta > 0:
        if noise_multiplier is None:
            # The accountant's epsilon comes from its own bisection, rounded up;
            # the margin keeps it at most epsilon instead of epsilon + 1 ulp-ish.
            noise_multiplier = analytic_gaussian_sigma(epsilon, delta, 2.0) * _SIGMA_MARGIN
        event: DpEvent = GaussianEvent(noise_multiplier / 2.0, Neighbouring.REPLACE_ONE)
        guarantee = _account(event, "gdp", delta)
        noise = "gaussian"
    else:
        if noise_multiplier is None:
            noise_multiplier = 2.0 / epsilon
        event = EpsilonDeltaEvent(2.0 / noise_multiplier, 0.0, Neighbouring.REPLACE_ONE)
        guarantee = _account(event, "basic", 0.0)
        noise = "l2-laplace"
    return _Noise(noise, noise_multiplier, 2.0, event, guarantee)
