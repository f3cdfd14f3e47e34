from __future__ import annotations

import sqlite3

import pytest

from privml import __version__
from privml.study import ResultStore, make_executor, plan, run_study, spec_from_dict
from privml.study._executors import DaskExecutor, JoblibExecutor, SerialExecutor

from .conftest import tiny_spec_dict


def small_spec(**changes):
    raw = tiny_spec_dict(methods=["output", "objective"], repeats=1,
                         sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [0.5, 5.0]}])
    raw.update(changes)
    return spec_from_dict(raw)


def test_store_has_one_row_per_run_with_everything(tiny_study):
    spec, outcome, _ = tiny_study
    assert outcome.failed == 0 and outcome.finished == outcome.planned
    rows = ResultStore(outcome.results).records()
    assert len(rows) == outcome.planned
    row = rows[0]
    for column in ("spec_hash", "method", "params", "seed", "accuracy", "epsilon", "delta", "train_seconds",
                   "predict_seconds", "version", "status"):
        assert row[column] is not None, column
    assert row["version"] == __version__ and row["status"] == "ok"
    assert row["selection"]["mode"] == "public"
    # The store is plain SQLite: readable without privml.
    with sqlite3.connect(outcome.results) as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == outcome.planned


def test_rerun_skips_finished_runs(tmp_path):
    spec = small_spec()
    first = run_study(spec, tmp_path, progress=False, report=False)
    assert first.finished == first.planned == 4 and first.skipped == 0
    again = run_study(spec, tmp_path, progress=False, report=False)
    assert (again.skipped, again.finished, again.failed) == (4, 0, 0)
    # A new point in the same store runs only what is new.
    wider = small_spec(sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [0.5, 5.0, 50.0]}])
    more = run_study(wider, tmp_path, progress=False, report=False)
    assert (more.skipped, more.finished) == (4, 2)


def test_failed_runs_are_stored_with_their_error_and_retried(tmp_path):
    spec = small_spec(defaults={"epsilon": 1.0, "delta": 0.0, "budget": 1, "n": 100_000, "d": 10})
    # check_data=False: the data check now refuses this n before any run; this test is about runs that fail.
    outcome = run_study(spec, tmp_path, progress=False, report=False, check_data=False)
    assert outcome.failed == outcome.planned and outcome.finished == 0
    errors = ResultStore(outcome.results).records(status="error")
    assert "n = 100000 training records requested" in errors[0]["error"]
    retry = run_study(spec, tmp_path, progress=False, report=False, check_data=False)
    assert retry.skipped == 0 and retry.failed == outcome.planned


def test_parallel_workers_give_the_same_results_as_serial(tmp_path):
    spec = small_spec()
    serial = run_study(spec, tmp_path / "serial", jobs=1, progress=False, report=False)
    parallel = run_study(spec, tmp_path / "parallel", jobs=2, progress=False, report=False)
    assert parallel.executor == "joblib, 2 workers"

    def accuracies(outcome):
        return {r["key"]: r["accuracy"] for r in ResultStore(outcome.results).records()}

    assert accuracies(serial) == accuracies(parallel)


def test_dask_executor_runs_a_study_on_a_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = small_spec()
    # Threads in this process, but a real TCP scheduler: the address is what --executor dask://HOST:PORT takes.
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        outcome = run_study(spec, tmp_path, executor=address, progress=False, report=False)
        assert outcome.executor == f"dask at {address}"
        assert outcome.finished == outcome.planned == 4
        with distributed.Client(cluster) as client:
            resumed = run_study(small_spec(repeats=2), tmp_path, executor=DaskExecutor(client), progress=False,
                                report=False)
    assert (resumed.skipped, resumed.finished) == (4, 4)


def _blas_threads(_: object) -> list[int]:
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info()]


def test_serial_executor_runs_each_job_on_one_thread_like_a_joblib_worker():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=2):  # as on a 2-core machine, whatever this one has
        (inside,) = SerialExecutor().map_unordered(_blas_threads, [None])
        outside = _blas_threads(None)
    assert inside and all(n == 1 for n in inside)  # numpy's BLAS is always among the pools
    assert max(outside) == 2  # the one-thread limit is lifted once the job is done


def test_make_executor():
    assert isinstance(make_executor(None, jobs=1), SerialExecutor)
    assert isinstance(make_executor("local", jobs=3), JoblibExecutor)
    assert isinstance(make_executor("dask://127.0.0.1:8786"), DaskExecutor)
    with pytest.raises(ValueError, match="unknown executor 'ray://x'"):
        make_executor("ray://x")
    with pytest.raises(ValueError, match="--jobs must be >= 1"):
        make_executor(None, jobs=0)
    with pytest.raises(ValueError, match="names no scheduler"):
        make_executor("dask://")


def test_plan_of_a_study_with_an_unavailable_method_notes_it(monkeypatch):
    from privml.study import _methods as methods

    ghost = methods.Method("ghost", "a future method", "prediction", "privml.not_there:Ghost",
                           ("epsilon", "delta", "budget"), {}, True, lambda p, k, s, shape: {})
    monkeypatch.setitem(methods.METHODS, "ghost", ghost)
    spec = small_spec(methods=["output", "ghost"])
    jobs, notes = plan(spec)
    assert {j.method for j in jobs} == {"output"}
    assert any("'ghost'" in n and "privml.not_there" in n and "runs the available methods" in n for n in notes)


def test_quick_ci_preset_runs_end_to_end(tmp_path):
    from privml.study import load_preset

    outcome = run_study(load_preset("quick-ci"), tmp_path, jobs=2, progress=False)
    assert outcome.failed == 0 and outcome.finished == outcome.planned
    page = outcome.report.read_text()
    assert page.count("data:image/png;base64,") == len(load_preset("quick-ci").sweeps)


def test_run_study_itself_warns_that_a_study_of_user_data_is_not_for_publication(tmp_path):
    import csv
    import warnings

    import numpy as np

    from privml.exceptions import PrivacyLeakWarning
    from privml.study import run_study, spec_from_dict

    from .conftest import tiny_spec_dict

    rng = np.random.default_rng(0)
    path = tmp_path / "mine.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b", "label"])
        writer.writerows([[float(rng.normal()), float(rng.normal()), i % 2] for i in range(40)])
    two_classes = {**tiny_spec_dict()["defaults"], "k": 2}  # k may not exceed the public class set
    spec = spec_from_dict(tiny_spec_dict(dataset=f"csv:{path}", classes=["0", "1"], defaults=two_classes))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run_study(spec, tmp_path / "out", progress=False, report=False)
        except Exception:  # noqa: BLE001 - runs on this tiny set may fail; the warning comes before any run
            pass
    assert any(issubclass(w.category, PrivacyLeakWarning) and "do not publish" in str(w.message) for w in caught)


def test_private_selection_does_not_count_its_candidates_in_the_cache_statistics(tmp_path):
    # The minimiser lookups of random stopping's candidates would print the number of runs (study run's cache
    # lines), which Liu-Talwar's bound needs hidden; only the selection's own lookups are counted.
    from privml.study import _cache as cache_module

    cache_module._CACHES.clear()
    spec = spec_from_dict(tiny_spec_dict(
        methods=["output"], repeats=1, selection={"mode": "private", "stop_probability": 0.2,
                                                 "grids": {"output": {"l2": [1e-3, 1e-2, 1e-1]}}},
        sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [1.0, 30.0]}]))
    outcome = run_study(spec, tmp_path / "study", jobs=1, progress=False)
    assert outcome.finished == 2
    (row,) = [r for r in outcome.cache if r["method"] == "output"]
    assert row["hits"] == 0 and row["misses"] == 0 and row["seconds_computed"] == 0


def test_private_selection_stores_no_time_that_counts_its_candidates(tmp_path, monkeypatch):
    # Each candidate of random stopping took about one fit's time, and the row stored their sum (train_seconds)
    # and the run's wall time and finishing second: the number of runs, which Liu-Talwar's bound needs hidden,
    # was read off them (a review). Every fit here reports 1 s: a stored time above that counts candidates.
    import dataclasses

    from privml.study._methods import Method
    from privml.study._store import ResultStore

    fits = []
    original = Method.fit

    def one_second(self, *args, **kwargs):
        fits.append(1)
        return dataclasses.replace(original(self, *args, **kwargs), train_seconds=1.0)

    monkeypatch.setattr(Method, "fit", one_second)
    spec = spec_from_dict(tiny_spec_dict(
        methods=["nonprivate", "output"], repeats=1,
        selection={"mode": "private", "stop_probability": 0.05, "grids": {"output": {"l2": [1e-3, 1e-2, 1e-1]}}},
        sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [30.0]}]))
    outcome = run_study(spec, tmp_path / "study", jobs=1, progress=False, cache=False)
    assert outcome.finished == 2 and len(fits) > 2  # several candidates ran (stopping probability 0.05)
    store = ResultStore(tmp_path / "study" / "results.sqlite", read_only=True)
    rows = {row["method"]: row for row in store.records()}
    # No training time either: the candidates' sum counted them, and even the released candidate's own time told
    # whether a hidden candidate had solved its minimiser first (a third review).
    assert rows["output"]["train_seconds"] is None and rows["nonprivate"]["train_seconds"] is not None
    # No row keeps a run time or a finishing second, nor the study its start second: the baseline's, beside
    # the private row, would bracket it (a second review).
    assert all(row["wall_seconds"] is None and len(row["finished"]) == 10 for row in rows.values())
    saved = sqlite3.connect(tmp_path / "study" / "results.sqlite").execute("SELECT saved FROM specs").fetchall()
    assert [len(s) for (s,) in saved] == [10]


def test_a_point_searchs_key_covers_the_class_set():
    # A review: a study into the same folder with another class set read the first study's validation search.
    from privml.study._runner import _point_selection

    context = {"privml_version": "x", "dataset": "digits", "label_column": "label", "public_size": 100,
               "data_seed": 0, "selection": {"mode": "validation"}}
    job = {"method": "output", "params": {"epsilon": 1.0}}
    keys = {_point_selection({**context, **extra}, job, None).key
            for extra in ({}, {"classes": ["a", "b", "c"]}, {"classes": ["a", "c", "b"]})}
    assert len(keys) == 3


def test_a_killed_workers_half_written_cache_entries_are_removed(tmp_path):
    # A review: a SIGKILLed worker's temporary entry stayed in the cache folder for good.
    spec = spec_from_dict(tiny_spec_dict(methods=["output"], repeats=1,
                                         sweeps=[{"name": "epsilon", "parameter": "epsilon", "values": [1.0]}]))
    stale = tmp_path / "study" / "cache" / "minimisers" / "ab" / ".abcd.npz.123.ff.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"partial")
    run_study(spec, tmp_path / "study", jobs=1, progress=False)
    assert not stale.exists()
