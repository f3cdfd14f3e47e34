"""Choosing hyper-parameters (lambda, clip norm, m), leaky or honest.

Three modes (:class:`privml.study.spec.Selection`), recorded with every run:

``validation`` (the paper's protocol)
    Grid search on a validation split carved from the training records;
    the best candidate is refitted on all of them. The choice depends on the
    private data and is **not** privatised: the reported epsilon is that of
    the final fit only and understates the true loss (the paper says so and
    ignores it; privml labels every such result ``leaky``).
``private`` (honest)
    Liu & Talwar (2019), "Private selection from private candidates",
    random stopping (their Theorem 3.4; Papernot & Steinke 2022 generalise
    it). One candidate run Q draws a grid point uniformly, trains on the
    training part with (eps1, delta1) and scores on the validation part,
    releasing ``accuracy + Lap(1 / (n_val eps1))``. The two parts are a
    data-independent split by index, so under replace-one (and add/remove)
    neighbours a changed record lies in one part only and Q is
    (eps1, delta1)-DP by parallel composition. Q is repeated, keeping the
    best score, and stops after each run with probability gamma. For
    ``delta = 0`` the selection is ``3 eps1``-DP (uncapped); for
    ``delta > 0`` it is capped at ``T = ceil(ln(1/delta2) / gamma)`` runs and
    is ``(3 eps1 + 3 sqrt(2 delta1), sqrt(2 delta1) T / gamma + delta2)``-DP.
    (Statements of the theorem differ on the ``1 / gamma`` in the delta
    term; privml charges the larger form, so the charge is valid under
    either, at the price of a smaller ``delta1``: at epsilon = 1, delta = 1e-5
    and the default gamma = 0.2 (T = 62), delta1 = 1.3e-16 instead of
    3.3e-15, and the candidates' analytic-Gaussian noise grows by 5.8%.)
    privml solves for (eps1, delta1) so the total is the target (eps, delta):
    ``delta2 = delta / 2``, ``sqrt(2 delta1) T / gamma = delta / 2``. The
    released model is the chosen candidate itself (trained without the
    validation part; refitting would cost more privacy). Private prediction
    methods have no candidate model to release, so they fall back to the
    public defaults in this mode, and say so.
``public``
    No tuning: each estimator's defaults, computed from public quantities
    only (e.g. ``l2="auto"``). Costs nothing, leaks nothing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privml.study.methods import Method, RunResult
from privml.study.prepare import StudyData
from privml.study.spec import Selection

#: Refuse a private selection whose per-candidate epsilon would be this small (nothing useful is left).
_MIN_CANDIDATE_EPSILON = 1e-6


@dataclass(frozen=True)
class Selected:
    """A run's test result and how its hyper-parameters were chosen.

    Attributes
    ----------
    result : RunResult
        Accuracy on the test set; ``epsilon``/``delta`` are the **total**
        charged (selection included in ``private`` mode).
    mode : str
        The mode actually used (``public`` when a mode did not apply).
    chosen : dict
        The hyper-parameters of the reported model.
    candidates : list of dict
        ``validation`` mode: every candidate with its exact validation score
        (leaky, as in the paper). ``private`` mode: the chosen candidate and
        its noisy score only, the one release Liu & Talwar's theorem covers;
        the other candidates' noisy scores are never stored.
    leaky : bool
        True when the choice used private data without being charged.
    note : str
    """

    result: RunResult
    mode: str
    chosen: dict[str, Any]
    candidates: list[dict[str, Any]] = field(default_factory=list)
    leaky: bool = False
    note: str = ""


def grid_for(method: Method, params: dict[str, Any], selection: Selection) -> list[dict[str, Any]]:
    """The candidate hyper-parameters for ``method`` at ``params`` (empty: nothing to tune).

    Hyper-parameters the point fixes (a non-None ``l2`` or ``m`` setting) are not tuned.
    """
    grid = dict(selection.grids.get(method.name, method.hyper))
    grid = {name: values for name, values in grid.items() if params.get(name) is None}
    if not grid:
        return []
    names = sorted(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def private_candidate_budget(epsilon: float, delta: float, gamma: float) -> tuple[float, float, int | None]:
    """Per-candidate (eps1, delta1) and cap T for a random-stopping selection totalling (epsilon, delta).

    Liu & Talwar (2019), Theorem 3.4; see the module docstring. ``T`` is
    ``None`` for ``delta = 0`` (uncapped, pure 3 eps1).

    Raises
    ------
    ValueError
        If nothing of epsilon is left for the candidates.
    """
    if delta == 0:
        return epsilon / 3.0, 0.0, None
    delta2 = delta / 2.0
    cap = math.ceil(math.log(1.0 / delta2) / gamma)
    delta1 = (delta / 2.0 * gamma / cap) ** 2 / 2.0
    eps1 = (epsilon - 3.0 * math.sqrt(2.0 * delta1)) / 3.0
    if eps1 < _MIN_CANDIDATE_EPSILON:
        raise ValueError(f"epsilon = {epsilon:g} is too small for a private selection at delta = {delta:g}")
    return eps1, delta1, cap


def select_and_run(
    method: Method, data: StudyData, params: dict[str, Any], *, seed: int, selection: Selection
) -> Selected:
    """Run ``method`` at ``params`` with hyper-parameters chosen by ``selection.mode``.

    Parameters
    ----------
    method : Method
    data : StudyData
        Training records (selection carves its validation split from them) and the test set.
    params : dict
        The point's settings.
    seed : int
        Seeds the validation split, the models' noise and random stopping.
    selection : Selection
    """
    # A hyper-parameter with a one-value grid is simply set (e.g. epochs of a CNN), in every mode.
    fixed = {name: values[0] for name, values in selection.grids.get(method.name, {}).items()
             if len(values) == 1 and params.get(name) is None}
    params = {**params, **fixed}
    grid = grid_for(method, params, selection)
    mode = selection.mode
    if not grid:
        return _public(method, data, params, seed, note="nothing to tune at this point", chosen=fixed)
    if mode == "public":
        return _public(method, data, params, seed, note="public defaults (no tuning)", chosen=fixed)
    if mode == "private" and method.kind == "baseline":
        # The non-private reference has no privacy to charge: tune it on validation data.
        mode = "validation"
    if mode == "private" and method.kind == "prediction":
        return _public(method, data, params, seed,
                       note="private prediction releases no candidate model to select; public defaults")
    rng = np.random.default_rng(seed)
    train, val = _split(data.y_train.shape[0], selection.validation_fraction, rng)
    if mode == "validation":
        return _validation(method, data, params, grid, train, val, seed)
    return _private(method, data, params, grid, train, val, rng, selection.stop_probability)


def _public(
    method: Method, data: StudyData, params: dict[str, Any], seed: int, *, note: str,
    chosen: dict[str, Any] | None = None,
) -> Selected:
    result = method.run(data.X_train, data.y_train, data.X_test, data.y_test,
                        params=params, n_classes=data.n_classes, seed=seed,
                        image_shape=data.image_shape)
    return Selected(result=result, mode="public", chosen=chosen or {}, note=note)


def _validation(
    method: Method, data: StudyData, params: dict[str, Any], grid: list[dict[str, Any]],
    train: np.ndarray, val: np.ndarray, seed: int,
) -> Selected:
    candidates: list[dict[str, Any]] = []
    # The two parts are cut once for every candidate (the same arrays each time).
    X_fit, y_fit, X_val, y_val = data.X_train[train], data.y_train[train], data.X_train[val], data.y_train[val]
    for i, candidate in enumerate(grid):
        r = method.run(X_fit, y_fit, X_val, y_val, params={**params, **candidate}, n_classes=data.n_classes,
                       seed=seed + 1 + i, image_shape=data.image_shape)
        candidates.append({"params": candidate, "score": r.accuracy})
    # Ties go to the first candidate: grids are listed from most to least regularised or as given.
    best = max(range(len(grid)), key=lambda i: candidates[i]["score"])
    result = method.run(data.X_train, data.y_train, data.X_test, data.y_test,
                        params={**params, **grid[best]}, n_classes=data.n_classes, seed=seed,
                        image_shape=data.image_shape)
    return Selected(result=result, mode="validation", chosen=grid[best], candidates=candidates, leaky=True,
                    note="grid search on a validation split; the choice is not privatised (as in the paper)")


def _private(
    method: Method, data: StudyData, params: dict[str, Any], grid: list[dict[str, Any]],
    train: np.ndarray, val: np.ndarray, rng: np.random.Generator, gamma: float,
) -> Selected:
    epsilon, delta = float(params["epsilon"]), float(params["delta"])
    eps1, delta1, cap = private_candidate_budget(epsilon, delta, gamma)
    n_val = val.size
    best: tuple[float, dict[str, Any], Any, int] | None = None
    runs = 0
    train_seconds = 0.0
    while True:
        runs += 1
        candidate = grid[int(rng.integers(len(grid)))]
        fitted = method.fit(data.X_train[train], data.y_train[train], params={**params, **candidate,
                            "epsilon": eps1, "delta": delta1}, n_classes=data.n_classes,
                            seed=int(rng.integers(2**31)), image_shape=data.image_shape)
        train_seconds += fitted.train_seconds
        accuracy, _ = method.evaluate(fitted, data.X_train[val], data.y_train[val])
        # Replace-one changes the count of correct validation answers by at most 1.
        score = accuracy + rng.laplace(scale=1.0 / (n_val * eps1))
        if best is None or score > best[0]:
            best = (float(score), candidate, fitted, runs)
        if rng.random() < gamma or (cap is not None and runs >= cap):
            break
    best_score, chosen, fitted, _ = best
    # Random stopping releases the best candidate (and its noisy score) only: the
    # others' scores are outside the theorem (Liu & Talwar 2019, Thm 3.4), so they
    # are dropped here and never reach the study store. The number of runs depends
    # on the coin flips alone, not on the data.
    candidates = [{"params": chosen, "score": best_score}]
    accuracy, predict_seconds = method.evaluate(fitted, data.X_test, data.y_test)
    total_epsilon = 3.0 * eps1 + 3.0 * math.sqrt(2.0 * delta1)
    total_delta = 0.0 if cap is None else math.sqrt(2.0 * delta1) * cap / gamma + delta / 2.0
    result = RunResult(accuracy=accuracy, epsilon=total_epsilon, delta=total_delta, train_seconds=train_seconds,
                       predict_seconds=predict_seconds,
                       info={**fitted.info, "candidate_epsilon": eps1, "candidate_delta": delta1, "runs": runs})
    return Selected(result=result, mode="private", chosen=chosen, candidates=candidates,
                    note=f"Liu-Talwar random stopping (gamma = {gamma:g}, {runs} candidate runs at "
                         f"eps1 = {eps1:.4g}, delta1 = {delta1:.3g}); cost charged in epsilon, delta")


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n_val = min(n - 2, max(1, round(n * fraction)))
    order = rng.permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])
