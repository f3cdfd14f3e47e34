"""White-box one-run audits of linear DP-SGD: the seam, the canaries, planted bugs caught, correct code passes."""

from __future__ import annotations

import numpy as np
import pytest

from privml.audit._one_run import default_guess_counts
from privml.audit._one_run_dpsgd import _StepReader, dirac_coordinates, dpsgd_white_box_audit
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._output_perturbation import OutputPerturbationClassifier
from privml.testing.negative_controls import UnclippedDPSGD


class HalfNoiseDPSGD(DPSGDClassifier):
    """BROKEN (planted bug of these tests): half the noise the accountant assumes (mu doubles)."""

    def _noise(self, plan, clip, shape, rng):
        return 0.5 * super()._noise(plan, clip, shape, rng)


def test_the_seam_adds_c_for_each_sampled_included_canary_and_reads_the_sum():
    reader = _StepReader(3, np.array([True, False, True]), 0.5, np.array([1, 5, 7]), None)
    noisy = np.zeros((4, 2))  # 8 weights, row-major
    out = reader(np.array([0, 2, 3, 4, 5]), noisy)  # real records 0 and 2; slots 0, 1 and 2 sampled
    assert out.reshape(-1)[[1, 5, 7]].tolist() == [0.5, 0.0, 0.5]  # slot 1's canary is out: a null record
    assert reader.rows[0].tolist() == [1.0, 0.0, 1.0]  # in units of C
    reader(np.array([0, 4]), np.ones((4, 2)))  # slot 1 only, excluded
    assert reader.rows[1].tolist() == [2.0, 2.0, 2.0]
    assert DPSGDClassifier._audit_step is None  # production never sets it


def test_dirac_coordinates_are_the_quietest_weights():
    X = np.zeros((10, 4))
    X[:, 0], X[:, 2] = 1.0, 0.1  # features 1 and 3 are blank, then 2, then 0
    assert dirac_coordinates(X, 3, 7).tolist() == [3, 4, 5, 6, 9, 10, 11]  # features 1 and 3 whole, then 2's first
    assert dirac_coordinates(X, 2, 2).tolist() == [1, 3]  # binary: one weight per feature
    with pytest.raises(ValueError, match="need as many coordinates"):
        dirac_coordinates(X, 2, 5)


def _wide_data():
    # 200 records on 20 of 1000 features, 10 classes: 10,000 weights, most of them never reached by a record.
    rng = np.random.default_rng(0)
    X = np.zeros((200, 1000))
    X[:, :20] = rng.standard_normal((200, 20))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, rng.integers(0, 10, 200)


def test_half_noise_is_flagged_white_box_and_correct_dpsgd_is_not():
    # One full-batch step, claim (2, 1e-5): the release is mu-GDP with the claim's mu, halved noise doubles it.
    # 10,000 Dirac canaries; the f-DP test of the claimed (PLD) curve sees it where the (eps, delta) bound
    # (capped near a third of the real epsilon at this m) cannot.
    X, y = _wide_data()
    settings = {"epsilon": 2.0, "classes": range(10), "sample_rate": 1.0, "steps": 1}
    guesses = [(k, 0) for k in (200, 500, 1000, 2000)]
    for seed in range(2):
        broken = dpsgd_white_box_audit(
            HalfNoiseDPSGD(**settings, random_state=seed), X, y, m=10_000, guesses=guesses, random_state=10 + seed
        )
        correct = dpsgd_white_box_audit(
            DPSGDClassifier(**settings, random_state=seed), X, y, m=10_000, guesses=guesses, random_state=10 + seed
        )
        assert broken.audit.claim_rejected and broken.audit.exceeds_claim, broken.audit
        assert not correct.audit.exceeds_claim and correct.audit.claim_rejected is False, correct.audit
        assert correct.audit.epsilon_lower < 2.0 and correct.audit.mu_lower < broken.audit.mu_lower


def _quiet_data():
    rng = np.random.default_rng(0)
    X = np.zeros((300, 200))
    X[:, :20] = rng.standard_normal((300, 20))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0)


def test_unclipped_dpsgd_is_flagged_by_record_canaries_and_correct_dpsgd_is_not():
    # Record canaries go through the estimator's clipping: left out, each moves the sum ~10x further than C.
    X, y = _quiet_data()
    settings = {
        "epsilon": 1.0,
        "clip_norm": 0.05,
        "classes": (0, 1, 2, 3),
        "sample_rate": 1.0,
        "steps": 10,
        "learning_rate": 1.0,
    }
    for seed in range(2):
        broken = dpsgd_white_box_audit(
            UnclippedDPSGD(**settings, random_state=seed), X, y, m=400, canaries="records", random_state=20 + seed
        )
        correct = dpsgd_white_box_audit(
            DPSGDClassifier(**settings, random_state=seed), X, y, m=400, canaries="records", random_state=20 + seed
        )
        assert broken.audit.exceeds_claim, broken.audit
        assert not correct.audit.exceeds_claim, correct.audit


def test_a_poisson_run_reports_its_run_and_the_claim_under_its_own_relation():
    X, y = _quiet_data()
    est = DPSGDClassifier(epsilon=1.0, classes=(0, 1, 2, 3), batch_size=100, epochs=2, random_state=0)
    result = dpsgd_white_box_audit(est, X, y, m=300, random_state=1)
    out = result.to_dict()
    assert out["scores_from"] == "white-box" and out["neighbouring"] == "add/remove-one"
    assert out["canaries"] == "dirac" and out["statistic"] in ("sum", "likelihood")
    assert (
        out["n_train"] == 600
        and out["training_runs"] == 1
        and out["tried"] == 2 * 3 * 2 * len(default_guess_counts(300))
    )
    assert out["sample_rate"] == pytest.approx(100 / 600) and out["steps"] == 12
    assert out["claimed_epsilon"] == pytest.approx(1.0, rel=1e-3) and not out["exceeds_claim"]
    assert result.scores.shape == (300,) and "_audit_step" not in vars(est)


@pytest.mark.parametrize(
    ("estimator", "kwargs", "error", "message"),
    [
        (OutputPerturbationClassifier(epsilon=1.0, classes=(0, 1)), {}, TypeError, "linear DP-SGD"),
        (DPSGDClassifier(epsilon=1.0, classes=(0, 1), neighbouring="replace-one"), {}, ValueError, "add/remove-one"),
        (DPSGDClassifier(epsilon=1.0, classes=(0, 1), design="direct"), {}, ValueError, "add/remove-one"),
        (DPSGDClassifier(epsilon=1.0, classes=(0, 1)), {"canaries": "pixels"}, ValueError, "canaries must be"),
        (DPSGDClassifier(epsilon=1.0, classes=(0, 1)), {"m": 500}, ValueError, "need as many coordinates"),
        (DPSGDClassifier(epsilon=1.0), {}, ValueError, "public class set"),
        (DPSGDClassifier(epsilon=-1.0, classes=(0, 1)), {}, ValueError, "epsilon"),
    ],
)
def test_refusals_come_before_any_training(estimator, kwargs, error, message):
    X, y = _quiet_data()
    with pytest.raises(error, match=message):
        dpsgd_white_box_audit(estimator, X, (y > 1).astype(int), **{"m": 10, **kwargs})
