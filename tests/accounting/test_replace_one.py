"""Replace-one accounting for DP-SGD (issue 14): events, dominating pair, RDP curves, group privacy.

Oracles: direct numerical computation of the dominating pair's privacy curve
and Rényi divergences (scipy quadrature, mpmath at 40 digits), dp_accounting
0.6 (its REPLACE_ONE PLD of the Poisson-sampled Gaussian and its RDP for
SampledWithoutReplacementDpEvent; test-only imports), and group privacy.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.pld import privacy_loss_distribution as reference_pld
from dp_accounting.rdp import rdp_privacy_accountant as reference_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr
from scipy.stats import norm

from privml.accounting import (
    GaussianEvent,
    GroupPrivacyAccountant,
    LaplaceEvent,
    PLDAccountant,
    PoissonSampledEvent,
    RDPAccountant,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    add_remove_twin,
    calibrate_dpsgd,
    dpsgd_event,
    make_accountant,
)
from privml.accounting._pld_pairs import _ReplaceOnePoissonGaussianPair
from privml.accounting._rdp_curves import DEFAULT_ORDERS
from privml.accounting._rdp_replace_one import (
    rdp_poisson_gaussian_replace_one,
    rdp_sampled_without_replacement_gaussian,
)
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring

RO = Neighbouring.REPLACE_ONE
AR = Neighbouring.ADD_REMOVE_ONE
# (noise multiplier, q, steps, delta): DP-SGD settings (MNIST-like, small-data, large-q, few steps).
SETTINGS = [
    (1.1, 256 / 60000, 14040, 1e-5),
    (0.7, 0.01, 120, 1e-5),
    (2.0, 0.05, 500, 1e-6),
    (5.0, 0.3, 50, 1e-5),
    (0.8, 0.5, 3, 1e-5),
]


# ----------------------------------------------------------------- events
def test_poisson_event_carries_its_relation():
    event = PoissonSampledEvent(0.01, GaussianEvent(1.0), neighbouring="replace-one")
    assert event.neighbouring is RO
    assert PoissonSampledEvent(0.01, GaussianEvent(1.0)).neighbouring is AR
    assert SelfComposedEvent(event, 3).neighbouring is RO
    with pytest.raises(ValueError, match="one record's contribution"):
        PoissonSampledEvent(0.01, GaussianEvent(1.0, neighbouring=RO), neighbouring=RO)


def test_fixed_size_event_is_replace_one_and_checks_its_sizes():
    event = SampledWithoutReplacementEvent(256, 60000, GaussianEvent(1.0))
    assert event.neighbouring is RO
    assert event.sampling_ratio == pytest.approx(256 / 60000)
    with pytest.raises(ValueError):
        SampledWithoutReplacementEvent(10, 5, GaussianEvent(1.0))
    with pytest.raises(ValueError):
        SampledWithoutReplacementEvent(0, 5, GaussianEvent(1.0))
    with pytest.raises(ValueError, match="one record's contribution"):
        SampledWithoutReplacementEvent(1, 5, GaussianEvent(1.0, neighbouring=RO))


def test_dpsgd_event_builds_each_sampler_and_refuses_bad_combinations():
    assert dpsgd_event(1.0, 0.01, 5) == SelfComposedEvent(
        PoissonSampledEvent(0.01, GaussianEvent(1.0)), 5
    )
    assert dpsgd_event(1.0, 0.01, 5, neighbouring="replace-one").neighbouring is RO
    fixed = dpsgd_event(
        1.0, 0.01, 5, neighbouring="replace-one", sampling="fixed-size", population=1000
    )
    assert fixed == SelfComposedEvent(
        SampledWithoutReplacementEvent(10, 1000, GaussianEvent(1.0)), 5
    )
    with pytest.raises(ValueError, match="replace-one"):
        dpsgd_event(1.0, 0.01, 5, sampling="fixed-size", population=1000)
    with pytest.raises(ValueError, match="population"):
        dpsgd_event(1.0, 0.01, 5, neighbouring="replace-one", sampling="fixed-size")
    with pytest.raises(ValueError, match="whole batch"):
        dpsgd_event(
            1.0,
            0.0105,
            5,
            neighbouring="replace-one",
            sampling="fixed-size",
            population=1000,
        )
    with pytest.raises(ValueError, match="sampling"):
        dpsgd_event(1.0, 0.01, 5, sampling="shuffle")


def test_add_remove_twin_exists_for_poisson_events_only():
    ro = dpsgd_event(1.0, 0.01, 5, neighbouring="replace-one")
    assert add_remove_twin(ro) == dpsgd_event(1.0, 0.01, 5)
    fixed = dpsgd_event(
        1.0, 0.01, 5, neighbouring="replace-one", sampling="fixed-size", population=1000
    )
    assert add_remove_twin(fixed) is None
    assert add_remove_twin(GaussianEvent(1.0, neighbouring=RO)) is None


@pytest.mark.parametrize("name", ["basic", "advanced", "optimal", "zcdp", "gdp"])
def test_accountants_without_a_replace_one_analysis_refuse_it(name):
    ro = PoissonSampledEvent(0.1, LaplaceEvent(1.0), neighbouring=RO)
    for event in (ro, dpsgd_event(1.0, 0.01, 5, neighbouring="replace-one")):
        acc = make_accountant(name)
        assert not acc.supports(event)
        with pytest.raises(UnsupportedEventError):
            acc.compose(event)


def test_pld_refuses_fixed_size_and_non_gaussian_replace_one_events():
    fixed = dpsgd_event(
        1.0, 0.01, 5, neighbouring="replace-one", sampling="fixed-size", population=1000
    )
    laplace = PoissonSampledEvent(0.1, LaplaceEvent(1.0), neighbouring=RO)
    for event in (fixed, laplace):
        assert not PLDAccountant().supports(event)
        with pytest.raises(UnsupportedEventError):
            PLDAccountant().compose(event)
    assert not RDPAccountant().supports(laplace)


def test_group_accountant_takes_replace_one_poisson_events_only():
    group = GroupPrivacyAccountant("pld")
    assert group.supports(dpsgd_event(1.0, 0.01, 5, neighbouring="replace-one"))
    assert not group.supports(
        dpsgd_event(1.0, 0.01, 5)
    )  # already add/remove: nothing to convert
    assert not group.supports(
        dpsgd_event(
            1.0,
            0.01,
            5,
            neighbouring="replace-one",
            sampling="fixed-size",
            population=1000,
        )
    )
    with pytest.raises(UnsupportedEventError):
        group.compose(dpsgd_event(1.0, 0.01, 5))


# ------------------------------------------------------- the dominating pair
def _mixture_curve(q, s, u, v, gammas, dim):
    """H_gamma(A_u || A_v), A_w = (1-q) N(0, s^2 I) + q N(w, s^2 I), by a trapezoid grid in 1 or 2 dimensions."""
    axis = np.linspace(-1.0 - 9 * s, 1.0 + 9 * s, 1201 if dim == 1 else 501)
    step = axis[1] - axis[0]
    grid = np.stack(np.meshgrid(*([axis] * dim), indexing="ij"), axis=-1)

    def density(w):
        sq = np.sum((grid - np.asarray(w)) ** 2, axis=-1)
        return np.exp(-sq / (2 * s * s)) / (2 * np.pi * s * s) ** (dim / 2)

    zero = density(np.zeros(dim))
    a = (1 - q) * zero + q * density(u)
    b = (1 - q) * zero + q * density(v)
    return np.array([np.sum(np.maximum(a - g * b, 0.0)) * step**dim for g in gammas])


def test_no_pair_of_clipped_gradients_beats_the_dominating_pair():
    # The proof's claim, checked numerically: every (u, v) in the unit ball, in one and two
    # dimensions, has a hockey-stick curve below that of u = +1, v = -1, for gamma below and above 1.
    q, s = 0.3, 0.8
    gammas = np.array([0.2, 0.6, 1.0, 1.5, 3.0, 8.0])
    worst = _mixture_curve(q, s, [1.0], [-1.0], gammas, 1)
    for u, v in [
        (1.0, 0.0),
        (0.0, 1.0),
        (1.0, 0.5),
        (-0.3, 0.9),
        (0.7, -0.7),
        (1.0, 1.0),
    ]:
        assert np.all(_mixture_curve(q, s, [u], [v], gammas, 1) <= worst + 1e-9)
    worst_2d = _mixture_curve(
        q, s, [1.0, 0.0], [-1.0, 0.0], gammas, 2
    )  # the same pair on the 2-d grid
    assert np.allclose(worst_2d, worst, atol=1e-4)
    for u, v in [
        ([1.0, 0.0], [0.0, 1.0]),
        ([0.6, 0.8], [-0.6, 0.8]),
        ([0.6, 0.8], [0.0, -1.0]),
    ]:
        assert np.all(_mixture_curve(q, s, u, v, gammas, 2) <= worst_2d + 1e-9)
    # add/remove (v = 0, the null record) is a special case: replace-one is the stronger promise
    assert np.all(_mixture_curve(q, s, [1.0], [0.0], gammas, 1) < worst)


@settings(max_examples=60, deadline=None)
@given(
    q=st.floats(1e-4, 0.99),
    s=st.floats(0.2, 20.0),
    x=st.floats(-30.0, 30.0),
)
def test_loss_is_the_log_likelihood_ratio_and_is_inverted_exactly(q, s, x):
    pair = _ReplaceOnePoissonGaussianPair(s, q)
    direct = np.logaddexp(
        np.log1p(-q) + norm.logpdf(x, 0, s), np.log(q) + norm.logpdf(x, 1, s)
    ) - np.logaddexp(
        np.log1p(-q) + norm.logpdf(x, 0, s), np.log(q) + norm.logpdf(x, -1, s)
    )
    loss = float(pair.loss(x))
    assert loss == pytest.approx(direct, rel=1e-9, abs=1e-12)
    assert float(pair._output_at(np.array([loss]))[0]) == pytest.approx(
        x, rel=1e-7, abs=1e-7 * s * s
    )


def _independent_loss(q, s):
    def loss(x):
        p = np.logaddexp(
            np.log1p(-q) + norm.logpdf(x, 0, s), np.log(q) + norm.logpdf(x, 1, s)
        )
        r = np.logaddexp(
            np.log1p(-q) + norm.logpdf(x, 0, s), np.log(q) + norm.logpdf(x, -1, s)
        )
        return p - r

    return loss


def _exact_curve_one_step(q, s, eps):
    """delta(eps) = P(x > t) - e^eps Q(x > t), L(t) = eps, with mpmath at 40 digits."""
    mp.mp.dps = 40
    q_, s_ = mp.mpf(q), mp.mpf(s)

    def loss(x):
        p = (1 - q_) * mp.npdf(x, 0, s_) + q_ * mp.npdf(x, 1, s_)
        r = (1 - q_) * mp.npdf(x, 0, s_) + q_ * mp.npdf(x, -1, s_)
        return mp.log(p / r)

    t = mp.findroot(
        lambda x: loss(x) - eps,
        mp.mpf(brentq(lambda x: _independent_loss(q, s)(x) - eps, -1e3, 1e3)),
    )
    tail = lambda m: 1 - mp.ncdf(t, m, s_)
    return float(
        (1 - q_) * tail(0)
        + q_ * tail(1)
        - mp.e**eps * ((1 - q_) * tail(0) + q_ * tail(-1))
    )


def _exact_curve_two_steps(q, s, eps):
    """delta(eps) of the pair composed twice: integral over x of p(x) P(y > t(x)) - e^eps q(x) Q(y > t(x)).

    For each x, t(x) solves L(t) = eps - L(x) (vectorised bisection on an independent L); the outer
    integrand is smooth and Gaussian-tailed, so a fine trapezoid grid is exact to ~1e-12.
    """
    loss = _independent_loss(q, s)
    x = np.linspace(-1 - 14 * s, 2 + 14 * s, 20001)
    target = eps - loss(x)
    low, high = np.full(x.shape, -400.0), np.full(x.shape, 400.0)
    for _ in range(60):
        mid = 0.5 * (low + high)
        above = loss(mid) > target
        high, low = np.where(above, mid, high), np.where(above, low, mid)
    t = 0.5 * (low + high)
    p = (1 - q) * norm.pdf(x, 0, s) + q * norm.pdf(x, 1, s)
    r = (1 - q) * norm.pdf(x, 0, s) + q * norm.pdf(x, -1, s)
    p_tail = (1 - q) * ndtr(-t / s) + q * ndtr(-(t - 1) / s)
    r_tail = (1 - q) * ndtr(-t / s) + q * ndtr(-(t + 1) / s)
    return float(integrate.trapezoid(p * p_tail - math.exp(eps) * r * r_tail, x))


@pytest.mark.parametrize(
    "q, s",
    [
        (0.01, 0.8),
        (0.5, 3.0),
        pytest.param(0.2, 1.5, marks=pytest.mark.slow),
        pytest.param(0.05, 0.4, marks=pytest.mark.slow),
    ],
)
def test_pld_is_a_tight_upper_bound_on_the_exact_curve(q, s):
    one = PLDAccountant().compose(
        PoissonSampledEvent(q, GaussianEvent(s), neighbouring=RO)
    )
    two = PLDAccountant().compose(
        PoissonSampledEvent(q, GaussianEvent(s), neighbouring=RO), count=2
    )
    for eps in (0.0, 0.01, 0.1, 0.5, 1.0, 2.0):
        exact = _exact_curve_one_step(q, s, eps)
        if exact < 1e-12:
            continue
        # pessimistic (up to floating-point rounding at the grid points, where it is exact) and tight
        assert exact * (1 - 1e-12) <= one.get_delta(eps) <= exact * (1 + 1e-3) + 1e-14
        if eps not in (0.0, 0.1, 1.0):
            continue
        exact2 = _exact_curve_two_steps(q, s, eps)
        if exact2 > 1e-10:
            assert (
                exact2 * (1 - 1e-8) <= two.get_delta(eps) <= exact2 * (1 + 1e-3) + 1e-14
            )


@pytest.mark.parametrize(
    "s, q, steps, delta",
    [SETTINGS[0], SETTINGS[2]]
    + [pytest.param(*p, marks=pytest.mark.slow) for p in SETTINGS[1::2]],
)
def test_pld_matches_dp_accounting_replace_one(s, q, steps, delta):
    ours = (
        PLDAccountant()
        .compose(dpsgd_event(s, q, steps, neighbouring="replace-one"))
        .get_epsilon(delta)
    )
    reference = (
        reference_pld.from_gaussian_mechanism(
            s,
            sensitivity=1.0,
            sampling_prob=q,
            neighboring_relation=NeighboringRelation.REPLACE_ONE,
            value_discretization_interval=1e-4,
        )
        .self_compose(steps)
        .get_epsilon_for_delta(delta)
    )
    assert reference * (1 - 1e-5) <= ours <= reference * 1.005


def test_full_batch_replace_one_is_the_gaussian_with_sensitivity_two():
    for name in ("pld", "rdp"):
        ro = make_accountant(name).compose(
            dpsgd_event(2.0, 1.0, 10, neighbouring="replace-one")
        )
        plain = make_accountant(name).compose(
            GaussianEvent(1.0, neighbouring=RO), count=10
        )
        assert ro.get_epsilon(1e-5) == pytest.approx(plain.get_epsilon(1e-5), rel=1e-9)


# ------------------------------------------------------------ RDP curves
def _exact_rdp(q, s, alpha):
    mp.mp.dps = 25
    q, s, a = mp.mpf(q), mp.mpf(s), mp.mpf(alpha)
    p = lambda x: (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, 1, s)
    r = lambda x: (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, -1, s)
    f = lambda x: r(x) * ((p(x) / r(x)) ** a - 1 - a * (p(x) / r(x) - 1))
    top = float(2 * a + 1 + 40 * s)
    points = [-1 - 40 * s, -1, 0, 1] + [mp.mpf(t) for t in np.geomspace(2, top, 12)]
    return float(mp.log1p(mp.quad(f, points)) / (a - 1))


@pytest.mark.parametrize(
    "q, s, alpha",
    [(0.01, 1.0, 2.0), (0.1, 0.8, 3.3), (0.004, 5.0, 128.0)]
    + [
        pytest.param(*c, marks=pytest.mark.slow)
        for c in [
            (0.01, 1.0, 10.5),
            (256 / 60000, 1.1, 16.0),
            (0.3, 0.5, 20.0),
            (0.5, 2.0, 1.5),
        ]
    ],
)
def test_poisson_replace_one_rdp_matches_the_exact_divergence(q, s, alpha):
    ours = float(rdp_poisson_gaussian_replace_one(q, s, [alpha])[0])
    exact = _exact_rdp(q, s, alpha)
    assert exact <= ours <= exact * (1 + 1e-8)


def test_poisson_replace_one_rdp_sits_between_add_remove_and_the_unsampled_gaussian():
    from privml.accounting._rdp_poisson_gaussian import rdp_sampled_gaussian

    for q, s in [(0.01, 1.0), (0.2, 0.6), (256 / 60000, 4.0)]:
        ro = rdp_poisson_gaussian_replace_one(q, s, DEFAULT_ORDERS)
        ar = rdp_sampled_gaussian(q, s, DEFAULT_ORDERS)
        assert np.all(ro >= ar) and np.all(ro <= 2 * np.array(DEFAULT_ORDERS) / s**2)
        assert np.all(np.diff(ro) >= -1e-12)  # D_alpha is non-decreasing in alpha
    assert np.all(
        rdp_poisson_gaussian_replace_one(0.01, 1.0, [2.0, float("inf")])
        == [rdp_poisson_gaussian_replace_one(0.01, 1.0, [2.0])[0], float("inf")]
    )


@pytest.mark.parametrize(
    "b, n, s",
    [
        (256, 60000, 1.1),
        (600, 60000, 2.0),
        (100, 1000, 4.0),
        (10, 100, 1.0),
        (500, 50000, 0.8),
    ],
)
def test_fixed_size_rdp_curve_matches_dp_accounting(b, n, s):
    # dp_accounting's noise multiplier is relative to the replace-one sensitivity 2C: s / 2.
    ours = rdp_sampled_without_replacement_gaussian(b, n, s, DEFAULT_ORDERS)
    theirs = reference_rdp._compute_rdp_sample_wor_gaussian(
        b / n, s / 2, np.array(DEFAULT_ORDERS)
    )
    assert np.all(ours <= theirs * (1 + 1e-9))
    assert np.all(
        ours >= np.minimum(theirs, 2 * np.array(DEFAULT_ORDERS) / s**2) * (1 - 1e-9)
    )


@pytest.mark.parametrize(
    "s, steps, delta",
    [(1.1, 14040, 1e-5), (2.0, 2000, 1e-6), (0.8, 300, 1e-5), (6.0, 50000, 1e-5)],
)
def test_fixed_size_epsilon_matches_dp_accounting(s, steps, delta):
    b, n = 256, 60000
    ours = (
        RDPAccountant()
        .compose(
            dpsgd_event(
                s,
                b / n,
                steps,
                neighbouring="replace-one",
                sampling="fixed-size",
                population=n,
            )
        )
        .get_epsilon(delta)
    )
    reference = reference_rdp.RdpAccountant(
        neighboring_relation=NeighboringRelation.REPLACE_ONE
    )
    reference.compose(
        dp_event.SelfComposedDpEvent(
            dp_event.SampledWithoutReplacementDpEvent(
                n, b, dp_event.GaussianDpEvent(s / 2)
            ),
            steps,
        )
    )
    theirs = reference.get_epsilon(delta)
    assert theirs * (1 - 1e-9) <= ours <= theirs * 1.005


# --------------------------------------------------------- group privacy
@pytest.mark.parametrize("s, q, steps, delta", SETTINGS[:4])
def test_tight_replace_one_is_never_looser_than_group_privacy(s, q, steps, delta):
    event = dpsgd_event(s, q, steps, neighbouring="replace-one")
    for name in ("pld", "rdp"):
        tight = make_accountant(name).compose(event).get_epsilon(delta)
        group = GroupPrivacyAccountant(name).compose(event)
        assert tight <= group.get_epsilon(delta)
    add_remove = PLDAccountant().compose(dpsgd_event(s, q, steps)).get_epsilon(delta)
    assert add_remove <= PLDAccountant().compose(event).get_epsilon(delta)


def test_group_epsilon_satisfies_the_group_inequality():
    event = dpsgd_event(1.1, 0.01, 500, neighbouring="replace-one")
    group = GroupPrivacyAccountant("pld").compose(event)
    inner = PLDAccountant().compose(dpsgd_event(1.1, 0.01, 500))
    epsilon = group.get_epsilon(1e-5)
    assert (1 + math.exp(epsilon / 2)) * inner.get_delta(epsilon / 2) <= 1e-5
    # and it is the best such epsilon: a little less breaks it
    assert (1 + math.exp(epsilon / 2 * 0.999)) * inner.get_delta(
        epsilon / 2 * 0.999
    ) > 1e-5
    assert (
        group.guarantee(1e-5).neighbouring is RO
        and group.guarantee(1e-5).accountant == "pld+group"
    )
    assert group.get_delta(epsilon) <= 1e-5


def test_tight_replace_one_noise_is_below_group_privacy_noise():
    # The yardstick: q = 256/60000, 40 epochs, delta = 1e-5.
    q = 256 / 60000
    steps = round(40 / q)
    for epsilon in (0.1, 1.0, 10.0):
        kwargs = {
            "sample_rate": q,
            "steps": steps,
            "delta": 1e-5,
            "accountant": "pld",
            "neighbouring": "replace-one",
        }
        tight = calibrate_dpsgd(epsilon, **kwargs)
        group = calibrate_dpsgd(epsilon, replace_one_bound="group", **kwargs)
        add_remove = calibrate_dpsgd(
            epsilon, sample_rate=q, steps=steps, delta=1e-5, accountant="pld"
        )
        assert (
            add_remove.noise_multiplier
            < tight.noise_multiplier
            < group.noise_multiplier
        )
        assert group.accountant == "pld+group" and tight.accountant == "pld"


# ----------------------------------------------- calibration round trips
@pytest.mark.parametrize(
    "accountant, options",
    [
        ("pld", {"neighbouring": "replace-one"}),
        ("rdp", {"neighbouring": "replace-one"}),
        ("rdp", {"neighbouring": "replace-one", "replace_one_bound": "group"}),
        (
            "rdp",
            {
                "neighbouring": "replace-one",
                "sampling": "fixed-size",
                "population": 60000,
            },
        ),
    ],
)
def test_calibration_round_trip(accountant, options):
    q, steps, delta, target = 600 / 60000, 1000, 1e-5, 2.0
    result = calibrate_dpsgd(
        target,
        sample_rate=q,
        steps=steps,
        delta=delta,
        accountant=accountant,
        **options,
    )
    make = {
        "sampling": options.get("sampling", "poisson"),
        "population": options.get("population"),
    }

    def epsilon(s):
        acc = (
            GroupPrivacyAccountant(accountant)
            if options.get("replace_one_bound") == "group"
            else make_accountant(accountant)
        )
        return acc.compose(
            dpsgd_event(s, q, steps, neighbouring="replace-one", **make)
        ).get_epsilon(delta)

    assert result.epsilon == pytest.approx(epsilon(result.noise_multiplier))
    assert result.epsilon <= target
    assert epsilon(result.noise_multiplier * (1 - 2e-3)) > target  # near-optimal


def test_epsilon_is_monotone_in_noise_rate_and_steps():
    def eps(s, q, steps):
        return (
            PLDAccountant()
            .compose(dpsgd_event(s, q, steps, neighbouring="replace-one"))
            .get_epsilon(1e-5)
        )

    assert eps(1.0, 0.01, 100) > eps(1.2, 0.01, 100) > eps(1.5, 0.01, 100)
    assert eps(1.0, 0.01, 100) < eps(1.0, 0.02, 100) < eps(1.0, 0.05, 100)
    assert eps(1.0, 0.01, 100) < eps(1.0, 0.01, 200)


def test_calibration_refuses_bad_combinations_before_searching():
    kwargs = {"sample_rate": 0.01, "steps": 100, "delta": 1e-5}
    with pytest.raises(UnsupportedEventError, match="fixed-size"):
        calibrate_dpsgd(
            1.0,
            accountant="pld",
            neighbouring="replace-one",
            sampling="fixed-size",
            population=1000,
            **kwargs,
        )
    with pytest.raises(ValueError, match="replace-one"):
        calibrate_dpsgd(1.0, accountant="pld", replace_one_bound="group", **kwargs)
    with pytest.raises(ValueError, match="replace-one"):
        calibrate_dpsgd(
            1.0, accountant="rdp", sampling="fixed-size", population=1000, **kwargs
        )
    with pytest.raises(UnsupportedEventError):
        calibrate_dpsgd(
            1.0,
            accountant="rdp",
            neighbouring="replace-one",
            replace_one_bound="group",
            sampling="fixed-size",
            population=1000,
            **kwargs,
        )
    with pytest.raises(ValueError, match="replace_one_bound"):
        calibrate_dpsgd(
            1.0, accountant="rdp", neighbouring="replace-one", replace_one_bound="loose", **kwargs
        )


def test_defaults_are_unchanged():
    # add/remove-one with Poisson sampling stays the default and gives the published figure.
    result = calibrate_dpsgd(2.5944, sample_rate=256 / 60000, steps=14040, delta=1e-5)
    assert result.noise_multiplier == pytest.approx(1.1, rel=2e-3)
    assert dpsgd_event(1.1, 0.5, 3).neighbouring is AR


def test_log_ndtr_is_available_for_the_oracles():
    # guards the oracle helpers above against a scipy without log_ndtr (they would silently lose precision)
    assert log_ndtr(-40.0) < -800
