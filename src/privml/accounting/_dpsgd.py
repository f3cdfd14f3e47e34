"""DP-SGD's privacy, once: which options go together, the event, the accountant, the calibration, the plan.

Every DP-SGD in privml (the linear :class:`~privml.linear.DPSGDClassifier`,
:class:`privml.torch.DPSGD` and ``privml account dpsgd``) takes its privacy
rules from here, so they cannot drift apart (issue 33):

- the samplers (:data:`SAMPLINGS`), the accountants that can account for a
  sampled Gaussian (:data:`DPSGD_ACCOUNTANTS`) and the ways a replace-one
  guarantee is obtained (:data:`REPLACE_ONE_BOUNDS`), and which combinations
  an analysis covers (:func:`check_dpsgd_options`): fixed-size batches are
  analysed under replace-one neighbours only, by RDP only (Wang, Balle and
  Kasiviswanathan 2019, Theorem 9), and group privacy needs an add/remove-one
  analysis to start from;
- the event of T sampled Gaussian steps (:func:`dpsgd_event`), the
  accountant stating it under a relation (:func:`dpsgd_accountant`) and the
  smallest noise for a budget (:func:`calibrate_dpsgd`);
- the whole plan of a run from n and the settings (:func:`plan_dpsgd`):
  rate, steps, batch, noise multiplier, sensitivity, event and guarantee,
  every check made once, before any data is read or noise drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from privml._validation import (
    MAX_COMPOSITIONS,
    check_count,
    check_delta,
    check_epsilon,
    check_planned_steps,
    check_positive,
    check_positive_delta,
    check_probability,
)
from privml.accounting._accountant import PrivacyAccountant
from privml.accounting._calibration import (
    AccountantSpec,
    NoiseCalibration,
    _accountant_factory,
    _rdp_bracket,
    calibrate_noise_multiplier,
)
from privml.accounting._events import (
    ADD_REMOVE,
    REPLACE_ONE,
    ComposedEvent,
    DpEvent,
    GaussianEvent,
    PoissonSampledEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    _relation,
)
from privml.accounting._group import GroupPrivacyAccountant
from privml.exceptions import UnsupportedEventError
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

__all__ = [
    "DPSGD_ACCOUNTANTS",
    "DPSGDPlan",
    "REPLACE_ONE_BOUNDS",
    "SAMPLINGS",
    "calibrate_dpsgd",
    "check_dpsgd_options",
    "dpsgd_accountant",
    "dpsgd_event",
    "fixed_batch_size",
    "plan_dpsgd",
    "planned_steps",
]

#: Accountants that can account for the sampled Gaussian mechanism of DP-SGD.
DPSGD_ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")
#: How a DP-SGD guarantee under replace-one is obtained: the tight dominating pair, or group privacy.
REPLACE_ONE_BOUNDS: tuple[str, ...] = ("tight", "group")


#: Samplers of DP-SGD: independent coins per record, or a fixed-size batch drawn without replacement.
SAMPLINGS: tuple[str, ...] = ("poisson", "fixed-size")


def fixed_batch_size(sample_rate: float, population: int) -> int:
    """The batch size b = q n of fixed-size sampling; q n must be a whole number (within 1e-9 relative)."""
    population = check_count(population, "population")
    sample_rate = check_probability(sample_rate, "sample_rate")
    size = round(sample_rate * population)
    if size < 1 or abs(size - sample_rate * population) > 1e-9 * max(1.0, sample_rate * population):
        raise ValueError(
            f"fixed-size sampling needs a whole batch size: sample_rate * population = {sample_rate * population!r}"
        )
    return size


def dpsgd_event(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    *,
    neighbouring: Neighbouring | str = ADD_REMOVE,
    sampling: str = "poisson",
    population: int | None = None,
) -> DpEvent:
    """The event of DP-SGD: ``steps`` sampled Gaussian steps.

    Parameters
    ----------
    noise_multiplier:
        s: each step adds N(0, s^2 C^2 I) to a sum of per-example gradients
        clipped to L2 norm C (C is one record's contribution bound).
    sample_rate:
        q: the Poisson rate, or b / n for fixed-size sampling.
    steps:
        T, the number of (adaptively composed) steps.
    neighbouring:
        ``add/remove-one`` (default; Poisson only) or ``replace-one``.
    sampling:
        ``"poisson"`` (default) or ``"fixed-size"`` (b = q n records without
        replacement each step; replace-one only, needs ``population`` = n).

    Returns
    -------
    DpEvent
        ``SelfComposedEvent`` of a :class:`PoissonSampledEvent` (or of a
        :class:`SampledWithoutReplacementEvent`) of ``GaussianEvent(s)``;
        with q = 1 under add/remove-one, of the plain ``GaussianEvent(s)``
        (sensitivity C).
    """
    relation = _relation(neighbouring)
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    check_positive(noise_multiplier, "noise_multiplier")
    step: DpEvent = GaussianEvent(noise_multiplier)
    if sampling == "fixed-size":
        if relation is not REPLACE_ONE:
            raise ValueError(
                "fixed-size sampling is analysed under replace-one neighbours only "
                "(Wang, Balle and Kasiviswanathan 2019); use neighbouring='replace-one' or Poisson sampling"
            )
        if population is None:
            raise ValueError("fixed-size sampling needs the population size n (population=...)")
        return SelfComposedEvent(
            SampledWithoutReplacementEvent(fixed_batch_size(sample_rate, population), int(population), step), steps
        )
    if sample_rate < 1 or relation is REPLACE_ONE:
        # (q = 1 under replace-one stays a sampled event: its noise is stated against C, not 2C)
        step = PoissonSampledEvent(sample_rate, step, neighbouring=relation)
    else:
        check_probability(sample_rate, "sample_rate")
    return SelfComposedEvent(step, steps)





def with_preceding(preceding: DpEvent | None, steps: DpEvent) -> DpEvent:
    """``steps`` after ``preceding`` (a release from the same records before the first step), or ``steps`` alone."""
    return steps if preceding is None else ComposedEvent((preceding, steps))


def dpsgd_accountant(
    accountant: AccountantSpec, *, neighbouring: Neighbouring | str = ADD_REMOVE, replace_one_bound: str = "tight"
) -> Callable[[], PrivacyAccountant]:
    """Factory of the accountant that states DP-SGD's guarantee under ``neighbouring`` by ``replace_one_bound``.

    ``"tight"``: ``accountant`` itself (it must support the event:
    the replace-one events have their own dominating pair / RDP curve in the
    ``pld`` and ``rdp`` accountants). ``"group"`` (replace-one only):
    :class:`~privml.accounting.GroupPrivacyAccountant` around
    ``accountant``, i.e. (2 eps, (1 + e^eps) delta) from the add/remove-one
    guarantee.
    """
    relation = Neighbouring.parse(neighbouring)
    if replace_one_bound not in REPLACE_ONE_BOUNDS:
        raise ValueError(f"replace_one_bound must be one of {', '.join(REPLACE_ONE_BOUNDS)}, "
                         f"got {replace_one_bound!r}")
    factory, _ = _accountant_factory(accountant)
    if replace_one_bound == "tight":
        return factory
    if relation is not REPLACE_ONE:
        raise ValueError("replace_one_bound='group' derives a replace-one guarantee: it needs "
                         "neighbouring='replace-one'")
    return lambda: GroupPrivacyAccountant(factory)


def calibrate_dpsgd(
    target_epsilon: float,
    *,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: AccountantSpec = "rdp",
    neighbouring: Neighbouring | str = ADD_REMOVE,
    sampling: str = "poisson",
    replace_one_bound: str = "tight",
    population: int | None = None,
    preceding: DpEvent | None = None,
    lower: float | None = None,
    upper: float | None = None,
    tolerance: float = 1e-3,
    max_iterations: int = 100,
) -> NoiseCalibration:
    """Noise multiplier of DP-SGD for a budget: ``steps`` sampled Gaussian steps.

    Each step adds N(0, (s C)^2 I) to a sum of per-example gradients clipped
    to L2 norm C, over a random batch; the event is
    :func:`~privml.accounting.dpsgd_event` and the search is
    :func:`calibrate_noise_multiplier` (see there for the search arguments and
    the guarantee on the returned multiplier).

    Parameters
    ----------
    target_epsilon, delta:
        The budget.
    sample_rate:
        q: the Poisson rate, or b / n for ``sampling="fixed-size"``.
    steps:
        T.
    accountant:
        ``"rdp"`` (default) or ``"pld"`` (or any name / factory; an accountant
        that cannot account for the event raises ``UnsupportedEventError``
        before any search).
    neighbouring:
        ``"add/remove-one"`` (default: Poisson sampling, sensitivity C, Abadi
        et al. 2016; Mironov, Talwar and Zhang 2019) or ``"replace-one"``
        (same n, one record replaced: the clipped sum moves by up to 2C when
        the record is sampled).
    sampling:
        ``"poisson"`` (default) or ``"fixed-size"`` (a batch of exactly
        b = q n records drawn without replacement; replace-one only, RDP only:
        Wang, Balle and Kasiviswanathan 2019, Theorem 9; needs ``population``).
    replace_one_bound:
        Under replace-one: ``"tight"`` (default; the dominating pair of
        :class:`~privml.accounting._pld._ReplaceOnePoissonGaussianPair` in PLD,
        its Rényi divergence in RDP) or ``"group"`` (group privacy from the
        add/remove-one guarantee, (2 eps, (1 + e^eps) delta): the fallback
        and the yardstick).
    preceding:
        An event released before the steps from the same records, under the
        same relation (e.g. a noisy statistic of the inputs that the model
        then reads): the multiplier is the smallest whose composition with it
        meets the budget. None (default): the steps alone.

    Returns
    -------
    NoiseCalibration
        With ``accountant`` naming what certified the epsilon (e.g.
        ``"pld"``, ``"rdp+group"``).
    """
    # long-function: a long numpy-style docstring (parameters, guarantee, references) and code that is argument
    # checks, the accountant probe and one search.
    relation = Neighbouring.parse(neighbouring)
    steps = check_count(steps, "steps")
    sample_rate = check_probability(sample_rate, "sample_rate")

    def make_event(s: float) -> DpEvent:
        run = dpsgd_event(s, sample_rate, steps, neighbouring=relation, sampling=sampling, population=population)
        return with_preceding(preceding, run)

    make_event(1.0)  # bad combinations of relation, sampling and population fail here, before any search
    factory = dpsgd_accountant(accountant, neighbouring=relation, replace_one_bound=replace_one_bound)
    probe = factory()
    if not probe.supports(make_event(1.0)):
        raise UnsupportedEventError(
            f"the {probe.name} accountant cannot account for DP-SGD with {sampling} sampling under "
            f"{relation.value} neighbours"
            + (" (fixed-size sampling: use accountant='rdp')" if sampling == "fixed-size" else "")
        )
    if replace_one_bound == "group" and accountant == "pld" and lower is None and upper is None:
        # the RDP version of the same bound is looser (more noise): a cheap bracket for the PLD search
        lower, upper = _rdp_bracket(
            make_event, target_epsilon, delta, tolerance, max_iterations,
            accountant=dpsgd_accountant("rdp", neighbouring=relation, replace_one_bound="group"),
        )
    result = calibrate_noise_multiplier(
        make_event,
        target_epsilon=target_epsilon,
        delta=delta,
        accountant=accountant if replace_one_bound == "tight" else factory,
        lower=lower,
        upper=upper,
        tolerance=tolerance,
        max_iterations=max_iterations,
    )
    return result if replace_one_bound == "tight" else replace(result, accountant=probe.name)


def check_dpsgd_options(
    *, neighbouring: Neighbouring | str, sampling: str, accountant: str, replace_one_bound: str
) -> Neighbouring:
    """The relation, if the sampler, accountant and replace-one bound go together under it; else one ValueError.

    The rules every DP-SGD shares: fixed-size batches are analysed under
    replace-one neighbours only and by RDP only (Wang, Balle and
    Kasiviswanathan 2019, Theorem 9), and have no add/remove-one analysis
    for group privacy to start from; ``replace_one_bound="group"`` derives a
    replace-one guarantee, so it needs that relation.
    """
    relation = Neighbouring.parse(neighbouring)
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if accountant not in DPSGD_ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {', '.join(DPSGD_ACCOUNTANTS)}, got {accountant!r}")
    if replace_one_bound not in REPLACE_ONE_BOUNDS:
        raise ValueError(f"replace_one_bound must be one of {', '.join(REPLACE_ONE_BOUNDS)}, "
                         f"got {replace_one_bound!r}")
    if sampling == "fixed-size":
        if relation is not REPLACE_ONE:
            raise ValueError("fixed-size sampling is analysed under replace-one neighbours only (Wang, Balle and "
                             "Kasiviswanathan 2019): set neighbouring='replace-one'")
        if accountant != "rdp":
            raise ValueError("fixed-size sampling is accounted by RDP only: set accountant='rdp'")
        if replace_one_bound != "tight":
            raise ValueError("group privacy needs an add/remove-one analysis, which fixed-size sampling lacks: "
                             "use replace_one_bound='tight'")
    if replace_one_bound == "group" and relation is not REPLACE_ONE:
        raise ValueError("replace_one_bound='group' derives a replace-one guarantee: set neighbouring='replace-one'")
    return relation


@dataclass(frozen=True)
class DPSGDPlan:
    """Everything a DP-SGD run decides from n and its settings alone, before any data is read.

    ``batch_size`` is the expected batch q n (Poisson) or the exact b
    (fixed-size), None when n is not given (an accounting question).
    ``steps`` is None for an open-ended run (a noise multiplier and no
    budget), whose ``event`` and ``guarantee`` are then None.
    ``sensitivity`` is the L2 sensitivity of a step's clipped sum in units
    of the clip norm C under the relation: C under add/remove-one, 2C
    under replace-one (a clipped term can flip from +C to -C).
    """

    n: int | None
    sample_rate: float
    batch_size: float | None
    steps: int | None
    noise_multiplier: float
    delta: float
    neighbouring: Neighbouring
    sampling: str
    replace_one_bound: str
    accountant: str
    target_epsilon: float | None
    event: DpEvent | None
    guarantee: PrivacyGuarantee | None
    preceding: DpEvent | None = None

    @property
    def epochs(self) -> float | None:
        return None if self.steps is None else self.steps * self.sample_rate

    @property
    def sensitivity(self) -> float:
        return 2.0 if self.neighbouring is REPLACE_ONE else 1.0

    @property
    def bound(self) -> str:
        """The replace-one bound in use ("tight" under add/remove-one, where there is nothing to derive)."""
        return self.replace_one_bound if self.neighbouring is REPLACE_ONE else "tight"

    def event_after(self, steps: int) -> DpEvent:
        """The event of the first ``steps`` steps of this plan (after its ``preceding`` release, if any)."""
        if steps == 0:
            return ComposedEvent(()) if self.preceding is None else self.preceding
        return with_preceding(self.preceding, dpsgd_event(self.noise_multiplier, self.sample_rate, steps,
                                                          neighbouring=self.neighbouring, sampling=self.sampling,
                                                          population=self.n))

    def guarantee_after(self, steps: int) -> PrivacyGuarantee:
        """(epsilon, delta) of the first ``steps`` steps (0 steps: epsilon 0), by the plan's accountant."""
        factory = dpsgd_accountant(self.accountant, neighbouring=self.neighbouring, replace_one_bound=self.bound)
        if steps == 0 and self.preceding is None:
            return PrivacyGuarantee(0.0, self.delta, self.neighbouring, factory().name)
        return factory().compose(self.event_after(steps)).guarantee(self.delta)


def _sample_rate(n: int, sample_rate: float | None, batch_size: float | None) -> float:
    if (sample_rate is None) == (batch_size is None):
        raise ValueError("give exactly one of sample_rate and batch_size (the expected batch size q n)")
    if sample_rate is not None:
        return check_probability(sample_rate, "sample_rate")
    size = check_positive(batch_size, "batch_size")
    if size > n:
        raise ValueError(f"batch_size={size:g} exceeds the number of records n={n}")
    return size / n


def planned_steps(epochs: float | None = None, steps: int | None = None, *, q: float) -> int | None:
    """The planned number of steps T: ``steps``, or round(epochs / q); None for an open-ended run."""
    if epochs is not None and steps is not None:
        raise ValueError("give epochs or steps, not both")
    if steps is not None:
        if not (isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1):
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        return check_count(steps, "steps", maximum=MAX_COMPOSITIONS)
    if epochs is not None:
        # The accountants compose at most MAX_COMPOSITIONS steps: more would fail inside the PLD convolution
        # (epochs=1e300) or run for ever (1e7 epochs).
        return check_planned_steps(max(1, round(check_positive(epochs, "epochs") / q)), epochs)
    return None


def plan_dpsgd(
    n: int | None,
    *,
    delta: float,
    epsilon: float | None = None,
    sample_rate: float | None = None,
    batch_size: float | None = None,
    epochs: float | None = None,
    steps: int | None = None,
    accountant: str = "pld",
    neighbouring: Neighbouring | str = ADD_REMOVE,
    sampling: str = "poisson",
    replace_one_bound: str = "tight",
    noise_multiplier: float | None = None,
    preceding: DpEvent | None = None,
) -> DPSGDPlan:
    """The plan of a DP-SGD run on ``n`` records: every privacy rule checked once, the noise fixed.

    Parameters
    ----------
    n:
        The number of records (public: DP-SGD divides by the expected batch q n); None only for Poisson
        sampling at a given ``sample_rate`` (an accounting question without a data set).
    delta, epsilon:
        The budget; without ``epsilon`` the run's epsilon is what
        ``noise_multiplier`` buys over the planned steps.
    sample_rate, batch_size:
        q, or the expected batch q n (give one). Fixed-size batches hold
        exactly b = q n records: q n must be a whole number.
    epochs, steps:
        T, or T = round(epochs / q). Neither: an open-ended run (a noise
        multiplier and no ``epsilon``), accounted as it goes.
    accountant, neighbouring, sampling, replace_one_bound:
        See :func:`check_dpsgd_options`.
    noise_multiplier:
        s; with ``epsilon`` too it must meet the budget. Without it, the
        smallest s meeting (epsilon, delta) (:func:`calibrate_dpsgd`).
    preceding:
        An event released from the same records before the first step (see
        :func:`calibrate_dpsgd`); the plan's event and guarantee include it.

    Raises
    ------
    ValueError
        for any setting or combination no analysis covers, in one line.
    """
    # long-function: a long numpy-style docstring and code that is the plan's checks in order, then one calibration.
    relation = check_dpsgd_options(neighbouring=neighbouring, sampling=sampling, accountant=accountant,
                                   replace_one_bound=replace_one_bound)
    if n is None:
        if sampling == "fixed-size" or batch_size is not None:
            raise ValueError("fixed-size sampling and a batch size need the number of records n")
        q, batch = check_probability(sample_rate, "sample_rate"), None
    else:
        n = check_count(n, "n_samples")
        q = _sample_rate(n, sample_rate, batch_size)
        batch = float(fixed_batch_size(q, n)) if sampling == "fixed-size" else q * n  # a whole b, or refused
    planned = planned_steps(epochs, steps, q=q)
    delta = check_positive_delta(check_delta(delta))  # the Gaussian is never pure DP
    target = None if epsilon is None else check_epsilon(epsilon, "epsilon")
    bound = replace_one_bound if relation is REPLACE_ONE else "tight"
    _check_preceding(preceding, relation, bound)
    if planned is None:
        if target is not None:
            raise ValueError("a target epsilon needs the planned number of steps: give epochs or steps")
        if noise_multiplier is None:
            raise ValueError("give noise_multiplier, a target epsilon, or both")
        return DPSGDPlan(n, q, batch, None, check_positive(noise_multiplier, "noise_multiplier"), delta, relation,
                         sampling, replace_one_bound, accountant, None, None, None, preceding)
    if noise_multiplier is None:
        if target is None:
            raise ValueError("give noise_multiplier, a target epsilon, or both")
        # A record takes part in some step with probability 1 - (1 - q)^T; a delta at least that large is met by
        # any noise (epsilon 0), and a search for the smallest multiplier would never end.
        touched = -math.expm1(planned * math.log1p(-q)) if q < 1 else 1.0
        if delta >= touched:
            raise ValueError(f"delta={delta:g} is at least the probability that a record is ever sampled "
                             f"({touched:.3g}): every noise multiplier meets every epsilon; choose a smaller delta")
        noise_multiplier = calibrate_dpsgd(target, sample_rate=q, steps=planned, delta=delta, accountant=accountant,
                                           replace_one_bound=bound, neighbouring=relation, sampling=sampling,
                                           population=n, preceding=preceding).noise_multiplier
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    event = with_preceding(
        preceding, dpsgd_event(noise_multiplier, q, planned, neighbouring=relation, sampling=sampling, population=n)
    )
    factory = dpsgd_accountant(accountant, neighbouring=relation, replace_one_bound=bound)
    if not factory().supports(event):
        raise UnsupportedEventError(f"the {accountant} accountant cannot account for {sampling} sampling under "
                                    f"{relation.value} neighbours")
    guarantee = factory().compose(event).guarantee(delta)
    if target is not None and not guarantee.epsilon <= target:
        raise ValueError(
            f"noise_multiplier={noise_multiplier:g} over {planned} steps costs epsilon={guarantee.epsilon:.6g} at "
            f"delta={delta:g} ({guarantee.accountant}), above the target epsilon={target:g}; raise noise_multiplier "
            "or leave it unset to calibrate it"
        )
    return DPSGDPlan(n, q, batch, planned, noise_multiplier, delta, relation, sampling, replace_one_bound,
                     accountant, target, event, guarantee, preceding)


def _check_preceding(preceding: DpEvent | None, relation: Neighbouring, bound: str) -> None:
    """A release before the steps must be stated under the steps' relation, and composed by the tight bound."""
    if preceding is None:
        return
    if not isinstance(preceding, DpEvent):
        raise TypeError(f"preceding must be a DpEvent, got {type(preceding).__name__}")
    if preceding.neighbouring is not relation:
        raise ValueError(f"the release before the steps is stated under {preceding.neighbouring.value} neighbours, "
                         f"the steps under {relation.value}: state both under one relation")
    if bound != "tight":
        raise ValueError("a release before the steps is composed by the tight replace-one bound only: use "
                         "replace_one_bound='tight'")
