"""High-precision minimisation of the regularised ERM objective.

Objective perturbation (CMS11 Thm 9; KST12 Thm 2; vdMH20 Thm 3-4) proves
privacy for the *exact* minimiser of the perturbed objective: its proof maps
each output ``w`` back to the unique noise vector ``b`` that makes ``w`` the
stationary point. An approximate minimiser ``w~`` with gradient ``g`` is the
exact minimiser of the objective whose linear term is ``b - n g``, so the
guarantee survives only if ``n ||g||`` is negligible against the noise. Output
perturbation similarly calibrates its noise to the sensitivity of the exact
minimiser. :func:`minimise_objective` therefore solves to a tight tolerance on
the L2 norm of the full gradient and reports the norm it reached.

Data-independent success. Whether a fast solver converges within its cap
depends on the data, so refusing to release when it does not would itself
release a bit that no guarantee covers. Private fits therefore never fail on
the data: when the fast path stops short, a *certified* phase takes over,
Nesterov's accelerated gradient method for mu-strongly convex, beta-smooth J
(Nesterov 2004, Thm 2.2.3, constant step scheme III), whose number of steps
to reach ``||grad J|| <= tol`` has a bound computed from public quantities
only (:func:`certified_steps`: mu = lambda + Delta, beta = c + mu, the loss's
Lipschitz constant, n and the noise vector b, never the records). A setting
whose bound exceeds :data:`MAX_CERTIFIED_STEPS` is refused before the solve,
so the refusal depends on public inputs alone.

Method: with few parameters (at most :data:`DENSE_NEWTON_MAX_PARAMETERS`),
damped Newton on the dense Hessian, which converges in a handful of steps and
avoids scipy's per-call overhead (statistical privacy tests fit thousands of
tiny models). Otherwise L-BFGS (scipy's L-BFGS-B without bounds) gets close
cheaply and a Newton-CG polish, using the objective's exact Hessian-vector
products, finishes with quadratic convergence, which L-BFGS lacks once
rounding blurs its curvature pairs.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import OptimizeResult, minimize
from scipy.sparse.linalg import LinearOperator, cg

from privml._validation import check_count, check_positive
from privml.exceptions import ConvergenceError
from privml.losses import RegularisedObjective

__all__ = [
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "DENSE_NEWTON_MAX_PARAMETERS",
    "MAX_CERTIFIED_STEPS",
    "SolverResult",
    "certified_steps",
    "check_l2_setting",
    "check_solver_settings",
    "MinimiserCache",
    "minimise_objective",
    "minimiser_key",
    "sharing_minimisers",
    "solve_nonprivate",
]

#: Default bound on ``||grad J(w)||_2``. With ``n`` records, objective
#: perturbation's noise vector enters as ``b / n``, so the residual acts like a
#: change of ``n * tol`` in ``b`` (6e-6 for MNIST), far below any noise scale.
DEFAULT_TOL = 1e-10
#: Default cap on L-BFGS plus Newton iterations.
DEFAULT_MAX_ITER = 1000

#: Problems with at most this many parameters are solved by dense Newton.
DENSE_NEWTON_MAX_PARAMETERS = 64

# L-BFGS memory: more pairs cost little next to a pass over X and cut iterations.
_LBFGS_MEMORY = 30
# L-BFGS hands over to Newton-CG once ||grad|| <= this many times tol.
_NEWTON_HANDOVER = 1e3
# Armijo constant of the Newton line search.
_ARMIJO = 1e-4
# Halvings of the Newton step before the polish gives up.
_MAX_HALVINGS = 40
#: Largest certified-phase step bound a private fit accepts (each step is one pass over
#: the data); a worse-conditioned setting (tiny lambda, tiny tol) is refused up front.
MAX_CERTIFIED_STEPS = 1_000_000


@dataclass(frozen=True)
class SolverResult:
    """Outcome of :func:`minimise_objective`.

    Attributes
    ----------
    weights : numpy.ndarray
        The minimiser, in the loss's parameter shape: ``(d,)`` or ``(d, k)``.
    value : float
        ``J(weights)``.
    grad_norm : float
        ``||grad J(weights)||_2`` over all (flattened) parameters.
    iterations : int
        L-BFGS iterations plus Newton steps taken.
    converged : bool
        Whether ``grad_norm <= tol``.
    """

    weights: np.ndarray
    value: float
    grad_norm: float
    iterations: int
    converged: bool


#: The smallest ``tol`` accepted. A release's sensitivity assumes the solve certified ``||grad J|| <= tol``;
#: float64 gradients of a mean over records carry rounding near 1e-16 (the losses' Lipschitz constants are
#: about 1), so a smaller tol could be out of reach and the certificate fail on some data (a review released
#: a model at tol = 1e-20 with a gradient of 1.3e-17: the slack 2 tol / lambda understated).
MIN_TOL = 1e-13


def check_solver_settings(tol: object, max_iter: object) -> tuple[float, int]:
    """Validate an estimator's ``tol`` (>= :data:`MIN_TOL`) and ``max_iter`` (integer >= 1)."""
    value = check_positive(tol, "tol")
    if value < MIN_TOL:
        raise ValueError(f"tol must be at least {MIN_TOL:g} (float64 gradients cannot certify less), got {value:g}")
    return value, check_count(max_iter, "max_iter")


def check_l2_setting(l2: object) -> float | None:
    """Validate an estimator's ``l2``: ``"auto"`` (returns None) or a finite float > 0."""
    if isinstance(l2, str):
        if l2 != "auto":
            raise ValueError(f"l2 must be 'auto' or a number > 0, got {l2!r}")
        return None
    return check_positive(l2, "l2")


def minimise_objective(
    objective: RegularisedObjective,
    *,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
    x0: ArrayLike | None = None,
    require_convergence: bool = True,
) -> SolverResult:
    """Minimise a strongly convex :class:`~privml.losses.RegularisedObjective` to high precision.

    Parameters
    ----------
    objective : RegularisedObjective
        ``J(w) = ((l2 + extra_l2)/2)||w||^2 + mean loss + (1/n) b.w``. Needs
        ``l2 + extra_l2 > 0`` so that the minimiser exists and is unique.
    tol : float, default 1e-10
        Stop once ``||grad J(w)||_2 <= tol``. By strong convexity with
        modulus ``m = l2 + extra_l2`` the iterate is then within ``tol / m`` of
        the exact minimiser.
    max_iter : int, default 1000
        Cap on L-BFGS iterations plus Newton steps.
    x0 : array_like, optional
        Starting point (flat or in parameter shape); default zero.
    require_convergence : bool, default True
        Reach ``tol`` whatever the data: if the fast path (capped at
        ``max_iter``) stops short, run the certified accelerated-gradient
        phase for at most :func:`certified_steps` passes, a bound from
        public quantities. Private estimators always keep this on. ``False``
        returns the fast path's last iterate, ``converged`` saying whether it
        met ``tol`` (for diagnostics and tests).

    Returns
    -------
    SolverResult

    Raises
    ------
    ValueError
        If the objective is not strongly convex, an argument is invalid, or
        (with ``require_convergence``) the certified bound exceeds
        :data:`MAX_CERTIFIED_STEPS`: checked before the solve, from public
        quantities only.

    Notes
    -----
    Not a privacy mechanism itself; it is deterministic given its inputs. The
    privacy proofs it serves (CMS11 Thm 6 and 9; KST12 Thm 2; vdMH20 Thm 1-4)
    assume its output is the exact minimiser, which is why the final gradient
    norm is checked and reported instead of trusting the solver's own stop.

    Examples
    --------
    >>> import numpy as np
    >>> from privml.losses import LogisticLoss, RegularisedObjective
    >>> X = np.array([[0.6, 0.8], [-0.8, 0.6], [0.0, -1.0]])
    >>> objective = RegularisedObjective(LogisticLoss(), X, np.array([1, -1, -1]), l2=0.1)
    >>> result = minimise_objective(objective)
    >>> result.converged, bool(result.grad_norm <= 1e-10)
    (True, True)
    """
    # long-function: most of its length is the numpy-style docstring (parameters, guarantee, references); the code is
    # argument checks, the certified step budget and the fast path with its certified fallback.
    if not isinstance(objective, RegularisedObjective):
        raise TypeError(f"objective must be a RegularisedObjective, got {type(objective).__name__}")
    tol, max_iter = check_solver_settings(tol, max_iter)
    if not objective.strong_convexity > 0:
        raise ValueError("the objective must be strongly convex (l2 + extra_l2 > 0) to have a unique minimiser")
    p = objective.n_parameters
    budget = certified_steps(objective, tol) if require_convergence else 0
    if budget > MAX_CERTIFIED_STEPS:
        raise ValueError(
            f"this objective is too ill-conditioned to certify ||grad|| <= tol = {tol:.3g} "
            f"(up to {budget:.3g} passes over the data, limit {MAX_CERTIFIED_STEPS:.0e}): increase l2 or tol"
        )
    w = np.zeros(p) if x0 is None else objective._flat(x0, "x0").copy()
    if p <= DENSE_NEWTON_MAX_PARAMETERS:
        value, grad = objective.value_and_grad(w)
        w, value, grad_norm, iterations = _newton(objective, w, value, grad, tol=tol, max_steps=max_iter, dense=True)
    else:
        w, value, grad_norm, iterations = _lbfgs_then_newton(objective, w, tol=tol, max_iter=max_iter)
    if require_convergence and grad_norm > tol:
        # The fast path stopped short (a cap hit, or rounding): finish with the method whose
        # step count is bounded by public quantities, so success does not depend on the data.
        start = np.zeros(p)
        start_value = objective.value(start)
        if not value <= start_value:  # the public bound holds from any w0 with J(w0) <= J(0)
            w, value = start, start_value
        w, value, grad_norm, steps = _accelerated_gradient(objective, w, tol=tol, max_steps=budget)
        iterations += steps
        if grad_norm > tol:
            # Never hand back an uncertified minimiser to be released: the sensitivity's slack assumes the
            # certificate. With tol >= MIN_TOL the bounded phase reaches it (in exact arithmetic, always).
            raise ConvergenceError(f"the solver could not certify ||grad J|| <= tol = {tol:.3g}; increase tol")
    return SolverResult(
        weights=w.reshape(objective.parameter_shape),
        value=float(value),
        grad_norm=grad_norm,
        iterations=iterations,
        converged=grad_norm <= tol,
    )


def certified_steps(objective: RegularisedObjective, tol: float, start: ArrayLike | None = None) -> int:
    """Accelerated-gradient steps that provably reach ``||grad J|| <= tol`` from any w0 with J(w0) <= J(start).

    Nesterov (2004), Thm 2.2.3: with ``kappa = beta / mu``, after k steps
    ``J(x_k) - J* <= (1 - 1/sqrt(kappa))^k (J(x_0) - J* + mu/2 ||x_0 - x*||^2)``,
    and the bracket is at most ``2 (J(start) - J*) <= G^2 / mu`` for
    ``G >= ||grad J(start)||`` (strong convexity, twice). Since
    ``||grad J(x)||^2 <= 2 beta (J(x) - J*)`` (smoothness),
    ``k >= log(2 beta G^2 / (mu tol^2)) / -log(1 - 1/sqrt(kappa))`` suffices.
    At ``start = 0`` (the default), ``G = L + ||b|| / n`` bounds the gradient
    for every dataset (``||x_i|| <= 1``, an L-Lipschitz loss): the count uses
    lambda, Delta, the loss's constants, n and the noise b, never the records.
    """
    mu, beta = objective.strong_convexity, objective.smoothness
    if start is not None:
        bound = float(np.linalg.norm(objective.gradient(start)))
    else:
        bound = objective.loss.lipschitz + float(np.linalg.norm(objective.linear)) / objective.n_samples
    if not math.isfinite(bound) or not math.isfinite(beta):
        return MAX_CERTIFIED_STEPS + 1  # no public bound (e.g. an unbounded loss): nothing to certify
    if bound <= tol:
        return 0
    ratio = 2.0 * beta * bound**2 / (mu * tol**2)
    return math.ceil(math.log(ratio) / -math.log1p(-1.0 / math.sqrt(beta / mu))) + 1


def _accelerated_gradient(
    objective: RegularisedObjective, w: np.ndarray, *, tol: float, max_steps: int
) -> tuple[np.ndarray, float, float, int]:
    """Nesterov's constant-momentum method for strongly convex J, until ``||grad|| <= tol``.

    Step ``1/beta``, momentum ``(sqrt(kappa) - 1)/(sqrt(kappa) + 1)`` (Nesterov 2004,
    scheme 2.2.11). Returns (w, J(w), ||grad J(w)||, steps); ``max_steps`` from
    :func:`certified_steps` is enough in exact arithmetic.
    """
    mu, beta = objective.strong_convexity, objective.smoothness
    root = math.sqrt(beta / mu)
    momentum = (root - 1.0) / (root + 1.0)
    x, y = w.copy(), w.copy()
    value, grad = objective.value_and_grad(y)
    best = (float(np.linalg.norm(grad)), x, value)
    steps = 0
    while best[0] > tol and steps < max_steps:
        x_next = y - grad / beta
        y = x_next + momentum * (x_next - x)
        x = x_next
        steps += 1
        value, grad = objective.value_and_grad(x)
        norm = float(np.linalg.norm(grad))
        if norm < best[0]:
            best = (norm, x.copy(), value)
        if norm <= tol:
            break
        value, grad = objective.value_and_grad(y)
    grad_norm, x, value = best
    return x, float(value), grad_norm, steps


def _lbfgs_then_newton(
    objective: RegularisedObjective, w: np.ndarray, *, tol: float, max_iter: int
) -> tuple[np.ndarray, float, float, int]:
    """L-BFGS from ``w``, then a Newton-CG polish; returns (w, J(w), ||grad||, iterations)."""
    p = objective.n_parameters
    last: dict[str, np.ndarray] = {}

    def value_and_grad(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = objective.value_and_grad(x)
        last["x"], last["grad"] = x.copy(), grad
        return value, grad

    def hand_over_to_newton(intermediate_result: OptimizeResult) -> None:
        # Within _NEWTON_HANDOVER * tol one Newton-CG step (quadratic
        # convergence) usually certifies tol, where L-BFGS would need many
        # more iterations and often stalls near 1e-9 (measured on MNIST: 20-40%
        # fewer passes over the data than running L-BFGS to its end).
        x = intermediate_result.x
        if "x" in last and np.array_equal(x, last["x"]) and np.linalg.norm(last["grad"]) <= _NEWTON_HANDOVER * tol:
            raise StopIteration

    # ||g||_2 <= sqrt(p) ||g||_inf, so this pgtol also implies the L2 target.
    # ftol=0: never stop on a small change of J, which says nothing about the gradient.
    lbfgs = minimize(
        value_and_grad,
        w,
        jac=True,
        method="L-BFGS-B",
        callback=hand_over_to_newton,
        options={"maxiter": max_iter, "gtol": tol / math.sqrt(p), "ftol": 0.0, "maxcor": _LBFGS_MEMORY},
    )
    w = np.asarray(lbfgs.x, dtype=np.float64)
    iterations = int(lbfgs.nit)
    if "x" in last and np.array_equal(w, last["x"]):
        value, grad = float(lbfgs.fun), last["grad"]
    else:
        value, grad = objective.value_and_grad(w)
    if iterations >= max_iter:
        return w, value, float(np.linalg.norm(grad)), iterations
    remaining = max_iter - iterations
    w, value, grad_norm, steps = _newton(objective, w, value, grad, tol=tol, max_steps=remaining, dense=False)
    return w, value, grad_norm, iterations + steps


def _newton_direction(objective: RegularisedObjective, w: np.ndarray, grad: np.ndarray, *, dense: bool) -> np.ndarray:
    """Solve ``Hess J(w) d = -grad``: exactly (Cholesky) if ``dense``, else by truncated CG."""
    if dense:
        # J is strongly convex, so its Hessian is symmetric positive definite.
        factor = cho_factor(objective.hessian(w))
        return cho_solve(factor, -grad)
    p = objective.n_parameters
    hessian = LinearOperator((p, p), matvec=lambda v: objective.hessian_vector_product(w, v), dtype=np.float64)
    grad_norm = float(np.linalg.norm(grad))
    # Forcing sequence rtol ~ sqrt(||g||) gives superlinear convergence
    # (Nocedal & Wright, Thm 7.2) without over-solving far from the optimum.
    direction, _ = cg(hessian, -grad, rtol=min(0.5, math.sqrt(grad_norm)), maxiter=max(50, 2 * p))
    return direction


def _newton(
    objective: RegularisedObjective,
    w: np.ndarray,
    value: float,
    grad: np.ndarray,
    *,
    tol: float,
    max_steps: int,
    dense: bool,
) -> tuple[np.ndarray, float, float, int]:
    """Damped Newton from ``w`` (with ``J(w)``, ``grad J(w)``) until ``||grad|| <= tol``.

    Returns (w, J(w), ||grad||, steps).
    """
    grad_norm = float(np.linalg.norm(grad))
    steps = 0
    while grad_norm > tol and steps < max_steps:
        direction = _newton_direction(objective, w, grad, dense=dense)
        slope = float(grad @ direction)
        if not slope < 0:  # CG breakdown: fall back to steepest descent
            direction, slope = -grad, -grad_norm**2
        # Near the optimum, decreases of J fall below its rounding error
        # (~1e-16 |J|), so a step is also accepted when J does not rise beyond
        # rounding and the gradient norm, the quantity we certify, shrinks.
        rounding = 8.0 * np.finfo(np.float64).eps * (abs(value) + 1.0)
        step, accepted = 1.0, False
        for _ in range(_MAX_HALVINGS):
            candidate = w + step * direction
            new_value, new_grad = objective.value_and_grad(candidate)
            new_norm = float(np.linalg.norm(new_grad))
            armijo = new_value <= value + _ARMIJO * step * slope
            flat_but_better = new_value <= value + rounding and new_norm < grad_norm
            if armijo or flat_but_better:
                accepted = True
                break
            step *= 0.5
        steps += 1
        if not accepted:
            break  # no progress possible at this precision: report as is
        w, value, grad, grad_norm = candidate, new_value, new_grad, new_norm
    return w, float(value), grad_norm, steps


# ------------------------------------------------------------------ sharing non-private minimisers
class MinimiserCache(Protocol):
    """Where :func:`solve_nonprivate` may find a minimiser solved before (e.g. the study's cache).

    ``minimiser(key, compute, accept)`` returns the result stored under
    ``key`` when ``accept(result)`` holds, else ``compute()`` (which it may
    store under ``key``). An implementation shared by several processes
    must let one compute a key while the others wait and reuse it.
    """

    def minimiser(
        self, key: str, compute: Callable[[], SolverResult], accept: Callable[[SolverResult], bool]
    ) -> SolverResult: ...


_ACTIVE_CACHE: contextvars.ContextVar[MinimiserCache | None] = contextvars.ContextVar("privml_minimiser_cache",
                                                                                      default=None)
# Domain separation of the key (bumped when the solver's output for given inputs may change).
_KEY_VERSION = "privml-nonprivate-minimiser-v1"


@contextlib.contextmanager
def sharing_minimisers(cache: MinimiserCache | None) -> Iterator[None]:
    """Let :func:`solve_nonprivate` reuse minimisers from ``cache`` inside the block (None: no sharing).

    The trade-off study enters it around each run (:mod:`privml.study._cache`),
    so runs that differ only in their noise solve each non-private objective
    once. A cached minimiser is a non-private function of the training data:
    the cache is as private as the data.
    """
    token = _ACTIVE_CACHE.set(cache)
    try:
        yield
    finally:
        _ACTIVE_CACHE.reset(token)


def minimiser_key(objective: RegularisedObjective, tol: float, max_iter: int) -> str:
    """Content hash of everything the non-private minimiser of ``objective`` depends on.

    The loss (its repr names its class and constants), the bytes, shape and
    dtype of ``X`` and ``y``, lambda, ``tol`` and ``max_iter`` (exact
    binary values). Two solves with equal keys return identical results.
    """
    if objective.linear.any() or objective.extra_l2 != 0:
        raise ValueError("minimiser_key is for non-private objectives (no linear term, no extra l2)")
    digest = hashlib.sha256()
    header = (f"{_KEY_VERSION}|{objective.loss!r}|l2={float(objective.l2).hex()}|tol={float(tol).hex()}"
              f"|max_iter={int(max_iter)}")
    digest.update(header.encode())
    for name, array in (("X", objective.X), ("y", objective.y)):
        contiguous = np.ascontiguousarray(array)
        digest.update(f"|{name}:{contiguous.dtype.str}:{contiguous.shape}|".encode())
        digest.update(contiguous.data.cast("B"))  # .data is memoryview(contiguous), typed for Python < 3.12
    return digest.hexdigest()


def solve_nonprivate(objective: RegularisedObjective, *, tol: float, max_iter: int) -> SolverResult:
    """:func:`minimise_objective` of a non-private objective, reused from the active cache when one is set.

    Without a cache (:func:`sharing_minimisers`) this is exactly
    ``minimise_objective(objective, tol=tol, max_iter=max_iter)``. With one,
    the result is looked up by :func:`minimiser_key` and a stored result is
    used only after it is checked against this very objective: the right
    parameter shape, finite weights, and a gradient norm recomputed here
    that meets ``tol``. A minimiser of any other data or lambda fails
    that check, so it is solved afresh instead: the certified
    ``||grad J|| <= tol`` that the sensitivity bounds rely on holds for
    whatever this returns. Output perturbation, the non-private baseline,
    prediction sensitivity and every teacher of subsample-and-aggregate
    solve through here; the noise is drawn by the caller, after, from its
    own generator, so a reused minimiser leaves every release unchanged.
    """
    cache = _ACTIVE_CACHE.get()
    if cache is None:
        return minimise_objective(objective, tol=tol, max_iter=max_iter)
    key = minimiser_key(objective, tol, max_iter)

    def accept(result: SolverResult) -> bool:
        weights = np.asarray(result.weights)
        if weights.shape != tuple(objective.parameter_shape) or not np.all(np.isfinite(weights)):
            return False
        # Strict: a stored result is used only where it certifies tol for this objective (a solve
        # that stopped above tol, or a norm that rounds above it here, is solved afresh: the same
        # deterministic solve, so the same result, only not shared).
        return float(np.linalg.norm(objective.gradient(weights))) <= tol

    return cache.minimiser(key, lambda: minimise_objective(objective, tol=tol, max_iter=max_iter), accept)
