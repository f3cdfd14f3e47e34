"""What the runs of a study share, computed once: non-private minimisers and selections.

A study runs the same non-private computation again and again with only the
noise differing: every output-perturbation run at every epsilon and delta
solves the same minimiser for its split and lambda; every prediction-
sensitivity run at every B, epsilon and delta trains the same non-private
model over the same lambda grid (on the same validation split, then on all
records); every subsample-and-aggregate run at every B, epsilon and delta
trains the same teachers (its partition depends on the run's seed only, the
same for every setting of a repeat). Those solves all go through
:func:`privml.linear._solvers.solve_nonprivate`; :class:`StudyCache` is the
cache it consults while a run executes (:func:`privml.linear._solvers.sharing_minimisers`).

Bit for bit. An entry is addressed by the content hash of everything the
solve depends on (:func:`~privml.linear._solvers.minimiser_key`: the loss, the
bytes of X and y, lambda, tol, max_iter) and is used only after the solver
side checks it against the very objective it would solve (gradient norm
recomputed, at most tol). The noise is drawn afterwards by the estimator from
the run's own generator, exactly as when the run computes its minimiser
itself; the solver is deterministic. So a run's result is identical with or
without the cache, and whichever run or worker computed an entry.

Layout: ``<out>/cache/minimisers/<key[:2]>/<key>.npz`` (``np.savez`` arrays,
never pickles: read with ``allow_pickle=False``), written to a temporary file
and renamed, so an interrupted study leaves no partial entry and a resumed
one reuses every finished entry. ``<out>/cache/.ident`` names the folder: a
worker process that kept entries of a folder since deleted (``--clear-cache``)
forgets them when it meets the new one. Workers on one machine (or a cluster with a
shared file system) take an exclusive ``flock`` per key before computing it:
a second worker needing the same key waits and then reads it, instead of
computing it again. A worker that cannot see the folder (a Dask worker on
another machine) keeps its entries in memory only; the study groups the runs
that share quantities into one task on Dask, so they still share them. Each
process also keeps recent entries in memory.

Selections. With ``selection.scope = "point"`` the validation grid search
of a point is made once for all its repeats (:mod:`privml.study._selection`);
its outcome (the chosen hyper-parameters and every candidate's exact
validation score) is kept as JSON under ``<out>/cache/selections/``, written
and locked like a minimiser, so one worker makes it while another waiting
for it reads it. Its key hashes the study's run context, the method, the
point's settings, the grid and the selection seed: everything the search
depends on.

Privacy. A cached minimiser is a function of the private training records
computed without noise: **private data**, with the same status as the results
store beside it (for the data owner only, docs/releases.md). privml never
prints it, never puts it in the store or the report, and removes it with
``privml study run ... --clear-cache`` (or :func:`clear_cache`).

Statistics. Every lookup is counted per study method: hits, misses, the
seconds the misses spent computing, and the seconds the hits saved (the
compute time recorded with each entry when it was first solved).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
import shutil
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from privml.linear._solvers import SolverResult

__all__ = ["CACHE_DIR", "StudyCache", "cache_ident", "clear_cache", "get_cache", "merge_stats"]

#: Folder of the cache inside a study's output folder (beside results.sqlite).
CACHE_DIR = "cache"
#: Bytes of minimisers each process keeps in memory (least recently used go first).
MEMORY_BYTES = 256 * 2**20
_FORMAT = "privml-study-cache-v1"


class StudyCache:
    """The minimiser cache of one study folder, as seen from one process.

    Parameters
    ----------
    root : path or None
        ``<out>/cache``. ``None``, or a folder that does not exist here (a
        remote worker), keeps entries in this process's memory only.
    memory_bytes : int
        Budget of the in-memory layer.
    """

    def __init__(self, root: str | Path | None, *, memory_bytes: int = MEMORY_BYTES, ident: str | None = None) -> None:
        self.root = None if root is None else Path(root)
        self.ident = ident
        self.memory_bytes = memory_bytes
        self._memory: collections.OrderedDict[str, tuple[SolverResult, float]] = collections.OrderedDict()
        self._held = 0
        self._stats: dict[str, float] = _empty()
        #: Vote counts of subsample-and-aggregate teachers, in memory only
        #: (:func:`privml.prediction._aggregate.sharing_votes`).
        self.votes: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
        #: Selections made or read by this process (small: kept whole).
        self._selections: dict[str, tuple[dict[str, Any], float]] = {}
        self._selection_key: bytes | None = None

    # ------------------------------------------------------------ the solver's interface
    def minimiser(
        self, key: str, compute: Callable[[], SolverResult], accept: Callable[[SolverResult], bool]
    ) -> SolverResult:
        """The result stored under ``key`` if ``accept`` takes it, else ``compute()`` (then stored)."""
        found = self._memory.get(key)
        # An entry in memory was solved in this process, or read from the folder and accepted: no
        # second check (the key is the content hash of the objective it solves).
        if found is not None:
            self._memory.move_to_end(key)
            self._hit(found[1])
            return _copy(found[0])
        path = self._path(key)
        if path is None:
            return self._compute(key, compute, None)
        with self._key_lock(key):
            # Under the lock: whoever held it before has written the entry, or failed.
            loaded = _read(path, key)
            if loaded is not None and accept(loaded[0]):
                self._remember(key, *loaded)
                self._hit(loaded[1])
                return _copy(loaded[0])
            return self._compute(key, compute, path)

    def selection(self, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The selection outcome stored under ``key``, else ``compute()`` (then stored); JSON-ready dicts."""
        found = self._selections.get(key)
        path = None if self.root is None or not self.root.is_dir() else (
            self.root / "selections" / key[:2] / f"{key}.json")
        if found is None:
            with self._key_lock(key) if path is not None else contextlib.nullcontext():
                found = None if path is None else _read_selection(path, key)
                if found is None:
                    start = time.perf_counter()
                    outcome = compute()
                    seconds = time.perf_counter() - start
                    self._stats["selection_misses"] += 1
                    if path is not None:
                        _write_text(path, json.dumps({"format": _FORMAT, "key": key, "seconds": seconds,
                                                      "outcome": outcome}))
                    self._selections[key] = (outcome, seconds)
                    return _json_copy(outcome)
                self._selections[key] = found
        self._stats["selection_hits"] += 1
        self._stats["seconds_saved"] += found[1]
        return _json_copy(found[0])

    def selection_key(self) -> bytes:
        """The study's secret key for private selection's randomness (``<root>/.selection-key``, made once).

        Private selection's noise, candidate draws and stopping coins come
        from this key with the run's seed (:func:`privml.study._selection.select_and_run`):
        the run seeds are public (the store holds them), and noise drawn from
        them alone could be replayed against the noisy score the store holds.
        The key lives with the cache, which is secret; a study made again in
        the same folder draws the same randomness, and ``--clear-cache`` gives
        it new randomness. Without a folder it lives in this process's memory.
        """
        if self._selection_key is None:
            if self.root is None or not self.root.is_dir():
                self._selection_key = secrets.token_bytes(32)
            else:
                path = self.root / ".selection-key"
                text = _made_once(path, secrets.token_hex(32))
                try:
                    key = bytes.fromhex(text)
                except ValueError:
                    key = b""
                if len(key) != 32:
                    # An empty or damaged key would leave the noise a function of the public seeds alone.
                    raise ValueError(f"{path} is damaged (not 32 random bytes in hex): delete it, or run the study "
                                     "with --clear-cache; private selections then draw new randomness")
                self._selection_key = key
        return self._selection_key

    # -------------------------------------------------------------------- statistics
    def take_stats(self) -> dict[str, float]:
        """Hits, misses, seconds computed and seconds saved since the last call (then reset)."""
        stats, self._stats = self._stats, _empty()
        return stats

    # ---------------------------------------------------------------------- internals
    def _compute(self, key: str, compute: Callable[[], SolverResult], path: Path | None) -> SolverResult:
        start = time.perf_counter()
        result = compute()
        seconds = time.perf_counter() - start
        self._stats["misses"] += 1
        self._stats["seconds_computed"] += seconds
        if path is not None:
            _write(path, key, result, seconds)
        self._remember(key, result, seconds)
        return result

    def _hit(self, seconds: float) -> None:
        self._stats["hits"] += 1
        self._stats["seconds_saved"] += seconds

    def _remember(self, key: str, result: SolverResult, seconds: float) -> None:
        size = int(np.asarray(result.weights).nbytes)
        if size > self.memory_bytes:
            return
        if key in self._memory:
            self._held -= int(np.asarray(self._memory.pop(key)[0].weights).nbytes)
        self._memory[key] = (_copy(result), seconds)
        self._held += size
        while self._held > self.memory_bytes:
            _, (old, _) = self._memory.popitem(last=False)
            self._held -= int(np.asarray(old.weights).nbytes)

    def _path(self, key: str) -> Path | None:
        if self.root is None or not self.root.is_dir():
            return None
        return self.root / "minimisers" / key[:2] / f"{key}.npz"

    @contextlib.contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        assert self.root is not None
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl  # lazy(platform): POSIX file locks
        except ImportError:  # not POSIX: no advisory locks; two workers may compute a key twice (same result)
            yield
            return
        with open(locks / f"{key}.lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


_CACHES: dict[str, StudyCache] = {}


def get_cache(root: str | Path | None, ident: str | None = None) -> StudyCache:
    """This process's :class:`StudyCache` of ``root`` (one per folder, kept between runs).

    ``ident`` is the folder's identity (:func:`cache_ident`): a folder deleted
    (``--clear-cache``) and made again has a new one, and a worker that still
    holds entries of the old folder in memory forgets them.
    """
    name = "" if root is None else str(root)
    if name not in _CACHES or _CACHES[name].ident != ident:
        _CACHES[name] = StudyCache(root, ident=ident)
    return _CACHES[name]


def cache_ident(root: Path) -> str:
    """The identity of the cache folder ``root``, made (a random id in ``root/.ident``) when missing.

    The folder is the owner's alone (0700, also when made by an earlier version): it holds private selection's
    secret key and exact non-private minimisers, which other users of the machine must not read (a review).
    """
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):  # not ours to change (a shared folder): its owner's permissions stand
        os.chmod(root, 0o700)
    return _made_once(root / ".ident", uuid.uuid4().hex)


def _made_once(path: Path, value: str) -> str:
    """The text of ``path``, written as ``value`` first if missing (the first of racing writers wins)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        temporary = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        # The owner's only (the secret key is made this way), whatever the umask.
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(value)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before it is linked in: a power loss leaves no empty file
        try:
            with contextlib.suppress(FileExistsError):  # another process made it first: everyone reads its value
                os.link(temporary, path)
        finally:
            temporary.unlink()
        return path.read_text().strip()


def clear_cache(out: str | Path) -> bool:
    """Delete ``<out>/cache`` (every cached minimiser); True if there was one."""
    root = Path(out) / CACHE_DIR
    for cache in _CACHES.values():
        if cache.root is not None and cache.root == root:
            cache._memory.clear()
            cache._held = 0
    if not root.exists():
        return False
    shutil.rmtree(root)
    return True


def merge_stats(total: dict[str, dict[str, float]], method: str, stats: dict[str, float] | None) -> None:
    """Add one run's cache statistics to ``total`` (per method)."""
    if not stats:
        return
    into = total.setdefault(method, _empty())
    for name, value in stats.items():
        into[name] = into.get(name, 0) + value


def _empty() -> dict[str, float]:
    return {"hits": 0, "misses": 0, "seconds_computed": 0.0, "seconds_saved": 0.0, "selection_hits": 0,
            "selection_misses": 0}


def _json_copy(outcome: dict[str, Any]) -> dict[str, Any]:
    """A copy through JSON: what a run reads is the same whether it made the outcome or read it from disk."""
    return json.loads(json.dumps(outcome))


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` atomically: a temporary file in the same folder, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def _read_selection(path: Path, key: str) -> tuple[dict[str, Any], float] | None:
    """The selection at ``path`` if it is a complete entry for ``key``; None otherwise (then it is made again)."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry["format"] != _FORMAT or entry["key"] != key or not isinstance(entry["outcome"], dict):
            return None
        return entry["outcome"], float(entry["seconds"])
    except (FileNotFoundError, OSError, KeyError, TypeError, ValueError):
        return None


def _copy(result: SolverResult) -> SolverResult:
    return SolverResult(weights=np.array(result.weights, dtype=np.float64, copy=True), value=result.value,
                        grad_norm=result.grad_norm, iterations=result.iterations, converged=result.converged)


def _write(path: Path, key: str, result: SolverResult, seconds: float) -> None:
    """Write one entry atomically: a temporary file in the same folder, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as handle:
            np.savez(handle, format=np.array(_FORMAT), key=np.array(key),
                     weights=np.asarray(result.weights, dtype=np.float64), value=np.float64(result.value),
                     grad_norm=np.float64(result.grad_norm), iterations=np.int64(result.iterations),
                     converged=np.bool_(result.converged), seconds=np.float64(seconds))
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def _read(path: Path, key: str) -> tuple[SolverResult, float] | None:
    """The entry at ``path`` if it is a complete entry for ``key``; None otherwise (then it is recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["format"]) != _FORMAT or str(data["key"]) != key:
                return None
            result = SolverResult(weights=np.array(data["weights"], dtype=np.float64), value=float(data["value"]),
                                  grad_norm=float(data["grad_norm"]), iterations=int(data["iterations"]),
                                  converged=bool(data["converged"]))
            return result, float(data["seconds"])
    except (FileNotFoundError, OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
        return None


def describe(stats: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for printing: per method, hits, misses, hit rate and seconds saved (JSON-ready)."""
    rows = []
    for method, s in sorted(stats.items()):
        lookups = s["hits"] + s["misses"]
        selections = s.get("selection_hits", 0) + s.get("selection_misses", 0)
        rows.append({"method": method, "hits": int(s["hits"]), "misses": int(s["misses"]),
                     "hit_rate": (s["hits"] / lookups) if lookups else None,
                     "selection_hits": int(s.get("selection_hits", 0)),
                     "selection_misses": int(s.get("selection_misses", 0)),
                     "selection_hit_rate": (s.get("selection_hits", 0) / selections) if selections else None,
                     "seconds_computed": round(float(s["seconds_computed"]), 3),
                     "seconds_saved": round(float(s["seconds_saved"]), 3)})
    return rows
