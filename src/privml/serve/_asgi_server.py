"""The production server: the ASGI application on uvicorn, one event loop per worker.

uvicorn's HTTP/1.1 protocol (h11) is extended with what a server facing
untrusted clients needs and uvicorn does not do itself:

- a deadline on the whole request head (``header_timeout``), counted from the
  connection's opening or the first byte of the next request, so a client
  trickling header lines is cut however it paces them (408);
- limits on the head's size (414 for the request line, 431 for the headers)
  and header count (431), unsupported HTTP versions (505), and JSON bodies
  for every error the protocol answers itself;
- a connection cap (``max_connections``): beyond it, 503 at once;
- lingering close: a connection closed with input still arriving is first
  half-closed and drained (at most 1 s, 1 MiB), so the kernel never resets
  it and destroys a response before the client reads it;
- half-closed clients (a client that sends its request and shuts down its
  side) still get their answer.

Needs the ``serve`` extra (``pip install 'privml[serve]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import threading
import time
from http import HTTPStatus
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from privml import __version__
from privml._validation import check_port
from privml.serve._asgi import PEER_KEY, create_app
from privml.serve._limits import ASGI_MAX_CONNECTIONS, ServeLimits
from privml.serve._service import PredictionService

__all__ = ["AsgiPredictionServer", "PrivmlH11Protocol", "bind_socket"]

LINGER_SECONDS = 1.0
LINGER_BYTES = 1 << 20
GRACEFUL_SECONDS = 10
_SERVER = f"privml/{__version__}".encode()


def _error_bytes(status: int, message: str, *, retry_after: bool = False) -> bytes:
    body = json.dumps({"error": message}).encode()
    try:
        phrase = HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b"Error"
    head = [
        b"HTTP/1.1 %d %s" % (status, phrase),
        b"Server: " + _SERVER,
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        b"Cache-Control: no-store",
        b"Connection: close",
    ]
    if retry_after:
        head.append(b"Retry-After: 1")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class _Connection:
    """An ``h11.Connection`` that also refuses what h11 lets through (versions, header count)
    and remembers which status a protocol error deserves."""

    __slots__ = ("_conn", "_limits", "error")

    def __init__(self, conn: h11.Connection, limits: ServeLimits) -> None:
        self._conn = conn
        self._limits = limits
        self.error: tuple[int, str] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def next_event(self) -> Any:
        try:
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            self.error = self._classify(exc)
            raise
        if isinstance(event, h11.Request):
            if event.http_version not in (b"1.0", b"1.1"):
                self.error = (505, f"HTTP/{event.http_version.decode('ascii', 'replace')} is not supported: "
                                   "use HTTP/1.1")
                raise h11.RemoteProtocolError(self.error[1], 505)
            limit = self._limits.max_head_bytes
            if len(event.target) > limit:
                self.error = (414, f"request line longer than {limit} bytes")
            elif len(event.headers) > self._limits.max_headers:
                self.error = (431, f"more than {self._limits.max_headers} header lines")
            elif len(event.target) + sum(len(name) + len(value) + 4 for name, value in event.headers) > limit:
                self.error = (431, f"request head larger than {limit} bytes")
            if self.error is not None:
                raise h11.RemoteProtocolError(self.error[1], self.error[0])
        return event

    def _classify(self, exc: h11.RemoteProtocolError) -> tuple[int, str]:
        hint = exc.error_status_hint
        text = str(exc)
        if hint == 431:
            buffered = self._conn.trailing_data[0]
            if b"\n" not in buffered:
                return 414, f"request line longer than {self._limits.max_head_bytes} bytes"
            return 431, f"request head larger than {self._limits.max_head_bytes} bytes"
        if "Transfer-Encoding" in text:  # h11 refuses encodings other than chunked (501)
            return 411, "chunked or encoded bodies are not accepted: send a Content-Length"
        if "Content-Length" in text:
            return 400, "invalid Content-Length header"
        # h11's messages may quote the offending bytes: keep the reason only.
        reason = text.split(":", 1)[0].strip()[:100] or "malformed"
        return (hint if 400 <= hint < 600 else 400), f"invalid HTTP request: {reason}"


class _LingeringTransport:
    """The connection's transport, whose ``close()`` lingers (see the module docstring)."""

    def __init__(self, transport: asyncio.Transport, protocol: PrivmlH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def write(self, data: bytes) -> None:
        if not self._closing:  # a late write after the close (an app answering a dropped client) is dropped
            self._transport.write(data)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        transport = self._transport
        if transport.is_closing():
            return
        if self._protocol.peer_eof:  # the client has sent everything: nothing can arrive to reset
            transport.close()
            return
        self._protocol.start_draining()
        try:
            transport.write_eof()
        except (OSError, RuntimeError, NotImplementedError):
            transport.close()
            return
        with contextlib.suppress(RuntimeError):
            transport.resume_reading()


class PrivmlH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a head deadline, head limits, a connection cap and lingering close."""

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: ServeLimits = config.privml_limits  # type: ignore[attr-defined]
        # The same object twice: uvicorn's code sees an h11.Connection, ours the wrapper's error too.
        self._checked_conn = _Connection(self.conn, self.limits)
        self.conn = self._checked_conn  # type: ignore[assignment]  # duck-types h11.Connection
        self.peer_eof = False
        self._draining = False
        self._drained = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None

    # -- connections ---------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        raw_socket = transport.get_extra_info("socket")
        if raw_socket is not None and raw_socket.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # whoever made the listening socket: no Nagle delay
                raw_socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        wrapped = _LingeringTransport(transport, self)
        limit = self.limits.connection_limit(ASGI_MAX_CONNECTIONS)
        if len(self.connections) >= limit:
            # Refuse at once rather than queue: a flood of connections must not exhaust descriptors.
            self.transport = wrapped  # type: ignore[assignment]
            transport.write(_error_bytes(503, "too many connections; retry later", retry_after=True))
            wrapped.close()
            return
        super().connection_made(wrapped)  # type: ignore[arg-type]
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._linger_timer = None
        super().connection_lost(exc)

    def start_draining(self) -> None:
        """Discard input until the client closes, ``LINGER_BYTES`` arrive or ``LINGER_SECONDS`` pass."""
        self._draining = True
        self._unset_keepalive_if_required()
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, self._abort)

    def _abort(self) -> None:
        if self._raw is not None and not self._raw.is_closing():
            self._raw.close()

    # -- input ---------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._draining:
            self._drained += len(data)
            if self._drained > LINGER_BYTES:
                self._abort()
            return
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        self._head_settled()

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not before:
            # ASGI allows extension keys in the scope; uvicorn's TypedDict lists only the standard ones.
            cast("dict[str, Any]", self.cycle.scope)[PEER_KEY] = self

    # asyncio.Protocol.eof_received returns bool | None (True keeps the transport open); uvicorn
    # annotates its override -> None, so mypy would refuse the wider return of this one.
    def eof_received(self) -> bool | None:  # type: ignore[override]
        self.peer_eof = True
        if self._draining:
            return False  # the client has closed: close
        if self.cycle is not None and not self.cycle.response_complete:
            # The client sent its request and shut down its side: answer, then close.
            # A body reader waiting for more learns that none will come.
            self.cycle.message_event.set()
            return True
        return False

    # -- the head deadline ---------------------------------------------------

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timeout)

    def _head_settled(self) -> None:
        """Stop the head deadline once a head has arrived (h11 is past IDLE)."""
        if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:
            message = f"request head not received within {self.limits.header_timeout:g} s"
            self.transport.write(_error_bytes(408, message))
        self.transport.close()

    # -- output ----------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        status, message = self._checked_conn.error or (400, "invalid HTTP request")
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.response_started:  # an answer is on its way: just stop
                self.transport.close()
                return
            self.cycle.disconnected = True  # the application's own answer is dropped
            self.cycle.message_event.set()
        self.transport.write(_error_bytes(status, message))
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.peer_eof and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()
            return
        if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            self._arm_head_timer()  # a pipelined request's head is already arriving


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``ValueError`` when that is impossible)."""
    check_port(port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio disables Nagle's algorithm only on sockets that say they are TCP;
    # with it on, a response's head and body (two writes) wait for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_shutdown: Any) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets=sockets)


class AsgiPredictionServer:
    """Serves a :class:`~privml.serve.PredictionService` with uvicorn.

    Parameters
    ----------
    service:
        What to serve (its ``limits`` bound requests and connections).
    host, port:
        Where to listen; ``port=0`` picks a free port (see :attr:`url`).
        Ignored when ``sock`` is given.
    sock:
        A listening socket to serve on (a worker of ``privml serve --workers``).
    verbose:
        Log every request on stderr.

    Examples
    --------
    >>> server = AsgiPredictionServer(service, port=0)  # doctest: +SKIP
    >>> server.serve_until_signal()                     # doctest: +SKIP
    """

    def __init__(self, service: PredictionService, *, host: str = "127.0.0.1", port: int = 8000,
                 sock: socket.socket | None = None, verbose: bool = False) -> None:
        self.service = service
        self.limits = service.limits
        self.app = create_app(service)
        self._transport = self.app.state.transport
        self.sock = sock if sock is not None else bind_socket(host, port)
        self.server_address = self.sock.getsockname()
        config = uvicorn.Config(
            self.app,
            http=PrivmlH11Protocol,
            ws="none",
            lifespan="off",
            loop="asyncio",
            interface="asgi3",
            log_config=None,
            log_level="info" if verbose else "error",  # warnings (each malformed request) only with --verbose
            access_log=verbose,
            proxy_headers=False,
            server_header=False,
            headers=[("Server", f"privml/{__version__}")],
            timeout_keep_alive=self.limits.idle_timeout,  # type: ignore[arg-type]
            timeout_graceful_shutdown=GRACEFUL_SECONDS,
            h11_max_incomplete_event_size=self.limits.max_head_bytes,
            backlog=2048,
        )
        config.privml_limits = self.limits  # type: ignore[attr-defined]
        if verbose:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            for name in ("uvicorn.error", "uvicorn.access"):
                logger = logging.getLogger(name)
                if not logger.handlers:
                    logger.addHandler(handler)
        self._server = _Server(config, self._begin_stop)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, with the port actually bound."""
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"

    @property
    def stopping(self) -> bool:
        """Set once shutdown began: late requests on open connections get 503."""
        return self._transport.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self._transport.stopping = bool(value)

    def _begin_stop(self) -> None:
        self._transport.stopping = True

    def serve_until_signal(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> int | None:
        """Serve until one of ``signals`` arrives, then stop gracefully.

        New connections stop being accepted, requests in progress finish (up
        to 10 s), and the service's ledger is closed. Must run in the main
        thread (signal handlers). Returns the signal received.
        """
        received: list[int] = []

        def stop(signum: int, frame: Any) -> None:
            received.append(signum)
            self._server.should_exit = True

        # uvicorn installs its own handlers while it runs and re-raises the signal it caught
        # afterwards: into these, which record it rather than kill the process.
        previous = {sig: signal.signal(sig, stop) for sig in signals}
        try:
            self._server.run(sockets=[self.sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._close()
        return received[0] if received else None

    def _close(self) -> None:
        self._transport.executor.shutdown(wait=True)
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.service.ledger is not None:
            self.service.ledger.close()

    # -- in a background thread (tests, embedding) -----------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Serve in a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                        name="privml-asgi-server")
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the ASGI server did not start")
            time.sleep(0.01)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop a server started with :meth:`start` (the ledger stays open)."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._transport.executor.shutdown(wait=False)
        with contextlib.suppress(OSError):
            self.sock.close()
