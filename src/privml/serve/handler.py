"""HTTP request handling: routing, body limits, JSON responses.

Every response, including errors raised by :mod:`http.server` itself
(malformed request lines, oversize headers), is a JSON object; client
mistakes get 4xx, and 500 is reserved for genuine bugs (logged with their
traceback).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from privml import __version__
from privml.serve.requests import RequestError

if TYPE_CHECKING:
    from privml.serve.server import PredictionServer

__all__ = ["PredictionHandler"]

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
        if self.headers.get("Transfer-Encoding") is not None:
            raise RequestError(411, "chunked or encoded bodies are not accepted: send a Content-Length")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return None
        text = values[0].strip()
        # ASCII digits only: str.isdigit() also accepts characters such as "²" that int() rejects.
        if len(values) > 1 or not (text.isascii() and text.isdigit()) or len(text) > 18:
            raise RequestError(400, "invalid Content-Length header")
        return int(text)

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
