"""One-run auditing (Steinke, Nasr and Jagielski 2023; issue 29, item 3): the idealised bounds and the linear
methods on full MNIST, one training run each.

1. Idealised setting: an eps-DP mechanism whose guesses are each right with probability e^eps / (1 + e^eps),
   m = 1000 canaries, the correct count at its expectation (rounded down), best number of guesses r
   (:func:`privml.audit._one_run.idealised_curve`); and the Gaussian mechanism simulated at (eps, 1e-5) with one
   canary per coordinate (:func:`privml.audit._one_run.simulate_gaussian_audit`, median of 5 seeds).
2. Each linear method (``privml audit --one-run`` settings) on the whole MNIST training set (60,000 records +
   m = 1000 canary slots) at epsilon 1 and 8, delta 1e-5: black-box (:mod:`privml.audit._one_run_linear`) and,
   for DP-SGD, white-box with Dirac canaries (:mod:`privml.audit._one_run_dpsgd`, ``--white-box``); each the one-run
   95% lower bound, the f-DP test of the claimed curve, the time and the machine's load average around it.
3. Accuracy First (output perturbation with noise reduction, defaults but the target and delta) on the same data:
   black-box, against the ex-post epsilon of the run when delta = 0 (Laplace chain) and the search's worst case
   eps_AT + eps_max when delta > 0 (Gaussian chain; :mod:`privml.audit._one_run_claims` says why).

    python benchmarks/one_run_audit.py --out benchmarks/results/one_run_audit.json [--methods output,dpsgd]

``render(results)`` writes the BENCHMARKS.md section (benchmarks/write_benchmarks_md.py): the tables from the data,
the prose from the file's ``notes`` (the setting, and any analysis written after the run).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
from _common import machine

from privml.audit._one_run import idealised_curve, simulate_gaussian_audit
from privml.audit._one_run_dpsgd import dpsgd_white_box_audit
from privml.audit._one_run_linear import linear_one_run_audit
from privml.cli._common import BIAS
from privml.cli._train import build_estimator
from privml.data import load_dataset
from privml.selection._accuracy_first import AccuracyFirstClassifier, AccuracyFirstWarning

HEADING = "## One-run audits (issue 29, item 3): Steinke, Nasr & Jagielski 2023, one training run each"
#: What each part measured, written with its figures (the render prints the notes a file holds).
NOTES = {
    "intro": "`PYTHONPATH=src python benchmarks/one_run_audit.py` on the shared 2-core CPU (the load average is stated "
             "with each row). Steinke et al.'s (eps, delta) analysis exactly (Theorem 3 / Prop. 5) and the f-DP test "
             "of the claimed privacy curve (Mahloujifar, Melis & Chaudhuri 2024) with the mu-GDP bound, 95% "
             "confidence shared by the three analyses and the fixed guess counts (union bound).",
    "idealised": "Idealised setting, m = 1000 (guesses right with probability e^eps/(1+e^eps), expected count rounded "
                 "down, best r, delta = 0), beside a simulated Gaussian mechanism at (eps, 1e-5), one canary per "
                 "coordinate, median of 5 seeds. The paper's figure for this setting was not found in text form here, so "
                 "it is not quoted: compare by eye with its idealised-setting figure.",
    "linear": "Linear methods on full MNIST (60,000 records + 1000 canary slots, one fit each, delta 1e-5, seed 0). "
              "Black-box: each canary's margin under the released model; replace-one methods hold a canary's mirror "
              "(same features, other label) when it is out, DP-SGD a null record (zero-out add/remove). White-box "
              "(DP-SGD): 1000 Dirac canaries on the quietest weights, read from every step's released noisy sum. "
              "'curve refuted': the f-DP test of the curve the fit's accountant states (DP-SGD: its PLD curve; "
              "DP-CD: mu-GDP; output and objective perturbation: their one (eps, delta) pair); 'mu': the largest "
              "mu-GDP the run refutes. Accuracy First: with delta = 0 the claim is the run's ex-post epsilon (sound for "
              "a pure ex-post guarantee, given the output), with delta > 0 the search's worst case eps_AT + eps_max "
              "(privml.audit._one_run_claims says why); the method column says whether the search met its target.",
}


def idealised_rows(m: int) -> list[dict]:
    rows = []
    for eps in (1.0, 2.0, 4.0, 8.0):
        r, bounds = idealised_curve(eps, m)
        i = int(np.argmax(bounds))
        gauss = [simulate_gaussian_audit(eps, m, delta=1e-5, random_state=s).epsilon_lower for s in range(5)]
        rows.append({"epsilon": eps, "m": m, "idealised_bound": float(bounds[i]), "best_guesses": int(r[i]),
                     "gaussian_median_bound": float(np.median(gauss))})
        print(rows[-1], flush=True)
    return rows


def _row(result, **extra) -> dict:
    row = {**result.to_dict(), **extra}
    print({k: row.get(k) for k in ("method", "scores_from", "epsilon", "claimed_epsilon", "epsilon_lower",
                                   "claim_rejected", "mu_lower", "correct", "guesses", "seconds_fit", "seconds",
                                   "load_average_before")}, flush=True)
    return row


def linear_rows(methods: list[str], epsilons: list[float], m: int, seed: int, data) -> list[dict]:
    k = len(data.info.classes)
    rows = []
    for method in methods:
        kinds = ("black-box", "white-box") if method == "dpsgd" else ("black-box",)
        for eps in epsilons:
            for kind in kinds:
                model = build_estimator(method, n_classes=k, epsilon=eps, delta=1e-5, l2=None, seed=seed)
                load = list(os.getloadavg())
                if kind == "white-box":
                    result = dpsgd_white_box_audit(model, data.X_train, data.y_train, m=m, random_state=seed)
                else:
                    result = linear_one_run_audit(model, data.X_train, data.y_train, m=m, random_state=seed)
                rows.append(_row(result, epsilon=eps, load_average_before=load,
                                 load_average_after=list(os.getloadavg())))
    return rows


def accuracy_first_rows(settings: list[tuple[float, float]], m: int, seed: int, data) -> list[dict]:
    rows = []
    for target, delta in settings:
        model = AccuracyFirstClassifier(target=target, delta=delta, classes=tuple(range(len(data.info.classes))),
                                        random_state=seed)
        load = list(os.getloadavg())
        with warnings.catch_warnings(record=True) as caught:  # a missed target is recorded, not printed
            warnings.simplefilter("always")
            result = linear_one_run_audit(model, data.X_train, data.y_train, m=m, random_state=seed)
        missed = any(issubclass(w.category, AccuracyFirstWarning) for w in caught)
        rows.append(_row(result, target=target, af_delta=delta, met_target=not missed, load_average_before=load,
                         load_average_after=list(os.getloadavg())))
    return rows


def _blas_threads() -> int | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return max((pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"), default=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/one_run_audit.json")
    parser.add_argument("--methods", default="output,objective,dpsgd,dpcd")
    parser.add_argument("--epsilons", default="1,8")
    parser.add_argument("--accuracy-first", default="0.35:0,0.3:0,0.2:1e-5",
                        help="Accuracy First's validation-error targets and deltas, TARGET:DELTA,... ('' for none)")
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-idealised", action="store_true", help="keep the file's idealised rows")
    args = parser.parse_args()
    started = time.perf_counter()
    out_path = Path(args.out)
    old = json.loads(out_path.read_text()) if out_path.exists() else {}
    idealised = old.get("idealised", []) if args.skip_idealised else idealised_rows(args.canaries)
    data = load_dataset("mnist", bias=BIAS, random_state=args.seed)
    targets = [(float(t), float(d)) for t, d in (item.split(":") for item in args.accuracy_first.split(",") if item)]
    out = {
        "idealised": idealised,
        "linear_mnist": linear_rows([m for m in args.methods.split(",") if m],
                                    [float(e) for e in args.epsilons.split(",")], args.canaries, args.seed, data)
                        + accuracy_first_rows(targets, args.canaries, args.seed, data),
        "machine": {**machine(), "shared": "2-core CPU shared with other jobs", "blas_threads": _blas_threads()},
        "notes": dict(NOTES),
    }
    out["seconds"] = time.perf_counter() - started
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


def _claimed(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}"


def _method(row: dict) -> str:
    if "target" not in row:
        return row["method"]
    met = "met" if row["met_target"] else "not met"
    return f"accuracy-first (target error {row['target']:g}, delta {row['af_delta']:g}, {met})"


def _linear_table(rows: list[dict]) -> list[str]:
    white = any(r["scores_from"] == "white-box" for r in rows)
    fdp = any("claim_rejected" in r for r in rows)
    load = any("load_average_before" in r for r in rows)
    head = ["method"] + (["scores"] if white else []) + ["claimed eps", "one-run bound", "correct / guesses"]
    head += (["curve refuted", "mu"] if fdp else []) + ["fit (s)", "audit total (s)"]
    head += ["load (1 min) before / after"] if load else []
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [_method(r)]
        if white:
            cells.append(f"white-box ({r['statistic']})" if r["scores_from"] == "white-box" else "black-box")
        cells += [_claimed(r["claimed_epsilon"]) if r["claimed_epsilon"] is not None else "none",
                  f"{r['epsilon_lower']:.3f}", f"{r['correct']} / {r['guesses']}"]
        if fdp:
            refuted = r.get("claim_rejected")
            cells += ["-" if refuted is None else ("yes" if refuted else "no"),
                      "-" if r.get("mu_lower") is None else f"{r['mu_lower']:.3f}"]
        cells += [f"{r['seconds_fit']:.1f}", f"{r['seconds']:.1f}"]
        if load:
            cells.append(f"{r['load_average_before'][0]:.1f} / {r['load_average_after'][0]:.1f}"
                         if "load_average_before" in r else "-")
        out.append("| " + " | ".join(cells) + " |")
    return out


def render(data: dict) -> str:
    """The BENCHMARKS.md section from ``benchmarks/results/one_run_audit.json``."""
    notes = data.get("notes", {})
    out = [HEADING, ""]
    if notes.get("intro"):
        out += [notes["intro"], ""]
    if data.get("idealised"):
        out += ([notes["idealised"], ""] if notes.get("idealised") else []) + [
            "| eps | idealised bound (best r) | Gaussian, one run (median of 5) |", "|---|---|---|"]
        out += [f"| {r['epsilon']:g} | {r['idealised_bound']:.3f} (r = {r['best_guesses']}) | "
                f"{r['gaussian_median_bound']:.3f} |" for r in data["idealised"]] + [""]
    if data.get("linear_mnist"):
        out += ([notes["linear"], ""] if notes.get("linear") else []) + _linear_table(data["linear_mnist"]) + [""]
    if notes.get("after"):
        out += [notes["after"], ""]
    return "\n".join(out[:-1]) + "\n"


if __name__ == "__main__":
    main()
