"""Where a study stands: what is done, running, failed and left, per sweep and method.

Read from the folder alone (``privml study status DIR``), while a study runs
in it or after: the results store says which runs finished or failed, the
spec stored with them says which runs the study has, and the workers mark the
runs they are executing in ``DIR/.running`` (one empty file per run, removed
when it ends; markers are trusted only while a study holds the folder's lock,
so a study that was killed shows nothing running).

A run shared by several sweeps (the same method, setting and seed) counts in
each of them; the totals count it once.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

from privml.study._points import plan
from privml.study._runner import LOCK_FILE, RESULTS_FILE, RUNNING_DIR
from privml.study._spec import spec_from_dict
from privml.study._store import ResultStore

__all__ = ["study_status"]

_STATES = ("done", "failed", "running", "left")


def study_status(folder: str | Path, *, spec_hash: str | None = None) -> dict[str, Any]:
    """Counts of runs done, failed, running and left, per sweep and method, and an estimate of the time left.

    Parameters
    ----------
    folder : path
        A study's output folder (or its ``results.sqlite``).
    spec_hash : str, optional
        Which study of the store (a prefix is enough); default the one saved last.

    Returns
    -------
    dict
        ``study``, ``spec_hash``, ``active`` (a study holds the folder now),
        ``total`` (``{state: runs}``), ``methods`` (``{method: {state: runs}}``),
        ``sweeps`` (one entry per sweep with its ``methods`` and ``total``),
        ``errors`` (distinct errors of the failed runs, most frequent first) and
        ``run_seconds_left``: the runs left (and running) times the mean wall
        time of the finished runs of their method (of all finished runs for a
        method with none yet), in run-seconds; divide by the workers. None
        before any run finished.

    Raises
    ------
    FileNotFoundError
        If the folder holds no results store.
    ValueError
        If the store holds no study (or none matching ``spec_hash``).
    """
    # long-function: one pass over the planned jobs that fills every counter of the report; the pieces share the job
    # states and records.
    path = Path(folder)
    # A results file named directly (existing or not, as in a typo) is that file, not a folder holding one.
    as_file = path.is_file() or (not path.exists() and path.suffix == Path(RESULTS_FILE).suffix)
    out = path.parent if as_file else path
    store_path = path if as_file else path / RESULTS_FILE
    if not store_path.is_file():
        raise FileNotFoundError(f"{store_path} does not exist: no study has run in {out}")
    store = ResultStore(store_path, read_only=True)  # status only reads: a foreign file is left untouched
    specs = store.specs()
    if spec_hash is not None:
        specs = {h: s for h, s in specs.items() if h.startswith(spec_hash)}
    if not specs:
        raise ValueError(f"{store_path} holds no study" + (f" with spec hash {spec_hash}" if spec_hash else ""))
    chosen_hash, raw = list(specs.items())[-1]
    spec = spec_from_dict(raw)
    jobs, _ = plan(spec)
    records = {}
    for record in store.records(status=None):
        records[record["key"]] = record
    active = _locked(out / LOCK_FILE)
    running_keys = set()
    if active and (out / RUNNING_DIR).is_dir():
        running_keys = {p.name for p in (out / RUNNING_DIR).iterdir()}

    def state(key: str) -> str:
        record = records.get(key)
        if record is not None and record["status"] == "ok":
            return "done"
        if key in running_keys:
            return "running"
        if record is not None:
            return "failed"
        return "left"

    total: Counter[str] = Counter()
    by_method: dict[str, Counter[str]] = {}
    by_sweep: dict[str, dict[str, Counter[str]]] = {sweep.name: {} for sweep in spec.sweeps}
    seconds: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    pending_by_method: Counter[str] = Counter()
    for job in jobs:
        s = state(job.key)
        total[s] += 1
        by_method.setdefault(job.method, Counter())[s] += 1
        for name in job.sweeps:
            by_sweep[name].setdefault(job.method, Counter())[s] += 1
        found = records.get(job.key)
        if s == "done" and found is not None and found.get("wall_seconds") is not None:
            seconds.setdefault(job.method, []).append(float(found["wall_seconds"]))
        if s == "failed" and found is not None:
            errors[found.get("error") or "unknown error"] += 1
        if s in ("left", "running", "failed"):
            pending_by_method[job.method] += 1
    every = [x for xs in seconds.values() for x in xs]
    left_seconds = None
    if every:
        overall = sum(every) / len(every)
        left_seconds = sum(n * (sum(seconds[m]) / len(seconds[m]) if m in seconds else overall)
                           for m, n in pending_by_method.items())
    return {
        "study": spec.name,
        "spec_hash": chosen_hash,
        "results": str(store_path),
        "active": active,
        "total": _full(total),
        "methods": {m: _full(c) for m, c in by_method.items()},
        "sweeps": [{"sweep": name, "total": _full(sum(methods.values(), Counter())),
                    "methods": {m: _full(c) for m, c in methods.items()}}
                   for name, methods in by_sweep.items()],
        "errors": [{"error": e, "count": n} for e, n in errors.most_common()],
        "run_seconds_left": left_seconds,
    }


def _full(counts: Counter[str]) -> dict[str, int]:
    return {s: int(counts.get(s, 0)) for s in _STATES}


def _locked(path: Path) -> bool:
    """Whether a study holds the folder's lock now (tested without taking it for longer than a system call)."""
    if not path.exists():
        return False
    try:
        import fcntl  # lazy(platform): POSIX file locks
    except ImportError:  # not POSIX: no locks, so no way to tell
        return False
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: two status calls never exclude each other
        except BlockingIOError:
            return True
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False
