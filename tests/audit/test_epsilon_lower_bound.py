"""Clopper-Pearson epsilon lower bounds: formula, validity, power, threshold selection, reproducibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privml.audit._epsilon_lower_bound import audit_mechanism
from privml.audit._threshold_test import epsilon_from_rates, epsilon_lower_bound
from privml.audit._trials import run_trials, trial_seeds, white_box_statistic
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring


def test_epsilon_from_rates_matches_both_terms():
    # log((1 - 0 - 0.5) / 0.05) = log 10; the other term log(0.95 / 0.5) is smaller.
    assert epsilon_from_rates(0.05, 0.5, 0.0) == pytest.approx(math.log(10))
    assert epsilon_from_rates(0.5, 0.05, 0.0) == pytest.approx(math.log(10))  # symmetric term
    assert epsilon_from_rates(0.5, 0.05, 0.1) == pytest.approx(math.log(0.4 / 0.05))
    assert epsilon_from_rates(0.5, 0.5, 0.0) == 0.0  # a coin flip certifies nothing
    assert epsilon_from_rates(0.9, 0.9, 0.0) == 0.0  # worse than a coin: clamped at 0


def test_perfect_separation_gives_the_clopper_pearson_ceiling():
    out, inn = np.zeros(200), np.ones(200)
    bound = epsilon_lower_bound(out, inn, delta=0.0, confidence=0.95)
    # 100 bounding trials, zero errors: the upper bounds are 1 - (0.025)^(1/100) each.
    hi = stats.beta.ppf(1 - 0.025, 1, 100)
    assert bound.fpr == bound.fnr == 0.0
    assert bound.fpr_upper == pytest.approx(hi)
    assert bound.epsilon == pytest.approx(math.log((1 - hi) / hi))
    assert bound.n_select == bound.n_bound == 100


def test_reversed_statistic_is_detected_by_direction():
    rng = np.random.default_rng(0)
    out, inn = rng.normal(0, 1, 400), rng.normal(-4, 1, 400)
    bound = epsilon_lower_bound(out, inn)
    assert bound.direction == "less" and bound.epsilon > 1.5


def test_identical_worlds_rarely_certify_anything():
    rng = np.random.default_rng(1)
    bounds = [epsilon_lower_bound(rng.normal(size=200), rng.normal(size=200)).epsilon for _ in range(40)]
    # Valid at 95%: a positive bound on identical worlds is a false alarm (any positive epsilon is "true" here,
    # so we check the bounds are tiny rather than zero).
    assert np.mean(np.asarray(bounds) > 0.3) <= 0.1


def test_randomised_response_bound_is_valid_and_tight():
    """Binary randomised response is exactly eps-DP: the audit must stay below eps yet come close."""
    eps = 1.0
    keep = math.exp(eps) / (1 + math.exp(eps))

    def trial(inserted: bool, rng: np.random.Generator) -> float:
        truth = 1.0 if inserted else 0.0
        return truth if rng.random() < keep else 1.0 - truth

    claimed = PrivacyGuarantee(eps, 0.0, Neighbouring.REPLACE_ONE, "exact")
    result = audit_mechanism(trial, claimed=claimed, trials=3000, random_state=0)
    assert not result.violated
    assert 0.7 < result.epsilon_lower_bound < eps
    assert result.auc == pytest.approx(keep, abs=0.03)


def test_threshold_is_chosen_without_the_bounding_trials():
    rng = np.random.default_rng(2)
    out, inn = rng.normal(0, 1, 300), rng.normal(2, 1, 300)
    base = epsilon_lower_bound(out, inn)
    # Changing only the bounding half cannot move the threshold.
    out2, inn2 = out.copy(), inn.copy()
    out2[150:] = rng.normal(0, 1, 150)
    inn2[150:] = rng.normal(2, 1, 150)
    assert epsilon_lower_bound(out2, inn2).threshold == base.threshold


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"confidence": 1.0}, "confidence"),
        ({"select_fraction": 0.0}, "select_fraction"),
        ({"delta": 1.0}, "delta"),
        ({"select_confidence": 0.0}, "select_confidence"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        epsilon_lower_bound([0.0, 1.0], [0.0, 1.0], **kwargs)


def test_too_few_or_nan_scores_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        epsilon_lower_bound([0.0], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        epsilon_lower_bound([0.0, np.nan], [1.0, 2.0])


def _noisy_trial(inserted: bool, rng: np.random.Generator) -> float:
    return float(inserted) + rng.normal()


def test_trials_are_reproducible_and_independent_of_workers():
    a = run_trials(_noisy_trial, trials=6, random_state=3)
    b = run_trials(_noisy_trial, trials=6, random_state=3, n_jobs=2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = run_trials(_noisy_trial, trials=6, random_state=4)
    assert not np.array_equal(a[0], c[0])
    assert len({s.entropy for s in trial_seeds(3, 5)}) == 1  # one root ...
    assert len({tuple(s.spawn_key) for s in trial_seeds(3, 5)}) == 10  # ... ten distinct children


@pytest.mark.parametrize("kind", ["projection", "distance"])
def test_white_box_statistics_separate_shifted_noise(kind):
    rng = np.random.default_rng(5)
    out, inn = rng.normal(size=(100, 3)), rng.normal(size=(100, 3)) + [3.0, 0.0, 0.0]
    score = white_box_statistic(kind, out, inn)
    assert np.mean(score(inn)) > np.mean(score(out)) + 2
    with pytest.raises(ValueError, match="statistic"):
        white_box_statistic("median", out, inn)


def test_vector_trials_need_a_statistic():
    claimed = PrivacyGuarantee(1.0, 0.0, Neighbouring.REPLACE_ONE, "exact")

    def trial(inserted: bool, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(size=2) + (2.0 if inserted else 0.0)

    with pytest.raises(ValueError, match="statistic"):
        audit_mechanism(trial, claimed=claimed, trials=10, random_state=0)
    result = audit_mechanism(trial, claimed=claimed, trials=50, random_state=0, statistic="projection")
    assert result.auc > 0.9


def test_audit_epsilon_needs_a_stated_guarantee():
    from sklearn.linear_model import LogisticRegression

    from privml.audit._epsilon_lower_bound import audit_epsilon

    X = np.column_stack([np.linspace(-1, 1, 10), np.zeros(10)])
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(TypeError, match="no privacy_ guarantee"):
        audit_epsilon(LogisticRegression(), X, y, trials=2)
    with pytest.raises(ValueError, match="score must be"):
        audit_epsilon(LogisticRegression(), X, y, trials=2, score="weights-median")
