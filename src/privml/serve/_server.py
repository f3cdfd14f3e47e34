"""The standard-library HTTP server: request handling, connection limits, startup and graceful shutdown.

One thread per connection (:mod:`http.server`), one process. ``privml serve``
runs the ASGI server (:mod:`privml.serve._asgi_server`) unless asked for this
one with ``--server stdlib``; it is kept as the baseline of
``benchmarks/serve.py``. It bounds each read of a request head but not the
head as a whole, so a client trickling header lines holds a thread.

Every response, including errors raised by :mod:`http.server` itself
(malformed request lines, oversize headers), is a JSON object; client
mistakes get 4xx, and 500 is reserved for genuine bugs (logged with their
traceback).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from privml import __version__
from privml._validation import check_port
from privml.serve._limits import STDLIB_MAX_CONNECTIONS
from privml.serve._openapi import openapi_schema
from privml.serve._requests import RequestError, content_length
from privml.serve._service import PredictionService

__all__ = ["PredictionHandler", "PredictionServer"]

_JSON_TYPES = ("application/json",)
_READ_CHUNK = 65536


class PredictionHandler(BaseHTTPRequestHandler):
    """Routes ``/predict``, ``/budget``, ``/healthz`` and ``/openapi.json``."""

    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    # Headers and body leave in two writes; with Nagle's algorithm the second
    # waits for the client's delayed ACK (~40 ms a response on Linux).
    disable_nagle_algorithm = True
    # A request line without a version is answered as HTTP/1.0, so even
    # garbage gets a status line and a JSON error rather than a bare body.
    default_request_version = "HTTP/1.0"
    server: PredictionServer

    #: path -> {method: handler name}
    ROUTES: dict[str, dict[str, str]] = {
        "/predict": {"POST": "_predict"},
        "/budget": {"GET": "_budget"},
        "/healthz": {"GET": "_healthz"},
        "/openapi.json": {"GET": "_openapi"},
    }

    def version_string(self) -> str:
        return f"privml/{__version__}"

    def setup(self) -> None:
        # The socket timeout bounds how long an idle keep-alive connection
        # (or a stalled request line) holds a thread.
        # typeshed declares StreamRequestHandler.timeout a ClassVar, but setup() reads it from the instance.
        self.timeout = self.server.limits.idle_timeout  # type: ignore[misc]
        super().setup()

    # http.server answers unknown methods with 501 and an HTML page; every
    # method name is routed here instead, so the answer is 404 or 405 in JSON.
    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def _dispatch(self) -> None:
        self.server.request_started()
        try:
            if self.server.stopping:
                self.close_connection = True
                raise RequestError(503, "the server is shutting down; nothing was answered")
            self._route()
        except RequestError as exc:
            self._fail(exc.status, exc.message)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception:  # a bug, not the client's fault: say so, keep serving
            sys.stderr.write(f"privml serve: internal error on {self.command} {self.path}\n{traceback.format_exc()}")
            self._fail(500, "internal server error")
        finally:
            self.server.request_finished()

    def _route(self) -> None:
        path = urlsplit(self.path).path
        methods = self.ROUTES.get(path)
        if methods is None:
            self._discard_body()
            raise RequestError(404, f"no such endpoint: {path[:100]}")
        if self.command not in methods:
            self._discard_body()
            self.close_connection = True
            raise RequestError(405, f"{self.command[:20]} is not allowed on {path}; use {', '.join(methods)}")
        if self.command != "POST":
            self._discard_body()
        getattr(self, methods[self.command])()

    # -- endpoints ----------------------------------------------------------

    def _predict(self) -> None:
        service = self.server.service
        # Any refusal before the body is read leaves it unread, so the
        # connection cannot be reused: the next "request" would be the rest of
        # this body. Once it is read, the client's own choice applies again.
        client_closes = self.close_connection
        self.close_connection = True
        key = service.authenticate(self.headers.get("X-API-Key"))
        body = self._read_body()
        self.close_connection = client_closes
        self._send(200, service.predict(body, key))

    def _budget(self) -> None:
        service = self.server.service
        key = service.authenticate(self.headers.get("X-API-Key"))
        self._send(200, service.budget(key))

    def _healthz(self) -> None:
        self._send(200, self.server.service.health())

    def _openapi(self) -> None:
        self._send(200, self.server.openapi)

    # -- bodies -------------------------------------------------------------

    def _content_length(self) -> int | None:
        return content_length(self.headers.get_all("Content-Length") or [], self.headers.get("Transfer-Encoding"))

    def _discard_body(self) -> None:
        """A body on a request that takes none: read it if small, else close."""
        try:
            length = self._content_length()
        except RequestError:
            self.close_connection = True
            return
        if length:
            if length > self.server.limits.max_body_bytes:
                self.close_connection = True
            else:
                self._read_exactly(length)

    def _read_body(self) -> bytes:
        """The request body, after the checks that need no reading (type, length)."""
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if content_type not in _JSON_TYPES:
            raise RequestError(415, f"Content-Type must be application/json, got {content_type[:80] or 'none'!r}")
        length = self._content_length()
        if length is None:
            raise RequestError(411, "missing Content-Length header")
        limit = self.server.limits.max_body_bytes
        if length > limit:
            raise RequestError(413, f"body of {length} bytes is larger than the limit of {limit} bytes")
        return self._read_exactly(length)

    def _read_exactly(self, length: int) -> bytes:
        """Read ``length`` bytes within the body timeout, however the client paces them."""
        deadline = time.monotonic() + self.server.limits.body_timeout
        chunks: list[bytes] = []
        received = 0
        try:
            while received < length:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(min(length - received, _READ_CHUNK))
                if not chunk:
                    self.close_connection = True
                    raise RequestError(400, f"body ended after {received} of {length} bytes")
                chunks.append(chunk)
                received += len(chunk)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(408, f"body not received within {self.server.limits.body_timeout:g} s") from None
        finally:
            self.connection.settimeout(self.server.limits.idle_timeout)
        return b"".join(chunks)

    def handle_expect_100(self) -> bool:
        """Answer ``Expect: 100-continue`` with the refusal itself when the body would be refused."""
        try:
            length = self._content_length()
            if length is not None and length > self.server.limits.max_body_bytes:
                raise RequestError(
                    413, f"body of {length} bytes is larger than the limit of {self.server.limits.max_body_bytes} bytes"
                )
        except RequestError as exc:
            self.close_connection = True
            self._fail(exc.status, exc.message)
            return False
        return super().handle_expect_100()

    # -- responses ----------------------------------------------------------

    def _fail(self, status: int, message: str) -> None:
        self._send(status, {"error": message})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, allow_nan=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if status == 405:
            path = urlsplit(self.path).path
            self.send_header("Allow", ", ".join(self.ROUTES.get(path, {})))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (bad request line, huge headers) as JSON."""
        self.close_connection = True
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        with contextlib.suppress(OSError):  # the client hung up: nobody to tell
            self._send(code, {"error": message or phrase})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        if self.server.verbose:
            super().log_message(format, *args)


_LINGER_SECONDS = 1.0
_LINGER_BYTES = 1 << 20
_BUSY = json.dumps({"error": "too many connections; retry later"}).encode()
_BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(_BUSY)).encode() + b"\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + _BUSY
)


class PredictionServer(ThreadingHTTPServer):
    """Serves a :class:`~privml.serve.PredictionService` over HTTP.

    The parameters are those of :class:`~privml.serve.AsgiPredictionServer` (``privml
    serve --server stdlib`` binds ``sock`` before it opens the ledger; it is closed with the server).

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
