"""Progress bars on stderr for long work, with no required dependency.

Uses tqdm when it is installed; otherwise a small built-in bar that prints
the fraction done, the rate and the estimated time left. Either way stdout
is untouched, so ``--json`` output stays one clean object.
"""

from __future__ import annotations

import sys
import time
from typing import Any


class _PlainBar:
    """Minimal stand-in for tqdm: ``update(n)``, ``set_postfix_str(s)``, ``close()``."""

    def __init__(self, total: int, desc: str, unit: str, min_interval: float = 0.5) -> None:
        self.total, self.desc, self.unit = max(int(total), 1), desc, unit
        self.n = 0
        self._start = self._last = time.monotonic()
        self._postfix = ""
        self._min_interval = min_interval

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self._min_interval or self.n >= self.total:
            self._last = now
            self._draw(now)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self._postfix = text

    def _draw(self, now: float) -> None:
        elapsed = now - self._start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.n) / rate if rate > 0 else float("nan")
        width = 24
        filled = int(width * self.n / self.total)
        bar = "#" * filled + "-" * (width - filled)
        extra = f" {self._postfix}" if self._postfix else ""
        sys.stderr.write(
            f"\r{self.desc}: [{bar}] {self.n}/{self.total} {self.unit} "
            f"{elapsed:.0f}s elapsed, ~{left:.0f}s left{extra}   "
        )
        sys.stderr.flush()

    def close(self) -> None:
        self._draw(time.monotonic())
        sys.stderr.write("\n")
        sys.stderr.flush()

    def __enter__(self) -> _PlainBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NoBar:
    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def progress_bar(total: int, *, desc: str, unit: str = "it", enabled: bool = True) -> Any:
    """A progress bar on stderr (tqdm if available), or a silent stand-in when disabled.

    Use as a context manager so the bar is closed on errors too.
    """
    if not enabled or total <= 0:  # nothing to do (a study whose runs are all done): no "0/1, ~nan s left" bar
        return _NoBar()
    try:
        from tqdm import tqdm  # lazy(extra): tqdm is optional: a plain bar without it
    except ImportError:
        return _PlainBar(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr)
