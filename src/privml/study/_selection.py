"""Choosing hyper-parameters (lambda, clip norm, m), leaky or honest.

Three modes (:class:`privml.study.Selection`), recorded with every run:

``validation`` (the paper's protocol)
    Grid search on a validation split carved from the training records;
    the best candidate is refitted on all of them. The choice depends on the
    private data and is **not** privatised: the reported epsilon is that of
    the final fit only and understates the true loss (the paper says so and
    ignores it; privml labels every such result ``leaky``). With
    ``scope = "point"`` the search is made once per point, on a split and
    candidate noise drawn from the study's selection seed, and every repeat
    refits the chosen candidate with its own seed (:class:`PointSelection`;
    the paper's code cross-validates once and then repeats the experiment).
``private`` (honest)
    Liu & Talwar (2019), "Private selection from private candidates",
    random stopping (:class:`privml.selection.RandomStopping`, which states
    the theorem, solves for the per-candidate budget (eps1, delta1) that
    totals the target (epsilon, delta), runs the candidates and returns the
    guarantee). One candidate run Q draws a grid point uniformly, trains on
    the training part with (eps1, delta1) and scores on the validation part,
    releasing ``accuracy + Lap(1 / (n_val eps1))``
    (:class:`privml.mechanisms.LaplaceMechanism`: replace-one changes the
    count of correct validation answers by at most 1). The two parts are a
    data-independent split by index, so under replace-one (and add/remove)
    neighbours a changed record lies in one part only and Q is
    (eps1, delta1)-DP by parallel composition. The released model is the
    chosen candidate itself (trained without the validation part; refitting
    would cost more privacy). Private prediction methods have no candidate
    model to release, so they fall back to the public defaults in this mode,
    and say so.
``public``
    No tuning: each estimator's defaults, computed from public quantities
    only (e.g. ``l2="auto"``). Costs nothing, leaks nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privml.mechanisms import LaplaceMechanism
from privml.neighbouring import Neighbouring
from privml.selection._random_stopping import RandomStopping
from privml.study._methods import Fitted, Method, RunResult
from privml.study._prepare import StudyData
from privml.study._spec_parts import Selection


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


@dataclass(frozen=True)
class PointSelection:
    """Where a ``scope = "point"`` selection comes from.

    Attributes
    ----------
    seed : int
        Seeds the validation split and the candidates (the study's
        :func:`~privml.study._spec.selection_seed`, the same for every repeat).
    key : str
        Content hash of what the search depends on besides the grid: the
        study's run context (data, version, selection settings), the method
        and the point's settings.
    cache : object, optional
        A :class:`~privml.study._cache.StudyCache` (its ``selection`` method)
        that makes each search once across runs and workers; None: the run
        makes it itself, with the same outcome.
    """

    seed: int
    key: str
    cache: Any = None


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


def select_and_run(
    method: Method, data: StudyData, params: dict[str, Any], *, seed: int, selection: Selection,
    point: PointSelection | None = None,
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
    point : PointSelection, optional
        Needed when ``selection.scope`` is ``"point"`` (validation mode).
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
    if mode == "validation" and selection.scope == "point":
        if point is None:
            raise ValueError("selection.scope = 'point' needs the point's selection seed (PointSelection)")
        return _validation_once(method, data, params, grid, seed, point, selection.validation_fraction)
    rng = np.random.default_rng(seed)
    train, val = _split(data.y_train.shape[0], selection.validation_fraction, rng)
    if mode == "validation":
        return _validation(method, data, params, grid, train, val, seed)
    return _private(method, data, params, grid, train, val, _secret_rng(seed, point), selection.stop_probability)


def _secret_rng(seed: int, point: PointSelection | None) -> np.random.Generator:
    """Private selection's randomness: the run's (public) seed with the study's secret key.

    The split may follow the stored seed, but the candidates' draws and
    training noise, the scores' Laplace noise and the stopping coins may
    not: replayed from a stored seed, the noise would turn the stored noisy
    score back into the exact validation score (a review did so).
    """
    cache = None if point is None else point.cache
    key = cache.selection_key() if cache is not None else secrets.token_bytes(32)
    return np.random.default_rng([seed, *np.frombuffer(key, dtype=np.uint32).tolist()])


def _public(
    method: Method, data: StudyData, params: dict[str, Any], seed: int, *, note: str,
    chosen: dict[str, Any] | None = None,
) -> Selected:
    result = method.run(data.X_train, data.y_train, data.X_test, data.y_test,
                        params=params, n_classes=data.n_classes, seed=seed,
                        image_shape=data.image_shape)
    return Selected(result=result, mode="public", chosen=chosen or {}, note=note)


def _search(
    method: Method, data: StudyData, params: dict[str, Any], grid: list[dict[str, Any]],
    train: np.ndarray, val: np.ndarray, seed: int,
) -> tuple[int, list[dict[str, Any]]]:
    """Fit every candidate on ``train``, score it on ``val``: (index of the best, every candidate's score)."""
    candidates: list[dict[str, Any]] = []
    # The two parts are cut once for every candidate (the same arrays each time).
    X_fit, y_fit, X_val, y_val = data.X_train[train], data.y_train[train], data.X_train[val], data.y_train[val]
    for i, candidate in enumerate(grid):
        r = method.run(X_fit, y_fit, X_val, y_val, params={**params, **candidate}, n_classes=data.n_classes,
                       seed=seed + 1 + i, image_shape=data.image_shape)
        candidates.append({"params": candidate, "score": r.accuracy})
    # Ties go to the first candidate: grids are listed from most to least regularised or as given.
    return max(range(len(grid)), key=lambda i: candidates[i]["score"]), candidates


def _validation_once(
    method: Method, data: StudyData, params: dict[str, Any], grid: list[dict[str, Any]], seed: int,
    point: PointSelection, fraction: float,
) -> Selected:
    """``scope = "point"``: the point's search (made once, or read), then this run's own final fit."""

    def search() -> dict[str, Any]:
        train, val = _split(data.y_train.shape[0], fraction, np.random.default_rng(point.seed))
        best, candidates = _search(method, data, params, grid, train, val, point.seed)
        return {"best": best, "candidates": candidates}

    key = hashlib.sha256(json.dumps({"point": point.key, "grid": grid}, sort_keys=True).encode()).hexdigest()
    # Through JSON either way, so a run reads the same outcome whether it made the search or a cache did.
    outcome = point.cache.selection(key, search) if point.cache is not None else json.loads(json.dumps(search()))
    best = int(outcome["best"])
    result = method.run(data.X_train, data.y_train, data.X_test, data.y_test,
                        params={**params, **grid[best]}, n_classes=data.n_classes, seed=seed,
                        image_shape=data.image_shape)
    return Selected(result=result, mode="validation", chosen=grid[best], candidates=outcome["candidates"],
                    leaky=True, note="grid search on a validation split, once for every repeat of this point "
                                     "(as the paper's code); the choice is not privatised")


def _validation(
    method: Method, data: StudyData, params: dict[str, Any], grid: list[dict[str, Any]],
    train: np.ndarray, val: np.ndarray, seed: int,
) -> Selected:
    best, candidates = _search(method, data, params, grid, train, val, seed)
    result = method.run(data.X_train, data.y_train, data.X_test, data.y_test,
                        params={**params, **grid[best]}, n_classes=data.n_classes, seed=seed,
                        image_shape=data.image_shape)
    return Selected(result=result, mode="validation", chosen=grid[best], candidates=candidates, leaky=True,
                    note="grid search on a validation split; the choice is not privatised (as in the paper)")


def _private(
    method: Method, data: StudyData, params: dict[str, Any], grid: list[dict[str, Any]],
    train: np.ndarray, val: np.ndarray, rng: np.random.Generator, gamma: float,
) -> Selected:
    relation = _candidate_relation(method, params)
    # Every parameter is checked here, before any candidate trains.
    selection = RandomStopping(float(params["epsilon"]), float(params["delta"]), stop_probability=gamma,
                               neighbouring=relation)
    eps1, delta1 = selection.candidate_epsilon, selection.candidate_delta
    X_fit, y_fit, X_val, y_val = data.X_train[train], data.y_train[train], data.X_train[val], data.y_train[val]
    # Replace-one changes the count of correct validation answers by at most 1.
    score_sensitivity = 1.0 / val.size

    def candidate(rng: np.random.Generator) -> tuple[float, tuple[dict[str, Any], Fitted]]:
        chosen = grid[int(rng.integers(len(grid)))]
        fitted = method.fit(X_fit, y_fit, params={**params, **chosen, "epsilon": eps1, "delta": delta1},
                            n_classes=data.n_classes, seed=int(rng.integers(2**31)), image_shape=data.image_shape)
        if fitted.info.get("neighbouring") != relation.value:
            raise RuntimeError(f"{method.name} trained under {fitted.info.get('neighbouring')} neighbours, "
                               f"but its private selection is stated under {relation.value}")
        accuracy, _ = method.evaluate(fitted, X_val, y_val)
        noisy = LaplaceMechanism(epsilon=eps1, sensitivity=score_sensitivity, neighbouring=relation,
                                 random_state=rng).randomise(accuracy)
        return float(noisy), (chosen, fitted)

    outcome = selection.run(candidate, rng)
    chosen, fitted = outcome.output
    # Random stopping releases the best candidate (and its noisy score) only: the
    # others' scores are outside the theorem, so they never reach the study store.
    # Nor does the number of runs: it depends on the coins alone, but the theorem's
    # bound holds for the best of a hidden number of runs (the best of a known t costs t eps1).
    # So neither does the time they took: the stored training time is the released candidate's own (their
    # sum grew with the number of runs, about t times one fit's time for same-sized candidates: a review).
    candidates = [{"params": chosen, "score": outcome.score}]
    accuracy, predict_seconds = method.evaluate(fitted, data.X_test, data.y_test)
    guarantee = outcome.privacy
    result = RunResult(accuracy=accuracy, epsilon=guarantee.epsilon, delta=guarantee.delta,
                       train_seconds=fitted.train_seconds, predict_seconds=predict_seconds,
                       info={**fitted.info, "candidate_epsilon": eps1, "candidate_delta": delta1})
    return Selected(result=result, mode="private", chosen=chosen, candidates=candidates,
                    note=f"Liu-Talwar random stopping (gamma = {gamma:g}, candidates at eps1 = {eps1:.4g}, "
                         f"delta1 = {delta1:.3g}); cost charged in epsilon, delta")


def _candidate_relation(method: Method, params: dict[str, Any]) -> Neighbouring:
    """The relation a method's candidates are private under at this point (checked after each fit).

    Methods whose accounting follows the study's relation (``neighbouring``
    in :attr:`Method.uses`, i.e. DP-SGD) are add/remove-one unless the point
    says replace-one; every other private method is analysed under replace-one.
    """
    if "neighbouring" in method.uses and params.get("neighbouring", "replace-one") != "replace-one":
        return Neighbouring.ADD_REMOVE_ONE
    return Neighbouring.REPLACE_ONE


def _split(n: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n_val = min(n - 2, max(1, round(n * fraction)))
    order = rng.permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])
