"""Audits of DP-SGD under replace-one with a *replaced* canary (issue 14, part 3).

When the claimed guarantee is replace-one, the audit's neighbour D' replaces
the canary's mirror (same features, the other label) by the canary itself:
the canary's clipped gradient flips sign, the largest change one record can
make (2C), which is the worst case the replace-one dominating pair assumes.
A correct implementation never shows a lower bound above its claim; the slow
suite runs the setting where the bound can come close (full batches, a clip
every gradient reaches, a direction no other record uses).
"""

from __future__ import annotations

import pytest

from privml.audit._canaries import make_canary, neighbouring_pair
from privml.audit._epsilon_lower_bound import audit_epsilon
from privml.linear import DPSGDClassifier
from privml.neighbouring import Neighbouring
from privml.testing.negative_controls import control_data

SAMPLERS = {
    "poisson": {"accountant": "pld"},
    "fixed-size": {"sampling": "fixed-size", "accountant": "rdp"},
}


def _model(epsilon: float, sampler: str, **extra) -> DPSGDClassifier:
    params = dict(epsilon=epsilon, delta=1e-5, neighbouring="replace-one", classes=(0, 1), **SAMPLERS[sampler])
    params.update(extra)
    return DPSGDClassifier(**params)


def test_the_audit_replaces_the_canary_for_a_replace_one_claim():
    X, y = control_data(50, bias=False)
    canary = make_canary("clipbkd", X, classes=(0, 1), label=1)
    pair = neighbouring_pair(X, y, canary, Neighbouring.REPLACE_ONE)
    assert pair.X_in.shape == pair.X_out.shape  # same n: replaced, not added
    assert (pair.X_in[-1] == pair.X_out[-1]).all() and pair.y_in[-1] != pair.y_out[-1]


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_replace_one_dpsgd_stays_below_its_claim(sampler, epsilon):
    X, y = control_data(50, bias=False)
    model = _model(epsilon, sampler, batch_size=16, epochs=5)
    result = audit_epsilon(model, X, y, trials=100, canary_label=1, random_state=0)
    assert result.claimed.neighbouring is Neighbouring.REPLACE_ONE
    assert result.to_dict()["neighbouring"] == "replace-one"
    assert result.claimed.epsilon <= epsilon + 1e-9
    assert not result.violated, result.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_replace_one_dpsgd_stays_below_its_claim_where_the_audit_is_tight(epsilon):
    # Full batches (q = 1: the Gaussian with sensitivity 2C, accounted exactly), a clip every gradient
    # reaches, no schedule or averaging: along the canary the weights are exactly the accounted mechanism.
    X, y = control_data(50, bias=False)
    model = _model(epsilon, "poisson", clip_norm=0.01, learning_rate=1.0, lr_schedule="constant",
                   averaging="none", epochs=10)
    result = audit_epsilon(model, X, y, trials=1000, canary_label=1, score="weights-projection", random_state=3)
    assert not result.violated, result.to_dict()
    if epsilon == 4.0:  # the replaced canary is visible: the audit has power
        assert result.epsilon_lower_bound > 0.3


@pytest.mark.slow
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_subsampled_replace_one_dpsgd_stays_below_its_claim_with_many_trials(sampler):
    X, y = control_data(50, bias=False)
    model = _model(4.0, sampler, batch_size=16, epochs=5, clip_norm=0.01, learning_rate=1.0,
                   lr_schedule="constant", averaging="none")
    result = audit_epsilon(model, X, y, trials=600, canary_label=1, score="weights-projection", random_state=4)
    assert not result.violated, result.to_dict()
