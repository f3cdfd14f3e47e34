"""Run a study's unfinished jobs (planned by :mod:`privml.study._points`), store every result.

Workers receive plain data (the study context and the
job as dicts) and return a store record, errors included, so one failing
run never stops a study; :class:`StudyRun` counts the failures and lists
each distinct error once. Before any run starts the dataset is checked (and
a missing built-in set fetched, once, rather than by every worker), so an
unknown or unobtainable dataset stops the study with one error instead of
failing every run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from privml import __version__
from privml._progress import progress_bar
from privml.data import load_dataset
from privml.data._fetch import ensure_dataset
from privml.data._registry import canonical_name, is_user_data
from privml.exceptions import PrivacyLeakWarning
from privml.linear._solvers import sharing_minimisers
from privml.prediction._aggregate import sharing_votes
from privml.study._cache import CACHE_DIR, cache_ident, describe, get_cache, merge_stats
from privml.study._cache import clear_cache as clear
from privml.study._executors import DaskExecutor, Executor, make_executor
from privml.study._methods import METHODS, get_method
from privml.study._points import plan
from privml.study._prepare import check_point, prepare
from privml.study._report import write_report
from privml.study._scheduling import ProgressTracker, dispatch_batches, leading_keys
from privml.study._selection import PointSelection, select_and_run
from privml.study._sizing import choose
from privml.study._spec import StudySpec, selection_seed
from privml.study._spec_parts import Selection
from privml.study._spec_values import content_digest
from privml.study._store import ResultStore

RESULTS_FILE = "results.sqlite"
LOCK_FILE = ".privml-study.lock"
#: Folder of one empty file per run a worker is executing now (``privml study status``).
RUNNING_DIR = ".running"
#: What every run's result depends on besides its method, settings and seed (StudySpec.run_context).
_RUN_CONTEXT = ("privml_version", "dataset", "label_column", "public_size", "data_seed", "selection")
#: ...and what it depends on when the study gives it (left out otherwise, so earlier keys hold).
_OPTIONAL_CONTEXT = ("classes", "schema", "bounds", "test_fraction")


@dataclass(frozen=True)
class StudyRun:
    """What :func:`run_study` did.

    Attributes
    ----------
    results : Path
        The SQLite store.
    spec_hash : str
    planned, skipped, finished, failed : int
        Jobs in the plan, already done before this call, completed now, failed now.
    seconds : float
        Wall time of this call.
    executor : str
    notes : list of str
        Methods left out and why.
    report : Path or None
        The HTML report, when written.
    errors : list of dict
        One entry per distinct error of the runs that failed now, most
        frequent first: ``{"error": "Type: message", "count": runs, "methods": [...]}``.
    cache : list of dict
        Per method, what the shared cache (:mod:`privml.study._cache`) did in
        this call: ``hits``, ``misses``, ``hit_rate``, ``seconds_computed``
        (by the misses) and ``seconds_saved`` (the compute time of the
        entries the hits reused). Empty with ``cache=False``.
    """

    results: Path
    spec_hash: str
    planned: int
    skipped: int
    finished: int
    failed: int
    seconds: float
    executor: str
    notes: list[str]
    report: Path | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    cache: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["results"] = str(self.results)
        out["report"] = None if self.report is None else str(self.report)
        return out


def place_study(spec: StudySpec) -> StudySpec:
    """``spec`` with its device resolved (``"auto"``: CUDA when available), checked before any run.

    Raises
    ------
    ValueError
        For a device other than ``"auto"`` in a study without CNN methods (an
        option no method can use is an error, never dropped), a device torch
        does not know, or a CUDA device this machine does not have.
    """
    cnn = [name for name, method in METHODS.items() if method.inputs == "images"]
    if not set(cnn) & set(spec.methods):
        if spec.device != "auto":
            raise ValueError(f"device {spec.device!r} (--device) applies to the CNN methods ({', '.join(cnn)}) "
                             f"only; study {spec.name} runs none of them")
        return spec
    try:
        from privml.torch._classifier import resolve_device  # lazy(extra): torch
    except ImportError:  # the CNN methods are unavailable here: the plan leaves them out with a note
        if spec.device == "auto":
            return spec
        raise ValueError(f"device {spec.device!r} (--device) needs torch: pip install 'privml[torch]'") from None
    device = str(resolve_device(spec.device))
    return spec if device == spec.device else spec.with_overrides(device=device)


def run_study(
    spec: StudySpec,
    out: str | Path,
    *,
    executor: Executor | str | None = None,
    jobs: int = 1,
    progress: bool = True,
    report: bool = True,
    check_data: bool = True,
    cache: bool = True,
    clear_cache: bool = False,
) -> StudyRun:
    """Run every unfinished job of ``spec``, storing results in ``out/results.sqlite``.

    Re-running with the same ``out`` skips finished runs (resumable); runs
    that failed are retried. With ``report=True`` the HTML report is written
    to ``out/report/index.html``.

    Parameters
    ----------
    spec : StudySpec
    out : path
        Output folder.
    executor : Executor, str or None
        An executor, ``"local"`` or ``"dask://HOST:PORT"`` (see :func:`make_executor`).
    jobs : int
        Local workers when ``executor`` is a string or None.
    progress : bool
        Show a progress bar with ETA on stderr.
    report : bool
        Write the HTML report after the runs.
    check_data : bool
        Check the dataset first (:func:`check_dataset`; ``False`` when the caller did).
    cache : bool
        Compute what runs share once (:mod:`privml.study._cache`, in
        ``out/cache``): results are identical bit for bit either way, but
        under private selection, whose secret key lives in the cache (without
        it each run draws fresh randomness). ``False`` makes every run compute
        everything itself.
    clear_cache : bool
        Delete ``out/cache`` first (it holds non-private minimisers of the
        training data; see :mod:`privml.study._cache`).

    Raises
    ------
    ValueError, FileNotFoundError, DatasetFetchError
        Before any run, for a bad device (:func:`place_study`) or executor, or a dataset that cannot be
        loaded (:func:`check_dataset`).
    """
    # The device first (the stored spec records the one used), then the executor: a bad device,
    # executor or job count is refused before anything is written.
    spec = place_study(spec)
    runner = executor if executor is not None and not isinstance(executor, str) else make_executor(executor, jobs=jobs)
    # Then the data, once, here: a bad or unobtainable dataset stops the study before any run
    # (instead of failing each), and a missing built-in set is fetched once, not by every worker.
    if isinstance(runner, DaskExecutor):
        runner.check_reachable()
    if check_data:
        check_dataset(spec, local=not isinstance(runner, DaskExecutor))
    spec = size_study(spec)
    out = Path(out)
    _warn_if_private(spec, out)
    with folder_lock(out):
        if clear_cache:
            clear(out)
        return _run_locked(spec, out, runner, progress=progress, report=report, cache=cache)


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out`` while a study runs in it.

    Two ``study run`` on one folder would both compute every pending run; the
    second is refused at once instead (one line, nothing computed). The lock
    is an advisory ``flock`` on ``out/.privml-study.lock``, released when the
    process exits, however it exits.
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    handle = path.open("a+")
    try:
        try:
            import fcntl  # lazy(platform): POSIX file locks
        except ImportError:  # not POSIX: no advisory locks, run unguarded
            yield
            return
        # A few tries over a second: `privml study status` takes the lock for an instant to see if a run holds it,
        # and a run starting at that instant must not be refused (a review measured 10% of starts refused).
        for attempt in range(20):
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 19:
                    raise ValueError(f"{out} is in use by another privml study run (lock {path}); wait for it to "
                                     "finish or use another --out") from None
                time.sleep(0.05)
        yield
    finally:
        handle.close()


def _run_locked(spec: StudySpec, out: Path, runner: Any, *, progress: bool, report: bool, cache: bool) -> StudyRun:
    store = ResultStore(out / RESULTS_FILE)
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    # The day only under private selection: the start second and the first row's would time the runs between.
    store.save_spec(spec.spec_hash, spec.to_dict(), started[:10] if spec.selection.mode == "private" else started)
    todo, notes = plan(spec)
    store.add_notes(spec.spec_hash, notes)
    done = store.finished_keys()
    pending = [job for job in todo if job.key not in done]
    context = _context(spec)
    if cache:
        context["cache_ident"] = cache_ident(out / CACHE_DIR)
        context["cache_dir"] = str((out / CACHE_DIR).resolve())
        # Half-written entries of a killed worker (never read: entries are renamed in whole), as .running's below.
        for stale in (out / CACHE_DIR).rglob(".*.tmp"):
            stale.unlink(missing_ok=True)
    running = out / RUNNING_DIR
    running.mkdir(parents=True, exist_ok=True)
    for stale in running.iterdir():  # left by an interrupted study: nothing runs now (we hold the lock)
        stale.unlink(missing_ok=True)
    context["running_dir"] = str(running.resolve())
    finished = failed = 0
    errors: Counter[str] = Counter()
    methods: dict[str, list[str]] = {}
    cache_stats: dict[str, dict[str, float]] = {}
    batches = dispatch_batches(pending, grouped=isinstance(runner, DaskExecutor), scope=spec.selection.scope)
    tracker = ProgressTracker(spec, pending, workers=_workers(runner),
                              leaders=leading_keys(batches, spec.selection.scope))
    start = time.perf_counter()
    with progress_bar(len(pending), desc=f"study {spec.name}", unit="run", enabled=progress) as bar:
        for records in runner.map_unordered(execute_batch, [(context, [asdict(job) for job in batch])
                                                             for batch in batches]):
            for record in records:
                store.put(record)
                merge_stats(cache_stats, record["method"], record.get("cache"))
                if record["status"] == "ok":
                    finished += 1
                else:
                    failed += 1
                    error = record["error"] or "unknown error"
                    errors[error] += 1
                    if record["method"] not in methods.setdefault(error, []):
                        methods[error].append(record["method"])
                lines = tracker.finish(record)
                bar.set_postfix_str(tracker.postfix(record), refresh=False)
                bar.update(1)
                for line in lines:
                    _say(bar, line)
    seconds = time.perf_counter() - start
    report_path = None
    if report:
        report_path = write_report(store, out / "report", spec_hash=spec.spec_hash)
    return StudyRun(results=store.path, spec_hash=spec.spec_hash, planned=len(todo), skipped=len(todo) - len(pending),
                    finished=finished, failed=failed, seconds=seconds, executor=runner.description,
                    notes=store.notes(spec.spec_hash), report=report_path,
                    # Methods in the study's order, whatever order the workers finished in.
                    errors=[{"error": e, "count": n, "methods": sorted(methods[e], key=spec.methods.index)}
                            for e, n in errors.most_common()],
                    cache=describe(cache_stats) if cache else [])


def _workers(runner: Any) -> int:
    return int(getattr(runner, "n_jobs", 1) or 1)


def _say(bar: Any, line: str) -> None:
    """A line above the progress bar (tqdm's write keeps the bar intact)."""
    if hasattr(bar, "write"):
        bar.write(line, file=sys.stderr)
    elif hasattr(bar, "total"):  # the plain bar; a disabled bar has no total and prints nothing
        sys.stderr.write("\n" + line + "\n")


def _warn_if_private(spec: StudySpec, out: Path) -> None:
    """The release rule's stated exception (docs/releases.md), said by the library too, not only by the CLI."""
    if is_user_data(spec.dataset):
        warnings.warn(PrivacyLeakWarning(
            f"the study's accuracies (exact, on your private held-out rows) and timings in {out} are not covered "
            "by any privacy guarantee; do not publish the results store or the report"), stacklevel=3)


def check_dataset(spec: StudySpec, *, local: bool = True) -> None:
    """Refuse a study whose dataset cannot be loaded, before any run; fetch a missing built-in set once.

    ``local``: the runs execute on this machine, so the data must be here
    (with a remote executor only the name is checked: the workers have
    their own files and cache).

    Raises
    ------
    ValueError
        An unknown dataset name, or user data that does not parse.
    FileNotFoundError
        User data that does not exist; a built-in set that cannot be had
        (:class:`~privml.data.DatasetNotAvailable`, e.g. offline).
    DatasetFetchError
        A download that failed.
    """
    user = is_user_data(spec.dataset)
    if not user:
        canonical_name(spec.dataset)
        if local:
            ensure_dataset(spec.dataset)
            _check_points(spec)
    elif local:
        with warnings.catch_warnings():
            # Without public classes, load_dataset's PrivacyLeakWarning (the class set read from the labels)
            # is raised here, once, before any run; the plan's notes carry it into the report.
            warnings.simplefilter("ignore")
            warnings.simplefilter("always", PrivacyLeakWarning)
            load_dataset(spec.dataset, label_column=spec.label_column, preprocess=False,
                         classes=None if spec.classes is None else list(spec.classes), schema=spec.schema,
                         bounds=spec.bounds)


def size_study(spec: StudySpec) -> StudySpec:
    """``spec`` with its ``sizing`` resolved (:mod:`privml.study._sizing`): the test split and repeats chosen from
    the number of records, and the note that says what a verdict can resolve; ``spec`` itself without sizing.

    Reads the data (here: the runs of a remote executor need the sizes before they are planned).
    """
    if spec.sizing is None:
        return spec

    user = is_user_data(spec.dataset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_dataset has said what there is to say about the data
        data = load_dataset(spec.dataset, label_column=spec.label_column if user else "label", preprocess=False,
                            classes=None if spec.classes is None else list(spec.classes), schema=spec.schema,
                            bounds=spec.bounds)
    n_records = data.info.n_train + data.info.n_test
    # A csv: file has no test split of its own (load_csv cuts a fixed 80/20 one): the sizing chooses it.
    sizes = choose(spec.sizing, n_records=n_records, n_test=None if spec.dataset.startswith("csv:") else
                   data.info.n_test, repeats=spec.repeats)
    return spec.with_overrides(sizing=None, repeats=sizes.repeats, test_fraction=sizes.test_fraction,
                               notes=[*spec.notes, sizes.note])


def _check_points(spec: StudySpec) -> None:
    """A built-in set's n, d and k that every run of a point would fail on, refused before anything is written.

    Its sizes are public, so this may look at them (never done for user data: its size is private).
    """
    seen = set()
    for sweep, setting, method in spec.points():
        images = METHODS[method].inputs == "images"
        point = (setting.get("n"), setting.get("d"), setting.get("k"), images)
        if point not in seen:
            seen.add(point)
            try:
                check_point(spec.dataset, *point[:3], spec.public_size, images)
            except ValueError as exc:
                raise ValueError(f"sweep {sweep.name!r} ({method}): {exc}") from None


def _context(spec: StudySpec) -> dict[str, Any]:
    """What a worker needs beyond the job (plain data: it travels to other processes)."""
    # The schema's path, to read it by (its content's hash is in the run context, the runs' keys).
    return {**spec.run_context, "schema_path": spec.schema}


def execute_batch(payload: tuple[dict[str, Any], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run a batch of jobs in one worker, in order, and return their store records.

    Module-level so that joblib and Dask can pickle it. Locally a batch is
    one job; on Dask it is a sharing group (:func:`~privml.study._scheduling.dispatch_batches`).
    """
    context, jobs = payload
    return [execute_job((context, job)) for job in jobs]


def execute_job(payload: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Run one job in a worker and return its store record; errors are returned, not raised.

    Module-level so that joblib and Dask can pickle it. With a cache folder
    in the context (``cache_dir``) the run's non-private solves go through
    the study cache (:mod:`privml.study._cache`) and the record carries the
    run's cache statistics under ``cache`` (not stored: the store keeps its
    columns only).
    """
    context, job = payload
    params = job["params"]
    start = time.perf_counter()
    record: dict[str, Any] = {
        "key": job["key"], "spec_hash": job["spec_hash"], "method": job["method"], "params": params,
        "repeat": job["repeat"], "seed": job["seed"], "status": "ok", "accuracy": None, "epsilon": None,
        "delta": None, "train_seconds": None, "predict_seconds": None, "wall_seconds": None, "selection": None,
        "info": None, "error": None, "version": __version__,
    }
    cache = get_cache(context["cache_dir"], context.get("cache_ident")) if context.get("cache_dir") else None
    if cache is not None:
        cache.take_stats()  # what earlier runs of this worker did is theirs
    with (_running(context.get("running_dir"), job["key"]), sharing_minimisers(cache),
          sharing_votes(None if cache is None else cache.votes)):
        try:
            data = prepare(context["dataset"], n=params.get("n"), d=params.get("d"), k=params.get("k"),
                           public_size=context["public_size"], seed=context["data_seed"],
                           label_column=context["label_column"],
                           images=get_method(job["method"]).inputs == "images", classes=context.get("classes"),
                           schema=context.get("schema_path"), bounds=context.get("bounds"),
                           test_fraction=context.get("test_fraction"))
            sel = context["selection"]
            selection = Selection(mode=sel["mode"], validation_fraction=sel["validation_fraction"],
                                  stop_probability=sel["stop_probability"],
                                  grids={m: {p: tuple(v) for p, v in g.items()} for m, g in sel["grids"].items()},
                                  scope=sel.get("scope", "run"))
            full = {"epsilon": None, "delta": None, "budget": None, "l2": None, "m": None, **params}
            chosen = select_and_run(get_method(job["method"]), data, full, seed=job["seed"], selection=selection,
                                    point=_point_selection(context, job, cache))
            r = chosen.result
            record.update(
                accuracy=r.accuracy, epsilon=r.epsilon, delta=r.delta, train_seconds=r.train_seconds,
                predict_seconds=r.predict_seconds, info={**r.info, "n_train": int(data.y_train.size),
                                                          "n_test": int(data.y_test.size),
                                                          "n_features": data.n_features,
                                                          "data_steps": list(data.steps)},
                selection={"mode": chosen.mode, "chosen": chosen.chosen, "candidates": chosen.candidates,
                           "leaky": chosen.leaky, "note": chosen.note},
            )
        except Exception as exc:  # noqa: BLE001 - a failed run is data: stored with its error, retried next time
            lines = str(exc).splitlines()
            record.update(status="error", error=f"{type(exc).__name__}: {lines[0] if lines else ''}",
                          info={"traceback": traceback.format_exc(limit=6)})
    record["wall_seconds"] = time.perf_counter() - start
    record["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    if context["selection"]["mode"] == "private":
        # A private selection's run time grows with the number of candidates it ran, which Liu-Talwar's bound
        # needs hidden. Not its row only: the rows around it (baselines, prediction methods, failed runs) would
        # bracket it by their finishing seconds and wall times (a review). A private study keeps no row's.
        record["wall_seconds"] = None
        record["finished"] = record["finished"][:10]
    if (record["selection"] or {}).get("mode") == "private":
        # Nor a private row its released candidate's own training time: a hidden earlier candidate that solved the
        # same minimiser made it a cache hit of ~2 ms against ~40 ms for a solve (a review).
        record["train_seconds"] = None
    if cache is not None:
        stats = cache.take_stats()
        if (record["selection"] or {}).get("mode") == "private":
            # Each candidate of random stopping looks its minimiser up once: the lookups would count the runs,
            # which stay hidden (Liu-Talwar's bound holds for the best of a hidden number). The selection's own.
            stats = {name: value for name, value in stats.items() if name.startswith("selection_")}
        record["cache"] = stats
    return record


def _point_selection(context: dict[str, Any], job: dict[str, Any], cache: Any) -> PointSelection:
    """The seed and key of a ``scope = "point"`` selection: one per (method, settings), whatever the repeat."""
    # Every field of StudySpec.run_context the study has (classes only when given: earlier keys unchanged); the
    # class set was left out, so a study with other classes into the same folder read another's search (a review).
    run_context = {name: context[name] for name in (*_RUN_CONTEXT, *_OPTIONAL_CONTEXT) if name in context}
    key = content_digest({**run_context, "method": job["method"], "params": job["params"], "purpose": "selection"})
    return PointSelection(seed=selection_seed(context["data_seed"]), key=key, cache=cache)


@contextlib.contextmanager
def _running(folder: str | None, key: str) -> Iterator[None]:
    """Mark ``key`` as running (an empty file in ``folder``) while the block runs; skipped if the folder is not here."""
    marker = None
    if folder is not None and Path(folder).is_dir():
        marker = Path(folder) / key
        with contextlib.suppress(OSError):
            marker.touch()
    try:
        yield
    finally:
        if marker is not None:
            with contextlib.suppress(OSError):
                marker.unlink()
