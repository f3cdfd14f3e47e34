"""Tests for the high-precision ERM solver."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from privml.exceptions import ConvergenceError
from privml.linear import _solvers as solvers
from privml.linear._solvers import SolverResult, check_l2_setting, check_solver_settings, minimise_objective
from privml.losses import HuberHingeLoss, LogisticLoss, MultinomialLogisticLoss, RegularisedObjective


def _data(seed: int, n: int, d: int, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    if k is None:
        y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    else:
        y = np.argmax(X @ rng.standard_normal((d, k)) + 0.3 * rng.standard_normal((n, k)), axis=1)
    return X, y


@pytest.mark.parametrize(
    "loss, k, d",
    [(LogisticLoss(), None, 5), (HuberHingeLoss(0.5), None, 5), (MultinomialLogisticLoss(4), 4, 5),
     (LogisticLoss(), None, 120), (MultinomialLogisticLoss(3), 3, 40)],
    ids=["logistic-dense", "huber-dense", "multinomial-dense", "logistic-lbfgs", "multinomial-lbfgs"],
)
def test_reaches_the_gradient_tolerance(loss, k, d: int) -> None:
    X, y = _data(0, 300, d, k)
    objective = RegularisedObjective(loss, X, y, 1e-3, linear=np.full(loss.n_parameters(d), 0.5), extra_l2=1e-4)
    result = minimise_objective(objective)
    assert isinstance(result, SolverResult)
    assert result.converged and result.grad_norm <= solvers.DEFAULT_TOL
    assert result.weights.shape == loss.parameter_shape(d)
    # The reported norm is the true one, not the solver's own estimate.
    assert np.linalg.norm(objective.gradient(result.weights)) == pytest.approx(result.grad_norm, rel=1e-6, abs=1e-15)
    assert result.value == pytest.approx(objective.value(result.weights))


def test_dense_newton_and_lbfgs_find_the_same_minimiser(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(1, 200, 6, 3)
    objective = RegularisedObjective(MultinomialLogisticLoss(3), X, y, 1e-3)
    dense = minimise_objective(objective)
    monkeypatch.setattr(solvers, "DENSE_NEWTON_MAX_PARAMETERS", 0)
    iterative = minimise_objective(objective)
    # Strong convexity: ||w - w*|| <= ||grad|| / lambda, here ~1e-7 at most.
    assert np.allclose(dense.weights, iterative.weights, atol=2 * solvers.DEFAULT_TOL / 1e-3)


def test_matches_scikit_learn_at_tight_tolerance() -> None:
    X, y = _data(2, 400, 8, 3)
    lam = 1e-2
    ours = minimise_objective(RegularisedObjective(MultinomialLogisticLoss(3), X, y, lam)).weights
    # scikit-learn minimises C sum_i loss + ||W||^2 / 2, i.e. J with lambda = 1 / (n C).
    reference = LogisticRegression(C=1 / (len(y) * lam), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    assert np.allclose(ours.T, reference.coef_, atol=1e-6)


def test_newton_polish_finishes_what_lbfgs_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    # p > the dense threshold, so L-BFGS runs first; at tol = 1e-13 it stalls
    # in double precision (its curvature pairs drown in rounding) and the
    # Newton-CG polish must certify the tolerance.
    X, y = _data(3, 500, 80, None)
    objective = RegularisedObjective(LogisticLoss(), X, y, 1e-6)
    polish_steps = []
    newton = solvers._newton

    def spy(*args, **kwargs):
        out = newton(*args, **kwargs)
        polish_steps.append((kwargs["dense"], out[3]))
        return out

    monkeypatch.setattr(solvers, "_newton", spy)
    result = minimise_objective(objective, tol=1e-13, max_iter=5000)
    assert result.converged and result.grad_norm <= 1e-13
    assert len(polish_steps) == 1 and polish_steps[0][0] is False and polish_steps[0][1] >= 1


def test_warm_start_needs_fewer_iterations() -> None:
    X, y = _data(4, 300, 100, None)
    objective = RegularisedObjective(LogisticLoss(), X, y, 1e-3)
    cold = minimise_objective(objective)
    warm = minimise_objective(objective, x0=cold.weights)
    assert warm.iterations <= 2 < cold.iterations
    assert np.allclose(warm.weights, cold.weights, atol=1e-6)


@pytest.mark.parametrize("d", [5, 100], ids=["dense", "lbfgs"])
def test_a_short_fast_path_is_finished_by_the_certified_phase(d: int) -> None:
    # Whether the capped fast path converges depends on the data; a private fit must not
    # fail on it, so the certified accelerated-gradient phase finishes the job.
    X, y = _data(5, 300, d, None)
    objective = RegularisedObjective(LogisticLoss(), X, y, 1e-2)
    diagnostic = minimise_objective(objective, max_iter=1, require_convergence=False)
    assert not diagnostic.converged and diagnostic.iterations <= 1
    certified = minimise_objective(objective, max_iter=1)
    assert certified.converged and certified.grad_norm <= solvers.DEFAULT_TOL
    assert certified.iterations <= 1 + solvers.certified_steps(objective, solvers.DEFAULT_TOL)
    exact = minimise_objective(objective)
    assert np.allclose(certified.weights, exact.weights, atol=2 * solvers.DEFAULT_TOL / 1e-2)


def test_the_certified_bound_uses_public_quantities_only() -> None:
    # Same n, d, lambda, loss and noise vector b, different records: the same bound.
    rng = np.random.default_rng(0)
    b = rng.normal(size=4)
    bounds = set()
    for seed in range(3):
        X, y = _data(seed, 50, 4, None)
        bounds.add(solvers.certified_steps(RegularisedObjective(LogisticLoss(), X, y, 0.05, linear=b), 1e-10))
    assert len(bounds) == 1


def test_accelerated_gradient_meets_its_bound_from_zero() -> None:
    X, y = _data(7, 200, 6, None)
    objective = RegularisedObjective(LogisticLoss(), X, y, 0.05)
    steps = solvers.certified_steps(objective, 1e-10)
    w, _, grad_norm, taken = solvers._accelerated_gradient(objective, np.zeros(6), tol=1e-10, max_steps=steps)
    assert grad_norm <= 1e-10 and taken <= steps


def test_hopeless_conditioning_is_refused_before_the_solve() -> None:
    X, y = _data(8, 50, 3, None)
    objective = RegularisedObjective(LogisticLoss(), X, y, 1e-14)
    with pytest.raises(ValueError, match="too ill-conditioned"):
        minimise_objective(objective)
    assert ConvergenceError  # still importable for callers of privml <= 0.1


def test_rejects_bad_input() -> None:
    X, y = _data(6, 50, 3, None)
    with pytest.raises(ValueError, match="strongly convex"):
        minimise_objective(RegularisedObjective(LogisticLoss(), X, y, 0.0))
    objective = RegularisedObjective(LogisticLoss(), X, y, 0.1)
    with pytest.raises(TypeError):
        minimise_objective(LogisticLoss())  # type: ignore[arg-type]
    for kwargs in ({"tol": 0.0}, {"tol": -1.0}, {"max_iter": 0}, {"max_iter": 2.5}):
        with pytest.raises((ValueError, TypeError)):
            minimise_objective(objective, **kwargs)
    with pytest.raises(ValueError):
        minimise_objective(objective, x0=np.zeros(4))


def test_setting_checks() -> None:
    assert check_l2_setting("auto") is None
    assert check_l2_setting(0.5) == 0.5
    for bad in ("big", 0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            check_l2_setting(bad)
    with pytest.raises(TypeError):
        check_l2_setting(None)
    assert check_solver_settings(1e-8, 10) == (1e-8, 10)


def test_a_tol_below_what_float64_can_certify_is_refused_before_any_solve():
    # A review released a model at tol = 1e-20 whose gradient was 1.3e-17: the sensitivity's slack understated.
    from privml.linear._solvers import MIN_TOL, check_solver_settings

    assert check_solver_settings(MIN_TOL, 10) == (MIN_TOL, 10)
    with pytest.raises(ValueError, match="tol must be at least"):
        check_solver_settings(1e-20, 10)


def test_an_uncertified_solve_raises_rather_than_returning_a_minimiser_to_release(monkeypatch):
    X, y = _data(3, 200, 5, None)
    objective = RegularisedObjective(LogisticLoss(), X, y, 1e-3)

    def stalls(objective, w, *, tol, max_steps):  # the bounded phase falling short (it cannot in exact arithmetic)
        return w, objective.value(w), 1.0, max_steps

    monkeypatch.setattr(solvers, "_newton", lambda objective, w, value, grad, **kw: (w, value, 1.0, 0))
    monkeypatch.setattr(solvers, "_accelerated_gradient", stalls)
    with pytest.raises(ConvergenceError, match="could not certify"):
        minimise_objective(objective, tol=1e-10, max_iter=5)
