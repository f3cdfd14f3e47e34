"""Where the runs of a study execute: in-process, joblib workers, or a Dask cluster.

Every executor has one method, ``map_unordered(fn, items)``, yielding
``fn(item)`` as each finishes, so the coordinator can store results (and
update the progress bar) as they arrive, and an interrupted study keeps
everything finished so far. ``fn`` must be a module-level function (it is
pickled to the workers); it catches its own errors and returns them as data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from joblib import Parallel, delayed
from joblib.externals.loky.process_executor import TerminatedWorkerError
from threadpoolctl import threadpool_limits

from privml.exceptions import WorkerLost

__all__ = ["DaskExecutor", "Executor", "JoblibExecutor", "SerialExecutor", "make_executor"]

#: Seconds to wait for a Dask scheduler before refusing the study.
CONNECT_TIMEOUT = 10


class Executor(Protocol):
    """Runs independent jobs and yields their results as they finish."""

    description: str

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]: ...


class SerialExecutor:
    """One job after another in this process (``--jobs 1``).

    Numerical libraries (BLAS, OpenMP) are limited to one thread while a job
    runs, as in each joblib worker: ``--jobs N`` then uses N cores whatever N
    is, and per-run times are comparable between executors. (Measured on the
    quick preset: with the default two BLAS threads the serial runs took 1.7x
    longer in total than the same runs on one thread each, as threading
    overhead dominates the study's many small solves.)
    """

    description = "serial"

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            with threadpool_limits(limits=1):
                result = fn(item)
            yield result


class JoblibExecutor:
    """``n_jobs`` local worker processes (joblib's loky backend).

    Each worker caches the datasets it has loaded, so a worker pays the load
    once. Numerical libraries are limited to one thread per worker by joblib,
    so ``n_jobs`` workers use ``n_jobs`` cores.
    """

    def __init__(self, n_jobs: int) -> None:
        if n_jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {n_jobs}")
        self.n_jobs = n_jobs
        self.description = f"joblib, {n_jobs} workers"

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        parallel = Parallel(n_jobs=self.n_jobs, return_as="generator_unordered")
        try:
            yield from parallel(delayed(fn)(item) for item in items)
        except TerminatedWorkerError as exc:
            # A worker killed from outside (out of memory, a signal): finished runs are stored; say so in one line.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WorkerLost(f"a study worker process died ({first}); finished runs are kept: run the study again "
                               "to resume, with fewer --jobs if memory ran out") from None


class DaskExecutor:
    """A Dask cluster (``dask://HOST:PORT`` on the command line), or an existing ``distributed.Client``.

    Parameters
    ----------
    address : str or distributed.Client
        Scheduler address (``tcp://HOST:PORT``; ``dask://`` is accepted) or a client.
    """

    def __init__(self, address: Any) -> None:
        self.address = address
        self.description = f"dask at {address}" if isinstance(address, str) else "dask (existing client)"

    def _connect(self, client_class: Any) -> Any:
        try:
            return client_class(_tcp(self.address), timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"cannot reach the Dask scheduler at {self.address}: {reason}") from None

    def check_reachable(self) -> None:
        """Connect once and hang up: an unreachable scheduler is refused before the study writes anything."""
        if not isinstance(self.address, str):
            return
        try:
            from distributed import Client  # lazy(extra): distributed (study)
        except ImportError:
            raise ValueError("--executor dask://... needs dask.distributed (pip install 'distributed')") from None
        self._connect(Client).close()

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        try:
            from distributed import Client, as_completed  # lazy(extra): distributed (study)
        except ImportError:
            raise ValueError("--executor dask://... needs dask.distributed (pip install 'distributed')") from None
        owned = isinstance(self.address, str)
        client = self._connect(Client) if owned else self.address
        try:
            # pure=False: equal arguments are still separate runs (they would be cached otherwise).
            futures = client.map(fn, list(items), pure=False)
            for future in as_completed(futures):
                yield future.result()
        finally:
            if owned:
                client.close()


def _tcp(address: str) -> str:
    if address.startswith("dask://"):
        return "tcp://" + address[len("dask://"):]
    return address


def make_executor(executor: str | None = None, *, jobs: int = 1) -> Executor:
    """The executor named on the command line.

    Parameters
    ----------
    executor : str, optional
        ``None`` or ``"local"``: joblib with ``jobs`` workers (in-process for
        ``jobs = 1``); ``"dask://HOST:PORT"`` or ``"tcp://HOST:PORT"``: that Dask scheduler.
    jobs : int
        Local workers.

    Raises
    ------
    ValueError
        For an unknown executor or an invalid ``jobs``.
    """
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if executor in (None, "local"):
        return SerialExecutor() if jobs == 1 else JoblibExecutor(jobs)
    if executor.startswith(("dask://", "tcp://")):
        if len(executor.split("://", 1)[1]) == 0:
            raise ValueError(f"--executor {executor!r} names no scheduler; use dask://HOST:PORT")
        return DaskExecutor(executor)
    raise ValueError(f"unknown executor {executor!r}; use local or dask://HOST:PORT")
