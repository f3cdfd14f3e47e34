"""The trade-off study under one relation (replace-one) against the paper's mixed protocol (issue 14).

Runs a study preset twice, with ``--neighbouring replace-one`` (privml's
default: every method, DP-SGD included, under replace-one) and with
``--neighbouring mixed`` (the paper's protocol: DP-SGD under add/remove-one),
then lists which of the paper's findings change and the accuracy of every
method at the default point (epsilon = 1, delta = 1e-5; prediction methods at
B = 100). Run from the repository root (about 2 minutes on 2 cores for the
quick preset)::

    .venv/bin/python benchmarks/study_relation.py --preset quick

Writes ``benchmarks/results/study_relation.json``; :func:`render` turns it into
the BENCHMARKS.md section.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, machine_line, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "study_relation.json"


def _study(preset: str, relation: str, out: Path, jobs: int, extra: list[str]) -> dict:
    # Both relations share one folder: runs that do not depend on the relation (everything but
    # DP-SGD) have the same job key and are computed once.
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "privml.cli.main", "study", "run", preset, "--out", str(out), "--jobs", str(jobs),
         "--neighbouring", relation, "--no-progress", "--json", *extra],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    summary = json.loads(done.stdout)
    from privml.study import ResultStore, collect
    from privml.study._findings import findings

    store = ResultStore(out / "results.sqlite")
    results = collect(store, summary["spec_hash"])
    found = [{"claim": f.claim, "status": f.status, "evidence": f.evidence} for f in findings(results)]
    defaults = {**results.spec.defaults, "epsilon": 1.0, "delta": 1e-5, "budget": 100}
    accuracy: dict[str, list[float]] = defaultdict(list)
    # Runs that do not depend on the relation were stored once, under the first relation's spec,
    # so read every record and keep DP-SGD's runs of this relation only.
    dpsgd_relation = "add/remove-one" if relation == "mixed" else relation
    for record in store.records(spec_hash=None):
        p = record["params"]
        if record["method"] == "dpsgd" and (record.get("info") or {}).get("neighbouring") != dpsgd_relation:
            continue
        if all(p[name] == value for name, value in defaults.items() if name in p):
            accuracy[record["method"]].append(record["accuracy"])
    return {"relation": relation, "seconds": time.perf_counter() - start, "finished": summary["finished"],
            "failed": summary["failed"], "findings": found,
            "default_point": {m: float(np.mean(v)) for m, v in sorted(accuracy.items())}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sweeps", nargs="+", help="run these sweeps of the preset only")
    parser.add_argument("--repeats", type=int, help="repeats per point (default: the preset's)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    extra = (["--sweeps", *args.sweeps] if args.sweeps else []) + (
        ["--repeats", str(args.repeats)] if args.repeats else [])
    with tempfile.TemporaryDirectory() as folder:
        runs = [_study(args.preset, relation, Path(folder), args.jobs, extra) for relation in ("replace-one", "mixed")]
    command = f".venv/bin/python benchmarks/study_relation.py --preset {args.preset}"
    if args.sweeps:
        command += " --sweeps " + " ".join(args.sweeps)
    if args.repeats:
        command += f" --repeats {args.repeats}"
    payload = {"machine": machine(), "preset": args.preset, "sweeps": args.sweeps, "repeats": args.repeats,
               "load_average": os.getloadavg()[0], "runs": runs, "command": command}
    write_json(args.out, payload)
    print(render(payload))
    return 0


def render(data: dict) -> str:
    m = data["machine"]
    one, mixed = data["runs"]
    out = [
        f"## The study under one relation: `{data['preset']}`"
        + (f" (sweeps {', '.join(data['sweeps'])}, {data['repeats'] or 'all'} repeats, full scale)"
           if data.get("sweeps") else "") + ", replace-one against the paper's mixed protocol",
        "",
        f"Command: `{data['command']}`.  ",
        f"Machine: {machine_line(m)}; "
        f"load average at the end {data['load_average']:.1f}.",
        "",
        f"Runs: {one['finished']} under replace-one ({one['seconds']:.0f} s), {mixed['finished']} mixed "
        f"({mixed['seconds']:.0f} s), {one['failed'] + mixed['failed']} failed. Accuracy at the default point "
        "(epsilon = 1, delta = 1e-5; B = 100 for private prediction):",
        "",
        "| method | replace-one (like for like) | mixed (DP-SGD under add/remove-one) |",
        "|---|---|---|",
    ]
    for method in one["default_point"]:
        other = mixed["default_point"].get(method)
        # A method whose runs do not depend on the relation ran once, for both columns.
        shown = f"{100 * other:.1f}%" if other is not None else "the same runs (they do not depend on the relation)"
        out.append(f"| {method} | {100 * one['default_point'][method]:.1f}% | {shown} |")
    changed = [(a, b) for a, b in zip(one["findings"], mixed["findings"]) if a["status"] != b["status"]]
    out += ["", "Findings of the paper that change when every guarantee is stated under replace-one:"]
    if not changed:
        out.append(f"none: all {len(one['findings'])} findings have the same verdict under both protocols "
                   f"({sum(f['status'] == 'holds' for f in one['findings'])} hold). Only the evidence moves, e.g.:")
        for a, b in zip(one["findings"], mixed["findings"]):
            if a["evidence"] != b["evidence"] and "DP-SGD" in a["evidence"]:
                out.append(f"- {a['claim']} replace-one: {a['evidence']}; mixed: {b['evidence']}")
    else:
        for a, b in changed:
            out.append(f"- {a['claim']} replace-one: {a['status']} ({a['evidence']}); "
                       f"mixed: {b['status']} ({b['evidence']})")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
