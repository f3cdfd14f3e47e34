"""RandomStopping: Liu and Talwar's (2019) private selection from private candidates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privml.neighbouring import Neighbouring
from privml.selection import RandomStopping


# ------------------------------------------------------------------ guarantee
@pytest.mark.parametrize(("epsilon", "delta", "gamma"), [(1.0, 1e-5, 0.2), (0.3, 1e-6, 0.5), (8.0, 1e-3, 0.05),
                                                         (1.0, 0.9, 1.0)])
def test_guarantee_is_liu_talwar_theorem_3_4_at_the_target(epsilon: float, delta: float, gamma: float) -> None:
    s = RandomStopping(epsilon, delta, stop_probability=gamma)
    eps1, delta1, cap = s.candidate_epsilon, s.candidate_delta, s.max_runs
    # Theorem 3.4: T = max(ln(1/delta2) / gamma, 1 + 1/(e gamma)) runs at most, and the selection is
    # (3 eps1 + 3 sqrt(2 delta1), sqrt(2 delta1) T / gamma + delta2)-DP (the larger of the stated forms).
    delta2 = delta / 2
    assert cap == math.ceil(max(math.log(1 / delta2) / gamma, 1 + 1 / (math.e * gamma)))
    assert 3 * eps1 + 3 * math.sqrt(2 * delta1) == pytest.approx(epsilon, rel=1e-12)
    assert math.sqrt(2 * delta1) * cap / gamma + delta2 == pytest.approx(delta, rel=1e-12)
    assert (s.privacy.epsilon, s.privacy.delta) == pytest.approx((epsilon, delta), rel=1e-12)
    # The cap truncates the geometric number of runs with probability (1 - gamma)^T <= delta2.
    assert (1 - gamma) ** cap <= delta2
    assert s.privacy.accountant == "liu-talwar"


def test_the_second_term_of_the_cap_binds_for_large_gamma_and_delta() -> None:
    # ln(1/0.45) = 0.80 < 1 + 1/e: the cap is 2, not 1.
    assert RandomStopping(1.0, 0.9, stop_probability=1.0).max_runs == 2


def test_pure_dp_is_three_times_the_candidate_epsilon_without_a_cap() -> None:
    s = RandomStopping(1.5, 0.0, stop_probability=0.1)
    assert (s.candidate_epsilon, s.candidate_delta, s.max_runs) == (0.5, 0.0, None)
    assert (s.privacy.epsilon, s.privacy.delta) == (1.5, 0.0)
    assert s.expected_runs == pytest.approx(10.0)


@pytest.mark.parametrize("relation", [Neighbouring.REPLACE_ONE, "add/remove-one"])
def test_the_guarantee_carries_the_candidates_relation(relation) -> None:
    s = RandomStopping(1.0, 1e-5, neighbouring=relation)
    assert s.privacy.neighbouring is Neighbouring.parse(relation)
    outcome = s.run(lambda rng: (rng.random(), None), random_state=0)
    assert outcome.privacy == s.privacy
    assert s.privacy.to_dict()["neighbouring_detail"] == Neighbouring.parse(relation).detail


# ------------------------------------------------------------------ the runs
def _runs(selection: RandomStopping, repeats: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([selection.run(lambda r: (0.0, None), random_state=rng).runs for _ in range(repeats)])


def _fit_pvalue(runs: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square p-value of the run counts against pmf[k - 1] = P(runs = k), sparse cells pooled."""
    observed = np.bincount(runs, minlength=pmf.size + 1)[1:]
    assert observed.size == pmf.size  # no count beyond the support
    expected = runs.size * pmf
    keep = expected >= 5
    obs, exp = observed[keep], expected[keep]
    if not keep.all():
        obs, exp = np.append(obs, observed[~keep].sum()), np.append(exp, expected[~keep].sum())
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def test_runs_are_geometric_truncated_at_the_cap() -> None:
    s = RandomStopping(1.0, 1e-2, stop_probability=0.3)
    cap = s.max_runs
    assert cap == 18
    runs = _runs(s, 6000, seed=1)
    assert runs.min() >= 1 and runs.max() <= cap
    k = np.arange(1, cap + 1)
    pmf = 0.3 * 0.7 ** (k - 1)
    pmf[-1] = 0.7 ** (cap - 1)  # the last run is reached whatever the last coin says
    assert pmf.sum() == pytest.approx(1.0)
    assert _fit_pvalue(runs, pmf) > 1e-3
    assert abs(runs.mean() - s.expected_runs) < 4 * runs.std() / math.sqrt(runs.size)


def test_runs_without_a_cap_are_geometric() -> None:
    s = RandomStopping(1.0, 0.0, stop_probability=0.25)
    runs = _runs(s, 6000, seed=2)
    k = np.arange(1, runs.max() + 1)
    pmf = stats.geom(0.25).pmf(k)
    pmf[-1] += stats.geom(0.25).sf(k[-1])  # the tail beyond the largest count seen
    assert _fit_pvalue(runs, pmf) > 1e-3
    assert abs(runs.mean() - 4.0) < 4 * math.sqrt(0.75 / 0.25**2 / runs.size)


def test_a_wrong_stopping_rule_is_caught() -> None:
    # The same check on a selection that stops with probability 0.5 instead of 0.3 fails.
    runs = _runs(RandomStopping(1.0, 0.0, stop_probability=0.5), 6000, seed=1)
    k = np.arange(1, runs.max() + 1)
    pmf = stats.geom(0.3).pmf(k)
    pmf[-1] += stats.geom(0.3).sf(k[-1])
    assert _fit_pvalue(runs, pmf) < 1e-6


def test_only_the_best_output_and_its_score_are_released() -> None:
    scores = iter([0.2, 0.7, 0.1, 0.7, 0.4] + [0.0] * 1000)
    seen: list[int] = []

    def candidate(rng):
        seen.append(len(seen))
        return next(scores), f"model {len(seen) - 1}"

    outcome = RandomStopping(1.0, 0.0, stop_probability=0.05).run(candidate, random_state=3)
    assert outcome.runs == len(seen) >= 4  # this seed runs past the second 0.7
    assert (outcome.output, outcome.score) == ("model 1", 0.7)  # ties go to the earliest
    assert set(vars(outcome)) == {"output", "score", "runs", "privacy"}  # no other candidate is kept


def test_same_seed_same_selection() -> None:
    s = RandomStopping(2.0, 1e-5, stop_probability=0.3)
    draw = lambda rng: (rng.normal(), rng.integers(100))  # noqa: E731
    a, b = s.run(draw, random_state=11), s.run(draw, random_state=11)
    assert (a.output, a.score, a.runs) == (b.output, b.score, b.runs)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(("settings", "error", "message"), [
    ({"epsilon": 0.0}, ValueError, "epsilon must be > 0"),
    ({"epsilon": float("nan")}, ValueError, "epsilon"),
    ({"epsilon": float("inf")}, ValueError, "epsilon must be finite"),
    ({"delta": 1.0}, ValueError, "delta must be in"),
    ({"delta": -1e-9}, ValueError, "delta must be in"),
    ({"stop_probability": 0.0}, ValueError, "stop_probability must be in"),
    ({"stop_probability": 1.5}, ValueError, "stop_probability must be in"),
    ({"stop_probability": float("nan")}, ValueError, "stop_probability must be in"),
    ({"stop_probability": True}, ValueError, "stop_probability must be in"),
    ({"stop_probability": "0.2"}, ValueError, "stop_probability must be in"),
    ({"neighbouring": "swap-two"}, ValueError, "unknown neighbouring relation"),
    ({"epsilon": 1e-9, "delta": 1e-5}, ValueError, "too small for a private selection"),
    ({"epsilon": 2e-6, "delta": 0.0}, ValueError, "too small for a private selection"),
])
def test_bad_parameters_are_refused_before_any_candidate_runs(settings, error, message) -> None:
    calls = []
    with pytest.raises(error, match=message):
        RandomStopping(**{"epsilon": 1.0, "delta": 1e-5, **settings}).run(lambda rng: calls.append(1) or (0.0, None))
    assert calls == []


def test_a_bad_candidate_is_refused() -> None:
    s = RandomStopping(1.0)
    with pytest.raises(TypeError, match="candidate must be callable"):
        s.run("not a function")
    with pytest.raises(ValueError, match="candidate scores must be finite"):
        s.run(lambda rng: (float("nan"), None), random_state=0)


def test_the_run_count_is_documented_as_not_covered():
    # Publishing it with the output voids Liu-Talwar's bound (a review measured a log-ratio of 2.0 against 1.0).
    from privml.selection import _random_stopping as random_stopping

    doc = random_stopping.RandomStoppingOutcome.__doc__ or ""
    assert "not covered by the guarantee" in doc and "may be published" not in doc
