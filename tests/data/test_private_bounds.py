"""Private bounds (privml.data._private_bounds): the quantile selection's guarantee, checked exactly on enumerated
neighbours of each relation, and the ranges, their warning and their composition with a model."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from privml.data import load_dataset
from privml.data._private_bounds import (
    DEFAULT_GRID,
    PrivateRanges,
    WeakBoundsWarning,
    compose_with_model,
    dp_quantile,
    rank_utilities,
)
from privml.data._schema import Label
from privml.guarantee import PrivacyGuarantee
from privml.mechanisms import ExponentialMechanism

GRID = np.array([-2.0, 0.0, 1.0, 2.0, 3.0, 5.0])
VALUES = (-3.0, 0.5, 1.0, 2.5, 4.0, 9.0)  # below, between and on the candidates, and beyond both ends
N = 4


def _datasets() -> list[tuple[float, ...]]:
    return list(itertools.product(VALUES, repeat=N))


def _neighbours(data: tuple[float, ...], relation: str) -> list[tuple[np.ndarray, int]]:
    """(the neighbour's values, its n) for every neighbour of ``data`` under ``relation``."""
    out = []
    for i, other in itertools.product(range(N), VALUES):
        if relation == "replace-one":
            out.append((np.array(data[:i] + (other,) + data[i + 1:]), N))
    for i in range(N):
        rest = np.array(data[:i] + data[i + 1:])
        if relation == "zero-out":  # record i replaced by a null record: counted by no candidate, n public
            out.append((rest, N))
        if relation == "add/remove":  # classic: n changes too
            out.append((rest, N - 1))
    if relation == "add/remove":
        out += [(np.array(data + (other,)), N + 1) for other in VALUES]
    return out


@pytest.mark.parametrize("relation", ["replace-one", "zero-out", "add/remove"])
@pytest.mark.parametrize("q", [0.05, 0.5, 0.95])
def test_the_rank_utility_has_sensitivity_one_in_every_relation(relation: str, q: float) -> None:
    worst = 0.0
    for data in _datasets()[::7]:
        u = rank_utilities(np.array(data), q, GRID)
        for values, n in _neighbours(data, relation):
            worst = max(worst, float(np.max(np.abs(u - rank_utilities(values, q, GRID, n=n)))))
    assert worst <= 1.0
    # Attained under replace-one and zero-out; classic add/remove moves q n too, so max(q, 1 - q).
    assert worst == pytest.approx(1.0 if relation != "add/remove" else max(q, 1 - q))


def _worst_log_ratio(epsilon: float, q: float, relation: str, *, monotonic: bool) -> float:
    mechanism = ExponentialMechanism(epsilon=epsilon, sensitivity=1.0, monotonic=monotonic)
    worst = 0.0
    for data in _datasets()[::5]:
        p = mechanism.probabilities(rank_utilities(np.array(data), q, GRID))
        for values, n in _neighbours(data, relation):
            p2 = mechanism.probabilities(rank_utilities(values, q, GRID, n=n))
            worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(p2)))))
    return worst


@pytest.mark.parametrize("relation", ["replace-one", "zero-out", "add/remove"])
def test_each_selection_is_epsilon_dp_under_each_relation(relation: str) -> None:
    # The output distributions themselves, exactly: every candidate's probability within e^(+-epsilon).
    epsilon = 0.7
    for q in (0.05, 0.5, 0.95):
        assert _worst_log_ratio(epsilon, q, relation, monotonic=False) <= epsilon * (1 + 1e-9)


@pytest.mark.parametrize("relation", ["replace-one", "zero-out"])
def test_the_monotone_form_would_break_the_guarantee(relation: str) -> None:
    # Not vacuous: the utilities do not all move one way, so exp(epsilon u) (twice as sharp) exceeds epsilon.
    assert _worst_log_ratio(0.7, 0.5, relation, monotonic=True) > 0.7 * 1.2


def test_dp_quantile_finds_a_quantile_of_plenty_of_data() -> None:
    values = np.random.default_rng(1).uniform(100.0, 200.0, size=20_000)
    picks = [dp_quantile(values, 0.5, epsilon=1.0, random_state=seed) for seed in range(5)]
    # The grid's neighbours of the median 150 are 10^(35/16) = 154 and 10^(34/16) = 133.
    assert all(133.0 <= p <= 155.0 for p in picks)
    assert all(p in DEFAULT_GRID for p in picks)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"q": 1.5}, "q must be in"),
    ({"values": [1.0, np.nan]}, "finite"),
    ({"grid": [2.0, 1.0]}, "increasing"),
    ({"epsilon": 0.0}, "epsilon"),
])
def test_dp_quantile_refuses_bad_input(kwargs: dict, match: str) -> None:
    arguments = {"values": [1.0, 2.0], "q": 0.5, "epsilon": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        dp_quantile(arguments.pop("values"), arguments.pop("q"), **arguments)


def test_private_ranges_of_a_large_table() -> None:
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.normal(50.0, 10.0, 30_000), rng.uniform(-5000.0, 0.0, 30_000)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeakBoundsWarning)  # enough rows for this budget: no warning
        ranges = PrivateRanges(epsilon=0.5, random_state=3).fit(X)
    assert 23.0 < ranges.lower_[0] < 40.0 and 60.0 < ranges.upper_[0] < 80.0  # 5% and 95%: 33.6, 66.4
    assert -5000.0 < ranges.lower_[1] < -4000.0 and -400.0 < ranges.upper_[1] < -100.0  # -4750, -250
    assert ranges.privacy_ == PrivacyGuarantee(0.5, 0.0, "replace-one", "basic")
    encoded = ranges.transform(np.array([[0.0, 10.0], [50.0, -2500.0]]))
    assert encoded[0].tolist() == [-1.0, 1.0]  # clipped to the ranges
    assert np.all(np.abs(encoded) <= 1.0)
    schema = ranges.to_schema(["a", "b"], Label(column="y", classes=("n", "p")))
    assert [(c.lower, c.upper) for c in schema.columns] == list(zip(ranges.lower_, ranges.upper_))
    assert np.array_equal(schema.transform([[0.0, 10.0], [50.0, -2500.0]]), encoded)


def test_too_small_a_budget_for_the_rows_warns_from_public_inputs_only() -> None:
    X = np.random.default_rng(4).normal(size=(455, 30))
    ranges = PrivateRanges(epsilon=0.25, random_state=0)
    error = ranges.rank_error(n_columns=30)
    assert error == pytest.approx(2 / (0.25 / 60) * (math.log(DEFAULT_GRID.size) + math.log(20)))
    messages = []
    for values in (X, X * 1000 + 7):  # other values, the same message: it reads none of them
        with pytest.warns(WeakBoundsWarning, match="no better than predicting the majority class") as caught:
            PrivateRanges(epsilon=0.25, random_state=0).fit(values)
        messages.append(str(caught[0].message))
    assert messages[0] == messages[1]


def test_a_point_mass_gets_a_range_of_positive_width() -> None:
    ranges = PrivateRanges(epsilon=1.0, random_state=0).fit(np.zeros((5000, 1)))
    assert ranges.lower_[0] < ranges.upper_[0]


def test_composition_with_a_model_is_stated_under_the_model_relation() -> None:
    bounds = PrivacyGuarantee(0.25, 0.0, "replace-one", "basic")
    model = PrivacyGuarantee(0.75, 1e-5, "add/remove-one", "pld")
    total = compose_with_model(bounds, model)
    assert (total.epsilon, total.delta, total.neighbouring.value) == (1.0, 1e-5, "add/remove-one")
    assert total.accountant == "basic(private bounds, pld)"
    with pytest.raises(ValueError, match="pure"):
        compose_with_model(PrivacyGuarantee(0.25, 1e-6, "replace-one", "basic"), model)


def test_load_dataset_fits_them_on_the_training_rows(tmp_path) -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(100.0, 20.0, size=(3000, 2))
    path = tmp_path / "d.csv"
    lines = ["a,b,label"] + [f"{a},{b},{'yes' if a > 100 else 'no'}" for a, b in X]
    path.write_text("\n".join(lines) + "\n")
    ranges = PrivateRanges(epsilon=2.0, random_state=0)
    data = load_dataset(f"csv:{path}", classes=("no", "yes"), bounds=ranges)
    assert ranges.privacy_.epsilon == 2.0 and ranges.lower_.shape == (2,)
    assert any("estimated privately" in step for step in data.info.preprocessing)
    assert np.all(np.linalg.norm(data.X_train, axis=1) <= 1 + 1e-12)
    with pytest.raises(ValueError, match="preprocess=True"):
        load_dataset(f"csv:{path}", classes=("no", "yes"), bounds=PrivateRanges(epsilon=1.0), preprocess=False)
