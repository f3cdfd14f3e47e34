"""Noise reduction (Koufogiannis, Han and Pappas 2017): exact marginals, the Markov
structure that makes a released prefix cost only its last level, and broken variants
that the same tests catch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.audit import neighbour_distribution_test
from privml.neighbouring import Neighbouring
from privml.selection import _noise_reduction as noise_reduction
from privml.selection._noise_reduction import (
    NoiseReductionChain,
    check_epsilon_grid,
    gaussian_noise_reduction,
    laplace_noise_reduction,
)

# Every coordinate is an independent chain, so one chain over N coordinates of the
# same value gives N independent draws of every marginal.
N = 20_000
VALUE = 0.7
GRID = (0.2, 0.5, 1.0, 2.0)
SENSITIVITY = 1.5
DELTA = 1e-5


def laplace_chain(seed: int = 0, value: float = VALUE) -> NoiseReductionChain:
    return laplace_noise_reduction(np.full(N, value), epsilons=GRID, sensitivity=SENSITIVITY, random_state=seed)


def gaussian_chain(seed: int = 0, value: float = VALUE) -> NoiseReductionChain:
    return gaussian_noise_reduction(
        np.full(N, value), epsilons=GRID, delta=DELTA, sensitivity=SENSITIVITY, random_state=seed
    )


def marginal_pvalues(chain: NoiseReductionChain, value: float = VALUE) -> list[float]:
    """KS p-value of every marginal against the distribution the theorem claims."""
    out = []
    for t, scale in enumerate(chain.scales):
        family = "laplace" if chain.noise == "laplace" else "norm"
        out.append(stats.kstest(chain[t] - value, family, args=(0.0, scale)).pvalue)
    return out


# ----------------------------------------------------------------- marginals
def test_scales_are_the_claimed_mechanisms() -> None:
    assert laplace_chain().scales == tuple(SENSITIVITY / e for e in GRID)
    assert gaussian_chain().scales == tuple(analytic_gaussian_sigma(e, DELTA, SENSITIVITY) for e in GRID)


@pytest.mark.parametrize("make", [laplace_chain, gaussian_chain])
def test_every_marginal_has_exactly_the_claimed_distribution(make) -> None:
    pvalues = marginal_pvalues(make(seed=3))
    assert min(pvalues) > 1e-3, pvalues


def test_a_wrong_coin_is_caught(monkeypatch) -> None:
    # Broken: keep with probability eps_t / eps_{t+1} instead of its square.
    monkeypatch.setattr(noise_reduction, "laplace_keep_probability", lambda e, e_next: e / e_next)
    pvalues = marginal_pvalues(laplace_chain(seed=3))
    assert pvalues[-1] > 1e-3  # the last level is drawn directly ...
    assert min(pvalues[:-1]) < 1e-8, pvalues  # ... every earlier one is wrong


def test_a_wrong_gaussian_increment_is_caught(monkeypatch) -> None:
    # Broken: subtract standard deviations instead of variances.
    monkeypatch.setattr(noise_reduction, "gaussian_increment_std", lambda s, s_next: s - s_next)
    pvalues = marginal_pvalues(gaussian_chain(seed=3))
    assert min(pvalues[:-1]) < 1e-8, pvalues


def test_laplace_atoms_repeat_the_next_level_at_the_claimed_rate() -> None:
    chain = laplace_chain(seed=4)
    for t in range(len(GRID) - 1):
        repeated = np.mean(chain[t] == chain[t + 1])
        expected = (GRID[t] / GRID[t + 1]) ** 2
        assert abs(repeated - expected) < 4 * np.sqrt(expected * (1 - expected) / N)


# ----------------------------------------------------------------- Markov structure
def _bins(x: np.ndarray) -> np.ndarray:
    """Quartile bins of the non-zero values, plus one bin for exact zeros (the Laplace chain's atoms)."""
    nonzero = x[x != 0]
    codes = np.digitize(x, np.quantile(nonzero, [0.25, 0.5, 0.75])) + 1
    return np.unique(np.where(x == 0, 0, codes), return_inverse=True)[1]


def increment_independence_pvalue(earlier: np.ndarray, later: np.ndarray, following: np.ndarray) -> float:
    """Chi-square test that the backward increment earlier - later is independent of `following`.

    Independence of the increment from the later releases is what makes the earlier
    release a data-independent post-processing of the later one.
    """
    rows, cols = _bins(earlier - later), _bins(following)
    table = np.zeros((rows.max() + 1, cols.max() + 1))
    np.add.at(table, (rows, cols), 1)
    return stats.chi2_contingency(table).pvalue


def markov_pvalues(chain) -> list[float]:
    out = []
    for t in range(len(GRID) - 2):
        out.append(increment_independence_pvalue(chain[t], chain[t + 1], chain[t + 1]))
        out.append(increment_independence_pvalue(chain[t], chain[t + 1], chain[t + 2] - chain[t + 1]))
    return out


def shared_noise_chain(seed: int, noise: str, value: float = VALUE) -> list[np.ndarray]:
    """Broken: one noise draw, rescaled per level. Every marginal is right, the joint law is not."""
    rng = np.random.default_rng(seed)
    if noise == "laplace":
        base, scales = rng.laplace(0.0, 1.0, N), [SENSITIVITY / e for e in GRID]
    else:
        base, scales = rng.normal(0.0, 1.0, N), [analytic_gaussian_sigma(e, DELTA, SENSITIVITY) for e in GRID]
    return [value + s * base for s in scales]


@pytest.mark.parametrize("make", [laplace_chain, gaussian_chain])
def test_increments_are_independent_of_later_releases(make) -> None:
    pvalues = markov_pvalues(make(seed=5))
    assert min(pvalues) > 1e-3, pvalues


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_shared_noise_passes_the_marginals_but_fails_the_markov_check(noise: str) -> None:
    broken = shared_noise_chain(6, noise)
    family = "laplace" if noise == "laplace" else "norm"
    fake = laplace_chain() if noise == "laplace" else gaussian_chain()
    ks = [stats.kstest(b - VALUE, family, args=(0.0, s)).pvalue for b, s in zip(broken, fake.scales)]
    assert min(ks) > 1e-3
    assert min(markov_pvalues(broken)) < 1e-10


@pytest.mark.parametrize("make", [laplace_chain, gaussian_chain])
def test_the_backward_kernel_does_not_depend_on_the_data(make) -> None:
    low, high = make(seed=7, value=0.0), make(seed=8, value=5.0)
    for t in range(len(GRID) - 1):
        p = stats.ks_2samp(low[t] - low[t + 1], high[t] - high[t + 1]).pvalue
        assert p > 1e-3, (t, p)


# ----------------------------------------------------------------- privacy of a prefix
def prefix_statistic(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The combination of (theta_1, theta_2) that recovers v exactly under shared noise."""
    s1, s2 = SENSITIVITY / GRID[0], SENSITIVITY / GRID[1]
    return (s1 * second - s2 * first) / (s1 - s2)


def test_releasing_a_prefix_costs_its_last_level_and_shared_noise_does_not() -> None:
    # Neighbours: values SENSITIVITY apart (the L1 sensitivity of a scalar).
    a, b = laplace_chain(seed=9, value=0.0), laplace_chain(seed=10, value=SENSITIVITY)
    ok = neighbour_distribution_test(prefix_statistic(a[0], a[1]), prefix_statistic(b[0], b[1]), epsilon=GRID[1])
    assert not ok.violated, ok
    broken_a, broken_b = shared_noise_chain(9, "laplace", 0.0), shared_noise_chain(10, "laplace", SENSITIVITY)
    caught = neighbour_distribution_test(
        prefix_statistic(broken_a[0], broken_a[1]), prefix_statistic(broken_b[0], broken_b[1]), epsilon=GRID[1]
    )
    assert caught.violated and caught.epsilon_lower_bound > 5, caught


def test_prefix_guarantee() -> None:
    chain = gaussian_noise_reduction([1.0, 2.0], epsilons=GRID, delta=DELTA, sensitivity=1.0, random_state=0)
    g = chain.prefix_guarantee(2)
    assert (g.epsilon, g.delta, g.neighbouring, g.accountant) == (1.0, DELTA, Neighbouring.REPLACE_ONE, "noise-reduction")
    assert chain.prefix_guarantee(-1).epsilon == GRID[-1]
    with pytest.raises(IndexError):
        chain.prefix_guarantee(len(GRID))
    assert laplace_noise_reduction(0.0, epsilons=[1.0], sensitivity=1.0).prefix_guarantee(0).delta == 0.0


# ----------------------------------------------------------------- object contract
def test_chain_is_immutable_and_keeps_the_shape() -> None:
    chain = laplace_noise_reduction(np.zeros((3, 2)), epsilons=GRID, sensitivity=1.0, random_state=0)
    assert len(chain) == len(GRID) and all(r.shape == (3, 2) for r in chain)
    with pytest.raises(ValueError):
        chain[0][0, 0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        chain.epsilons = (1.0,)  # type: ignore[misc]
    assert isinstance(laplace_noise_reduction(1.0, epsilons=[1.0], sensitivity=1.0)[0], np.ndarray)


def test_seeded_chains_are_reproducible() -> None:
    a, b = gaussian_chain(seed=11), gaussian_chain(seed=11)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epsilons": [1.0, 0.5]},
        {"epsilons": [0.5, 0.5]},
        {"epsilons": []},
        {"epsilons": [0.0, 1.0]},
        {"epsilons": [1.0, float("inf")]},
        {"epsilons": [[0.5, 1.0]]},
        {"sensitivity": 0.0},
        {"value": [0.0, float("nan")]},
    ],
)
@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_bad_arguments_fail_before_any_noise(kwargs: dict, kind: str) -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    args = {"value": [0.0, 1.0], "epsilons": [0.5, 1.0], "sensitivity": 1.0, **kwargs}
    value = args.pop("value")
    with pytest.raises(ValueError):
        if kind == "laplace":
            laplace_noise_reduction(value, random_state=rng, **args)
        else:
            gaussian_noise_reduction(value, delta=DELTA, random_state=rng, **args)
    assert rng.bit_generator.state == state


def test_gaussian_needs_a_delta_and_distinct_sigmas() -> None:
    with pytest.raises(ValueError, match="delta"):
        gaussian_noise_reduction(0.0, epsilons=[1.0], delta=0.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="same sigma"):
        gaussian_noise_reduction(0.0, epsilons=[1.0, 1.0 + 1e-15], delta=DELTA, sensitivity=1.0)
    with pytest.raises(TypeError):
        laplace_noise_reduction(0.0, [1.0], 1.0)  # type: ignore[misc]


def test_grid_validation_names_the_parameter() -> None:
    assert check_epsilon_grid([0.1, 1]) == (0.1, 1.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        check_epsilon_grid([1.0, 0.1])
