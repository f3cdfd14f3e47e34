"""The paper-cnn study at full scale on a GPU, summarised from its results store.

The study itself runs on the GPU machine (``benchmarks/gpu_checks.sh study``, resumed call after call
from the store it brings back); this script reads that store here and records what it holds:

    python benchmarks/study_gpu.py .gpu/study/results.sqlite --device-from benchmarks/results/torch_gpu.json \
        --commits 365adcf 7cfd95d --calls "session 11: 380 s, 135 s (1 worker)" "session 12: 192 s (4 workers)"

Everything it writes is read from the store: run counts, failures, the runs' own wall times and the mean test
accuracy of each sweep point over its repeats (all of them DP outputs or public settings).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from _common import write_json

RESULTS = Path(__file__).resolve().parent / "results" / "study_gpu.json"

#: The CPU estimate this replaces (BENCHMARKS.md, "paper-cnn": extrapolated from torch_dpsgd.py's fits).
CPU_ESTIMATE = "about 10 core-hours, 5 h on 2 workers (extrapolated on the CPU machine, not measured)"


def summarise(store: Path) -> dict:
    """Counts, run times and per-point accuracies of every run in ``store`` (opened read-only)."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    spec = json.loads(db.execute("SELECT spec FROM specs ORDER BY saved DESC").fetchone()[0])
    runs = db.execute("SELECT method, params, status, accuracy, wall_seconds FROM runs").fetchall()
    points: dict[tuple, list[float]] = defaultdict(list)
    seconds: dict[str, float] = defaultdict(float)
    for method, params, status, accuracy, wall in runs:
        if status != "ok":
            continue
        p = json.loads(params)
        points[(method, p.get("epsilon"), p.get("budget"))].append(accuracy)
        seconds[method] += wall
    return {
        "study": spec["name"], "dataset": spec["dataset"], "repeats": spec["repeats"],
        "device_setting": spec.get("device"), "sweeps": [s["name"] for s in spec["sweeps"]],
        "runs": len(runs), "ok": sum(r[2] == "ok" for r in runs), "failed": sum(r[2] == "failed" for r in runs),
        "run_seconds": sum(seconds.values()), "run_seconds_by_method": dict(sorted(seconds.items())),
        "points": [{"method": m, "epsilon": e, "budget": b, "repeats": len(a), "mean_accuracy": statistics.fmean(a),
                    "sd": statistics.stdev(a) if len(a) > 1 else 0.0}
                   for (m, e, b), a in sorted(points.items(), key=lambda kv: (kv[0][0], str(kv[0][1:])))],
    }


def _setting(point: dict) -> str:
    eps = "-" if point["epsilon"] is None or math.isinf(point["epsilon"]) else f"{point['epsilon']:g}"
    return f"{eps} | {'-' if point['budget'] is None else point['budget']}"


def render(data: dict) -> str:
    """Markdown section for BENCHMARKS.md."""
    d, s = data["device"], data["summary"]
    out = [f"## Trade-off study on a GPU: `privml study run {s['study']} --device cuda` at full scale", "",
           f"Device: {d.get('gpu')}, torch {d.get('torch')}, CUDA {d.get('cuda')}; commits {', '.join(data['commits'])} "
           f"(the study resumed from its store call after call: {'; '.join(data['calls'])}).", "",
           f"Command: `bash benchmarks/gpu_checks.sh study` on the GPU machine (`privml study run {s['study']} --device "
           f"cuda --jobs N`); summary: `python benchmarks/study_gpu.py` on its store.", "",
           f"{s['ok']} of {s['runs']} runs finished, {s['failed']} failed ({s['dataset']}, sweeps "
           f"{', '.join(s['sweeps'])}, {s['repeats']} repeats). The runs' own wall times add up to "
           f"{s['run_seconds'] / 60:.1f} min ("
           + ", ".join(f"{m} {v / 60:.1f}" for m, v in s["run_seconds_by_method"].items())
           + f" min); on the CPU machine the same study was {CPU_ESTIMATE}.", "",
           "Mean test accuracy over the repeats (sd); `-cnn` methods train the Tramer-Boneh CNN on the GPU, the "
           "others are the linear methods on the host:", "",
           "| method | epsilon | B | repeats | accuracy |", "|---|---|---|---|---|"]
    out += [f"| {p['method']} | {_setting(p)} | {p['repeats']} | {p['mean_accuracy']:.4f} ({p['sd']:.4f}) |"
            for p in s["points"]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="the results.sqlite the GPU machine brought back")
    parser.add_argument("--device-from", type=Path, required=True,
                        help="torch_gpu.json of the same machine (names the GPU, torch and CUDA)")
    parser.add_argument("--commits", nargs="+", required=True, help="the commits whose runs the store holds")
    parser.add_argument("--calls", nargs="+", required=True, help="the study's calls and their wall times")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not args.store.is_file():
        parser.error(f"{args.store} does not exist")
    device = json.loads(args.device_from.read_text())["device"]
    write_json(args.out, {"device": device, "commits": args.commits, "calls": args.calls,
                          "summary": summarise(args.store)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
