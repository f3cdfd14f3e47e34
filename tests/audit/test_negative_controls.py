"""Negative controls: each planted bug is broken as documented, and the audit catches it."""

from __future__ import annotations

import numpy as np
import pytest

import privml.audit
from privml.linear import DPSGDClassifier, OutputPerturbationClassifier
from privml.linear._dpsgd_steps import clipped_gradient_sum
from privml.losses import LogisticLoss
from privml.mechanisms import AboveThreshold
from privml.prediction import SubsampleAndAggregate
from privml.testing import negative_controls as nc

FAST = [name for name in nc.CONTROLS if name != "per-tensor-clipping"]


@pytest.mark.parametrize("name", FAST)
def test_audit_catches_the_planted_bug_and_passes_the_correct_code(name):
    control = nc.CONTROLS[name]
    correct = nc.audit_control(name, broken=False)
    broken = nc.audit_control(name, broken=True)
    assert correct.claimed.epsilon == pytest.approx(broken.claimed.epsilon)
    assert correct.claimed.epsilon <= control.claimed_epsilon + 1e-9
    assert not correct.violated, correct.to_dict()
    assert broken.violated, broken.to_dict()
    assert broken.epsilon_lower_bound > correct.claimed.epsilon


@pytest.mark.slow
def test_audit_catches_per_tensor_clipping():
    correct = nc.audit_control("per-tensor-clipping", broken=False)
    broken = nc.audit_control("per-tensor-clipping", broken=True)
    assert not correct.violated, correct.to_dict()
    assert broken.violated, broken.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(nc.CONTROLS))
def test_audit_catches_every_bug_with_another_seed(name):
    assert nc.audit_control(name, broken=True, random_state=1).violated
    assert not nc.audit_control(name, broken=False, random_state=1).violated


def _one_record_sum(model, x, label=1):
    loss = LogisticLoss()
    X, y = np.asarray([x]), np.asarray([2 * label - 1])
    return model._clipped_sum(loss, np.zeros(2), X, y, 0.1, np.linalg.norm(X, axis=1))


def test_per_tensor_clipping_lets_one_record_move_the_sum_by_sqrt2_c():
    x = np.array([1.0, 1.0]) / np.sqrt(2)
    honest = _one_record_sum(DPSGDClassifier(epsilon=1.0), x)
    broken = _one_record_sum(nc.PerTensorClippingDPSGD(epsilon=1.0), x)
    assert np.linalg.norm(honest) == pytest.approx(0.1)
    assert np.linalg.norm(broken) == pytest.approx(0.1 * np.sqrt(2))


def test_unclipped_dpsgd_returns_the_raw_gradient():
    x = np.array([0.6, 0.8])
    broken = _one_record_sum(nc.UnclippedDPSGD(epsilon=1.0), x)
    raw = clipped_gradient_sum(LogisticLoss(), np.zeros(2), x[None, :], np.array([1]), 1e9)[0]
    np.testing.assert_allclose(broken, raw)
    assert np.linalg.norm(broken) == pytest.approx(0.5)  # five times the clip of 0.1


def test_half_sensitivity_control_uses_half_the_sensitivity():
    X, y = nc.control_data(30, bias=False)
    honest = OutputPerturbationClassifier(epsilon=1.0, classes=(0, 1), random_state=0).fit(X, y)
    broken = nc.HalfSensitivityOutputPerturbation(epsilon=1.0, classes=(0, 1), random_state=0).fit(X, y)
    assert broken.fit_info_["sensitivity"] == pytest.approx(honest.fit_info_["sensitivity"] / 2)
    assert broken.privacy_ == honest.privacy_  # the false claim is the same claim


def test_reused_threshold_keeps_answering_after_a_positive():
    honest = nc.answer_stream(AboveThreshold(epsilon=1.0, threshold=0.0, random_state=0), np.full(50, 100.0))
    broken = nc.answer_stream(
        nc.ReusedThresholdAboveThreshold(epsilon=1.0, threshold=0.0, random_state=0), np.full(50, 100.0)
    )
    assert honest.sum() == 1 and broken.sum() == 50


def test_unhalved_vote_is_twice_as_sharp():
    X, y = np.eye(2).repeat(2, axis=0), np.array([0, 0, 1, 1])
    settings = {"n_models": 2, "epsilon": 1.0, "budget": 1, "classes": (0, 1), "random_state": 0}
    honest = SubsampleAndAggregate(**settings).fit(X, y)
    broken = nc.UnhalvedSubsampleAggregate(**settings).fit(X, y)
    assert broken.fit_info_["beta"] == pytest.approx(2 * honest.fit_info_["beta"])


def test_controls_are_marked_and_not_exported():
    for cls in (
        nc.PerTensorClippingDPSGD,
        nc.UnclippedDPSGD,
        nc.HalfSensitivityOutputPerturbation,
        nc.ReusedThresholdAboveThreshold,
        nc.UnhalvedSubsampleAggregate,
    ):
        assert cls.BROKEN is True
        assert "NEVER" in nc.__doc__ and "BROKEN" in cls.__doc__
        assert cls.__name__ not in privml.audit.__all__
    with pytest.raises(ValueError, match="unknown control"):
        nc.audit_control("typo", broken=True)
