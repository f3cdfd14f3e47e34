"""One-run black-box audits of the linear methods: the design of the training set, claims kept, a bug caught."""

from __future__ import annotations

import numpy as np
import pytest

from privml.audit._one_run_linear import (
    linear_one_run_audit,
    make_one_run_canaries,
    one_run_training_set,
    quiet_basis,
)
from privml.cli._common import BIAS
from privml.cli._train import build_estimator
from privml.data import load_dataset
from privml.linear._dpsgd import DPSGDClassifier
from privml.neighbouring import Neighbouring
from privml.testing.negative_controls import UnclippedDPSGD


def test_training_set_switches_each_slot_under_the_claims_relation():
    X, y = np.full((5, 4), 0.1), np.zeros(5, dtype=int)
    canaries = make_one_run_canaries(3, 4, (0, 1, 2), random_state=0)
    assert np.allclose(np.linalg.norm(canaries.x, axis=1), 1.0)
    assert np.all(canaries.y != canaries.y_other)
    included = np.array([True, False, True])
    Xr, yr = one_run_training_set(X, y, canaries, included, Neighbouring.REPLACE_ONE)
    assert Xr.shape == (8, 4) and np.array_equal(Xr[:5], X)  # n = n_real + m in every world
    assert np.array_equal(Xr[5:], canaries.x)  # the mirror has the canary's features ...
    assert yr[6] == canaries.y_other[1] and yr[5] == canaries.y[0]  # ... and the other label
    Xa, ya = one_run_training_set(X, y, canaries, included, Neighbouring.ADD_REMOVE_ONE)
    assert np.array_equal(Xa[6], np.zeros(4)) and np.array_equal(Xa[7], canaries.x[2])  # zero-out null record


def test_quiet_basis_avoids_the_data():
    rng = np.random.default_rng(0)
    X = np.zeros((50, 6))
    X[:, :3] = rng.standard_normal((50, 3))
    basis = quiet_basis(X)
    assert basis.shape == (3, 6) and np.allclose(basis[:, :3], 0.0, atol=1e-12)
    canaries = make_one_run_canaries(10, 6, (0, 1), basis=basis, random_state=1)
    assert np.allclose(canaries.x[:, :3], 0.0, atol=1e-12)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", bias=BIAS, max_train=300, random_state=0)


@pytest.mark.parametrize("method", ["output", "objective", "dpsgd", "dpcd"])
def test_each_linear_method_stays_below_its_claim(digits, method):
    model = build_estimator(method, n_classes=10, epsilon=1.0, delta=1e-5, l2=None, seed=3)
    result = linear_one_run_audit(model, digits.X_train, digits.y_train, m=200, random_state=4)
    audit = result.audit
    assert audit.claimed_epsilon == pytest.approx(1.0, rel=1e-3)
    assert not audit.exceeds_claim and audit.epsilon_lower <= audit.claimed_epsilon
    assert audit.claim_rejected is False and audit.mu_lower is not None  # the f-DP test of the claimed curve ran
    assert result.n_train == result.n_real + 200 == 300 + 200
    expected = "add/remove-one" if method == "dpsgd" else "replace-one"
    assert audit.neighbouring == expected and audit.scores_from == "black-box"
    assert result.to_dict()["training_runs"] == 1


def test_the_baseline_leaks(digits):
    model = build_estimator("nonprivate", n_classes=10, epsilon=None, delta=1e-5, l2=None, seed=3)
    audit = linear_one_run_audit(model, digits.X_train, digits.y_train, m=200, random_state=4).audit
    assert audit.claimed_epsilon is None and audit.epsilon_lower > 0.3


def _quiet_data():
    # Records use 20 of 200 features: canaries drawn in the other 180 act alone, as in a real audit on
    # image data whose border pixels are always 0.
    rng = np.random.default_rng(0)
    X = np.zeros((1000, 200))
    X[:, :20] = rng.standard_normal((1000, 20))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, (X[:, 0] > 0).astype(int)


def test_unclipped_dpsgd_is_flagged_and_correct_dpsgd_is_not():
    X, y = _quiet_data()
    settings = {"epsilon": 0.5, "clip_norm": 0.01, "classes": (0, 1)}
    broken = [linear_one_run_audit(UnclippedDPSGD(**settings, random_state=s), X, y, m=200, random_state=10 + s)
              .audit for s in range(2)]
    correct = [linear_one_run_audit(DPSGDClassifier(**settings, random_state=s), X, y, m=200, random_state=10 + s)
               .audit for s in range(2)]
    assert all(a.exceeds_claim for a in broken), [a.epsilon_lower for a in broken]
    assert not any(a.exceeds_claim for a in correct)


def test_refuses_an_estimator_without_its_class_set():
    X, y = _quiet_data()
    with pytest.raises(ValueError, match="public class set"):
        linear_one_run_audit(DPSGDClassifier(epsilon=1.0), X, y, m=10)
    with pytest.raises(ValueError, match="one label per row"):
        linear_one_run_audit(DPSGDClassifier(epsilon=1.0, classes=(0, 1)), X, y[:5], m=10)
