"""The generic bracket-and-bisect calibration, noise calibration and accountant factory."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privml.accounting import _calibration as calibration
from privml.accounting._accountant import PrivacyAccountant, flatten
from privml.accounting._advanced import AdvancedCompositionAccountant
from privml.accounting._basic import BasicAccountant
from privml.accounting._calibration import ACCOUNTANTS, NoiseCalibration, calibrate_noise_multiplier, make_accountant
from privml.accounting._dpsgd import calibrate_dpsgd, dpsgd_event
from privml.accounting._events import (
    DpEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)
from privml.accounting._parameter_search import ParameterCalibration, calibrate_parameter
from privml.exceptions import UnsupportedEventError


class GaussianZCDP(PrivacyAccountant):
    """Test-local accountant with a closed form: Gaussian steps through zCDP.

    A Gaussian step of noise multiplier s is 1/(2 s^2)-zCDP; zCDP adds up, and
    rho-zCDP gives (rho + 2 sqrt(rho ln(1/delta)), delta)-DP (Bun and Steinke
    2016, Prop. 1.3). Calibration can then be checked against the exact inverse.
    """

    name = "test-zcdp"

    def __init__(self) -> None:
        super().__init__()
        self.rho = 0.0

    def supports(self, event: DpEvent) -> bool:
        return all(isinstance(e, GaussianEvent) for e, _ in flatten(event))

    def _compose(self, event: DpEvent, count: int) -> None:
        self.rho += sum(c / (2 * e.noise_multiplier**2) for e, c in flatten(event, count))

    def _get_epsilon(self, delta: float) -> float:
        if delta == 0:
            return math.inf
        return self.rho + 2 * math.sqrt(self.rho * math.log(1 / delta))

    def _get_delta(self, epsilon: float) -> float:
        return 1.0 if epsilon <= self.rho else math.exp(-((epsilon - self.rho) ** 2) / (4 * self.rho))


def exact_zcdp_sigma(target_epsilon: float, delta: float, steps: int) -> float:
    """Solve rho + 2 sqrt(rho L) = eps for rho, then rho = steps / (2 s^2) for s."""
    log_term = math.log(1 / delta)
    rho = (math.sqrt(log_term + target_epsilon) - math.sqrt(log_term)) ** 2
    return math.sqrt(steps / (2 * rho))


def gaussian_steps(steps: int):
    return lambda s: SelfComposedEvent(GaussianEvent(s), steps)


# ------------------------------------------------------------ make_accountant
def test_accountant_names():
    assert ACCOUNTANTS == ("basic", "advanced", "optimal", "rdp", "zcdp", "gdp", "pld")


@pytest.mark.parametrize(
    "name, cls, method",
    [("basic", BasicAccountant, None), ("advanced", AdvancedCompositionAccountant, "drv"),
     ("optimal", AdvancedCompositionAccountant, "kov")],
)
def test_make_accountant_builds_fresh_accountants(name, cls, method):
    acc = make_accountant(name)
    assert type(acc) is cls
    assert acc.name == name
    assert acc.ledger.events == ()
    assert make_accountant(name) is not acc
    if method is not None:
        assert acc.method == method


@pytest.mark.parametrize("name", ACCOUNTANTS)
def test_every_name_builds_an_empty_accountant_reporting_that_name(name):
    acc = make_accountant(name)
    assert isinstance(acc, PrivacyAccountant)
    assert acc.name == name
    assert acc.ledger.events == ()
    assert make_accountant(name) is not acc


def test_make_accountant_classes_of_the_numerical_accountants():
    from privml.accounting._gdp import GaussianDPAccountant
    from privml.accounting._pld import PLDAccountant
    from privml.accounting._rdp import RDPAccountant
    from privml.accounting._zcdp import ZCDPAccountant

    assert type(make_accountant("rdp")) is RDPAccountant
    assert type(make_accountant("zcdp")) is ZCDPAccountant
    assert type(make_accountant("gdp")) is GaussianDPAccountant
    assert type(make_accountant("pld")) is PLDAccountant


def test_make_accountant_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown accountant"):
        make_accountant("moments")
    with pytest.raises(TypeError):
        make_accountant(None)  # type: ignore[arg-type]


# ---------------------------------------------------------- calibrate_parameter
def test_integer_search_finds_the_largest_feasible_count():
    result = calibrate_parameter(lambda k: 0.1 * k, target=1.0, increasing=True, integer=True)
    assert isinstance(result, ParameterCalibration)
    assert result.value == 10 and isinstance(result.value, int)
    assert result.objective <= 1.0
    # A count whose very first step is over budget is unreachable.
    with pytest.raises(ValueError, match="unreachable"):
        calibrate_parameter(lambda k: 2.0 * k, target=1.0, increasing=True, integer=True)


def test_integer_search_for_a_decreasing_objective():
    # Smallest m with 100 / m <= 7 is 15; with everything feasible the answer is 1.
    assert calibrate_parameter(lambda m: 100 / m, target=7.0, increasing=False, integer=True).value == 15
    assert calibrate_parameter(lambda m: 1 / m, target=7.0, increasing=False, integer=True).value == 1


@given(
    a=st.floats(0.01, 100.0),
    b=st.floats(0.2, 5.0),
    target=st.floats(0.01, 100.0),
    increasing=st.booleans(),
    tolerance=st.sampled_from([1e-2, 1e-3, 1e-6]),
)
@settings(max_examples=100, deadline=None)
def test_returns_the_feasible_end_within_tolerance(a, b, target, increasing, tolerance):
    power = b if increasing else -b

    def objective(x: float) -> float:
        return a * x**power

    exact = (target / a) ** (1 / power)
    result = calibrate_parameter(objective, target=target, increasing=increasing, tolerance=tolerance)
    assert result.objective == objective(result.value) <= target
    # Feasible side, and within tolerance of the threshold.
    if increasing:
        assert exact * (1 - tolerance) * (1 - 1e-12) <= result.value <= exact * (1 + 1e-12)
    else:
        assert exact * (1 - 1e-12) <= result.value <= exact * (1 + tolerance) * (1 + 1e-12)


def test_wrong_hints_are_widened_and_good_hints_save_work():
    def objective(x: float) -> float:
        return 1 / x

    exact = 1 / 0.01
    wrong = calibrate_parameter(objective, target=0.01, increasing=False, lower=1.0, upper=2.0)
    assert exact <= wrong.value <= exact * (1 + 1e-3)
    good = calibrate_parameter(objective, target=0.01, increasing=False, lower=90.0, upper=110.0)
    assert exact <= good.value <= exact * (1 + 1e-3)
    assert good.iterations < wrong.iterations


def test_unreachable_and_unconstrained_targets():
    with pytest.raises(ValueError, match="unreachable"):
        calibrate_parameter(lambda x: 5.0, target=1.0, increasing=False, max_iterations=30)
    with pytest.raises(ValueError, match="does not constrain"):
        calibrate_parameter(lambda x: 0.5, target=1.0, increasing=True, max_iterations=30)
    with pytest.raises(ValueError, match="unreachable"):
        calibrate_parameter(lambda x: 1 + x, target=0.5, increasing=True)


def test_non_monotone_objective_and_nan_are_reported():
    with pytest.raises(ValueError, match="not monotone"):
        calibrate_parameter(lambda x: x, target=1.5, increasing=False, lower=1.0, upper=2.0)
    with pytest.raises(ValueError, match="NaN"):
        calibrate_parameter(lambda x: math.nan, target=1.0, increasing=True)


def test_running_out_of_iterations_is_an_error():
    with pytest.raises(RuntimeError, match="max_iterations"):
        calibrate_parameter(lambda x: 1 / x, target=0.3, increasing=False, tolerance=1e-12, max_iterations=8)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"tolerance": 0.0}, ValueError),
        ({"tolerance": 1.0}, ValueError),
        ({"lower": 2.0, "upper": 1.0}, ValueError),
        ({"lower": -1.0}, ValueError),
        ({"upper": math.inf}, ValueError),
        ({"max_iterations": 1}, ValueError),
        ({"target": math.nan}, ValueError),
        ({"increasing": 1}, TypeError),
    ],
)
def test_calibrate_parameter_validates_arguments(kwargs, error):
    args = {"target": 1.0, "increasing": True} | kwargs
    with pytest.raises(error):
        calibrate_parameter(lambda x: x, **args)


def test_objective_must_be_callable():
    with pytest.raises(TypeError):
        calibrate_parameter(1.0, target=1.0, increasing=True)  # type: ignore[arg-type]


# ------------------------------------------------------ calibrate_noise_multiplier
@given(
    target=st.floats(0.05, 20.0),
    delta=st.sampled_from([1e-9, 1e-6, 1e-3]),
    steps=st.integers(1, 10_000),
    tolerance=st.sampled_from([1e-2, 1e-3, 1e-5]),
)
@settings(max_examples=60, deadline=None)
def test_round_trip_against_a_closed_form(target, delta, steps, tolerance):
    result = calibrate_noise_multiplier(
        gaussian_steps(steps), target_epsilon=target, delta=delta, accountant=GaussianZCDP, tolerance=tolerance
    )
    assert isinstance(result, NoiseCalibration)
    assert result.accountant == "test-zcdp"
    exact = exact_zcdp_sigma(target, delta, steps)
    # The noisier end: at least the exact multiplier, at most tolerance above it.
    assert exact * (1 - 1e-9) <= result.noise_multiplier <= exact * (1 + tolerance) * (1 + 1e-9)
    achieved = GaussianZCDP().compose(gaussian_steps(steps)(result.noise_multiplier)).get_epsilon(delta)
    assert result.epsilon == achieved <= target
    # Less noise by the tolerance would break the budget.
    less = GaussianZCDP().compose(gaussian_steps(steps)(result.noise_multiplier * (1 - tolerance))).get_epsilon(delta)
    assert less > target


def test_laplace_with_basic_composition_has_an_exact_answer():
    # k Laplace steps of multiplier b cost k / b: the answer is b = k / eps.
    result = calibrate_noise_multiplier(
        lambda b: SelfComposedEvent(LaplaceEvent(b), 25), target_epsilon=2.0, delta=0.0, accountant="basic"
    )
    assert 12.5 <= result.noise_multiplier <= 12.5 * (1 + 1e-3)
    assert result.epsilon <= 2.0
    assert result.accountant == "basic"


def test_optimal_composition_needs_less_noise_than_basic():
    def make(b: float) -> DpEvent:
        return SelfComposedEvent(LaplaceEvent(b), 200)

    basic = calibrate_noise_multiplier(make, target_epsilon=1.0, delta=1e-6, accountant="basic")
    advanced = calibrate_noise_multiplier(make, target_epsilon=1.0, delta=1e-6, accountant="advanced")
    optimal = calibrate_noise_multiplier(make, target_epsilon=1.0, delta=1e-6, accountant="optimal")
    assert optimal.noise_multiplier < advanced.noise_multiplier < basic.noise_multiplier
    assert optimal.accountant == "optimal" and advanced.accountant == "advanced"
    for result in (basic, advanced, optimal):
        assert make_accountant(result.accountant).compose(make(result.noise_multiplier)).get_epsilon(1e-6) <= 1.0


def test_unreachable_target_is_a_clear_error():
    # The sampled step's own delta (q * 1e-3) can never fit in delta = 1e-6,
    # whatever the noise: epsilon stays infinite.
    def make(b: float) -> DpEvent:
        return SelfComposedEvent(
            PoissonSampledEvent(0.5, EpsilonDeltaEvent(1 / b, 1e-3, neighbouring="add/remove-one")), 10
        )

    with pytest.raises(ValueError, match="unreachable"):
        calibrate_noise_multiplier(make, target_epsilon=1.0, delta=1e-6, accountant="basic", max_iterations=20)


def test_unsupported_event_is_reported():
    with pytest.raises(UnsupportedEventError):
        calibrate_noise_multiplier(gaussian_steps(10), target_epsilon=1.0, delta=1e-5, accountant="basic")


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"target_epsilon": 0.0}, ValueError),
        ({"target_epsilon": math.inf}, ValueError),
        ({"delta": 1.0}, ValueError),
        ({"delta": -1e-9}, ValueError),
        ({"accountant": "moments"}, ValueError),
        ({"accountant": 3}, TypeError),
        ({"accountant": lambda: "rdp"}, TypeError),
        ({"lower": 0.0}, ValueError),
        ({"lower": 3.0, "upper": 2.0}, ValueError),
        ({"tolerance": 2.0}, ValueError),
        ({"max_iterations": 0}, ValueError),
    ],
)
def test_calibrate_noise_multiplier_validates_arguments(kwargs, error):
    args = {"target_epsilon": 1.0, "delta": 1e-5, "accountant": GaussianZCDP} | kwargs
    with pytest.raises(error):
        calibrate_noise_multiplier(gaussian_steps(10), **args)
    with pytest.raises(TypeError):
        calibrate_noise_multiplier("not callable", target_epsilon=1.0, delta=1e-5)  # type: ignore[arg-type]


def test_factory_must_return_an_empty_accountant():
    def used() -> PrivacyAccountant:
        return GaussianZCDP().compose(GaussianEvent(1.0))

    with pytest.raises(ValueError, match="empty"):
        calibrate_noise_multiplier(gaussian_steps(10), target_epsilon=1.0, delta=1e-5, accountant=used)


# --------------------------------------------------------------------- DP-SGD
def test_calibrate_dpsgd_recovers_the_reference_noise_multiplier():
    # SPEC reference: s = 1.1, q = 256/60000, 14040 steps, delta = 1e-5 -> RDP epsilon 2.5944
    # (dp_accounting 0.6.0, improved conversion). Calibrating to that epsilon gives s back.
    result = calibrate_dpsgd(2.5944, sample_rate=256 / 60000, steps=14040, delta=1e-5, accountant="rdp")
    assert result.accountant == "rdp"
    assert result.noise_multiplier == pytest.approx(1.1, rel=2e-3)
    assert result.epsilon <= 2.5944
    eps = make_accountant("rdp").compose(dpsgd_event(result.noise_multiplier, 256 / 60000, 14040)).get_epsilon(1e-5)
    assert eps == result.epsilon


def test_calibrate_dpsgd_agrees_with_dp_accounting_calibration():
    # Oracle: dp_accounting's own calibration over its RDP accountant (test-only import).
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    q, steps, target = 0.01, 120, 3.0
    theirs = dp_accounting.calibrate_dp_mechanism(
        rdp_privacy_accountant.RdpAccountant,
        lambda s: dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps
        ),
        target,
        1e-5,
        tol=1e-6,
    )
    ours = calibrate_dpsgd(target, sample_rate=q, steps=steps, delta=1e-5, accountant="rdp", tolerance=1e-4)
    assert ours.noise_multiplier == pytest.approx(theirs, rel=2e-3)


def test_gdp_calibration_of_composed_gaussians_matches_the_analytic_gaussian():
    # 100 Gaussian steps of multiplier s compose exactly to one of s / 10 (GDP,
    # mu = 10 / s). SPEC reference: the analytic Gaussian for (1, 1e-5) at
    # sensitivity 1 has sigma = 3.7306, so s = 37.306 (4 significant digits).
    result = calibrate_noise_multiplier(gaussian_steps(100), target_epsilon=1.0, delta=1e-5, accountant="gdp")
    assert result.accountant == "gdp"
    assert 37.306 * (1 - 2e-5) <= result.noise_multiplier <= 37.306 * (1 + 1e-3 + 2e-5)
    assert result.epsilon <= 1.0


def test_pld_calibration_recovers_the_reference_noise_multiplier():
    # SPEC reference: s = 1.1, q = 256/60000, 14040 steps, delta = 1e-5 -> PLD epsilon 2.3796.
    # The search runs through the RDP bracket (RDP needs more noise for the same epsilon).
    rdp = calibrate_dpsgd(2.3796, sample_rate=256 / 60000, steps=14040, delta=1e-5, accountant="rdp")
    pld = calibrate_dpsgd(2.3796, sample_rate=256 / 60000, steps=14040, delta=1e-5, accountant="pld")
    assert pld.accountant == "pld"
    assert pld.noise_multiplier == pytest.approx(1.1, rel=2e-3)
    assert pld.epsilon <= 2.3796
    assert pld.noise_multiplier < rdp.noise_multiplier


def test_full_batch_dpsgd_matches_closed_form():
    result = calibrate_dpsgd(1.0, sample_rate=1.0, steps=100, delta=1e-5, accountant=GaussianZCDP)
    assert result.noise_multiplier == pytest.approx(exact_zcdp_sigma(1.0, 1e-5, 100), rel=1e-3)


@pytest.mark.parametrize(
    "kwargs",
    [{"sample_rate": 0.0}, {"sample_rate": 1.5}, {"steps": 0}, {"delta": 1.0}],
)
def test_calibrate_dpsgd_validates_arguments(kwargs):
    args = {"sample_rate": 0.01, "steps": 100, "delta": 1e-5} | kwargs
    with pytest.raises(ValueError):
        calibrate_dpsgd(1.0, **args)


# ------------------------------------------------------------ the PLD shortcut
def test_pld_search_starts_from_the_rdp_bracket(monkeypatch):
    # Stand-ins: "rdp" is the looser accountant (zCDP of the Gaussian, as RDP
    # itself is for full-batch steps) and "pld" an exact one (a Gaussian whose
    # epsilon is 0.9 of it), so the RDP multiplier is a valid upper end.
    class Tighter(GaussianZCDP):
        name = "pld"

        def _get_epsilon(self, delta: float) -> float:
            return 0.9 * super()._get_epsilon(delta)

    calls: list[str] = []

    def fake(name: str) -> PrivacyAccountant:
        calls.append(name)
        return Tighter() if name == "pld" else GaussianZCDP()

    monkeypatch.setattr(calibration, "make_accountant", fake)
    hinted = calibrate_noise_multiplier(gaussian_steps(50), target_epsilon=1.0, delta=1e-5, accountant="pld")
    direct = calibrate_noise_multiplier(gaussian_steps(50), target_epsilon=1.0, delta=1e-5, accountant=Tighter)
    assert "rdp" in calls
    assert hinted.accountant == "pld"
    assert hinted.noise_multiplier == pytest.approx(direct.noise_multiplier, rel=2e-3)
    assert hinted.epsilon <= 1.0
    # The bracket [s_rdp / 2, s_rdp] already holds the answer: only bisection is left.
    assert hinted.iterations <= direct.iterations


def test_pld_search_widens_a_wrong_rdp_bracket(monkeypatch):
    # If the "rdp" stand-in were *tighter* than "pld", its multiplier would be
    # too small for PLD: the bracket must be checked and widened, not trusted.
    class Looser(GaussianZCDP):
        name = "pld"

        def _get_epsilon(self, delta: float) -> float:
            return 3.0 * super()._get_epsilon(delta)

    monkeypatch.setattr(calibration, "make_accountant", lambda name: Looser() if name == "pld" else GaussianZCDP())
    result = calibrate_noise_multiplier(gaussian_steps(50), target_epsilon=1.0, delta=1e-5, accountant="pld")
    assert Looser().compose(gaussian_steps(50)(result.noise_multiplier)).get_epsilon(1e-5) <= 1.0
    assert Looser().compose(gaussian_steps(50)(result.noise_multiplier * (1 - 1e-3))).get_epsilon(1e-5) > 1.0
