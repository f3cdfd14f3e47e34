"""One-run audits of torch DP-SGD: the canaries enter the run as designed, the claim is the engine's, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from privml.audit import _one_run_torch as ort
from privml.audit._one_run import _guess_pairs
from privml.testing.torch_controls import ControlNet, control_setting
from privml.torch import DPSGD, TorchClassifier


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def test_white_box_statistics_are_the_sum_and_the_centred_likelihood_ratio():
    x = np.array([[0.0, 2.0], [1.0, 2.0], [0.0, 3.0], [0.5, 2.0]])
    stats = ort.white_box_statistics(x, sample_rate=0.2, noise_multiplier=1.5)
    np.testing.assert_allclose(stats["sum"], [1.5, 9.0])
    centred = x - np.median(x, axis=0)  # medians 0.25 and 2.0
    expected = np.log(0.8 + 0.2 * np.exp((centred - 0.5) / 1.5**2)).sum(axis=0)
    np.testing.assert_allclose(stats["likelihood"], expected)
    # q = 1: the likelihood ratio (x - 1/2) / s^2 orders the canaries as the sum does: only the sum is tested
    full = ort.white_box_statistics(x, sample_rate=1.0, noise_multiplier=2.0)
    assert list(full) == ["sum"]
    np.testing.assert_allclose(full["sum"], x.sum(axis=0))


def test_dirac_canaries_add_exactly_c_in_the_steps_that_sample_them():
    # Nearly no noise: each canary's per-step value (units of C) is 1 when it is included and sampled, else 0.
    torch.manual_seed(0)
    m = 40
    X, y, _, _ = control_setting(m, random_state=0)
    model = ControlNet(X.shape[1] - m, m)
    engine = DPSGD(model, optimizer=_sgd(model.parameters()), n_samples=X.shape[0] + m, clip_norm=1.0,
                   sample_rate=0.3, steps=6, noise_multiplier=1e-9, seed=1, cuda_graph=False)
    names = [n for n, _ in engine._params]
    offset = sum(p.numel() for n, p in engine._params if n != "key.weight")
    assert names[-1] == "key.weight"  # the key columns come last: coordinates no real record moves
    coordinates = offset + np.arange(m)
    included = np.arange(m) % 2 == 0
    x, seconds = ort._run(engine, X, y, n_real=X.shape[0], included=included, records=False,
                          coordinates=coordinates, directions=None, progress=False)
    assert x.shape == (6, m) and seconds > 0
    assert np.all(np.abs(x[:, ~included]) < 1e-5)
    hits = np.round(x[:, included])
    np.testing.assert_allclose(x[:, included], hits, atol=1e-5)
    assert set(np.unique(hits)) <= {0.0, 1.0} and hits.sum() > 0  # sampled at rate 0.3 over 6 steps
    assert engine._extra_clipped is None  # the seam is cleared after the run


def test_the_seam_is_unset_in_production_and_adds_its_terms_before_the_noise():
    model = nn.Linear(3, 2)
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0), n_samples=10, clip_norm=1.0,
                   batch_size=5, steps=1, noise_multiplier=1e-9, seed=0)
    assert engine._extra_clipped is None
    before = model.weight.detach().clone()
    engine._extra_clipped = lambda: {"weight": torch.full((2, 3), 5.0)}
    engine.step(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))  # an empty batch: only the extra term
    np.testing.assert_allclose((before - model.weight.detach()).numpy(), np.full((2, 3), 5.0 / 5.0), atol=1e-6)


def test_correct_dpsgd_is_audited_against_its_own_claim_and_passes():
    torch.manual_seed(0)
    m = 300
    X, y, _, _ = control_setting(m, random_state=0)
    model = ControlNet(X.shape[1] - m, m)
    result = ort.dpsgd_one_run_audit(model, X, y, optimizer=_sgd, m=m, clip_norm=1.0, sample_rate=0.2, steps=10,
                                     target_epsilon=2.0, delta=1e-5, random_state=3)
    audit = result.audit
    assert result.canaries == "dirac" and result.n_train == X.shape[0] + m and result.steps == 10
    assert audit.neighbouring == "add/remove-one" and audit.scores_from == "white-box"
    assert audit.claimed_epsilon == pytest.approx(2.0, abs=0.01) and audit.delta == 1e-5
    assert not audit.exceeds_claim, result.to_dict()
    # union over both statistics and the three analyses ((eps, delta), the claimed profile, mu-GDP)
    assert audit.tried == len(ort.WHITE_BOX_STATISTICS) * 3 * len(_guess_pairs(m, None))
    assert audit.claim_rejected is False and 0.0 <= audit.mu_lower < 2.0
    assert result.statistic in ort.WHITE_BOX_STATISTICS
    assert result.scores.shape == (m,) and result.included.shape == (m,)
    assert "scores" not in result.to_dict() and result.to_dict()["training_runs"] == 1


def test_a_leaky_run_is_flagged_white_box():
    # The engine below claims its calibrated noise but draws a millionth of it: each sampled canary shows
    # plainly (those on the few coordinates real records move too are blurred by them).
    class Quiet(DPSGD):
        def _draw_noise(self):
            return [n * 1e-6 for n in super()._draw_noise()]

    torch.manual_seed(0)
    m = 300
    X, y, _, _ = control_setting(m, random_state=1)
    model = ControlNet(X.shape[1] - m, m)
    result = ort.dpsgd_one_run_audit(model, X, y, optimizer=_sgd, m=m, engine_cls=Quiet, clip_norm=1.0,
                                     sample_rate=0.2, steps=10, target_epsilon=2.0, random_state=0)
    # the f-DP test refutes the claimed profile; the (eps, delta) bound, at a third of the level, reaches the claim
    assert result.audit.exceeds_claim and result.audit.claim_rejected
    assert result.audit.epsilon_lower > 0.95 * result.audit.claimed_epsilon and result.audit.mu_lower > 0.5


def test_record_canaries_black_box():
    torch.manual_seed(0)
    m = 100
    X, y, cx, cy = control_setting(m, random_state=0)
    model = ControlNet(X.shape[1] - m, m)
    result = ort.dpsgd_one_run_audit(model, X, y, optimizer=_sgd, m=m, white_box=False, canary_x=cx, canary_y=cy,
                                     clip_norm=1.0, sample_rate=0.2, steps=5, target_epsilon=2.0, random_state=0)
    assert result.canaries == "records" and result.statistic == "negative-loss"
    assert result.audit.scores_from == "black-box" and not result.audit.exceeds_claim


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"neighbouring": "replace-one"}, "add/remove-one"),
        ({"n_samples": 10}, "sets n_samples"),
        ({"seed": 1}, "sets seed"),
    ],
)
def test_refusals(kwargs, message):
    X, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    settings = {"clip_norm": 1.0, "sample_rate": 0.5, "steps": 2, "noise_multiplier": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        ort.dpsgd_one_run_audit(nn.Linear(3, 2), X, y, optimizer=_sgd, m=5, random_state=0, **settings)


def test_black_box_needs_records_and_dirac_needs_coordinates():
    X, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    settings = {"clip_norm": 1.0, "sample_rate": 0.5, "steps": 2, "noise_multiplier": 1.0}
    with pytest.raises(ValueError, match="black-box audit needs canary records"):
        ort.dpsgd_one_run_audit(nn.Linear(3, 2), X, y, optimizer=_sgd, m=5, white_box=False, **settings)
    with pytest.raises(ValueError, match="need as many coordinates"):
        ort.dpsgd_one_run_audit(nn.Linear(3, 2), X, y, optimizer=_sgd, m=9, random_state=0, **settings)


def _tiny_classifier(**kwargs):
    return TorchClassifier(epsilon=2.0, input_shape=(1, 16, 16), classes=(0, 1), epochs=1, batch_size=20,
                           random_state=0, device="cpu", **kwargs)


@pytest.mark.parametrize("white_box", [True, False])
def test_torch_classifier_audit_runs_its_own_engine(white_box):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 256)).astype(np.float32)
    y = rng.integers(0, 2, 60)
    result = ort.torch_classifier_one_run_audit(_tiny_classifier(), X, y, m=40, white_box=white_box, random_state=0)
    assert result.n_train == 100 and result.canaries == ("dirac" if white_box else "records")
    if white_box:  # the claim is what an ordinary fit on n + m records with these settings states
        reference = _tiny_classifier().fit(np.concatenate([X, X[:40]]), np.concatenate([y, y[:40]]))
        assert result.audit.claimed_epsilon == pytest.approx(reference.privacy_.epsilon)
        assert result.steps == reference.fit_info_["steps"]
    assert not result.audit.exceeds_claim


def test_torch_classifier_refusals():
    X, y = np.zeros((10, 256), dtype=np.float32), np.arange(10) % 2
    with pytest.raises(ValueError, match="public class set"):
        ort.torch_classifier_one_run_audit(TorchClassifier(epsilon=1.0, input_shape=(1, 16, 16)), X, y, m=5)
    with pytest.raises(ValueError, match="non-private baseline"):
        ort.torch_classifier_one_run_audit(_tiny_classifier().set_params(epsilon=math.inf), X, y, m=5)
    with pytest.raises(ValueError, match="add/remove-one"):
        ort.torch_classifier_one_run_audit(_tiny_classifier(neighbouring="replace-one"), X, y, m=5, random_state=0)
