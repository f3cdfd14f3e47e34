"""The standard-library HTTP server: connection limits, startup and graceful shutdown.

One thread per connection (:mod:`http.server`), one process. ``privml serve``
runs the ASGI server (:mod:`privml.serve.asgi_server`) unless asked for this
one with ``--server stdlib``; it is kept as the baseline of
``benchmarks/serve.py``. It bounds each read of a request head but not the
head as a whole, so a client trickling header lines holds a thread.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from privml._validation import check_port
from privml.serve.handler import PredictionHandler
from privml.serve.limits import STDLIB_MAX_CONNECTIONS
from privml.serve.openapi import openapi_schema
from privml.serve.service import PredictionService

__all__ = ["PredictionServer"]

_LINGER_SECONDS = 1.0
_LINGER_BYTES = 1 << 20
_BUSY = json.dumps({"error": "too many connections; retry later"}).encode()
_BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(_BUSY)).encode() + b"\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + _BUSY
)


class PredictionServer(ThreadingHTTPServer):
    """Serves a :class:`~privml.serve.service.PredictionService` over HTTP.

    Parameters
    ----------
    service:
        What to serve (its ``limits`` bound requests and connections).
    host, port:
        Where to listen; ``port=0`` picks a free port (see :attr:`url`).
        Ignored when ``sock`` is given.
    sock:
        A listening socket to serve on instead (``privml serve`` binds it
        before it opens the ledger); closed with the server.
    verbose:
        Log every request on stderr.

    Examples
    --------
    >>> server = PredictionServer(service, port=0)  # doctest: +SKIP
    >>> server.serve_until_signal()                 # doctest: +SKIP
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, service: PredictionService, *, host: str = "127.0.0.1", port: int = 8000, verbose: bool = False,
        sock: socket.socket | None = None,
    ) -> None:
        check_port(port)
        if sock is not None:
            host, port = sock.getsockname()[:2]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.service = service
        self.limits = service.limits
        self.verbose = verbose
        self.openapi = openapi_schema(service)
        self._slots = threading.BoundedSemaphore(self.limits.connection_limit(STDLIB_MAX_CONNECTIONS))
        self._in_flight = 0
        self.stopping = False  # set on shutdown: late requests on open connections get 503
        self._idle = threading.Condition()
        if sock is not None:
            # Bound by the caller (privml serve binds before it opens the ledger): adopt it instead of binding.
            super().__init__((host, port), PredictionHandler, bind_and_activate=False)
            self.socket.close()
            self.socket = sock
            self.server_address = sock.getsockname()
            self.server_name, self.server_port = socket.getfqdn(str(host)), int(port)  # as server_bind sets them
            return
        try:
            super().__init__((host, port), PredictionHandler)
        except OSError as exc:
            raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    @property
    def url(self) -> str:
        """The base URL, with the port actually bound."""
        host, port = self.server_address[:2]
        assert isinstance(host, str)  # server_bind() sets it from getsockname(): str for AF_INET and AF_INET6
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"

    # -- connection limit -----------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # Refuse at once rather than queue: a flood of idle connections
            # must not pin every thread.
            with contextlib.suppress(OSError):  # the client may already be gone
                request.settimeout(1.0)
                request.sendall(_BUSY_RESPONSE)
                request.shutdown(socket.SHUT_WR)
                # No lingering here (this is the accept loop's thread), but input that has
                # already arrived is read without waiting, so closing does not reset the
                # connection and destroy the 503 before the client reads it.
                request.setblocking(False)
                while len(request.recv(65536)) > 0:
                    pass
            self.close_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown_request(self, request: Any) -> None:
        """Lingering close: drain what the client is still sending, then close.

        Closing a socket with unread input makes the kernel send a reset,
        which can destroy a response (say a 413 for a body left unread)
        before the client reads it. Bounded in time and bytes.
        """
        with contextlib.suppress(OSError):  # a reset by the client ends the drain early
            request.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + _LINGER_SECONDS
            drained = 0
            while drained < _LINGER_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                request.settimeout(left)
                chunk = request.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        self.close_request(request)

    # -- in-flight requests (for a graceful stop) -----------------------------

    def request_started(self) -> None:
        with self._idle:
            self._in_flight += 1

    def request_finished(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until no request is being handled; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def serve_until_signal(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> int | None:
        """Serve until one of ``signals`` arrives, then stop gracefully.

        New connections stop being accepted, requests in progress finish
        (up to 10 s), and the service's ledger is closed. Must run in the
        main thread (signal handlers). Returns the signal received.
        """
        received: list[int] = []

        def stop(signum: int, frame: Any) -> None:
            received.append(signum)
            # shutdown() waits for serve_forever() to return: not from this thread.
            threading.Thread(target=self.shutdown, daemon=True).start()

        previous = {sig: signal.signal(sig, stop) for sig in signals}
        try:
            self.serve_forever(poll_interval=0.2)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stopping = True
            self.drain()
            self.server_close()
            if self.service.ledger is not None:
                self.service.ledger.close()
        return received[0] if received else None
