"""Accuracy First (Ligett, Neel, Roth, Waggoner and Wu 2017): the most private
output-perturbation model that meets an accuracy target, with its ex-post privacy.

Given a target (a classification error on a validation set, or an excess
empirical risk), search the privacy levels ``eps_1 < ... < eps_T`` from the
most private up: publish the model at the next level, check it privately with
InteractiveAboveThreshold, stop at the first that passes. The privacy paid is
known only afterwards: ``eps_AT + eps_t`` at stop ``t`` (ex-post privacy), and
``eps_AT + eps_T`` if nothing passed (every model was published).

Searches
--------
``"noise-reduction"`` (the paper's method): one noise-reduction chain
(:mod:`privml.selection._noise_reduction`) of the ERM minimiser, so publishing
the first ``t`` models costs only ``eps_t``. ``delta == 0``: the Laplace chain
with L1 sensitivity ``sqrt(d) Delta_2`` (pure DP; good for small d).
``delta > 0``: the Gaussian chain at that delta (far less noise for large d;
see the noise-reduction module for the comparison).

``"doubling"`` (the paper's baseline, :mod:`privml.selection._doubling`):
independent models at ``eps_min, 2 eps_min, ...``; the first ``t`` cost
``sum eps_s`` (and ``t delta``).

Why output perturbation only
----------------------------
Noise reduction needs every earlier release to be a post-processing of the
later one. Output perturbation publishes ``w* + noise_t``: the chain acts on
the noise alone. Objective perturbation publishes ``argmin J(w) + b_t.w / n``,
and turning ``b_{t+1}`` into ``b_t`` and re-solving needs the data; so the
earlier models are not a post-processing of the later one, the prefix
argument fails, and it is not offered here (Ligett et al. likewise apply noise
reduction to output and covariance perturbation only).

Neighbouring relation and sensitivities: **replace-one** on the whole
dataset, training and validation records together, split by a public random
permutation. A training record moves the minimiser by ``Delta_2 = 2L/(n_train
lambda) + 2 tol / lambda`` (:func:`~privml.linear._sensitivity.erm_sensitivity`);
a validation record moves an accuracy by ``1 / n_val``; the excess risk has
sensitivity ``4 L R / n + tol^2 / (2 lambda)`` (the solver's optimum slack; :mod:`privml.selection._queries`).

What a search published and what it cost
(:class:`~privml.selection.SelectionResult`,
:class:`~privml.selection.SelectionStep`) is recorded by
:mod:`privml.selection._accuracy_first_result`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

import numpy as np

from privml._params import keep_params
from privml._random import RandomState, check_random_state
from privml._validation import (
    MAX_SEARCH_STEPS,
    check_count,
    check_delta,
    check_epsilon,
    check_finite,
    check_finite_array,
    check_positive,
    check_probability,
)
from privml.exceptions import PrivmlWarning
from privml.guarantee import PrivacyGuarantee
from privml.linear._base import PrivateLinearClassifier, make_loss
from privml.linear._output_perturbation import AUTO_SCORE_NOISE
from privml.linear._sensitivity import auto_l2, erm_sensitivity, rms_noise_multiplier
from privml.linear._solvers import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    check_l2_setting,
    check_solver_settings,
    minimise_objective,
)
from privml.losses import RegularisedObjective
from privml.neighbouring import Neighbouring
from privml.selection._accuracy_first_result import SelectionResult, SelectionStep
from privml.selection._doubling import DOUBLING_NOISES, doubling_grid, independent_releases
from privml.selection._ex_post import independent_prefix_costs, noise_reduction_prefix_costs
from privml.selection._interactive_above_threshold import InteractiveAboveThreshold, Release
from privml.selection._noise_reduction import (
    NoiseReductionChain,
    check_epsilon_grid,
    gaussian_noise_reduction,
    laplace_noise_reduction,
)
from privml.selection._queries import (
    accuracy_query,
    error_rate_sensitivity,
    excess_risk_query,
    excess_risk_sensitivity,
    minimiser_radius,
    project_to_ball,
)

__all__ = [
    "AccuracyFirstClassifier",
    "AccuracyFirstWarning",
    "SEARCHES",
    "epsilon_grid",
    "noise_reduction_releases",
    "reference_epsilon",
    "select_output_perturbation",
]

Search = Literal["noise-reduction", "doubling"]
Metric = Literal["error", "excess_risk"]
SEARCHES: tuple[str, ...] = ("noise-reduction", "doubling")
METRICS: tuple[str, ...] = ("error", "excess_risk")


#: default ``n_steps`` (levels of the noise-reduction grid)
DEFAULT_N_STEPS = 40


def epsilon_grid(epsilon_min: float, epsilon_max: float, n_steps: int) -> tuple[float, ...]:
    """``n_steps`` levels spaced geometrically from ``epsilon_min`` to ``epsilon_max``.

    A finer grid costs nothing with noise reduction (only the level reached is
    paid), and AboveThreshold's cost does not grow with the number of checks.

    Examples
    --------
    >>> epsilon_grid(0.1, 10.0, 3)
    (0.1, 1.0, 10.0)
    """
    low = check_epsilon(epsilon_min, "epsilon_min")
    high = check_epsilon(epsilon_max, "epsilon_max")
    n_steps = check_count(n_steps, "n_steps", maximum=MAX_SEARCH_STEPS)  # a grid of 10**9 levels: memory, not a search
    if n_steps == 1:
        if low != high:
            raise ValueError(f"n_steps=1 needs epsilon_min == epsilon_max, got {low!r} and {high!r}")
        return (low,)
    if not high > low:
        raise ValueError(f"epsilon_max must be > epsilon_min, got {high!r} <= {low!r}")
    grid = np.geomspace(low, high, n_steps)
    grid[0], grid[-1] = low, high  # exact end points despite rounding
    return tuple(float(e) for e in grid)


def reference_epsilon(epsilon_min: float, epsilon_max: float) -> float:
    """The level ``eps_min^(1/4) eps_max^(3/4)`` at which ``l2="auto"`` sets lambda.

    The search shares one minimiser, hence one lambda, across all levels; the
    lambda that suits a level underfits at higher ones and is too noisy at
    lower ones. Three quarters of the way up the (log) range kept moderate
    targets reachable on Adult and digits, where the midpoint (lambda 0.13 on
    digits) could not reach 70% accuracy at any level and ``eps_max`` needed
    several times more epsilon than necessary. A heuristic on public
    quantities: pass ``l2`` when you know better.
    """
    return float(epsilon_min**0.25 * epsilon_max**0.75)


def noise_reduction_releases(chain: NoiseReductionChain) -> Iterator[Release]:
    """The chain's elements in order, each with its prefix cost ``(eps_t, delta)``."""
    costs = noise_reduction_prefix_costs(chain.epsilons, chain.delta)
    for value, (eps, delta) in zip(chain, costs):
        yield Release(value, prefix_epsilon=eps, prefix_delta=delta)


def _noise_name(search: str, delta: float, doubling_noise: str = "best") -> str:
    if search == "noise-reduction" or doubling_noise == "chain":
        return "gaussian" if delta > 0 else "laplace"
    return "gaussian" if delta > 0 else "l2-laplace"


def select_output_perturbation(
    minimiser: np.ndarray,
    *,
    sensitivity: float,
    query: Callable[[np.ndarray], float],
    query_sensitivity: float,
    threshold: float,
    epsilons: Sequence[float],
    at_epsilon: float,
    delta: float = 0.0,
    search: Search = "noise-reduction",
    doubling_noise: str = "best",
    post_process: Callable[[np.ndarray], np.ndarray] | None = None,
    metric: str = "custom",
    target: float = math.nan,
    random_state: RandomState = None,
) -> SelectionResult:
    """Run one Accuracy First search over output perturbation of a given minimiser.

    The building block of :class:`AccuracyFirstClassifier`, exposed so that
    experiments can reuse one (deterministic) minimiser across trials.

    Parameters
    ----------
    minimiser : ndarray
        The exact regularised ERM minimiser ``w*`` of the training records.
    sensitivity : float
        L2 sensitivity ``Delta_2`` of ``w*`` (replace-one; ``erm_sensitivity``).
    query : callable
        ``published model -> check value`` (higher is better), sensitivity ``query_sensitivity``.
    query_sensitivity : float
        Replace-one sensitivity of ``query`` for every fixed model.
    threshold : float
        The check passes when the noisy value clears the noisy threshold.
    epsilons : sequence of float
        Strictly increasing levels (:func:`epsilon_grid`, or ``doubling_grid``
        for the doubling search).
    at_epsilon : float
        Budget of the check.
    delta : float, default 0
        0 for pure DP; else the delta of every level.
    search : {"noise-reduction", "doubling"}
    doubling_noise : {"best", "chain"}, default "best"
        The doubling search's mechanism (:mod:`privml.selection._doubling`):
        the best single release, or the chain's own (the paper's like-for-like
        baseline; differs only for ``delta = 0``). Ignored by noise reduction.
    post_process : callable, optional
        Data-independent map applied to each model before it is checked and
        published (e.g. :func:`~privml.selection._queries.project_to_ball`).
    metric, target : str, float
        Recorded in the result.
    random_state : None, int or numpy Generator

    Returns
    -------
    SelectionResult

    Notes
    -----
    Privacy: ``(at_epsilon + eps_t, delta)``-ex-post DP under replace-one
    neighbours when stopping at level ``t`` (noise reduction), resp.
    ``(at_epsilon + sum_{s<=t} eps_s, t delta)`` (doubling); the noise-reduction
    theorem and the ex-post AboveThreshold theorem (Ligett et al. 2017, slides'
    Algorithm 2) are stated in :mod:`privml.selection._noise_reduction` and
    :mod:`privml.selection._interactive_above_threshold`. All arguments are
    validated before any noise is drawn.
    """
    # long-function: a long numpy-style docstring (parameters, guarantee, references) and code that is argument
    # checks, the choice of release chain and the AboveThreshold run.
    w = check_finite_array(minimiser, "minimiser")
    sensitivity = check_positive(sensitivity, "sensitivity")
    query_sensitivity = check_positive(query_sensitivity, "query_sensitivity")
    threshold = check_finite(threshold, "threshold")
    grid = check_epsilon_grid(epsilons)
    at_epsilon = check_epsilon(at_epsilon, "at_epsilon")
    delta = check_delta(delta)
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {search!r}")
    if doubling_noise not in DOUBLING_NOISES:
        raise ValueError(f"doubling_noise must be one of {DOUBLING_NOISES}, got {doubling_noise!r}")
    rng = check_random_state(random_state)

    releases: Iterable[Release]
    if search == "noise-reduction":
        if delta > 0:
            chain = gaussian_noise_reduction(w, epsilons=grid, delta=delta, sensitivity=sensitivity, random_state=rng)
        else:
            # Laplace needs the L1 sensitivity: ||z||_1 <= sqrt(d) ||z||_2.
            chain = laplace_noise_reduction(
                w, epsilons=grid, sensitivity=math.sqrt(w.size) * sensitivity, random_state=rng
            )
        releases = noise_reduction_releases(chain)
    else:
        releases = independent_releases(w, epsilons=grid, sensitivity=sensitivity, delta=delta, rng=rng,
                                        noise=doubling_noise)
    if post_process is not None:
        releases = (Release(post_process(r.candidate), r.prefix_epsilon, r.prefix_delta) for r in releases)

    iat = InteractiveAboveThreshold(
        epsilon=at_epsilon, threshold=threshold, sensitivity=query_sensitivity, random_state=rng
    )
    outcome = iat.run(releases, query)
    steps = tuple(
        SelectionStep(
            s.index, grid[s.index], at_epsilon + s.prefix_epsilon, s.prefix_delta, s.passed, s.nonprivate_value
        )
        for s in outcome.steps
    )
    released = tuple(np.array(r) for r in outcome.released)
    return SelectionResult(
        weights=released[-1],
        released=released,
        stopped_at=outcome.stopped_at,
        guarantee=outcome.cost.guarantee,
        cost=outcome.cost,
        search=search,
        noise=_noise_name(search, delta, doubling_noise),
        metric=metric,
        target=float(target),
        threshold=threshold,
        query_sensitivity=query_sensitivity,
        at_epsilon=at_epsilon,
        grid=grid,
        steps=steps,
    )


class AccuracyFirstWarning(PrivmlWarning):
    """No model met the target: the least private one was returned, and every level was paid for."""


class AccuracyFirstClassifier(PrivateLinearClassifier):
    """The most private output-perturbation classifier that meets a target (Ligett et al. 2017).

    Parameters
    ----------
    target : float
        ``metric="error"``: the largest acceptable validation error, in (0, 1).
        ``metric="excess_risk"``: the largest acceptable ``J(w) - min J`` on
        the training records, > 0.
    metric : {"error", "excess_risk"}, default "error"
    search : {"noise-reduction", "doubling"}, default "noise-reduction"
    epsilon_min, epsilon_max : float, default 0.01, 10
        The range searched.
    n_steps : int, default 40
        Levels of the noise-reduction grid (geometric); doubling uses
        ``epsilon_min * 2^k <= epsilon_max``.
    at_epsilon : float, default 0.1
        Budget of the private check. Its noise is ``Lap(4 Delta / at_epsilon)``
        on a check of sensitivity ``Delta``: ``1/n_val`` for the error, which
        makes 0.1 ample for thousands of validation records; ``4LR/n`` for the
        excess risk, which usually needs more.
    delta : float, default 0
        0: pure ex-post DP (Laplace chain / L2-Laplace doubling). In (0, 1):
        Gaussian releases at this delta (recommended beyond a few tens of
        parameters; see :mod:`privml.selection._noise_reduction`).
    margin : float, default 0
        Makes the threshold stricter by ``margin`` (in accuracy, or in excess
        risk), trading privacy for the chance that a passing model truly meets
        the target despite the check's noise. Each check adds
        ``Lap(4 Delta / at_epsilon)``, and a fine grid checks many nearly equal
        models near the threshold, so one of them can pass on noise alone. On
        Adult (benchmarks/accuracy_first.py, 6512 validation records,
        at_epsilon 0.1) 70-95% of the searches published a model truly within
        the target (on test data) with margin 0, 80-100% with one noise scale
        ``4 / (n_val at_epsilon)``, at a few to 50 percent more epsilon.
    l2 : "auto" or float, default "auto"
        ``lambda``, one value for the whole search (the minimiser is shared).
        ``"auto"``: output perturbation's rule (:func:`~privml.linear._sensitivity.auto_l2`
        at :data:`~privml.linear._output_perturbation.AUTO_SCORE_NOISE`) at
        :func:`reference_epsilon` of ``(epsilon_min, epsilon_max)`` (public quantities only).
    loss, huber_width, classes, tol, max_iter
        As :class:`~privml.linear.OutputPerturbationClassifier`.
    validation_fraction : float, default 0.2
        ``metric="error"``: share of the records held out, by a public random
        permutation, for the check (the rest trains). Unused for the excess risk.
    random_state : None, int or numpy Generator

    Attributes
    ----------
    privacy_ : PrivacyGuarantee
        The **ex-post** guarantee of this fit (accountant ``"ex-post"``).
    selection_ : SelectionResult
        Stopped level, trace, all published models. Each step's
        ``nonprivate_value`` (the exact validation score) is in memory only:
        :meth:`~privml.selection.SelectionResult.trace` leaves it out unless asked.
    fit_info_ : dict
        ``l2``, ``sensitivity``, ``query_sensitivity``, ``n_train``, ``n_val``,
        ``met_target``, ``stopped_at`` (DP: where AboveThreshold stopped).
    nonprivate_diagnostics_ : dict
        ``grad_norm``, ``iterations`` of the non-private solve (never saved).

    Notes
    -----
    Neighbouring relation: **replace-one** over all records passed to ``fit``.
    Sensitivities: ``Delta_2 = 2L/(n_train lambda) + 2 tol/lambda`` for the
    minimiser (CMS11 Cor. 8), ``1/n_val`` for the validation accuracy,
    ``4 L R / n + tol^2 / (2 lambda)`` for the excess risk (:mod:`privml.selection._queries`).
    Theorems: noise reduction (Koufogiannis, Han and Pappas 2017, as used by
    Ligett et al. 2017) and the ex-post AboveThreshold theorem (Ligett et al.
    2017, slides' Algorithm 2; Dwork and Roth 2014, Alg. 1, Thm 3.23). The
    guarantee is ex-post: it depends on where the search stopped, and is
    ``eps_AT + eps_max`` (noise reduction) at worst. If no model passes, the
    last one is returned with an :class:`AccuracyFirstWarning`.

    Examples
    --------
    >>> from privml.data import load_dataset
    >>> data = load_dataset("breast_cancer", bias=True, random_state=0)
    >>> model = AccuracyFirstClassifier(target=0.2, at_epsilon=0.5, classes=[0, 1], random_state=0)
    >>> model = model.fit(data.X_train, data.y_train)
    >>> model.privacy_.accountant, model.selection_.met_target
    ('ex-post', True)
    """

    method = "accuracy-first"
    released_info = frozenset({"l2", "l2_rule", "sensitivity", "noise", "query_sensitivity", "threshold", "n_train",
                               "n_val", "met_target", "stopped_at"})

    def __init__(
        self,
        *,
        target: float,
        metric: Metric = "error",
        search: Search = "noise-reduction",
        epsilon_min: float = 0.01,
        epsilon_max: float = 10.0,
        n_steps: int = DEFAULT_N_STEPS,
        at_epsilon: float = 0.1,
        delta: float = 0.0,
        margin: float = 0.0,
        l2: float | Literal["auto"] = "auto",
        loss: str = "logistic",
        huber_width: float = 0.5,
        classes: Any = None,
        validation_fraction: float = 0.2,
        random_state: RandomState = None,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
    ) -> None:
        keep_params(self, locals())

    # ------------------------------------------------------------ validation
    def _grid(self) -> tuple[float, ...]:
        if self.search == "doubling":
            # As `privml select` refuses --steps with --search doubling: a set grid size would be ignored.
            if self.n_steps != DEFAULT_N_STEPS:
                raise ValueError("n_steps sets the noise-reduction grid; search='doubling' doubles epsilon and has "
                                 f"no grid: leave n_steps at its default {DEFAULT_N_STEPS}")
            return doubling_grid(self.epsilon_min, self.epsilon_max)
        return epsilon_grid(self.epsilon_min, self.epsilon_max, self.n_steps)

    def _check_hyperparameters(self) -> tuple[float, float]:
        # Runs first in fit: every hyper-parameter is checked before the data and the noise.
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.search not in SEARCHES:
            raise ValueError(f"search must be one of {SEARCHES}, got {self.search!r}")
        target = check_positive(self.target, "target")
        if self.metric == "error" and not target < 1:
            raise ValueError(f"target (a maximal error rate) must be in (0, 1), got {target!r}")
        margin = check_positive(self.margin, "margin", allow_zero=True)
        if margin >= target:
            raise ValueError(f"margin must be < target, got margin={margin!r}, target={target!r}")
        grid = self._grid()
        if not math.isfinite(4.0 / check_epsilon(self.at_epsilon, "at_epsilon")):
            raise ValueError(f"at_epsilon={self.at_epsilon!r} is too small: the check's noise scale overflows")
        delta = check_delta(self.delta)
        fraction = check_probability(self.validation_fraction, "validation_fraction")
        if not fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {fraction!r}")
        check_l2_setting(self.l2)
        check_solver_settings(self.tol, self.max_iter)
        return grid[-1], delta

    def _split(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.metric == "excess_risk":
            return np.arange(n), np.arange(0)
        n_val = int(round(self.validation_fraction * n))
        if not 1 <= n_val < n:
            raise ValueError(f"validation_fraction={self.validation_fraction!r} of {n} records leaves an empty part")
        # A permutation of indices only: public randomness, independent of the records.
        order = rng.permutation(n)
        return np.sort(order[n_val:]), np.sort(order[:n_val])

    def _planned_guarantee(self, n: int) -> PrivacyGuarantee:
        """The ex-post guarantee's worst case: AboveThreshold's at_epsilon plus the whole grid's cost."""
        _, delta = self._check_hyperparameters()
        grid = self._grid()
        costs = independent_prefix_costs(grid, delta) if self.search == "doubling" else \
            noise_reduction_prefix_costs(grid, delta)
        epsilon, delta = costs[-1]
        return PrivacyGuarantee(float(self.at_epsilon) + epsilon, delta, Neighbouring.REPLACE_ONE, "planned")

    # ------------------------------------------------------------------- fit
    def _fit_private(
        self, X: np.ndarray, y: np.ndarray, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, PrivacyGuarantee, dict]:
        _, delta = self._check_hyperparameters()
        tol, max_iter = check_solver_settings(self.tol, self.max_iter)
        grid = self._grid()
        target, margin = float(self.target), float(self.margin)
        loss = make_loss(n_classes, self.loss, huber_width=self.huber_width)
        train, val = self._split(X.shape[0], rng)
        X_train, y_train = X[train], y[train]
        n_train, d = X_train.shape
        dim = loss.n_parameters(d)
        given = check_l2_setting(self.l2)
        if given is None:
            reference = reference_epsilon(float(self.epsilon_min), float(self.epsilon_max))
            l2 = auto_l2(n_train, loss.lipschitz, rms_noise_multiplier(reference, delta, dim), AUTO_SCORE_NOISE)
        else:
            l2 = given
        objective = RegularisedObjective(loss, X_train, y_train, l2)
        solution = minimise_objective(objective, tol=tol, max_iter=max_iter)
        sensitivity = erm_sensitivity(loss.lipschitz, n_train, l2, grad_tol=tol)

        post_process = None
        if self.metric == "error":
            query = accuracy_query(X[val], y[val])
            query_sensitivity = error_rate_sensitivity(val.size)
            threshold = 1.0 - target + margin
        else:
            radius = minimiser_radius(loss, l2)
            query = excess_risk_query(objective, solution.value, radius)
            query_sensitivity = excess_risk_sensitivity(loss.lipschitz, n_train, radius, grad_tol=tol, l2=l2)
            threshold = -target + margin

            def post_process(w: np.ndarray) -> np.ndarray:
                return project_to_ball(w, radius)

        result = select_output_perturbation(
            solution.weights,
            sensitivity=sensitivity,
            query=query,
            query_sensitivity=query_sensitivity,
            threshold=threshold,
            epsilons=grid,
            at_epsilon=self.at_epsilon,
            delta=delta,
            search=self.search,
            post_process=post_process,
            metric=self.metric,
            target=target,
            random_state=rng,
        )
        if not result.met_target:
            warnings.warn(
                f"no model met the target {self.metric} {target!r} up to epsilon {grid[-1]!r}; the least private "
                f"one is returned and the search cost the whole grid: {result.guarantee}",
                AccuracyFirstWarning,
                stacklevel=3,
            )
        self.selection_ = result
        info = {
            "l2": l2,
            "l2_rule": "auto at epsilon_min^(1/4) epsilon_max^(3/4)" if given is None else "given",
            "sensitivity": sensitivity,
            "noise": result.noise,
            "query_sensitivity": query_sensitivity,
            "threshold": threshold,
            "n_train": n_train,
            "n_val": int(val.size),
            "grad_norm": solution.grad_norm,
            "iterations": solution.iterations,
            "met_target": result.met_target,
            "stopped_at": result.stopped_at,
        }
        return result.weights, result.guarantee, info
