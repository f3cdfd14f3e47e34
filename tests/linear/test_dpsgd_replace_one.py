"""DPSGDClassifier under replace-one neighbours and with fixed-size batches (issue 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privml.accounting import GroupPrivacyAccountant, calibrate_dpsgd, dpsgd_event, make_accountant
from privml.data import load_dataset
from privml.io import load_model, save_model
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._dpsgd_steps import fixed_size_sample
from privml.neighbouring import Neighbouring

RO = Neighbouring.REPLACE_ONE
DIGITS_CLASSES = list(range(10))


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", bias=True, random_state=0)


def test_defaults_are_unchanged(digits):
    model = DPSGDClassifier(epsilon=1.0, epochs=3, batch_size=256, classes=DIGITS_CLASSES, random_state=0)
    params = model.get_params()
    assert params["neighbouring"] is None and params["sampling"] is None and params["replace_one_bound"] == "tight"
    model.fit(digits.X_train, digits.y_train)
    assert model.privacy_.neighbouring is Neighbouring.ADD_REMOVE_ONE
    assert model.fit_info_["sampling"] == "poisson" and "bound" not in model.fit_info_
    q, steps = model.fit_info_["sample_rate"], model.fit_info_["steps"]
    expected = calibrate_dpsgd(1.0, sample_rate=q, steps=steps, delta=1e-5, accountant="pld").noise_multiplier
    assert model.fit_info_["noise_multiplier"] == expected


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_replace_one_guarantee_is_carried_and_accounted(accountant, digits):
    kwargs = dict(epsilon=1.0, epochs=3, batch_size=256, accountant=accountant, classes=DIGITS_CLASSES, random_state=0)
    ar = DPSGDClassifier(**kwargs).fit(digits.X_train, digits.y_train)
    ro = DPSGDClassifier(neighbouring="replace-one", **kwargs).fit(digits.X_train, digits.y_train)
    group = DPSGDClassifier(neighbouring="replace-one", replace_one_bound="group", **kwargs).fit(
        digits.X_train, digits.y_train
    )
    for model in (ro, group):
        assert model.privacy_.neighbouring is RO and model.privacy_.epsilon <= 1.0
        assert model.fit_info_["neighbouring"] == "replace-one"
        assert model.fit_info_["sensitivity"] == pytest.approx(2 * model.fit_info_["clip_norm"])
    assert ro.fit_info_["bound"] == "tight" and ro.privacy_.accountant == accountant
    assert group.fit_info_["bound"] == "group" and group.privacy_.accountant == f"{accountant}+group"
    # the same data and steps, the stronger promise: more noise, and group privacy needs more still
    s_ar, s_ro, s_group = (m.fit_info_["noise_multiplier"] for m in (ar, ro, group))
    assert s_ar < s_ro < s_group
    # the recorded event is what was accounted
    q, steps = ro.fit_info_["sample_rate"], ro.fit_info_["steps"]
    assert ro.privacy_event_ == dpsgd_event(s_ro, q, steps, neighbouring="replace-one")
    again = make_accountant(accountant).compose(ro.privacy_event_).get_epsilon(1e-5)
    assert again == pytest.approx(ro.privacy_.epsilon)
    group_again = GroupPrivacyAccountant(accountant).compose(group.privacy_event_).get_epsilon(1e-5)
    assert group_again == pytest.approx(group.privacy_.epsilon)


def test_fixed_size_sample_is_b_distinct_records_uniformly():
    n, b, draws = 30, 7, 6000
    rng = np.random.default_rng(3)
    counts = np.zeros(n)
    for _ in range(draws):
        batch = fixed_size_sample(n, b, rng)
        assert batch.size == b and np.unique(batch).size == b and np.all(np.diff(batch) > 0)
        counts[batch] += 1
    # each record is in a batch with probability b / n
    assert stats.chisquare(counts, np.full(n, draws * b / n)).pvalue > 1e-3
    with pytest.raises(ValueError):
        fixed_size_sample(5, 6, rng)


def _recovered_batch_sizes(params: dict, seeds: range, n: int = 200) -> np.ndarray:
    """One step on n identical records (gradient -0.5 e_1, below C): w_1 * 2 * divisor... recovered as in test_dpsgd."""
    X = np.tile([1.0, 0.0], (n, 1))
    y = np.ones(n, dtype=int)
    out = []
    for seed in seeds:
        model = DPSGDClassifier(
            epsilon=1e4, noise_multiplier=0.05, clip_norm=1.0, steps=1, learning_rate=1.0, lr_schedule="constant",
            averaging="none", classes=[0, 1], random_state=seed, **params,
        ).fit(X, y)
        out.append(model.weights_[0] * 2 * model.fit_info_["expected_batch_size"])
    return np.array(out)


def test_fixed_size_batches_have_exactly_b_records_and_are_divided_by_b():
    # w_1 = 0.5 |B| / divisor + noise: with b records divided by b, w_1 * 2 b = b up to the noise
    params = dict(neighbouring="replace-one", sampling="fixed-size", accountant="rdp", batch_size=60)
    sizes = _recovered_batch_sizes(params, range(40))
    assert np.all(np.abs(sizes - 60) < 0.5)
    # while Poisson batches of the same expected size vary (Binomial(200, 0.3))
    poisson = np.round(_recovered_batch_sizes(dict(batch_size=60, accountant="rdp"), range(40)))
    assert poisson.std() > 3


def test_fixed_size_model_is_accounted_by_wbk19(digits):
    model = DPSGDClassifier(
        epsilon=2.0, epochs=3, batch_size=256, neighbouring="replace-one", sampling="fixed-size", accountant="rdp",
        classes=DIGITS_CLASSES, random_state=0,
    ).fit(digits.X_train, digits.y_train)
    n = digits.X_train.shape[0]
    info = model.fit_info_
    assert info["sampling"] == "fixed-size" and info["expected_batch_size"] == 256
    assert info["sample_rate"] == pytest.approx(256 / n) and info["steps"] == round(3 / (256 / n))
    assert model.privacy_.neighbouring is RO and model.privacy_.epsilon <= 2.0
    assert model.privacy_event_ == dpsgd_event(
        info["noise_multiplier"], 256 / n, info["steps"], neighbouring="replace-one", sampling="fixed-size",
        population=n,
    )
    assert model.score(digits.X_test, digits.y_test) > 0.5


@pytest.mark.parametrize(
    "params, message",
    [
        ({"sampling": "fixed-size"}, "replace-one"),
        ({"neighbouring": "replace-one", "sampling": "fixed-size"}, "accountant='rdp'"),
        ({"neighbouring": "replace-one", "sampling": "fixed-size", "accountant": "rdp", "replace_one_bound": "group"},
         "group privacy"),
        ({"sampling": "shuffle"}, "sampling must be"),
        ({"design": "linear", "neighbouring": "replace-one"}, "add/remove-one neighbours only"),
        ({"design": "direct", "neighbouring": "add/remove-one"}, "replace-one neighbours only"),
        ({"design": "direct", "sampling": "poisson"}, "partitions"),
        ({"design": "linear", "sampling": "fixed-size"}, "design='poisson'"),
        ({"neighbouring": "replace-one", "replace_one_bound": "loose"}, "replace_one_bound"),
        ({"neighbouring": "swap-two"}, "unknown neighbouring"),
    ],
)
def test_bad_combinations_fail_before_any_noise(params, message, digits):
    model = DPSGDClassifier(epsilon=1.0, classes=DIGITS_CLASSES, **params)
    with pytest.raises(ValueError, match=message):
        model.fit(digits.X_train[:50], digits.y_train[:50])
    assert not hasattr(model, "weights_")


def test_direct_design_states_replace_one_either_way(digits):
    a = DPSGDClassifier(epsilon=1.0, design="direct", batch_size=256, classes=DIGITS_CLASSES, random_state=0)
    b = DPSGDClassifier(epsilon=1.0, design="direct", batch_size=256, neighbouring="replace-one",
                        classes=DIGITS_CLASSES, random_state=0)
    a.fit(digits.X_train, digits.y_train)
    b.fit(digits.X_train, digits.y_train)
    assert a.privacy_ == b.privacy_ and a.privacy_.neighbouring is RO


def test_replace_one_model_round_trips_through_a_file(tmp_path, digits):
    model = DPSGDClassifier(
        epsilon=1.0, epochs=2, batch_size=256, neighbouring="replace-one", classes=DIGITS_CLASSES, random_state=0
    ).fit(digits.X_train, digits.y_train)
    loaded = load_model(save_model(model, tmp_path / "ro"))
    assert loaded.privacy_ == model.privacy_ and loaded.privacy_.neighbouring is RO
    assert loaded.fit_info_ == model.fit_info_
    assert loaded.get_params()["neighbouring"] == "replace-one"


def test_fit_info_stays_data_independent_under_replace_one(digits):
    kwargs = dict(epsilon=1.0, epochs=2, batch_size=128, neighbouring="replace-one", sampling="fixed-size",
                  accountant="rdp", classes=[0, 1])
    keep = digits.y_train < 2
    n = int(keep.sum())
    one = DPSGDClassifier(random_state=0, **kwargs).fit(digits.X_train[keep], digits.y_train[keep])
    other = DPSGDClassifier(random_state=1, **kwargs).fit(
        np.zeros((n, digits.X_train.shape[1])), np.arange(n) % 2
    )
    assert one.fit_info_ == other.fit_info_
    assert math.isfinite(one.fit_info_["epsilon"])
