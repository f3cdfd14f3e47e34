"""Resource limits of the prediction server."""

from __future__ import annotations

from dataclasses import dataclass

from privml._validation import check_count, check_positive

#: Connections served at once when ``max_connections`` is not set: the
#: standard-library server gives each connection a thread of its own, the
#: ASGI server (one event loop per worker) holds idle connections cheaply.
STDLIB_MAX_CONNECTIONS = 64
ASGI_MAX_CONNECTIONS = 1000


@dataclass(frozen=True, kw_only=True)
class ServeLimits:
    """What one request (and one connection) may consume.

    Attributes
    ----------
    max_rows:
        Rows per ``POST /predict`` request (more: 422). Each row spends one
        answer, so this also caps what one request can take from the budget.
    max_body_bytes:
        Largest request body accepted, checked against ``Content-Length``
        before anything is read (more: 413).
    body_timeout:
        Seconds allowed to receive a whole body; a slower client gets 408 and
        the connection is closed, so trickled bodies cannot hold a thread.
    idle_timeout:
        Seconds a keep-alive connection may sit idle between requests.
    header_timeout:
        Seconds allowed to receive a whole request head (request line and
        headers), counted from the connection's opening or, on a keep-alive
        connection, from the first byte of the next request. A slower client
        gets 408 and the connection is closed, however it paces the bytes
        (ASGI server; the standard-library server bounds each read only).
    max_head_bytes:
        Largest request head (more: 414 for the request line, 431 for the
        headers; ASGI server).
    max_headers:
        Header lines per request (more: 431).
    max_connections:
        Connections served at once; beyond it a client gets 503 at once.
        ``None``: 64 on the standard-library server (a thread per
        connection), 1000 per worker on the ASGI server.
    max_in_flight:
        Requests being answered at once, waiting for a thread included (ASGI
        server, per worker); beyond it a request gets 503 at once rather than
        a place in an unbounded queue.
    threads:
        Threads that validate, charge the ledger and compute answers (ASGI
        server, per worker), so the event loop never waits on them.
    """

    max_rows: int = 1000
    max_body_bytes: int = 1_048_576
    body_timeout: float = 10.0
    idle_timeout: float = 30.0
    header_timeout: float = 10.0
    max_head_bytes: int = 65_536
    max_headers: int = 100
    max_connections: int | None = None
    max_in_flight: int = 256
    threads: int = 8

    def __post_init__(self) -> None:
        check_count(self.max_rows, "max_rows")
        check_count(self.max_body_bytes, "max_body_bytes")
        check_positive(self.body_timeout, "body_timeout")
        check_positive(self.idle_timeout, "idle_timeout")
        check_positive(self.header_timeout, "header_timeout")
        check_count(self.max_head_bytes, "max_head_bytes", minimum=1024)
        check_count(self.max_headers, "max_headers")
        if self.max_connections is not None:
            check_count(self.max_connections, "max_connections")
        check_count(self.max_in_flight, "max_in_flight")
        check_count(self.threads, "threads")

    def connection_limit(self, default: int) -> int:
        """``max_connections``, or the server's ``default`` when it is not set."""
        return default if self.max_connections is None else self.max_connections
