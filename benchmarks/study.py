"""Wall time of the trade-off study, serial and with 2 local workers, and a measured part of the paper preset.

Part ``quick``: runs the ``quick`` preset (the demo) from scratch once per
worker count, in a fresh results folder each time, and records the wall time,
the speed-up of 2 workers over 1, the accuracy of every method at the default
point (epsilon = 1, delta = 1e-5, B = 100) and the verdict of every finding.

Part ``paper``: runs some sweeps of ``paper-mnist-linear`` at full scale
(all 55,000 private MNIST records, 784 pixels; by default the two inference-
budget sweeps, which carry the paper's two headline findings) with fewer
repeats, records their wall time and findings, and **extrapolates** (labelled
so) the whole preset from these full-scale per-run times, scaled by the number
of training records times the dimension of each run::

    .venv/bin/python benchmarks/study.py --out benchmarks/results/study.json [--parts quick paper]

A part not run keeps its previous results in the JSON file. Parts are measured
with the shared cache (``privml.study._cache``; ``--paper-no-cache`` measures
every run computing everything itself) and record the cache's hits and the
seconds it saved per method, the wall time, the CPU time of the process and
its workers (less sensitive than wall time to other load on a shared
machine) and the load average before and after.

``--record-before DIR --before-wall S [--before-cpu S] --before-load A B
--before-commit C --before-command CMD`` records a part measured elsewhere
(e.g. the same sweeps run by an earlier commit, timed by ``/usr/bin/time``)
from its study folder, as the "before" of the comparison.

``render(data)`` turns the JSON into the BENCHMARKS.md section.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, machine_line, write_json

from privml.study import ResultStore, collect, load_preset, plan, run_study, spec_from_dict
from privml.study._findings import findings
from privml.study._methods import get_method

#: MNIST training records; records and features of runs with n or d unset (55,000 private after the public 5,000).
MNIST_TRAIN = 60_000
MNIST_N, MNIST_D = MNIST_TRAIN - 5_000, 784


def run_once(preset: str, workers: int, root: Path) -> tuple[float, Any, float]:
    """Wall seconds, outcome and CPU seconds (this process and its workers) of ``preset`` from scratch."""
    spec = load_preset(preset)
    out = root / f"{preset}-{workers}"
    stop_workers()
    cpu_before = cpu_seconds()
    start = time.perf_counter()
    outcome = run_study(spec, out, jobs=workers, progress=True)
    seconds = time.perf_counter() - start
    stop_workers()
    return seconds, outcome, cpu_seconds() - cpu_before


def default_point(outcome: Any) -> dict[str, dict[str, float]]:
    """Mean and std accuracy of each method at the study's default setting."""
    results = collect(ResultStore(outcome.results))
    spec = results.spec
    out: dict[str, dict[str, float]] = {}
    for sweep in spec.sweeps:
        if sweep.fixed or sweep.parameter != "epsilon":
            continue
        for curve in results.curves[sweep.name]:
            cell = curve.at(spec.defaults["epsilon"])
            if cell is not None:
                out[curve.method] = {"accuracy_mean": cell.mean, "accuracy_std": cell.std,
                                     "train_seconds": cell.train_time}
    return out


def extrapolate(outcome: Any, source: str, paper: str) -> dict[str, Any]:
    """Paper-preset core-seconds extrapolated from the runs of ``source`` (seconds per n x (d + 1), per method)."""
    source_spec = load_preset(source)
    default_n = source_spec.defaults.get("n") or MNIST_N
    default_d = source_spec.defaults.get("d") or MNIST_D
    per_unit: dict[str, list[float]] = {}
    for record in ResultStore(outcome.results).records():
        if record["status"] != "ok":
            continue
        p = record["params"]
        size = (p.get("n") or default_n) * ((p.get("d") or default_d) + 1)
        per_unit.setdefault(record["method"], []).append(record["wall_seconds"] / size)
    return extrapolate_from_rates({m: statistics.median(v) for m, v in per_unit.items()}, source, paper)


def extrapolate_from_rates(rate: dict[str, float], source: str, paper: str) -> dict[str, Any]:
    """Core-seconds of every run of ``paper`` at ``rate`` (seconds per n x (d + 1), per method)."""
    jobs, _ = plan(load_preset(paper))
    total, counted = 0.0, 0
    for job in jobs:
        if job.method not in rate:
            continue
        n = job.params.get("n") or MNIST_N
        d = job.params.get("d") or MNIST_D
        total += rate[job.method] * n * (d + 1)
        counted += 1
    return {"preset": paper, "runs": len(jobs), "runs_extrapolated": counted, "core_seconds": total,
            "source": source, "seconds_per_unit": rate,
            "model": f"median {source}-run seconds per (n x (d + 1)) of each method, times n x (d + 1) of every "
                     "paper run"}


def fits_per_run(spec: Any, job: Any) -> int:
    """Models one run of ``job`` trains: the free grid's candidates plus the refit (validation mode), else 1."""
    if spec.selection.mode != "validation":
        return 1
    grid = {**get_method(job.method).hyper, **spec.selection.grids.get(job.method, {})}
    free = [values for name, values in grid.items() if name not in job.params]
    return math.prod(len(v) for v in free) + 1 if free else 1


def extrapolate_cnn(preset: str, torch_results: dict, linear_rate: dict[str, float]) -> dict[str, Any]:
    """Core-seconds of a CNN preset, extrapolated (not measured).

    One CNN fit costs what the full-scale DP-SGD accuracy runs of
    ``benchmarks/torch_dpsgd.py`` measured (40 epochs over all MNIST training
    images: median train seconds x torch threads per record), times the records the fit sees;
    non-private CNNs (and subsample-and-aggregate's teachers, which together see
    every record for the same epochs) by the measured step-time ratio
    non-private / privml ghost. A run trains ``fits_per_run`` models. Linear
    methods use ``linear_rate`` (seconds per n x (d + 1), from the full-scale
    paper-mnist-linear runs, which include their own selection fits).
    """
    spec = load_preset(preset)
    full = [r for r in torch_results["accuracy"] if r["dataset"] == "mnist" and round(r["epochs"]) == 40]
    dpsgd_fit = statistics.median(r["train_seconds"] * r["threads"] / r["n_train"] for r in full)
    speed = torch_results["speed"]["variants"]
    nonprivate_fit = dpsgd_fit * speed["nonprivate"]["median_step_ms"] / speed["privml-ghost"]["median_step_ms"]
    per_fit = {"dpsgd-cnn": dpsgd_fit, "nonprivate-cnn": nonprivate_fit, "subsample-aggregate-cnn": nonprivate_fit}
    jobs, _ = plan(spec)
    n_private = MNIST_TRAIN - spec.public_size
    share = 1.0 - spec.selection.validation_fraction
    total, by_method = 0.0, {}
    for job in jobs:
        n = job.params.get("n") or n_private
        if job.method in per_fit:
            fits = fits_per_run(spec, job)
            # Candidates see the training share; the refit sees every private record.
            seconds = per_fit[job.method] * n * ((fits - 1) * share + 1)
        elif job.method in linear_rate:
            seconds = linear_rate[job.method] * n * ((job.params.get("d") or MNIST_D) + 1)
        else:
            continue
        total += seconds
        by_method[job.method] = by_method.get(job.method, 0.0) + seconds
    return {"preset": preset, "runs": len(jobs), "repeats": spec.repeats, "core_seconds": total,
            "core_seconds_by_method": by_method,
            "cnn_fit_core_seconds": {m: rate * MNIST_TRAIN for m, rate in per_fit.items()},
            "model": "one 40-epoch CNN fit = the median core-seconds of the full-scale DP-SGD MNIST runs of "
                     "benchmarks/torch_dpsgd.py (non-private and teachers scaled by the measured step-time ratio), "
                     "times the fits of each run (grid candidates + refit) and its share of the records; linear "
                     "methods at their full-scale paper-mnist-linear rates"}


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and its reaped children so far."""
    self_, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime


def stop_workers() -> None:
    """Shut joblib's reusable worker pool down, so the workers' CPU time is counted (they are reaped)."""
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


def run_paper_part(sweeps: list[str], repeats: int, workers: int, root: Path,
                   preset: str = "paper-mnist-linear", cache: bool = True) -> dict[str, Any]:
    """Run ``sweeps`` of ``preset`` at full scale with ``repeats`` repeats; time, findings, extrapolation."""
    full = load_preset(preset)
    spec = full.with_overrides(repeats=repeats,
                               sweeps=[sw for sw in full.to_dict()["sweeps"] if sw["name"] in sweeps])
    out = root / f"paper-part{'' if cache else '-no-cache'}"
    stop_workers()
    load_before, cpu_before = os.getloadavg()[0], cpu_seconds()
    start = time.perf_counter()
    outcome = run_study(spec, out, jobs=workers, progress=True, cache=cache)
    seconds = time.perf_counter() - start
    stop_workers()
    cpu = cpu_seconds() - cpu_before
    command = (f"privml study run {preset} --sweeps {' '.join(sweeps)} --repeats {repeats} --jobs {workers}"
               + ("" if cache else " --no-cache"))
    part = describe_part(outcome.results, spec, preset, sweeps=sweeps, repeats=repeats, workers=workers,
                         wall_seconds=seconds, load=(load_before, os.getloadavg()[0]), cpu_seconds=cpu,
                         command=command, variant="shared cache" if cache else "no shared cache (--no-cache)")
    part["cache"] = outcome.cache
    part["cache_enabled"] = cache
    print(f"paper part ({', '.join(sweeps)}): {seconds:.1f} s, {outcome.finished} runs", file=sys.stderr)
    return part


def describe_part(results_path: Path, spec: Any, preset: str, *, sweeps: list[str], repeats: int, workers: int,
                  wall_seconds: float, load: tuple[float, float], cpu_seconds: float | None, command: str,
                  variant: str) -> dict[str, Any]:
    """Timings, findings and extrapolation of the study in ``results_path`` (however it was run)."""
    full = load_preset(preset)
    store = ResultStore(results_path)
    outcome = _Outcome(results_path)
    seconds = wall_seconds
    load_before, load_after = load
    records = store.records()
    per_method: dict[str, list[float]] = {}
    for r in records:
        per_method.setdefault(r["method"], []).append(r["wall_seconds"])
    results = collect(store)
    jobs, _ = plan(spec)
    done = store.finished_keys()
    return {
        "sweeps": sweeps, "repeats": repeats, "workers": workers, "wall_seconds": seconds,
        "planned": len(jobs), "finished": sum(job.key in done for job in jobs),
        "failed": len(store.records(status="error")),
        "load_average_before": load_before, "load_average_after": load_after,
        "cpu_seconds": cpu_seconds, "command": command, "variant": variant,
        "sum_of_run_seconds": sum(r["wall_seconds"] for r in records),
        "run_seconds": {m: {"median": statistics.median(v), "max": max(v), "runs": len(v)}
                        for m, v in sorted(per_method.items())},
        "findings": [{"claim": f.claim, "status": f.status, "evidence": f.evidence, "sweeps": list(f.sweeps)}
                     for f in findings(results)],
        "extrapolation": extrapolate(outcome, preset, preset),
        "full_preset_runs": len(plan(full)[0]),
    }


class _Outcome:
    """The one attribute :func:`extrapolate` reads from a :class:`~privml.study.StudyRun`."""

    def __init__(self, results: Path) -> None:
        self.results = results


def pooled_extrapolation(parts: list[dict], preset: str = "paper-mnist-linear") -> dict[str, Any]:
    """The whole preset extrapolated from every measured part: per method, the parts' rates weighted by runs.

    Only parts whose runs computed everything themselves count (with the shared cache a run's time
    depends on what earlier runs left it, so per-run rates do not scale to other sweeps).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for part in parts:
        if part.get("cache_enabled") or part.get("identity_reference"):
            continue
        for method, rate in part["extrapolation"]["seconds_per_unit"].items():
            runs = part["run_seconds"][method]["runs"]
            sums[method] = sums.get(method, 0.0) + rate * runs
            counts[method] = counts.get(method, 0) + runs
    out = extrapolate_from_rates({m: sums[m] / counts[m] for m in sums}, preset, preset)
    out["model"] += " (rates pooled over the measured parts, weighted by their runs)"
    out["parts"] = [", ".join(part["sweeps"]) for part in parts]
    return out


#: Fields of a stored run that depend on time or on the spec that ran it, not on the computation.
_NOT_COMPARED = ("train_seconds", "predict_seconds", "wall_seconds", "finished", "spec_hash")


def identity_check(shared: Path, alone: Path) -> dict[str, Any]:
    """Compare every run two study folders both hold (same key), every stored field but timings."""

    def runs(folder: Path) -> dict[str, dict[str, Any]]:
        return {r["key"]: {k: v for k, v in r.items() if k not in _NOT_COMPARED}
                for r in ResultStore(folder / "results.sqlite").records()}

    a, b = runs(shared), runs(alone)
    common = sorted(set(a) & set(b))
    return {"compared": len(common), "identical": sum(a[k] == b[k] for k in common),
            "methods": sorted({a[k]["method"] for k in common}), "against": str(alone)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/study.json")
    parser.add_argument("--parts", nargs="+", choices=("quick", "paper"), default=["quick", "paper"])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 1])
    parser.add_argument("--paper-sweeps", nargs="+", default=["budget-pure", "budget"])
    parser.add_argument("--paper-repeats", type=int, default=1)
    parser.add_argument("--paper-workers", type=int, default=2)
    parser.add_argument("--paper-no-cache", action="store_true", help="measure the paper part without the cache")
    parser.add_argument("--workdir", help="keep the study folders here (default: a temporary folder)")
    parser.add_argument("--record-before", metavar="DIR", help="record a part measured elsewhere from its folder")
    parser.add_argument("--identity", nargs=3, metavar=("SWEEPS", "SHARED_DIR", "ALONE_DIR"),
                        help="record on the cached part of SWEEPS (comma-separated) that the runs of SHARED_DIR "
                        "equal those of ALONE_DIR (a --paper-no-cache folder) wherever both hold a run")
    parser.add_argument("--record-quick-before", metavar="JSON",
                        help="record the quick part an earlier commit's benchmarks/study.py measured")
    parser.add_argument("--before-wall", type=float, help="its wall time (s)")
    parser.add_argument("--before-cpu", type=float, help="its CPU time, user + system (s)")
    parser.add_argument("--before-load", type=float, nargs=2, metavar=("BEFORE", "AFTER"),
                        help="the 1-minute load average before and after it")
    parser.add_argument("--before-commit", help="the commit that ran it")
    parser.add_argument("--before-command", help="the command that ran it")
    args = parser.parse_args(argv)

    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="privml-study-bench-"))
    previous = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    payload = dict(previous)
    if args.identity:  # only this: no study is run
        sweeps, shared, alone = args.identity[0].split(","), Path(args.identity[1]), Path(args.identity[2])
        for part in payload.get("paper_parts", []):
            if part["sweeps"] == sweeps and part.get("cache_enabled"):
                part["identity_check"] = identity_check(shared, alone)
        write_json(args.out, payload)
        return 0
    if "quick" in args.parts and not (args.record_before or args.record_quick_before):
        payload.update(run_quick_part(args, root))
    if args.record_quick_before:
        # The quick part as an earlier commit's benchmarks/study.py measured it (its JSON file).
        before = json.loads(Path(args.record_quick_before).read_text())
        payload["quick_before"] = {"machine": {**before["machine"],
                                               "commit": args.before_commit or before["machine"]["commit"]},
                                   "runs": before["runs"], "command": args.before_command}
    if args.record_before:
        preset = "paper-mnist-linear"
        store = ResultStore(Path(args.record_before) / "results.sqlite")
        spec = spec_from_dict(list(store.specs().values())[-1])
        part = {"machine": {**machine(), "commit": args.before_commit},
                **describe_part(store.path, spec, preset, sweeps=[s.name for s in spec.sweeps],
                                repeats=spec.repeats, workers=args.paper_workers, wall_seconds=args.before_wall,
                                load=tuple(args.before_load), cpu_seconds=args.before_cpu,
                                command=args.before_command, variant="before")}
        part["cache_enabled"] = False
        # Kept apart from the parts: its run times may be inflated by other load, so the
        # extrapolation below stays on the parts measured by this script.
        payload["paper_before"] = part
    elif "paper" in args.parts and not args.record_quick_before:
        part = {"machine": machine(),
                **run_paper_part(args.paper_sweeps, args.paper_repeats, args.paper_workers, root,
                                 cache=not args.paper_no_cache)}
        # Parts with other sweeps (or the other cache setting) are kept; a rerun replaces its part.
        payload["paper_parts"] = [p for p in payload.get("paper_parts", [])
                                  if (p["sweeps"], bool(p.get("cache_enabled"))) != (part["sweeps"], not args.paper_no_cache)
                                  ] + [part]
        payload["paper_extrapolation_full_scale"] = pooled_extrapolation(payload["paper_parts"])
    torch_json = Path(args.out).parent / "torch_dpsgd.json"
    rate = payload.get("paper_extrapolation_full_scale", {}).get("seconds_per_unit")
    if rate and torch_json.exists():
        torch_results = json.loads(torch_json.read_text())
        payload["cnn_extrapolation"] = [extrapolate_cnn(p, torch_results, rate)
                                        for p in ("paper-cnn", "paper-cnn-fashion")]
    write_json(args.out, payload)
    return 0


def run_quick_part(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    runs = {}
    outcomes = {}
    for workers in args.workers:
        load_before = os.getloadavg()[0]
        seconds, outcome, cpu = run_once(args.preset, workers, root)
        outcomes[workers] = outcome
        records = ResultStore(outcome.results).records()
        runs[str(workers)] = {"wall_seconds": seconds, "planned": outcome.planned, "finished": outcome.finished,
                              "failed": outcome.failed, "executor": outcome.executor, "cpu_seconds": cpu,
                              "cache": outcome.cache,
                              # The machine may be shared: the 1-minute load average says how much.
                              "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
                              "sum_of_run_seconds": sum(r["wall_seconds"] for r in records)}
        print(f"{args.preset} with {workers} worker(s): {seconds:.1f} s, {outcome.finished} runs, "
              f"{outcome.failed} failed", file=sys.stderr)
    reference = outcomes[max(outcomes)]
    results = collect(ResultStore(reference.results))
    return {
        "machine": machine(),
        "preset": args.preset,
        "runs": runs,
        "speedup_2_workers": (runs["1"]["wall_seconds"] / runs["2"]["wall_seconds"]
                              if "1" in runs and "2" in runs else None),
        "default_point": default_point(reference),
        "findings": [{"claim": f.claim, "status": f.status, "evidence": f.evidence, "sweeps": list(f.sweeps)}
                     for f in findings(results)],
        "notes": reference.notes,
        "paper_extrapolation": extrapolate(reference, args.preset, "paper-mnist-linear"),
    }


def _comparison(data: dict, part: dict) -> list[str]:
    """How the cached part compares with the same sweeps measured without the cache."""
    out = []
    before = data.get("paper_before")
    if before and before["sweeps"] == part["sweeps"] and before.get("cpu_seconds") and part.get("cpu_seconds"):
        out.append(f"Against the same sweeps run by commit {before['machine']['commit']} (no shared cache) the "
                   f"same day: {before['cpu_seconds'] / part['cpu_seconds']:.1f}x less CPU time "
                   f"({_minutes(before['cpu_seconds'])} to {_minutes(part['cpu_seconds'])}); its wall time "
                   f"({_minutes(before['wall_seconds'])}) was inflated by other load on the machine.")
    for old in data.get("paper_parts", []):
        if old["sweeps"] == part["sweeps"] and not old.get("cache_enabled") and not old.get("identity_reference"):
            out.append(f"Against this script's earlier measurement of the same sweeps without the cache (commit "
                       f"{old['machine']['commit']}, load average {old['load_average_before']:.1f} / "
                       f"{old['load_average_after']:.1f}): {_minutes(old['wall_seconds'])} to "
                       f"{_minutes(part['wall_seconds'])}, {old['wall_seconds'] / part['wall_seconds']:.1f}x faster "
                       "in wall time.")
    limit, what = (90 * 60, "The 90-minute target for the whole preset") if _whole_preset(part) else (
        180, "The 3-minute target for these sweeps")
    met = "met" if part["wall_seconds"] <= limit else "not met"
    share = ""
    if part.get("cpu_seconds"):
        share = (f"; the study's processes had {part['cpu_seconds'] / part['wall_seconds']:.2f} of the 2 cores on "
                 "average (CPU time / wall time), other work on the machine the rest")
    out.append(f"{what} is {met} here ({_minutes(part['wall_seconds'])}{share}).")
    return [" ".join(out)]


def _whole_preset(part: dict) -> bool:
    """Whether a measured part is the whole paper-mnist-linear preset (every sweep, 10 repeats)."""
    return len(part["sweeps"]) == len(load_preset("paper-mnist-linear").sweeps) and part["repeats"] == 10


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _cache_table(rows: list[dict]) -> list[str]:
    out = ["| method | hits | misses | hit rate | searches reused / made | computing (s) | saved (s) |",
           "|---|---|---|---|---|---|---|"]
    for c in rows:
        searches = (c.get("selection_hits", 0), c.get("selection_misses", 0))
        if not (c["hits"] or c["misses"] or any(searches)):
            continue
        rate = "" if c["hit_rate"] is None else f"{100 * c['hit_rate']:.0f}%"
        out.append(f"| {c['method']} | {c['hits']} | {c['misses']} | {rate} | {searches[0]} / {searches[1]} "
                   f"| {c['seconds_computed']:.1f} | {c['seconds_saved']:.1f} |")
    return out


def render(data: dict) -> str:
    """The BENCHMARKS.md section for ``benchmarks/results/study.json``."""
    m = data["machine"]
    lines = [
        "## Trade-off study: `privml study run quick`",
        "",
        "Command: `.venv/bin/python benchmarks/study.py` (the `quick` preset from scratch, once per worker count).  ",
        f"Machine: {machine_line(m)}.",
        "",
        "| code | workers | wall time | CPU time (process + workers) | runs | failed "
        "| load average before / after (2 cores) |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [(f"before (commit {data['quick_before']['machine']['commit']})", w, r)
            for w, r in data.get("quick_before", {}).get("runs", {}).items()]
    rows += [(f"shared cache (commit {m['commit']})", w, r) for w, r in data["runs"].items()]
    for code, workers, r in sorted(rows, key=lambda row: (int(row[1]), not row[0].startswith("before"))):
        cpu = "" if r.get("cpu_seconds") is None else _minutes(r["cpu_seconds"])
        lines.append(f"| {code} | {workers} | {_minutes(r['wall_seconds'])} | {cpu} | {r['finished']} | {r['failed']} "
                     f"| {r['load_average_before']:.1f} / {r['load_average_after']:.1f} |")
    if data.get("quick_before"):
        lines += ["", f"Before: `{data['quick_before']['command']}` at commit "
                  f"{data['quick_before']['machine']['commit']}, {data['quick_before']['machine']['date']}."]
    two = data["runs"].get("2", {})
    if two.get("cache"):
        lines += ["", "Shared cache of the 2-worker run (hits reuse a non-private minimiser or teacher; seconds "
                  "saved = the compute time recorded with each entry reused):", ""] + _cache_table(two["cache"])
    if data.get("speedup_2_workers"):
        two = data["runs"]["2"]
        busy = two["sum_of_run_seconds"] / two["wall_seconds"]
        lines += ["", f"Speed-up from 2 local workers: {data['speedup_2_workers']:.2f}x in wall time. A load average "
                  "above 2 means other processes shared the 2 cores, which distorts both times (a speed-up above 2 "
                  "comes from that, not from parallelism). The load-independent measure is how many runs the 2 "
                  f"workers kept in flight on average (sum of run times / wall time): {busy:.2f}."]
    lines += ["", "Accuracy at the default point (epsilon = 1, delta = 1e-5, B = 100; mean ± std over repeats):", "",
              "| method | accuracy | train time |", "|---|---|---|"]
    for method, r in data["default_point"].items():
        lines.append(f"| {method} | {100 * r['accuracy_mean']:.1f} ± {100 * r['accuracy_std']:.1f}% "
                     f"| {r['train_seconds']:.2f} s |")
    lines += ["", "Findings of the paper, tested on these results:", ""]
    for f in data["findings"]:
        lines.append(f"- **{f['status']}**: {f['claim']} ({f['evidence']})")
    parts = data.get("paper_parts", [])
    if data.get("paper_before"):
        parts = [data["paper_before"], *parts]
    if not parts:  # the full-scale parts below extrapolate from better-matched run times
        x = data["paper_extrapolation"]
        lines += ["", f"`paper-mnist-linear` ({x['runs']} runs, 10 repeats), from the quick run: **extrapolated, not "
                  f"measured**: about {x['core_seconds'] / 3600:.0f} core-hours ({x['model']}; "
                  f"{x['runs_extrapolated']} runs of methods timed in the quick run)."]
    for part in parts:
        pm = part["machine"]
        variant = part.get("variant", "no shared cache")
        if "command" in part and variant == "before":
            command = f"`{part['command']}` (timed by `/usr/bin/time -v`; recorded with `benchmarks/study.py --record-before`)"
        else:
            flag = " --paper-no-cache" if variant.startswith("no shared cache") and part.get("command") else ""
            command = (f"`.venv/bin/python benchmarks/study.py --parts paper --paper-sweeps {' '.join(part['sweeps'])}"
                       f"{flag}` (`{part.get('command') or 'privml study run paper-mnist-linear --sweeps ' + ' '.join(part['sweeps']) + ' --repeats ' + str(part['repeats']) + ' --jobs ' + str(part['workers'])}`)")
        cpu = ("" if part.get("cpu_seconds") is None
               else f", CPU time {_minutes(part['cpu_seconds'])} (process and workers)")
        heading = ("the whole preset, every sweep, 10 repeats, measured end to end" if _whole_preset(part)
                   else f"measured in part: sweeps {', '.join(part['sweeps'])} at full scale")
        lines += [
            "",
            f"### `paper-mnist-linear`, {heading} ({variant})",
            "",
            f"Command: {command}.  ",
            f"Machine: {machine_line(pm)}.",
            "",
            f"{part['finished']} runs ({part['failed']} failed) of the preset's {part['full_preset_runs']}, "
            f"{part['repeats']} repeat(s), 55,000 private MNIST records, 784 pixels: **{part['wall_seconds'] / 60:.1f} "
            f"min** wall time with {part['workers']} workers{cpu} (load average {part['load_average_before']:.1f} "
            f"before, {part['load_average_after']:.1f} after; runs in flight on average: "
            f"{part['sum_of_run_seconds'] / part['wall_seconds']:.2f}).",
            "",
            "| method | runs | median run (s) | longest run (s) |",
            "|---|---|---|---|",
        ]
        for method, r in part["run_seconds"].items():
            lines.append(f"| {method} | {r['runs']} | {r['median']:.1f} | {r['max']:.1f} |")
        if part.get("cache"):
            lines += ["", "Shared cache:", ""] + _cache_table(part["cache"])
        if part.get("cache_enabled"):
            lines += ["", *_comparison(data, part)]
        if part.get("protocol"):
            lines += ["", f"Protocol: {part['protocol']}"]
        check = part.get("identity_check")
        if check:
            lines += ["", f"Same results as runs that compute everything themselves: {check['identical']} of "
                      f"{check['compared']} runs compared are identical in every stored field but timings "
                      f"({', '.join(check['methods'])}), against the same runs of the budget sweeps made with "
                      "`--paper-no-cache`, each computing its own search, minimisers and teachers (compared by "
                      "`benchmarks/study.py --identity SWEEPS SHARED_DIR ALONE_DIR`)."]
        lines += ["", "Findings of the paper on these full-scale runs:", ""]
        for f in part["findings"]:
            lines.append(f"- **{f['status']}**: {f['claim']} ({f['evidence']})")
    if parts:
        px = data["paper_extrapolation_full_scale"]
        if any(_whole_preset(p) for p in parts):
            lines += ["", "The estimate below is of the preset as it was before it was measured: every run "
                      "selecting on its own split and computing everything itself (the per-run rates of the "
                      "parts without the shared cache)."]
        lines += ["", f"Whole `paper-mnist-linear` preset ({px['runs']} runs, 10 repeats), from the full-scale runs "
                  "above that computed everything themselves (this script's parts without the shared cache; with it "
                  "a run's time depends on what earlier runs left, so it does not scale run by run): "
                  f"**extrapolated, not measured**: about {px['core_seconds'] / 3600:.1f} core-hours, "
                  f"{px['core_seconds'] / 3600 / 2:.1f} h on 2 workers ({px['model']}; {px['runs_extrapolated']} "
                  "runs of methods timed)."]
    # Presets with the same estimate (the same CNN on images of the same size) share one line.
    same_estimate: dict[float, list[dict]] = {}
    for x in data.get("cnn_extrapolation", []):
        same_estimate.setdefault(x["core_seconds"], []).append(x)
    for group in same_estimate.values():
        x = group[0]
        names = " and ".join(f"`{y['preset']}`" for y in group)
        shared = "the same CNN on images of the same size: the same estimate; " if len(group) > 1 else ""
        split = ", ".join(f"{m} {s / 3600:.1f}" for m, s in sorted(x["core_seconds_by_method"].items(),
                                                                     key=lambda kv: -kv[1]))
        lines += ["", f"{names} ({shared}{x['runs']} runs, {x['repeats']} repeats): **extrapolated, not measured**: "
                  f"about {x['core_seconds'] / 3600:.0f} core-hours, {x['core_seconds'] / 3600 / 2:.0f} h on 2 workers "
                  f"(core-hours by method: {split}; {x['model']})."]
    if data.get("notes"):
        lines += ["", "Notes: " + "; ".join(data["notes"]) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
