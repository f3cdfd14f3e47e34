"""Run ``privml serve`` as a subprocess and read the URL it announces."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path


def start_server(*args: str, timeout: float = 60.0) -> tuple[subprocess.Popen, dict]:
    """Start ``privml serve ARGS --port 0 --json``; return the process and its start-up object."""
    command = [sys.executable, "-m", "privml.cli.main", "serve", *args, "--port", "0", "--json"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"privml serve did not start: {err.decode()[-2000:]}")
        if selector.select(timeout=min(left, 0.5)):
            chunk = os.read(proc.stdout.fileno(), 4096)
            line += chunk
    selector.close()
    return proc, json.loads(line)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privml.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=Path.cwd())
