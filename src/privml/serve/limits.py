"""Resource limits of the prediction server."""

from __future__ import annotations

from dataclasses import dataclass

from privml._validation import check_count, check_positive


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
    max_connections:
        Connections served at once; beyond it a client gets 503 at once
        rather than a thread of its own.
    """

    max_rows: int = 1000
    max_body_bytes: int = 1_048_576
    body_timeout: float = 10.0
    idle_timeout: float = 30.0
    max_connections: int = 64

    def __post_init__(self) -> None:
        check_count(self.max_rows, "max_rows")
        check_count(self.max_body_bytes, "max_body_bytes")
        check_positive(self.body_timeout, "body_timeout")
        check_positive(self.idle_timeout, "idle_timeout")
        check_count(self.max_connections, "max_connections")
