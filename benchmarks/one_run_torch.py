"""One-run audits of torch DP-SGD (Steinke, Nasr and Jagielski 2023; issue 29, items 3 and 4, torch part).

Two parts:

``controls``
    Each planted bug of :mod:`privml.testing.torch_controls` and its correct engine, audited white-box in
    the controls' setting (tiny model, 200 synthetic records + m = 1000 canary slots, claimed (2, 1e-5)
    add/remove-one, 10 Poisson steps at q = 0.2), over independent seeds: how often the 95% bound exceeds
    the claim. Writes ``benchmarks/results/one_run_torch_controls.json``.
``mnist``
    The Tramer-Boneh MNIST CNN (:class:`privml.torch.TorchClassifier` defaults) on the MNIST training set
    plus m = 1000 canary slots at the given epsilons (delta 1e-5): one ordinary fit (on the real records
    alone), then one white-box audit (Dirac gradient canaries) and one black-box audit (out-of-distribution
    canaries, loss scores), each one training run; the bounds and each run's time against the ordinary
    fit's. Writes ``benchmarks/results/one_run_torch.json``.

    python benchmarks/one_run_torch.py controls --seeds 10
    python benchmarks/one_run_torch.py mnist --epsilons 2 8 --epochs 40 --threads 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json


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
    out = Path(args.out or "benchmarks/results/one_run_torch_controls.json")
    old = json.loads(out.read_text())["rows"] if out.exists() else []
    done = {row["control"] for row in rows}
    write_json(out, {"machine": machine(), "command": "python benchmarks/one_run_torch.py controls "
                     f"--seeds {args.seeds}" + (f" --m {args.m}" if args.m else ""),
                     "rows": [r for r in old if r["control"] not in done] + rows})


def mnist(args: argparse.Namespace) -> None:
    import torch

    from privml.audit.one_run_torch import torch_classifier_one_run_audit
    from privml.torch import TorchClassifier
    from privml.torch.data import load_images

    data = load_images("mnist", max_train=args.max_train, random_state=0)
    X, y = data.X_train.numpy(), data.y_train.numpy()
    out = Path(args.out or "benchmarks/results/one_run_torch.json")
    payload = json.loads(out.read_text()) if out.exists() else {"rows": []}
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
        row["load_average_after"] = list(__import__("os").getloadavg())
        payload["rows"] = [r for r in payload["rows"] if not (r["epsilon"] == eps and r["epochs"] == args.epochs
                                                              and r["n_real"] == row["n_real"])] + [row]
    payload["machine"] = machine()
    payload["paper"] = ("Steinke, Nasr and Jagielski (2023) audit a WRN-16-4 on CIFAR-10; their reported bounds "
                        "were not found in text form here, so they are not quoted")
    write_json(out, payload)


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
