"""One DP-SGD plan (issue 33): the linear trainer, the torch engine and `privml account` agree on it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privml.accounting._dpsgd import check_dpsgd_options, plan_dpsgd
from privml.linear import DPSGDClassifier

CASES = [
    dict(neighbouring="add/remove-one", sampling="poisson", accountant="pld", replace_one_bound="tight"),
    dict(neighbouring="replace-one", sampling="poisson", accountant="pld", replace_one_bound="tight"),
    dict(neighbouring="replace-one", sampling="poisson", accountant="rdp", replace_one_bound="group"),
    dict(neighbouring="replace-one", sampling="fixed-size", accountant="rdp", replace_one_bound="tight"),
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: f"{o['neighbouring']}-{o['sampling']}-{o['replace_one_bound']}")
def test_the_linear_and_torch_trainers_plan_the_same_run(options):
    torch = pytest.importorskip("torch")
    from privml.torch import DPSGD

    n, batch, epochs = 400, 40, 3
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(n, 4)) / 3, np.arange(n) % 2
    linear = DPSGDClassifier(epsilon=2.0, delta=1e-5, batch_size=batch, epochs=epochs, classes=[0, 1],
                             random_state=0, **options).fit(X, y)
    model = torch.nn.Linear(4, 2)
    engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), n_samples=n, clip_norm=1.0,
                   batch_size=batch, epochs=epochs, target_epsilon=2.0, delta=1e-5, seed=0, **options)
    info = linear.fit_info_
    assert info["steps"] == engine.planned_steps
    assert info["noise_multiplier"] == engine.noise_multiplier
    assert linear.privacy_ == engine.plan.guarantee
    assert linear.privacy_event_ == engine.plan.event


def test_privml_account_states_the_plan_of_the_trainers(capsys):
    from privml.cli.main import main

    plan = plan_dpsgd(1000, delta=1e-5, epsilon=1.0, batch_size=50, steps=200, neighbouring="replace-one",
                      sampling="fixed-size", accountant="rdp")
    assert main(["account", "dpsgd", "--target-epsilon", "1", "--batch-size", "50", "--population", "1000",
                 "--steps", "200", "--delta", "1e-5", "--neighbouring", "replace-one", "--sampling", "fixed-size",
                 "--accountant", "rdp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["noise_multiplier"] == plan.noise_multiplier and out["epsilon"] == plan.guarantee.epsilon


def test_fixed_size_batches_hold_a_whole_number_of_records_in_every_trainer():
    # The linear trainer rounded q n (a batch of 33 for q n = 33.3); the engine refused it. Now both refuse.
    with pytest.raises(ValueError, match="whole batch size"):
        plan_dpsgd(1000, delta=1e-5, epsilon=1.0, sample_rate=0.0333, steps=10, neighbouring="replace-one",
                   sampling="fixed-size", accountant="rdp")
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="whole batch size"):
        DPSGDClassifier(epsilon=1.0, delta=1e-5, sample_rate=0.0333, epochs=1, neighbouring="replace-one",
                        sampling="fixed-size", accountant="rdp", classes=[0, 1]).fit(rng.normal(size=(1000, 3)),
                                                                                      np.arange(1000) % 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(neighbouring="add/remove-one", sampling="fixed-size", accountant="rdp"), "replace-one neighbours only"),
        (dict(neighbouring="replace-one", sampling="fixed-size", accountant="pld"), "RDP only"),
        (dict(neighbouring="replace-one", sampling="fixed-size", accountant="rdp", replace_one_bound="group"),
         "group privacy needs"),
        (dict(neighbouring="add/remove-one", sampling="poisson", accountant="pld", replace_one_bound="group"),
         "derives a replace-one guarantee"),
        (dict(neighbouring="add/remove-one", sampling="shuffle", accountant="pld"), "sampling must be one of"),
        (dict(neighbouring="add/remove-one", sampling="poisson", accountant="basic"), "accountant must be one of"),
    ],
)
def test_each_rule_is_refused_in_one_place(options, message):
    options = {"replace_one_bound": "tight", **options}
    with pytest.raises(ValueError, match=message):
        check_dpsgd_options(**options)
    with pytest.raises(ValueError, match=message):
        plan_dpsgd(100, delta=1e-5, epsilon=1.0, batch_size=10, steps=5, **options)


def test_an_open_ended_plan_and_its_running_guarantee():
    plan = plan_dpsgd(100, delta=1e-5, sample_rate=0.1, noise_multiplier=1.0)
    assert plan.steps is None and plan.guarantee is None
    assert plan.guarantee_after(0).epsilon == 0.0
    assert 0 < plan.guarantee_after(10).epsilon < plan.guarantee_after(20).epsilon
    with pytest.raises(ValueError, match="planned number of steps"):
        plan_dpsgd(100, delta=1e-5, epsilon=1.0, sample_rate=0.1)


@pytest.mark.parametrize(("relation", "accountant"), [("add/remove-one", "pld"), ("replace-one", "pld"),
                                                      ("add/remove-one", "rdp"), ("replace-one", "rdp")])
def test_a_release_before_the_steps_is_composed_into_the_calibration_and_the_guarantee(relation, accountant):
    from privml.accounting import GaussianEvent, make_accountant
    from privml.accounting._dpsgd import dpsgd_event

    before = GaussianEvent(3.0, neighbouring=relation)
    settings = dict(delta=1e-5, epsilon=2.0, batch_size=100, epochs=2, accountant=accountant, neighbouring=relation)
    alone, both = plan_dpsgd(1000, **settings), plan_dpsgd(1000, preceding=before, **settings)
    assert both.noise_multiplier > alone.noise_multiplier  # the steps get what the release leaves
    # the guarantee is the accountant's for the composition, within the target, and the steps alone cost less
    composed = make_accountant(accountant).compose(before).compose(
        dpsgd_event(both.noise_multiplier, both.sample_rate, both.steps, neighbouring=relation))
    assert both.guarantee.epsilon == pytest.approx(composed.get_epsilon(1e-5), rel=1e-9)
    assert both.guarantee.epsilon <= 2.0
    assert both.guarantee_after(both.steps).epsilon == both.guarantee.epsilon
    assert 0 < both.guarantee_after(0).epsilon < both.guarantee_after(1).epsilon  # the release counts from step 0
    assert both.event_after(0) == before and alone.guarantee_after(0).epsilon == 0.0


def test_a_release_before_the_steps_is_refused_under_another_relation_or_the_group_bound():
    from privml.accounting import GaussianEvent

    settings = dict(delta=1e-5, epsilon=2.0, batch_size=100, epochs=2)
    with pytest.raises(ValueError, match="under replace-one neighbours, the steps under add/remove-one"):
        plan_dpsgd(1000, preceding=GaussianEvent(3.0, neighbouring="replace-one"), **settings)
    with pytest.raises(ValueError, match="tight replace-one bound only"):
        plan_dpsgd(1000, preceding=GaussianEvent(3.0, neighbouring="replace-one"), neighbouring="replace-one",
                   replace_one_bound="group", accountant="rdp", **settings)
    with pytest.raises(TypeError, match="DpEvent"):
        plan_dpsgd(1000, preceding=3.0, **settings)
