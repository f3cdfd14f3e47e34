"""Shared helpers for benchmarks: timing and machine description."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn: Callable[[], Any], *, repeats: int = 3) -> tuple[Any, float]:
    """Run ``fn`` ``repeats`` times; return the last result and the median wall time (s)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # A copy of the tree measured elsewhere (the GPU machine: benchmarks/gpu_checks.sh) names its commit.
    commit = os.environ.get("PRIVML_BENCH_COMMIT", "")
    try:
        commit = commit or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
    }


def machine_line(m: dict) -> str:
    """The record of :func:`machine` as one line, for the "Machine:" line of a BENCHMARKS.md section."""
    return f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, commit {m['commit']}, {m['date']}"


def write_json(path: str | Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
