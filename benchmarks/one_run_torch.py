"""One-run audits of torch DP-SGD (Steinke, Nasr and Jagielski 2023; issue 29, items 3 and 4, torch part).

Two parts:

``controls``
    Each planted bug of :mod:`privml.testing.torch_controls` and its correct engine, audited white-box in
    the controls' setting (tiny model, 200 synthetic records + m = 1000 canary slots, claimed (2, 1e-5)
    add/remove-one, 10 Poisson steps at q = 0.2), over independent seeds: how often the 95% bound exceeds
    the claim. Writes the ``controls`` part of ``benchmarks/results/one_run_torch.json``.
``mnist``
    The Tramer-Boneh MNIST CNN (:class:`privml.torch.TorchClassifier` defaults) on the MNIST training set
    plus m = 1000 canary slots at the given epsilons (delta 1e-5): one ordinary fit (on the real records
    alone), then one white-box audit (Dirac gradient canaries) and one black-box audit (out-of-distribution
    canaries, loss scores), each one training run; the bounds and each run's time against the ordinary
    fit's. Writes the ``rows`` of ``benchmarks/results/one_run_torch.json``.

``render(results)`` writes the BENCHMARKS.md section from that file (benchmarks/write_benchmarks_md.py). Rerunning
a part drops that part's hand-written ``notes`` (they describe the old figures); the section then states the
setting from the data alone until new notes are written.

    python benchmarks/one_run_torch.py controls --seeds 10
    python benchmarks/one_run_torch.py mnist --epsilons 2 8 --epochs 40 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json

RESULTS = "benchmarks/results/one_run_torch.json"
HEADING = "## One-run audits of torch DP-SGD (issue 29, items 3 and 4, torch part)"
#: How the section names each control, the notes on its canaries and on its correct engine.
CONTROL_TITLES = {"unclipped-layer": "one layer left unclipped", "half-noise": "noise scaled by 1/sqrt(2)",
                  "reused-noise": "noise drawn once, reused",
                  "row-order": "row-order fault (64 reordered branches, ghost unchecked)"}
CANARY_NOTES = {"unclipped-layer": "key input 100", "half-noise": "DiracNet's table", "row-order": "key input 100"}
CORRECT_NOTES = {"row-order": "vmap"}


def controls(args: argparse.Namespace) -> None:
    from privml.testing.torch_controls import TORCH_CONTROLS, audit_torch_control

    rows = []
    for name in args.controls or list(TORCH_CONTROLS):
        control = TORCH_CONTROLS[name]
        m = args.m or control.m
        for broken in (True, False):
            bounds, mus, flagged, rejected, seconds = [], [], 0, 0, []
            for seed in range(args.seeds):
                start = time.perf_counter()
                result = audit_torch_control(name, broken=broken, m=m, random_state=seed)
                seconds.append(time.perf_counter() - start)
                bounds.append(result.audit.epsilon_lower)
                mus.append(result.audit.mu_lower)
                flagged += int(result.audit.exceeds_claim)
                rejected += int(bool(result.audit.claim_rejected))
            row = {"control": name, "bug": control.bug, "broken": broken, "canaries": control.canaries,
                   "claimed_epsilon": result.audit.claimed_epsilon, "m": m, "n_real": result.n_real,
                   "audits": args.seeds,
                   "steps": control.setting["steps"], "sample_rate": control.setting["sample_rate"],
                   "flagged": flagged, "profile_rejected": rejected, "bounds": bounds,
                   "median_bound": float(np.median(bounds)), "mu_lower": mus, "median_mu": float(np.median(mus)),
                   "seconds_per_audit": float(np.median(seconds))}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("bounds", "mu_lower")}), flush=True)
    out = Path(args.out or RESULTS)
    payload = json.loads(out.read_text()) if out.exists() else {"rows": []}
    old = payload.get("controls", {}).get("rows", [])
    done = {row["control"] for row in rows}
    payload["controls"] = {"machine": machine(), "command": "python benchmarks/one_run_torch.py controls "
                           f"--seeds {args.seeds}" + (f" --m {args.m}" if args.m else ""),
                           "load_average_after": list(os.getloadavg()),
                           "rows": [r for r in old if r["control"] not in done] + rows}
    write_json(out, payload)


def mnist(args: argparse.Namespace) -> None:
    import torch

    from privml.audit._one_run_torch import torch_classifier_one_run_audit
    from privml.torch import TorchClassifier
    from privml.torch._data import load_images

    data = load_images("mnist", max_train=args.max_train, random_state=0)
    X, y = data.X_train.numpy(), data.y_train.numpy()
    out = Path(args.out or RESULTS)
    payload = json.loads(out.read_text()) if out.exists() else {"rows": []}
    payload.pop("notes", None)  # the hand-written notes describe the old rows
    for eps in args.epsilons:
        def estimator(seed: int) -> TorchClassifier:
            return TorchClassifier(epsilon=eps, delta=1e-5, classes=data.classes, epochs=args.epochs,
                                   random_state=seed, threads=args.threads, device="cpu", cuda_graph=False)

        row: dict = {"epsilon": eps, "delta": 1e-5, "n_real": int(X.shape[0]), "m": args.m, "epochs": args.epochs,
                     "threads": args.threads, "torch_threads": torch.get_num_threads()}
        if "plain" in args.parts:
            start = time.perf_counter()
            plain = estimator(args.seed).fit(X, y)
            row["plain_seconds"] = time.perf_counter() - start
            row["plain_epsilon"] = plain.privacy_.epsilon
            print(json.dumps(row), flush=True)
        for kind in ("white", "black"):
            if kind not in args.parts:
                continue
            result = torch_classifier_one_run_audit(estimator(args.seed), X, y, m=args.m, white_box=kind == "white",
                                                    random_state=args.seed)
            row[f"{kind}_box"] = result.to_dict()
            if "plain_seconds" in row:
                row[f"{kind}_box_time_ratio"] = result.seconds_total / row["plain_seconds"]
            print(json.dumps(row[f"{kind}_box"]), flush=True)
        row["load_average_after"] = list(os.getloadavg())
        payload["rows"] = [r for r in payload["rows"] if not (r["epsilon"] == eps and r["epochs"] == args.epochs
                                                              and r["n_real"] == row["n_real"])] + [row]
    payload["machine"] = machine()
    payload["paper"] = ("Steinke, Nasr and Jagielski (2023) audit a WRN-16-4 on CIFAR-10; their reported bounds "
                        "were not found in text form here, so they are not quoted")
    write_json(out, payload)


def _count(m: int) -> str:
    k = len(str(m)) - 1
    return f"10^{k}" if m >= 10**6 and m == 10**k else str(m)


def _noted(text: str, note: str | None) -> str:
    return f"{text} ({note})" if note else text


def _control_table(rows: list[dict]) -> list[str]:
    out = ["| control | setting | canaries | broken: flagged (curve refuted) | median eps bound / mu | correct engine: "
           "flagged | median eps bound / mu | s per audit |", "|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["control"] for r in rows):
        bad = next(r for r in rows if r["control"] == name and r["broken"])
        good = next(r for r in rows if r["control"] == name and not r["broken"])
        q, steps = bad["sample_rate"], bad["steps"]
        setting = "one full-batch step (q = 1)" if q == 1 and steps == 1 else f"{steps} Poisson steps, q = {q:g}"
        kind = "records" if bad["canaries"] == "records" else "Dirac"
        canaries = _noted(f"{_count(bad['m'])} {kind}", CANARY_NOTES.get(name))
        correct = _noted(f"{good['flagged']} / {good['audits']}", CORRECT_NOTES.get(name))
        out.append(f"| {CONTROL_TITLES.get(name, name)} | {setting} | {canaries} | {bad['flagged']} / {bad['audits']} "
                   f"({bad['profile_rejected']}) | {bad['median_bound']:.3f} / {bad['median_mu']:.3f} | {correct} | "
                   f"{good['median_bound']:.3f} / {good['median_mu']:.3f} | {bad['seconds_per_audit']:.1f} |")
    return out


def _mnist_table(rows: list[dict]) -> list[str]:
    out = ["| epochs | claimed eps | white-box bound (statistic, correct / guesses) | black-box bound | ordinary fit (s) "
           "| white-box run (s, ratio) | black-box run (s, ratio) |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["epochs"], r["epsilon"])):
        w, b = r.get("white_box"), r.get("black_box")
        audit = w or b
        white = f"{w['epsilon_lower']:.3f} ({w['statistic']}, {w['correct']} / {w['guesses']})" if w else "-"
        black = f"{b['epsilon_lower']:.3f} ({b['correct']} / {b['guesses']})" if b else "-"
        plain = f"{r['plain_seconds']:.1f}" if "plain_seconds" in r else "-"

        def run(kind: str, part: dict | None) -> str:
            ratio = r.get(f"{kind}_box_time_ratio")
            return "-" if part is None else f"{part['seconds']:.1f}" + (f" ({ratio:.2f}x)" if ratio else "")

        claimed = f"{audit['claimed_epsilon']:.3f}" if audit else "-"
        out.append(f"| {r['epochs']:g} | {claimed} | {white} | {black} | {plain} | {run('white', w)} | "
                   f"{run('black', b)} |")
    return out


def render(data: dict) -> str:
    """The BENCHMARKS.md section from ``benchmarks/results/one_run_torch.json``: the tables from the data, the
    prose from the file's hand-written ``notes`` (recorded with the figures) or, without them, the setting alone."""
    notes, controls = data.get("notes", {}), data.get("controls")
    out = [HEADING, "", notes.get("intro") or (
        "`PYTHONPATH=src python benchmarks/one_run_torch.py controls|mnist ...` (results/one_run_torch.json). "
        "Steinke et al.'s (eps, delta) analysis and the f-DP test of the claimed curve at 95% (union bound)."), ""]
    if controls:
        m = controls.get("machine", {})
        load = controls.get("load_average_after")
        cnotes = controls.get("notes", {})
        out += [cnotes.get("setting") or (
            f"**Planted bugs** (`privml.testing.torch_controls`): `PYTHONPATH=src {controls['command']}` on commit "
            f"{m.get('commit', '?')}, {m.get('date', '?')}" + (f", load average {load[0]:.1f} after" if load else "")
            + "; claimed (2, 1e-5) add/remove-one, white-box audits."), ""]
        out += _control_table(controls["rows"]) + [""]
        if cnotes.get("after"):
            out += [cnotes["after"], ""]
    if data.get("rows"):
        loads = [r["load_average_after"][0] for r in data["rows"] if "load_average_after" in r]
        out += [notes.get("mnist_setting") or (
            "**MNIST CNN** (TorchClassifier defaults; delta 1e-5). White-box: Dirac gradient canaries; black-box: "
            "N(0, 1) images with random labels, scored by their loss; time ratio over one ordinary fit"
            + (f"; load average {min(loads):.1f}-{max(loads):.1f} after the runs" if loads else "") + "."), ""]
        out += _mnist_table(data["rows"]) + [""]
        if notes.get("mnist_after"):
            out += [notes["mnist_after"], ""]
    return "\n".join(out[:-1]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    c = sub.add_parser("controls")
    c.add_argument("--seeds", type=int, default=10)
    c.add_argument("--m", type=int, default=None, help="canaries (default: each control's own)")
    c.add_argument("--controls", nargs="+", default=None, help="which controls (default: all)")
    c.add_argument("--out", default=None)
    mn = sub.add_parser("mnist")
    mn.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 8.0])
    mn.add_argument("--epochs", type=float, default=40.0)
    mn.add_argument("--m", type=int, default=1000)
    mn.add_argument("--max-train", type=int, default=None)
    mn.add_argument("--threads", type=int, default=2)
    mn.add_argument("--seed", type=int, default=0)
    mn.add_argument("--parts", nargs="+", default=["plain", "white", "black"])
    mn.add_argument("--out", default=None)
    args = parser.parse_args()
    controls(args) if args.part == "controls" else mnist(args)


if __name__ == "__main__":
    main()
