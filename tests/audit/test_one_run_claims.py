"""The claim a one-run audit of a linear fit tests: the pair, the accountant's curve, Accuracy First's epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from privml.audit._one_run_claims import linear_claim
from privml.audit._one_run_fdp import epsilon_delta_inverse, gaussian_inverse
from privml.audit._one_run_linear import linear_one_run_audit
from privml.cli._common import BIAS
from privml.cli._train import build_estimator
from privml.data import load_dataset
from privml.linear._dpsgd import DPSGDClassifier
from privml.neighbouring import Neighbouring
from privml.selection._accuracy_first import AccuracyFirstClassifier

Y = np.linspace(0.0, 1.0, 41)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", bias=BIAS, max_train=300, random_state=0)


def _gdp_delta(epsilon: float, mu: float) -> float:
    # Dong, Roth and Su (2022), Corollary 2.13: the (eps, delta(eps)) pairs of mu-GDP.
    return float(norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2))


def test_dpsgd_claims_its_accountants_curve_which_matches_the_mechanism(digits):
    # One full-batch step: the mechanism is exactly the Gaussian mechanism, mu = 1 / s. The PLD accountant's
    # curve must be no stronger than that (sound) and close to it (the claim is tested where it is tight).
    model = DPSGDClassifier(epsilon=2.0, classes=range(10), sample_rate=1.0, steps=1, random_state=0)
    model.fit(digits.X_train, digits.y_train)
    claim = linear_claim(model, Neighbouring.ADD_REMOVE_ONE, 300)
    assert claim.epsilon == model.privacy_.epsilon and claim.delta == 1e-5 and claim.profile is not None
    exact = gaussian_inverse(1.0 / model.fit_info_["noise_multiplier"])
    claimed = np.array([claim.profile(y) for y in Y])
    truth = np.array([exact(y) for y in Y])
    assert np.all(claimed <= truth + 1e-9) and np.max(truth - claimed) < 0.02
    pair = np.array([epsilon_delta_inverse(claim.epsilon, claim.delta)(y) for y in Y])
    assert np.max(claimed - pair) > 0.1  # the curve says far more than its one (eps, delta) pair


def test_dpcd_claims_mu_gdp_with_the_fits_mu(digits):
    model = build_estimator("dpcd", n_classes=10, epsilon=1.0, delta=1e-5, l2=None, seed=0)
    model.fit(digits.X_train, digits.y_train)
    claim = linear_claim(model, Neighbouring.REPLACE_ONE, 300)
    mu = model.fit_info_["mu"]
    assert claim.profile is not None and claim.profile(0.3) == pytest.approx(gaussian_inverse(mu)(0.3))
    assert _gdp_delta(model.privacy_.epsilon, mu) == pytest.approx(1e-5, rel=1e-3)  # the fit's own claim


@pytest.mark.parametrize("method", ["output", "objective"])
def test_single_releases_claim_their_pair(digits, method):
    model = build_estimator(method, n_classes=10, epsilon=1.0, delta=1e-5, l2=None, seed=0)
    model.fit(digits.X_train, digits.y_train)
    claim = linear_claim(model, Neighbouring.REPLACE_ONE, 300)
    pair = epsilon_delta_inverse(1.0, 1e-5)
    assert claim.profile is not None and [claim.profile(y) for y in Y] == [pair(y) for y in Y]
    with pytest.raises(RuntimeError, match="placed for add/remove-one"):
        linear_claim(model, Neighbouring.ADD_REMOVE_ONE, 300)


def test_the_baseline_has_no_claim(digits):
    model = build_estimator("nonprivate", n_classes=10, epsilon=None, delta=1e-5, l2=None, seed=0)
    claim = linear_claim(model.fit(digits.X_train, digits.y_train), Neighbouring.REPLACE_ONE, 300)
    assert claim.epsilon is None and claim.profile is None and claim.delta == 0.0


@pytest.fixture(scope="module")
def breast_cancer():
    return load_dataset("breast_cancer", bias=BIAS, random_state=0)


def _accuracy_first(delta: float) -> AccuracyFirstClassifier:
    return AccuracyFirstClassifier(target=0.3, at_epsilon=0.5, delta=delta, classes=[0, 1], random_state=0)


def test_accuracy_first_pure_is_audited_against_its_ex_post_epsilon(breast_cancer):
    data = breast_cancer
    result = linear_one_run_audit(_accuracy_first(0.0), data.X_train, data.y_train, m=200, random_state=1)
    audit = result.audit
    # the ex-post epsilon of the observed run (the search stopped early), far below its worst case
    worst = _accuracy_first(0.0)._planned_guarantee(result.n_train).epsilon
    assert audit.claimed_epsilon is not None and audit.claimed_epsilon < worst / 5
    assert audit.delta == 0.0 and audit.claim_rejected is None and "ex-post" in audit.claim_note
    assert audit.neighbouring == "replace-one" and not audit.exceeds_claim


def test_accuracy_first_with_delta_is_audited_against_its_worst_case(breast_cancer):
    model = _accuracy_first(1e-5).fit(breast_cancer.X_train, breast_cancer.y_train)
    claim = linear_claim(model, Neighbouring.REPLACE_ONE, breast_cancer.X_train.shape[0])
    worst = model._planned_guarantee(breast_cancer.X_train.shape[0])
    assert claim.epsilon == worst.epsilon > model.privacy_.epsilon and claim.delta == worst.delta
    assert claim.profile is not None and "worst case" in claim.note
