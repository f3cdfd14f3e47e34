"""The study's shared cache: results identical bit for bit, resumable, no race between workers, status, progress."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privml.linear._base import make_loss
from privml.linear._solvers import SolverResult, minimise_objective, minimiser_key, sharing_minimisers, solve_nonprivate
from privml.losses import RegularisedObjective
from privml.mechanisms._exponential import ExponentialMechanism
from privml.study import ResultStore, plan, run_study, spec_from_dict
from privml.study import _cache as cache_module
from privml.study._cache import CACHE_DIR, StudyCache
from privml.study._runner import RUNNING_DIR, folder_lock
from privml.study._scheduling import ProgressTracker, dispatch_batches, leading_keys, share_group
from privml.study._status import study_status
from tests.cli_runner import run, run_json

from .conftest import tiny_spec_dict

#: Every method that shares something, validation selection (grids are where the sharing is).
SHARING = ["nonprivate", "output", "objective", "prediction-sensitivity", "subsample-aggregate"]
#: Fields of a run that depend on time, not on the computation.
TIMING = ("train_seconds", "predict_seconds", "wall_seconds", "finished")


def sharing_spec(**changes):
    raw = tiny_spec_dict(methods=SHARING, repeats=1, selection={"mode": "validation", "grids": {
        "output": {"l2": [1e-3, 1e-2]}, "objective": {"l2": [1e-3, 1e-2]},
        "prediction-sensitivity": {"l2": [1e-3, 1e-2]}, "subsample-aggregate": {"m": [4, 8]}}})
    raw.update(changes)
    return spec_from_dict(raw)


def stored(outcome, *, ignore: tuple[str, ...] = ()) -> dict[str, dict]:
    """Every stored field of every run, timings (and ``ignore``) left out, by key."""
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING + ignore}
            for r in ResultStore(outcome.results).records(status=None)}


def cache_files(out: Path) -> list[Path]:
    return sorted((out / CACHE_DIR / "minimisers").glob("*/*.npz"))


@pytest.fixture(autouse=True)
def fresh_process_caches():
    """Each test starts as a new process would: no minimiser in memory."""
    cache_module._CACHES.clear()
    yield
    cache_module._CACHES.clear()


def totals(outcome) -> dict[str, float]:
    out = {"hits": 0, "misses": 0}
    for row in outcome.cache:
        out["hits"] += row["hits"]
        out["misses"] += row["misses"]
    return out


def test_cached_runs_are_identical_bit_for_bit_to_runs_computed_alone(tmp_path):
    spec = sharing_spec()
    alone = run_study(spec, tmp_path / "alone", progress=False, report=False, cache=False)
    shared = run_study(spec, tmp_path / "shared", progress=False, report=False)
    assert alone.failed == shared.failed == 0 and alone.cache == [] and not (tmp_path / "alone" / CACHE_DIR).exists()
    assert stored(shared) == stored(alone)
    # The cache did its job: most lookups hit, and every method that shares reports its numbers.
    t = totals(shared)
    assert t["hits"] > t["misses"] > 0
    by_method = {row["method"]: row for row in shared.cache}
    for method in ("output", "prediction-sensitivity", "subsample-aggregate"):
        assert by_method[method]["hits"] > 0 and by_method[method]["seconds_saved"] > 0
    # Objective perturbation solves a perturbed objective: nothing to share, nothing looked up.
    assert by_method.get("objective", {"hits": 0, "misses": 0})["hits"] == 0
    # Every miss wrote one entry: no key was computed twice.
    assert len(cache_files(tmp_path / "shared")) == t["misses"]


def test_the_cache_survives_a_resume_and_reuses_what_an_interrupted_study_wrote(tmp_path):
    spec = sharing_spec()
    reference = stored(run_study(spec, tmp_path / "reference", progress=False, report=False, cache=False))
    out = tmp_path / "study"
    part = spec.with_overrides(sweeps=[s for s in spec.to_dict()["sweeps"] if s["name"] == "epsilon"])
    first = run_study(part, out, progress=False, report=False)
    entries = len(cache_files(out))
    assert entries == totals(first)["misses"] > 0
    # An interruption leaves a temporary file and may leave a damaged entry: both are ignored.
    damaged = cache_files(out)[0]
    damaged.write_bytes(b"not an npz file")
    (damaged.parent / f".{damaged.name}.123.dead.tmp").write_bytes(b"partial")
    cache_module._CACHES.clear()  # a new process: nothing in memory, only the folder
    rest = run_study(spec, out, progress=False, report=False)
    assert rest.skipped == first.finished and rest.failed == 0
    # The resumed study reused the first one's entries (it recomputed the damaged one only).
    assert totals(rest)["hits"] > 0
    fresh = totals(run_study(spec, tmp_path / "fresh", progress=False, report=False))
    assert totals(rest)["misses"] < fresh["misses"]
    # The runs of the first part carry its spec's hash; everything else is the same.
    assert stored(rest, ignore=("spec_hash",)) == {k: {f: v for f, v in r.items() if f != "spec_hash"}
                                                  for k, r in reference.items()}


def test_two_workers_compute_each_shared_minimiser_once_and_agree_with_one(tmp_path):
    spec = sharing_spec(sweeps=[{"name": "budget", "parameter": "budget", "values": [1, 10, 100, 1000]},
                                {"name": "epsilon", "parameter": "epsilon", "values": [0.3, 3.0]}])
    serial = run_study(spec, tmp_path / "serial", jobs=1, progress=False, report=False)
    parallel = run_study(spec, tmp_path / "parallel", jobs=2, progress=False, report=False)
    assert parallel.executor == "joblib, 2 workers" and parallel.failed == 0
    assert stored(parallel) == stored(serial)
    # Workers take a lock per key: a key one worker computes, the other waits for and reads.
    assert totals(parallel)["misses"] == len(cache_files(tmp_path / "parallel")) == totals(serial)["misses"]


def test_a_dask_cluster_gets_each_sharing_group_as_one_task(tmp_path):
    spec = sharing_spec()
    jobs, _ = plan(spec)
    batches = dispatch_batches(jobs, grouped=True)
    assert sorted(j.key for b in batches for j in b) == sorted(j.key for j in jobs)
    for batch in batches:
        groups = {share_group(j) for j in batch}
        assert len(groups) == 1
        if None in groups:
            assert len(batch) == 1
    # Locally every job is its own batch; the first run of each sharing group goes first.
    local = dispatch_batches(jobs, grouped=False)
    assert all(len(b) == 1 for b in local)
    order = [b[0] for b in local]
    leaders = {}
    for position, job in enumerate(order):
        group = share_group(job)
        if group is not None:
            leaders.setdefault(group, position)
    assert max(leaders.values()) < len(leaders)


def test_dask_executor_shares_within_a_group(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = sharing_spec()
    reference = stored(run_study(spec, tmp_path / "reference", progress=False, report=False, cache=False))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        outcome = run_study(spec, tmp_path / "dask", executor=address, progress=False, report=False)
    assert stored(outcome) == reference and totals(outcome)["hits"] > 0


def objective_of(seed: int = 0, n: int = 60) -> RegularisedObjective:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return RegularisedObjective(make_loss(3), X, rng.integers(0, 3, size=n), 0.01)


class PlantedCache:
    """A cache that returns one planted result for every key (what a mismatched entry would be)."""

    def __init__(self, planted: SolverResult) -> None:
        self.planted, self.computed = planted, 0

    def minimiser(self, key, compute, accept):
        if accept(self.planted):
            return self.planted
        self.computed += 1
        return compute()


def test_a_minimiser_of_other_data_is_never_used():
    objective, other = objective_of(0), objective_of(1)
    wrong = minimise_objective(other)
    planted = PlantedCache(wrong)
    with sharing_minimisers(planted):
        result = solve_nonprivate(objective, tol=1e-10, max_iter=1000)
    assert planted.computed == 1
    np.testing.assert_array_equal(result.weights, minimise_objective(objective).weights)
    # Its own minimiser is accepted as it is.
    right = PlantedCache(minimise_objective(objective))
    with sharing_minimisers(right):
        solve_nonprivate(objective, tol=1e-10, max_iter=1000)
    assert right.computed == 0


def test_minimiser_key_changes_with_every_input_it_depends_on():
    base = objective_of(0)
    key = minimiser_key(base, 1e-10, 1000)
    assert key == minimiser_key(objective_of(0), 1e-10, 1000)
    X2 = base.X.copy()
    X2[0, 0] = np.nextafter(X2[0, 0], 1.0)
    y2 = base.y.copy()
    y2[0] = (y2[0] + 1) % 3
    variants = [
        RegularisedObjective(base.loss, X2, base.y, 0.01),
        RegularisedObjective(base.loss, base.X, y2, 0.01),
        RegularisedObjective(base.loss, base.X, base.y, np.nextafter(0.01, 1.0)),
        RegularisedObjective(make_loss(4), base.X, base.y, 0.01),
    ]
    keys = {minimiser_key(v, 1e-10, 1000) for v in variants}
    keys |= {minimiser_key(base, 1e-9, 1000), minimiser_key(base, 1e-10, 999)}
    assert key not in keys and len(keys) == 6
    with pytest.raises(ValueError, match="non-private"):
        minimiser_key(RegularisedObjective(base.loss, base.X, base.y, 0.01, extra_l2=0.1), 1e-10, 1000)


def test_cache_entries_are_npz_without_pickles_and_written_atomically(tmp_path):
    cache = StudyCache(tmp_path)
    objective = objective_of(0)
    with sharing_minimisers(cache):
        first = solve_nonprivate(objective, tol=1e-10, max_iter=1000)
    (entry,) = list((tmp_path / "minimisers").glob("*/*.npz"))
    assert not list(tmp_path.rglob("*.tmp"))
    with np.load(entry, allow_pickle=False) as data:  # raises on any object array
        assert str(data["key"]) == entry.stem == minimiser_key(objective, 1e-10, 1000)
        np.testing.assert_array_equal(data["weights"], first.weights)
    other = StudyCache(tmp_path)  # another process: reads the folder
    with sharing_minimisers(other):
        again = solve_nonprivate(objective, tol=1e-10, max_iter=1000)
    assert other.take_stats()["hits"] == 1
    np.testing.assert_array_equal(again.weights, first.weights)
    assert (again.value, again.grad_norm, again.iterations) == (first.value, first.grad_norm, first.iterations)


def test_vectorised_vote_draws_exactly_what_row_by_row_selection_draws():
    votes = np.random.default_rng(3).integers(0, 30, size=(400, 10))
    one = ExponentialMechanism(epsilon=0.7, random_state=np.random.default_rng(9))
    rows = np.array([one.select(row) for row in votes])
    many = ExponentialMechanism(epsilon=0.7, random_state=np.random.default_rng(9))
    np.testing.assert_array_equal(many.select_rows(votes), rows)
    assert one._rng.random() == many._rng.random()  # the generators are left in the same state


def test_progress_eta_learns_from_finished_runs():
    spec = sharing_spec()
    jobs, _ = plan(spec)
    tracker = ProgressTracker(spec, jobs, workers=2)
    assert tracker.eta_seconds() is None
    by_method = {}
    for job in jobs:
        by_method.setdefault(job.method, []).append(job)
    slow, fast = by_method["subsample-aggregate"][0], by_method["output"][0]
    tracker.finish({"key": slow.key, "method": slow.method, "wall_seconds": 10.0, "status": "ok"})
    first = tracker.eta_seconds()
    assert first == pytest.approx(10.0 * (len(jobs) - 1) / 2)
    tracker.finish({"key": fast.key, "method": fast.method, "wall_seconds": 2.0, "status": "ok"})
    left = {m: len(js) - (m in ("subsample-aggregate", "output")) for m, js in by_method.items()}
    expected = (left["subsample-aggregate"] * 10 + left["output"] * 2
                + sum(n for m, n in left.items() if m not in ("subsample-aggregate", "output")) * 6) / 2
    assert tracker.eta_seconds() == pytest.approx(expected)
    assert "eta" in tracker.postfix({"method": "output", "status": "ok"})


def test_status_counts_done_failed_running_and_left_per_sweep(capsys, tmp_path):
    spec = sharing_spec(methods=["output", "prediction-sensitivity"], selection="public")
    out = tmp_path / "study"
    part = spec.with_overrides(sweeps=[s for s in spec.to_dict()["sweeps"] if s["name"] == "budget"])
    run_study(part, out, progress=False, report=False)
    # A failing run: n too large for the data (stored with its error).
    bad = spec.with_overrides(defaults={**spec.defaults, "n": 100_000},
                              sweeps=[spec.to_dict()["sweeps"][0]])
    run_study(bad, out, progress=False, report=False, check_data=False)  # the data check would refuse it up front
    store = ResultStore(out / "results.sqlite")
    store.save_spec(spec.spec_hash, spec.to_dict(), "9999")  # the full study is the one asked about
    status = study_status(out)
    assert status["spec_hash"] == spec.spec_hash and not status["active"]
    sweeps = {s["sweep"]: s for s in status["sweeps"]}
    # budget: output once (B does not matter), prediction sensitivity at B = 1 and 1000: all done.
    assert sweeps["budget"]["total"] == {"done": 3, "failed": 0, "running": 0, "left": 0}
    # epsilon 0.3 and 30: everything left except the B = 10 point... which is not in the budget sweep.
    assert sweeps["epsilon"]["total"]["done"] == 0 and sweeps["epsilon"]["total"]["left"] == 4
    assert status["total"]["done"] == 3 and status["run_seconds_left"] > 0
    # The failed runs of the other spec are not runs of this one.
    assert status["total"]["failed"] == 0
    # While a study holds the folder, its workers' markers count as running.
    key = next(j.key for j in plan(spec)[0] if j.method == "output" and j.params["epsilon"] == 0.3)
    (out / RUNNING_DIR / key).touch()
    assert study_status(out)["total"]["running"] == 0  # nobody holds the lock: a stale marker
    with folder_lock(out):
        live = study_status(out)
    assert live["active"] and live["total"]["running"] == 1
    assert live["methods"]["output"]["running"] == 1
    text = run(capsys, "study", "status", str(out))[1]
    assert "sweep budget" in text and "3 done, 0 running, 0 failed, 0 left" in text
    r = run_json(capsys, "study", "status", str(out / "results.sqlite"))
    assert r["total"]["left"] == 4 and r["sweeps"][0]["sweep"] == "epsilon"
    # Failed runs of this study count as failed, with their error.
    failing = study_status(out, spec_hash=bad.spec_hash)
    assert failing["total"] == {"done": 0, "failed": 4, "running": 0, "left": 0}
    assert "n = 100000" in failing["errors"][0]["error"]
    code, _, err = run(capsys, "study", "status", str(tmp_path / "nothing"))
    assert code == 2 and "does not exist" in err


SPEC = """
name = "cli-cache"
dataset = "digits"
methods = ["output", "prediction-sensitivity"]
repeats = 1
public_size = 200

[defaults]
epsilon = 1.0
delta = 0.0
budget = 10
n = 300
d = 8

[selection]
mode = "validation"
grids = { output = { l2 = [0.001, 0.01] }, prediction-sensitivity = { l2 = [0.001, 0.01] } }

[[sweeps]]
name = "budget"
parameter = "budget"
values = [1, 100]
"""


def test_cli_prints_cache_use_clears_it_and_runs_without_it(capsys, tmp_path):
    spec_file = tmp_path / "s.toml"
    spec_file.write_text(SPEC)
    out = tmp_path / "out"
    r = run_json(capsys, "study", "run", str(spec_file), "--out", str(out), "--no-progress", "--no-report")
    assert r["failed"] == 0 and {c["method"] for c in r["cache"]} == {"output", "prediction-sensitivity"}
    assert all(set(c) == {"method", "hits", "misses", "hit_rate", "selection_hits", "selection_misses",
                          "selection_hit_rate", "seconds_computed", "seconds_saved"} for c in r["cache"])
    assert sum(c["hits"] for c in r["cache"]) > 0 and cache_files(out)
    code, text, _ = run(capsys, "study", "run", str(spec_file), "--out", str(out), "--no-progress", "--no-report",
                        "--clear-cache")
    assert code == 0 and not cache_files(out)
    code, text, _ = run(capsys, "study", "run", str(spec_file), "--out", str(tmp_path / "out2"), "--no-progress",
                        "--no-report")
    assert code == 0 and "cache prediction-sensitivity" in text and "hits" in text
    r3 = run_json(capsys, "study", "run", str(spec_file), "--out", str(tmp_path / "out3"), "--no-progress",
                  "--no-report", "--no-cache")
    assert r3["cache"] == [] and not (tmp_path / "out3" / CACHE_DIR).exists()
    code, _, err = run(capsys, "study", "run", str(spec_file), "--out", str(out), "--no-cache", "--clear-cache")
    assert code == 2 and "not allowed with" in err


@pytest.mark.slow
def test_quick_ci_budget_sweeps_are_identical_with_and_without_the_cache(tmp_path):
    """The acceptance check on a preset: every method of quick-ci, the two budget sweeps, 2 workers."""
    from privml.study import load_preset

    full = load_preset("quick-ci")
    spec = full.with_overrides(sweeps=[s for s in full.to_dict()["sweeps"] if s["name"] in ("budget-pure", "budget")])
    alone = run_study(spec, tmp_path / "alone", jobs=2, progress=False, report=False, cache=False)
    shared = run_study(spec, tmp_path / "shared", jobs=2, progress=False, report=False)
    assert alone.failed == shared.failed == 0 and alone.finished == shared.finished == alone.planned
    assert stored(shared) == stored(alone)
    assert totals(shared)["hits"] > totals(shared)["misses"]


def test_a_cleared_cache_is_forgotten_by_workers_that_held_it_in_memory(tmp_path):
    spec = sharing_spec(sweeps=[{"name": "budget", "parameter": "budget", "values": [1, 10]}])
    first = run_study(spec, tmp_path, jobs=2, progress=False, report=False)
    assert totals(first)["misses"] > 0
    # The two worker processes (kept alive between studies by joblib) hold the minimisers in memory. The new runs at
    # B = 100 need exactly those minimisers; after --clear-cache they must be computed again (and
    # written to the new folder), not served from the memory of the old one.
    more = spec.with_overrides(sweeps=[{"name": "budget", "parameter": "budget", "values": [1, 10, 100]}])
    cleared = run_study(more, tmp_path, jobs=2, progress=False, report=False, clear_cache=True)
    assert cleared.finished == 2 and cleared.skipped == first.finished
    by_method = {row["method"]: row for row in cleared.cache}
    # Prediction sensitivity at B = 100 solves its lambda grid again (in the old folder's memory, all hits).
    assert by_method["prediction-sensitivity"]["misses"] > 0
    assert totals(cleared)["misses"] == len(cache_files(tmp_path))


def test_the_eta_tells_runs_that_compute_from_runs_that_reuse():
    spec = sharing_spec(repeats=3, selection={"mode": "validation", "scope": "point", "grids": {
        "output": {"l2": [1e-3, 1e-2]}, "objective": {"l2": [1e-3, 1e-2]}}})
    jobs, _ = plan(spec)
    batches = dispatch_batches(jobs, grouped=False, scope="point")
    leaders = leading_keys(batches, "point")
    assert 0 < len(leaders) < len(jobs)
    tracker = ProgressTracker(spec, jobs, workers=1, leaders=leaders)
    output = [j for j in jobs if j.method == "output"]
    lead = next(j for j in output if j.key in leaders)
    follow = next(j for j in output if j.key not in leaders)
    tracker.finish({"key": lead.key, "method": "output", "wall_seconds": 10.0, "status": "ok"})
    tracker.finish({"key": follow.key, "method": "output", "wall_seconds": 1.0, "status": "ok"})
    left_lead = sum(j.key in leaders for j in output) - 1
    left_follow = sum(j.key not in leaders for j in output) - 1
    others = [j for j in jobs if j.method != "output"]
    # Other methods have no finished run: leaders take the leaders' mean, followers the followers'.
    expected = (left_lead * 10 + left_follow * 1 + sum(10 if j.key in leaders else 1 for j in others))
    assert tracker.eta_seconds() == pytest.approx(expected)
    # A method whose leader alone has finished: its followers are scaled by output's ratio (1/10).
    ps = [j for j in jobs if j.method == "objective"]
    ps_lead = next(j for j in ps if j.key in leaders)
    tracker.finish({"key": ps_lead.key, "method": "objective", "wall_seconds": 4.0, "status": "ok"})
    ps_follow = sum(j.key not in leaders for j in ps)
    ps_lead_left = sum(j.key in leaders for j in ps) - 1
    rest = [j for j in others if j.method != "objective"]
    expected = (left_lead * 10 + left_follow * 1 + ps_lead_left * 4 + ps_follow * 0.4
                + sum(7 if j.key in leaders else 1 for j in rest))
    assert tracker.eta_seconds() == pytest.approx(expected)


def test_the_cache_folder_and_its_secret_key_are_the_owners_alone(tmp_path):
    # A review: with umask 0022 the secret .selection-key was 0644 in a 0755 folder, readable by every local user.
    import stat

    from privml.study._cache import StudyCache, cache_ident

    root = tmp_path / "cache"
    cache_ident(root)
    StudyCache(root).selection_key()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / ".selection-key").stat().st_mode) == 0o600
