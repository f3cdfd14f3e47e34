"""InteractiveAboveThreshold (Ligett et al. 2017, slides' Algorithm 2): it stops at the
first pass, publishes nothing after it, always charges eps_AT plus the published prefix
(also when nothing passes), shares one threshold draw, and keeps its eps_AT on neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from privml.audit import neighbour_distribution_test
from privml.mechanisms import AboveThreshold, MechanismHalted
from privml.selection import _interactive_above_threshold as iat_module
from privml.selection._interactive_above_threshold import InteractiveAboveThreshold, Release


class RedrawnThreshold(AboveThreshold):
    """Broken: fresh threshold noise for every check, so each check pays for itself."""

    def query(self, value: float) -> bool:
        self._noisy_threshold = self.threshold + self._rng.laplace(0.0, self.threshold_scale)
        return super().query(value)


def releases(values, costs, delta: float = 0.0):
    return [Release(v, prefix_epsilon=c, prefix_delta=delta) for v, c in zip(values, costs)]


def exact(epsilon: float = 1e6, threshold: float = 0.5, seed: int = 0) -> InteractiveAboveThreshold:
    """Huge eps_AT: the check's noise is negligible against gaps of 0.1."""
    return InteractiveAboveThreshold(epsilon=epsilon, threshold=threshold, sensitivity=0.01, random_state=seed)


# ----------------------------------------------------------------- stopping and the ledger
def test_stops_at_the_first_pass_and_charges_at_plus_its_prefix() -> None:
    outcome = exact().run(releases([0.1, 0.3, 0.8, 0.9], [0.1, 0.2, 0.4, 0.8]), query=lambda v: v)
    assert outcome.stopped_at == 2
    assert outcome.released == (0.1, 0.3, 0.8)
    assert [s.passed for s in outcome.steps] == [False, False, True]
    assert [s.nonprivate_value for s in outcome.steps] == [0.1, 0.3, 0.8]
    cost = outcome.cost
    assert (cost.epsilon, cost.at_epsilon, cost.release_epsilon, cost.n_released, cost.passed) == (
        1e6 + 0.4, 1e6, 0.4, 3, True
    )
    assert cost.guarantee.accountant == "ex-post"


def test_nothing_after_the_pass_is_drawn() -> None:
    drawn = []

    def lazy():
        for t, v in enumerate([0.1, 0.9, 0.95, 0.99]):
            drawn.append(t)
            yield Release(v, prefix_epsilon=0.1 * (t + 1))

    exact().run(lazy(), query=lambda v: v)
    assert drawn == [0, 1]


def test_failure_still_charges_at_plus_the_last_level_never_minus_one() -> None:
    # The reference scripts report eps = -1 here although every model was published.
    outcome = exact().run(releases([0.1, 0.2, 0.3], [0.1, 0.2, 0.4], delta=1e-6), query=lambda v: v)
    assert outcome.stopped_at is None
    assert len(outcome.released) == 3
    g = outcome.cost.guarantee
    assert (g.epsilon, g.delta) == (1e6 + 0.4, 1e-6)
    assert outcome.cost.passed is False and outcome.cost.n_released == 3


def test_is_one_shot() -> None:
    iat = exact()
    iat.run(releases([0.1], [0.1]), query=lambda v: v)
    with pytest.raises(MechanismHalted):
        iat.run(releases([0.9], [0.1]), query=lambda v: v)


@pytest.mark.parametrize(
    ("items", "query", "match"),
    [
        ([], lambda v: v, "empty"),
        (releases([0.1, 0.2], [0.5, 0.4]), lambda v: v, "must not decrease"),
        (releases([0.1, 0.2], [0.4, 0.5], delta=float("nan")), lambda v: v, "must not decrease"),
        (releases([0.1], [0.1]), lambda v: float("nan"), "query value"),
        (releases([0.1], [0.0]), lambda v: v, "prefix_epsilon"),
    ],
)
def test_bad_streams_are_refused(items, query, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        exact().run(items, query=query)


@pytest.mark.parametrize(
    "kwargs",
    [{"epsilon": 0.0}, {"threshold": float("inf")}, {"sensitivity": -1.0}, {"neighbouring": "nope"}],
)
def test_bad_parameters(kwargs: dict) -> None:
    args = {"epsilon": 1.0, "threshold": 0.0, "sensitivity": 1.0, **kwargs}
    with pytest.raises(ValueError):
        InteractiveAboveThreshold(**args)
    with pytest.raises(TypeError):
        InteractiveAboveThreshold(1.0, 0.0, 1.0)  # type: ignore[misc]


# ----------------------------------------------------------------- noise structure and privacy
def reference_stop(seed: int, values: list[float], epsilon: float, threshold: float, sensitivity: float) -> int:
    """Dwork & Roth Alg. 1 on the same stream: one Lap(2 Delta/eps) threshold, Lap(4 Delta/eps) per check."""
    rng = np.random.default_rng(seed)
    noisy = threshold + rng.laplace(0.0, 2 * sensitivity / epsilon)
    for i, v in enumerate(values):
        if v + rng.laplace(0.0, 4 * sensitivity / epsilon) >= noisy:
            return i
    return len(values)


STREAM = [0.5, -1.0, 2.0, 0.0, 1.0, -0.5, 3.0, 0.2, 1.5, 2.5]


def stop(seed, values, epsilon: float = 1.0, threshold: float = 2.0, sensitivity: float = 1.0) -> int:
    iat = InteractiveAboveThreshold(
        epsilon=epsilon, threshold=threshold, sensitivity=sensitivity, random_state=np.random.default_rng(seed)
    )
    outcome = iat.run(releases(values, [1.0] * len(values)), query=lambda v: v)
    return len(values) if outcome.stopped_at is None else outcome.stopped_at


@pytest.mark.parametrize("broken", [False, True])
def test_noise_is_dwork_roth_algorithm_1(monkeypatch, broken: bool) -> None:
    if broken:
        monkeypatch.setattr(iat_module, "AboveThreshold", RedrawnThreshold)
    ours = [stop(seed, STREAM) for seed in range(300)]
    reference = [reference_stop(seed, STREAM, 1.0, 2.0, 1.0) for seed in range(300)]
    assert (ours == reference) is not broken


# Neighbouring check streams (Delta = 1), the non-monotone worst case of Dwork & Roth's
# Thm 3.23 (as in tests/mechanisms/test_above_threshold.py): a long run of "below"
# answers is where a redrawn threshold pays query by query.
EPSILON_AT = 2.5
STREAM_D = [-1.0] * 11 + [0.0]
STREAM_D_PRIME = [0.0] * 11 + [-1.0]


@pytest.mark.parametrize("broken", [False, True])
def test_stopping_index_respects_eps_at(monkeypatch, broken: bool) -> None:
    if broken:
        monkeypatch.setattr(iat_module, "AboveThreshold", RedrawnThreshold)
    n = 40_000
    rng_a, rng_b = np.random.default_rng(70), np.random.default_rng(71)
    a = np.array([stop(rng_a, STREAM_D, EPSILON_AT, 0.0) for _ in range(n)])
    b = np.array([stop(rng_b, STREAM_D_PRIME, EPSILON_AT, 0.0) for _ in range(n)])
    result = neighbour_distribution_test(a, b, epsilon=EPSILON_AT)
    assert result.violated is broken, result
