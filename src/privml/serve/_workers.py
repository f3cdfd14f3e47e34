"""``privml serve --workers N``: N server processes on one socket and one persistent ledger.

The supervisor (the process ``privml serve`` started) binds the socket, then
starts N workers (``spawn``: fresh interpreters), each of which opens the
model file and the ledger itself, builds its own service and serves the
inherited socket with :class:`~privml.serve.AsgiPredictionServer`.
The kernel hands each new connection to one worker.

The budget stays exact because every worker charges the one persistent
ledger (SQLite file or PostgreSQL) before it computes, in a transaction that
serialises against the other workers; the ledger's binding context (the
calibration: method, epsilon, delta, accountant) refuses a worker whose
calibration differs. A worker that dies (even by
``kill -9``) loses only answers it had charged and not yet sent: the count
can only over-count. The supervisor starts a replacement.

Noise: each worker (and each replacement) loads the model with fresh OS
entropy. A fixed seed would make every worker draw the same noise, so a
client could average identical answers away; ``--seed`` is refused with
more than one worker.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from privml.serve._limits import ServeLimits
from privml.serve._model import open_served_model
from privml.serve._service import PredictionService

if TYPE_CHECKING:  # the model module loads numpy, the ledgers and the data schema: imported where it is used
    from privml.serve._model import ModelSpec

__all__ = ["ServeSpec", "build_service", "serve_workers"]

READY_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0


@dataclass(frozen=True)
class ServeSpec:
    """Everything a worker needs to open the model and serve it (picklable)."""

    model: ModelSpec
    api_keys: dict[str, int] | None
    limits: ServeLimits
    verbose: bool = False


def build_service(spec: ServeSpec) -> Any:
    """Open the model and its ledger and wrap them in a :class:`PredictionService`."""
    served = open_served_model(spec.model)
    try:
        return served, PredictionService(
            served.predictor,
            limits=spec.limits,
            api_keys=spec.api_keys,
            preprocess=served.preprocess,
            class_names=served.class_names,
        )
    except BaseException:
        if served.ledger is not None:
            served.ledger.close()
        raise


def _die_with(parent: int) -> None:
    """Get SIGTERM when the supervisor dies, even by SIGKILL: no worker outlives it (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent:  # it died before the request above took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _worker(spec: ServeSpec, sock: socket.socket, ready: Connection, parent: int) -> None:
    """A worker process: open everything, say so, serve until SIGTERM (or SIGINT)."""
    _die_with(parent)
    try:
        from privml.serve._asgi_server import AsgiPredictionServer  # lazy(extra): serve: fastapi, uvicorn

        _, service = build_service(spec)
        server = AsgiPredictionServer(service, sock=sock, verbose=spec.verbose)
    except BaseException as exc:  # noqa: BLE001 - reported to the supervisor, which decides
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ready.send(("error", text))
        ready.close()
        sys.exit(1)
    ready.send(("ready", os.getpid()))
    ready.close()
    server.serve_until_signal()


class _Worker:
    def __init__(self, ctx: Any, spec: ServeSpec, sock: socket.socket, index: int) -> None:
        self.index = index
        receiver, sender = ctx.Pipe(duplex=False)
        self.ready = receiver
        self.process = ctx.Process(target=_worker, args=(spec, sock, sender, os.getpid()),
                                   name=f"privml-serve-{index}")
        self.process.start()
        sender.close()
        self.started = False

    def poll_ready(self) -> str | None:
        """``None`` while starting or once ready; the error message when it failed to start."""
        if self.started or not self.ready.poll():
            return None
        try:
            kind, value = self.ready.recv()
        except (EOFError, OSError):
            return f"worker {self.index} exited before it was ready (exit code {self.process.exitcode})"
        if kind == "error":
            return str(value)
        self.started = True
        return None


def _describe(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def serve_workers(spec: ServeSpec, sock: socket.socket, workers: int, on_ready: Any) -> int | None:
    """Run ``workers`` worker processes on ``sock`` until SIGTERM or SIGINT; return the signal.

    ``on_ready()`` is called once every worker serves. A worker that fails to
    start raises ``RuntimeError`` (the others are stopped); one that dies
    later is replaced.
    """
    if spec.model.random_state is not None and workers > 1:
        raise ValueError("a seed would give every worker the same noise: --seed needs --workers 1")
    ctx = multiprocessing.get_context("spawn")
    received: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    pool: list[_Worker] = []
    try:
        pool = [_Worker(ctx, spec, sock, i) for i in range(workers)]
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(w.started for w in pool) and not received:
            for w in pool:
                error = w.poll_ready()
                if error is None and not w.started and not w.process.is_alive() and not w.ready.poll():
                    error = f"worker {w.index} exited before it was ready ({_describe(w.process.exitcode)})"
                if error is not None:
                    raise RuntimeError(f"a worker failed to start: {error}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not start within {READY_TIMEOUT:g} s")
            wait([w.ready for w in pool if not w.started], timeout=0.2)
        if not received:
            on_ready()
        while not received:
            wait([w.process.sentinel for w in pool] + [w.ready for w in pool if not w.started], timeout=0.5)
            for i, w in enumerate(pool):
                error = w.poll_ready()
                if error is not None:
                    raise RuntimeError(f"a replacement worker failed to start: {error}")
                if not w.process.is_alive() and not received:
                    sys.stderr.write(f"privml serve: worker {w.index} (pid {w.process.pid}) stopped "
                                     f"({_describe(w.process.exitcode)}); starting another\n")
                    sys.stderr.flush()
                    w.ready.close()
                    pool[i] = _Worker(ctx, spec, sock, w.index)
    finally:
        _stop_all(pool)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return received[0] if received else None


def _stop_all(pool: list[_Worker]) -> None:
    """SIGTERM every worker (they finish what they are answering), then wait; SIGKILL stragglers."""
    for w in pool:
        if w.process.is_alive():
            try:
                os.kill(w.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_TIMEOUT
    for w in pool:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5)
        w.ready.close()
