"""``selection.scope = "point"``: one validation search per point, reused by every repeat, bit for bit."""

from __future__ import annotations

import json

import pytest

from privml.study import ResultStore, plan, run_study, spec_from_dict
from privml.study import _cache as cache_module
from privml.study._methods import get_method
from privml.study._prepare import prepare
from privml.study._scheduling import dispatch_batches, share_group
from privml.study._selection import select_and_run
from privml.study._spec import job_key, selection_seed
from privml.study._spec_parts import Selection

from .conftest import tiny_spec_dict

GRIDS = {"nonprivate": {"l2": [1e-3, 1e-2]}, "output": {"l2": [1e-3, 1e-2]}, "objective": {"l2": [1e-3, 1e-2]},
         "prediction-sensitivity": {"l2": [1e-3, 1e-2]}, "subsample-aggregate": {"m": [4, 8]}}
METHODS = list(GRIDS)
TIMING = ("train_seconds", "predict_seconds", "wall_seconds", "finished")


def point_spec(scope: str = "point", **changes):
    raw = tiny_spec_dict(methods=METHODS, repeats=3,
                         selection={"mode": "validation", "scope": scope, "grids": GRIDS},
                         sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [0.3, 30.0]}])
    raw.update(changes)
    return spec_from_dict(raw)


def stored(outcome) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING}
            for r in ResultStore(outcome.results).records(status=None)}


@pytest.fixture(autouse=True)
def fresh_process_caches():
    cache_module._CACHES.clear()
    yield
    cache_module._CACHES.clear()


def test_point_scope_runs_are_identical_to_runs_that_search_alone(tmp_path):
    spec = point_spec()
    alone = run_study(spec, tmp_path / "alone", progress=False, report=False, cache=False)
    shared = run_study(spec, tmp_path / "shared", jobs=2, progress=False, report=False)
    assert alone.failed == shared.failed == 0
    assert stored(shared) == stored(alone)
    # Each point searched once: one miss per distinct (method, settings), a hit for every other repeat.
    jobs, _ = plan(spec)
    points = {(j.method, json.dumps(j.params, sort_keys=True)) for j in jobs}
    misses = sum(row["selection_misses"] for row in shared.cache)
    hits = sum(row["selection_hits"] for row in shared.cache)
    assert misses == len(points) and hits == len(jobs) - len(points)
    assert len(list((tmp_path / "shared" / "cache" / "selections").glob("*/*.json"))) == len(points)


def test_every_repeat_of_a_point_reports_the_same_search_and_refits_with_its_own_noise(tmp_path):
    outcome = run_study(point_spec(), tmp_path / "s", progress=False, report=False)
    by_point: dict[tuple[str, str], list[dict]] = {}
    for record in ResultStore(outcome.results).records(status=None):
        by_point.setdefault((record["method"], json.dumps(record["params"], sort_keys=True)), []).append(record)
    for (method, _), records in by_point.items():
        assert len(records) == 3
        assert len({json.dumps(r["selection"], sort_keys=True) for r in records}) == 1
        assert "once for every repeat" in records[0]["selection"]["note"]
        if method == "output":  # noisy: the repeats differ by their noise only
            assert len({r["accuracy"] for r in records}) > 1


def test_the_point_search_differs_from_every_repeats_own(tmp_path):
    spec = point_spec()
    repeat_seeds = {j.seed for j in plan(spec)[0]}
    assert selection_seed(spec.seed) not in repeat_seeds


def test_scope_is_validated_and_the_default_leaves_run_keys_as_they_were():
    with pytest.raises(ValueError, match="selection.scope"):
        point_spec(scope="study")
    run_scope = point_spec(scope="run")
    assert "scope" not in run_scope.run_context["selection"]
    point = point_spec()
    assert point.run_context["selection"]["scope"] == "point"
    assert job_key(run_scope, "output", {"epsilon": 1.0}, 1) != job_key(point, "output", {"epsilon": 1.0}, 1)


def test_a_point_scope_selection_needs_its_seed():
    data = prepare("digits", n=400, d=10, k=10, public_size=200, seed=0)
    selection = Selection(mode="validation", scope="point", grids={"output": {"l2": (1e-3, 1e-2)}})
    params = {"epsilon": 1.0, "delta": 0.0, "budget": None, "l2": None, "m": None}
    with pytest.raises(ValueError, match="PointSelection"):
        select_and_run(get_method("output"), data, params, seed=1, selection=selection)


def test_dask_groups_hold_every_run_that_shares_a_search_or_a_minimiser():
    jobs, _ = plan(point_spec())
    batches = dispatch_batches(jobs, grouped=True, scope="point")
    assert sorted(j.key for b in batches for j in b) == sorted(j.key for j in jobs)
    for batch in batches:
        assert len({share_group(j, "point") for j in batch}) == 1
    # Across repeats: every repeat of a point is in its point's group.
    for batch in batches:
        if share_group(batch[0], "point")[0] == "selection":
            assert {j.repeat for j in batch} == {0, 1, 2}
    # Locally, the first run of every group goes before any second one.
    local = [b[0] for b in dispatch_batches(jobs, grouped=False, scope="point")]
    seen: set = set()
    first_follower = None
    for position, job in enumerate(local):
        group = share_group(job, "point")
        if group in seen and first_follower is None:
            first_follower = position
        seen.add(group)
    assert first_follower == len(seen)
