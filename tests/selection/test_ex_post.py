"""Ex-post costs: noise-reduction prefixes cost their last level, independent releases
add up, and the guarantee is eps_AT plus the prefix."""

from __future__ import annotations

import pytest

from privml.neighbouring import Neighbouring
from privml.selection._ex_post import ExPostCost, independent_prefix_costs, noise_reduction_prefix_costs


def test_noise_reduction_prefix_costs_only_the_last_level() -> None:
    assert noise_reduction_prefix_costs([0.1, 0.2, 0.4], 1e-6) == ((0.1, 1e-6), (0.2, 1e-6), (0.4, 1e-6))


def test_independent_prefix_costs_add_up() -> None:
    costs = independent_prefix_costs([0.1, 0.2, 0.4], 1e-6)
    assert [round(e, 12) for e, _ in costs] == [0.1, 0.3, 0.7]
    assert [d for _, d in costs] == [1e-6, 2e-6, 3e-6]
    assert independent_prefix_costs([1.0] * 3, 0.5)[-1][1] == 1.0  # delta capped at 1


def test_guarantee_is_at_plus_release() -> None:
    cost = ExPostCost(at_epsilon=0.1, release_epsilon=0.5, release_delta=1e-6, n_released=4, passed=False)
    g = cost.guarantee
    assert (g.epsilon, g.delta, g.neighbouring, g.accountant) == (0.6, 1e-6, Neighbouring.REPLACE_ONE, "ex-post")
    assert cost.epsilon == 0.6 and cost.delta == 1e-6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"at_epsilon": 0.0},
        {"release_epsilon": -1.0},
        {"release_delta": 1.5},
        {"release_delta": float("nan")},
        {"n_released": 0},
        {"neighbouring": "sideways"},
    ],
)
def test_rejects_impossible_costs(kwargs: dict) -> None:
    args = {"at_epsilon": 0.1, "release_epsilon": 0.5, "release_delta": 0.0, "n_released": 1, "passed": True, **kwargs}
    with pytest.raises(ValueError):
        ExPostCost(**args)


def test_prefix_costs_validate() -> None:
    with pytest.raises(ValueError):
        noise_reduction_prefix_costs([0.1, 0.0])
    with pytest.raises(ValueError):
        independent_prefix_costs([0.1], delta=1.0)
