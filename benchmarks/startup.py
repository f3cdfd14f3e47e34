"""Start-up time of the CLI against a bare ``import numpy, scipy.special`` (issues 18 and 30).

Median of ``--repeats`` fresh processes for each command, the commands taking
turns within each repeat (so that a change in the machine's load moves them
alike). Targets: ``privml --help`` at most half the bare import;
``privml account dpsgd ...`` at most 1.2 times it. Run from the repository root::

    .venv/bin/python benchmarks/startup.py

Writes ``benchmarks/results/startup.json``; :func:`render` turns it into the
BENCHMARKS.md section.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, machine_line, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "startup.json"
PRIVML = [sys.executable, "-m", "privml.cli.main"]
COMMANDS = {
    "python -c 'import numpy, scipy.special' (bare)": [sys.executable, "-c", "import numpy, scipy.special"],
    "privml --help": [*PRIVML, "--help"],
    "privml account dpsgd --noise-multiplier 1.1 --sample-rate 0.0042667 --steps 14040 --delta 1e-5": [
        *PRIVML, "account", "dpsgd", "--noise-multiplier", "1.1", "--sample-rate", "0.0042667", "--steps", "14040",
        "--delta", "1e-5"],
}


def _seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _median_seconds(commands: dict[str, list[str]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, argv in commands.items():
            times[name].append(_seconds(argv))
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    for argv in COMMANDS.values():  # warm the file cache: the first process reads every module from disk
        _seconds(argv)
    medians = _median_seconds(COMMANDS, args.repeats)
    rows = [{"command": name, "seconds": medians[name]} for name in COMMANDS]
    payload = {"machine": machine(), "repeats": args.repeats, "load_average": os.getloadavg()[0], "rows": rows,
               "command": ".venv/bin/python benchmarks/startup.py"}
    write_json(args.out, payload)
    print(render(payload))
    return 0


def render(data: dict) -> str:
    m = data["machine"]
    bare = data["rows"][0]["seconds"]
    targets = ["", "at most 0.5x", "at most 1.2x"]
    out = [
        "## Start-up: the CLI against a bare numpy/scipy import",
        "",
        f"Command: `{data['command']}` (median of {data['repeats']} fresh processes each, taking turns).  ",
        f"Machine: {machine_line(m)}; "
        f"load average at the end {data['load_average']:.1f}.",
        "",
        "| command | median wall time | ratio to the bare import | target |",
        "|---|---|---|---|",
    ]
    for row, target in zip(data["rows"], targets):
        out.append(f"| `{row['command']}` | {row['seconds']:.3f} s | {row['seconds'] / bare:.2f}x | {target} |")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
