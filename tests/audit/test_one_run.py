"""One-run audit math (Steinke, Nasr and Jagielski 2023): the p-value, its inversion, the sweep, the Gaussian."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, logit

from privml.audit._one_run import (
    OneRunAudit,
    audit_from_scores,
    default_guess_counts,
    idealised_bound,
    idealised_curve,
    one_run_epsilon_lower_bound,
    one_run_p_value,
    simulate_gaussian_audit,
)


def test_all_correct_gives_the_closed_form():
    # delta = 0, v = r: P[Bin(r, q) >= r] = q^r <= beta  <=>  q <= beta^(1/r)  <=>  eps <= logit(beta^(1/r)).
    for r, conf in ((100, 0.95), (10, 0.9), (1000, 0.99)):
        expected = float(logit((1 - conf) ** (1 / r)))
        assert one_run_epsilon_lower_bound(1000, r, r, confidence=conf) == pytest.approx(expected, abs=1e-9)


def test_p_value_matches_the_theorem_written_out():
    # Proposition 5, term by term with cdf differences instead of the module's cumulative pmf sum.
    m, r, v, eps, delta = 500, 60, 45, 1.3, 1e-4
    q = 1 / (1 + math.exp(-eps))
    tail = 1 - stats.binom.cdf(v - 1, r, q)
    alpha = max((stats.binom.cdf(v - 1, r, q) - stats.binom.cdf(v - 1 - i, r, q)) / i for i in range(1, v + 1))
    assert one_run_p_value(m, r, v, epsilon=eps, delta=delta) == pytest.approx(tail + 2 * m * delta * alpha,
                                                                               rel=1e-9)
    assert one_run_p_value(m, r, v, epsilon=eps) == pytest.approx(tail, rel=1e-9)
    assert one_run_p_value(m, r, 0, epsilon=eps) == 1.0


def test_bound_is_rejected_below_and_not_above():
    m, r, v, delta, conf = 1000, 200, 150, 1e-5, 0.95
    eps = one_run_epsilon_lower_bound(m, r, v, delta=delta, confidence=conf)
    assert 0 < eps
    for below in np.linspace(0, eps * (1 - 1e-9), 50):
        assert one_run_p_value(m, r, v, epsilon=float(below), delta=delta) <= 1 - conf
    assert one_run_p_value(m, r, v, epsilon=eps + 1e-6, delta=delta) > 1 - conf


def test_monotone_in_correct_and_zero_at_chance():
    bounds = [one_run_epsilon_lower_bound(1000, 100, v) for v in range(0, 101)]
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))
    assert bounds[50] == 0.0 and bounds[55] == 0.0  # at or near chance nothing is certified
    assert bounds[100] > bounds[90] > 0


def test_delta_and_confidence_only_weaken_the_bound():
    base = one_run_epsilon_lower_bound(1000, 200, 180)
    with_delta = one_run_epsilon_lower_bound(1000, 200, 180, delta=1e-5)
    more_delta = one_run_epsilon_lower_bound(1000, 200, 180, delta=1e-4)
    assert base > with_delta > more_delta > 0
    assert one_run_epsilon_lower_bound(1000, 200, 180, confidence=0.99) < base
    # The delta term grows with m: more canaries, same count, weaker bound when delta > 0.
    assert one_run_epsilon_lower_bound(10_000, 200, 180, delta=1e-5) < with_delta


def test_the_bound_is_a_valid_test_exactly():
    # For eps-DP randomised response every guess is right with probability q = e^eps / (1 + e^eps)
    # independently: the worst case of the theorem. The chance that the audit certifies more than eps
    # must be at most 1 - confidence; computed exactly over the binomial count, no simulation.
    # The test is nearly exact: the rate is close to its level (a discrete count cannot hit it exactly).
    for eps, r, conf in ((1.0, 100, 0.95), (2.0, 200, 0.9), (0.5, 400, 0.95)):
        q = float(expit(eps))
        false_claim = sum(stats.binom.pmf(v, r, q) for v in range(r + 1)
                          if one_run_epsilon_lower_bound(10 * r, r, v, confidence=conf) > eps)
        assert 0.6 * (1 - conf) < false_claim <= 1 - conf


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0, 0, 0), {}, "m must be >= 1"),
        ((10, 11, 5), {}, "guesses must be <= m"),
        ((10, 5, 6), {}, "correct must be <= guesses"),
        ((10, -1, 0), {}, "guesses must be >= 0"),
        ((10, 5, 5), {"delta": 1.0}, "delta must be in"),
        ((10, 5, 5), {"confidence": 1.0}, "confidence must be in"),
        ((10, 5, 5), {"confidence": 0}, "confidence must be in"),
    ],
)
def test_bad_inputs_are_one_line_errors(args, kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        one_run_epsilon_lower_bound(*args, **kwargs)
    assert "\n" not in str(err.value)


def test_no_guesses_certify_nothing():
    assert one_run_epsilon_lower_bound(10, 0, 0) == 0.0


def test_audit_from_scores_perfect_scores_and_union_bound():
    rng = np.random.default_rng(0)
    included = rng.random(1000) < 0.5
    scores = included.astype(float)  # a perfect attack
    audit = audit_from_scores(scores, included, confidence=0.95, claimed_epsilon=2.0)
    assert isinstance(audit, OneRunAudit)
    assert audit.tried == 2 * len(default_guess_counts(1000))  # each total split evenly and all "in"
    assert audit.correct == audit.guesses  # perfect
    # Every tried count is tested at 1 - 0.05 / tried: the reported bound is the best of those.
    per_test = 1 - 0.05 / audit.tried
    assert audit.epsilon_lower == pytest.approx(
        one_run_epsilon_lower_bound(1000, audit.guesses, audit.correct, confidence=per_test))
    assert audit.epsilon_lower < one_run_epsilon_lower_bound(1000, audit.guesses, audit.correct)
    assert audit.exceeds_claim
    blob = json.loads(json.dumps(audit.to_dict()))
    assert blob["exceeds_claim"] is True and blob["neighbouring"] == "add/remove-one"


def test_audit_from_scores_counts_guesses_exactly():
    included = np.array([1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    scores = np.array([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    audit = audit_from_scores(scores, included, guesses=[(2, 2)])
    # top 2 (indices 0, 1) both in: 2 right; bottom 2 (indices 6, 7): index 7 out right, index 6 in wrong.
    assert (audit.guesses_in, audit.guesses_out, audit.correct, audit.tried) == (2, 2, 3, 1)
    assert audit.epsilon_lower == one_run_epsilon_lower_bound(8, 4, 3)
    # A total r is tried split evenly and as all "in".
    assert audit_from_scores(scores, included, guesses=4).tried == 2
    # Ties are broken by index (fixed before the run): all-equal scores guess "in" on the first canaries.
    tied = audit_from_scores(np.zeros(8), included, guesses=[(2, 0)])
    assert tied.correct == 2


def test_chance_scores_certify_nothing():
    rng = np.random.default_rng(1)
    included = rng.random(2000) < 0.5
    audit = audit_from_scores(rng.standard_normal(2000), included)
    assert audit.epsilon_lower == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scores": [1.0, 2.0], "included": [1]}, "one bit per score"),
        ({"scores": [1.0, 2.0], "included": [1, 2]}, "only 0/1"),
        ({"scores": [1.0, np.nan], "included": [1, 0]}, "scores"),
        ({"scores": [1.0, 2.0], "included": [1, 0], "guesses": 3}, "between 1 and m"),
        ({"scores": [1.0, 2.0], "included": [1, 0], "guesses": []}, "at least one"),
        ({"scores": [1.0, 2.0], "included": [1, 0], "neighbouring": "swap"}, "unknown neighbouring"),
        ({"scores": [1.0, 2.0], "included": [1, 0], "scores_from": "grey-box"}, "scores_from"),
    ],
)
def test_audit_from_scores_refuses_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        audit_from_scores(**kwargs)


def test_default_guess_counts():
    assert default_guess_counts(1000) == [10, 20, 50, 100, 200, 500, 1000]
    assert default_guess_counts(7) == [7]
    assert default_guess_counts(60) == [10, 20, 50, 60]


def test_idealised_bound_is_below_eps_and_rises_with_it():
    r, curve = idealised_curve(2.0, 200)
    assert r[0] == 1 and r[-1] == 200 and np.all(curve <= 2.0)
    assert idealised_bound(2.0, 200) == curve.max() > 1.0
    assert idealised_bound(1.0, 200) < idealised_bound(2.0, 200) < idealised_bound(4.0, 200) < 4.0


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_gaussian_simulation_never_exceeds_the_true_epsilon(eps):
    # 30 seeded runs each at 95%: a sound bound exceeds eps with probability <= 5% per run, and the
    # Gaussian mechanism is far from the randomised-response worst case, so none should.
    bounds = [simulate_gaussian_audit(eps, 1000, delta=1e-5, random_state=seed).epsilon_lower for seed in range(30)]
    assert max(bounds) <= eps
    assert np.mean(bounds) > 0.1 * eps  # and the audit has power


def test_gaussian_simulation_catches_noise_too_small():
    # Noise for eps = 8 while the claim is eps = 1: the audit refutes the claim.
    audit = simulate_gaussian_audit(8.0, 1000, delta=1e-5, random_state=3)
    assert not audit.exceeds_claim  # against its true epsilon
    assert dataclasses.replace(audit, claimed_epsilon=1.0).exceeds_claim


def test_gaussian_simulation_approaches_the_idealised_bound():
    ideal = idealised_bound(8.0, 1000)
    sim = np.median([simulate_gaussian_audit(8.0, 1000, delta=1e-5, random_state=s).epsilon_lower
                     for s in range(5)])
    assert 0.3 * ideal < sim < ideal
