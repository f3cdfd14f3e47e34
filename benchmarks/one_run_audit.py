"""One-run auditing (Steinke, Nasr and Jagielski 2023; issue 29, item 3): the idealised bounds and the linear
methods on full MNIST, one training run each.

1. Idealised setting: an eps-DP mechanism whose guesses are each right with probability e^eps / (1 + e^eps),
   m = 1000 canaries, the correct count at its expectation (rounded down), best number of guesses r
   (:func:`privml.audit.one_run.idealised_curve`); and the Gaussian mechanism simulated at (eps, 1e-5) with one
   canary per coordinate (:func:`privml.audit.one_run.simulate_gaussian_audit`, median of 5 seeds).
2. Each linear method (``privml audit --one-run`` settings) on the whole MNIST training set (60,000 records +
   m = 1000 canary slots) at epsilon 1 and 8, delta 1e-5: the one-run 95% lower bound and the time.

    python benchmarks/one_run_audit.py --out benchmarks/results/one_run_audit.json [--methods output,dpsgd]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from privml.audit.one_run import idealised_curve, simulate_gaussian_audit
from privml.audit.one_run_linear import linear_one_run_audit
from privml.cli._common import BIAS
from privml.cli.train import build_estimator
from privml.data import load_dataset


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


def linear_rows(methods: list[str], epsilons: list[float], m: int, seed: int) -> list[dict]:
    data = load_dataset("mnist", bias=BIAS, random_state=seed)
    k = len(data.info.classes)
    rows = []
    for method in methods:
        for eps in epsilons:
            model = build_estimator(method, n_classes=k, epsilon=eps, delta=1e-5, l2=None, seed=seed)
            result = linear_one_run_audit(model, data.X_train, data.y_train, m=m, random_state=seed)
            row = {k_: v for k_, v in result.to_dict().items()}
            row["epsilon"] = eps
            rows.append(row)
            print({k_: row[k_] for k_ in ("method", "epsilon", "claimed_epsilon", "epsilon_lower", "guesses",
                                           "correct", "seconds_fit", "seconds")}, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/one_run_audit.json")
    parser.add_argument("--methods", default="output,objective,dpsgd,dpcd")
    parser.add_argument("--epsilons", default="1,8")
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    out = {
        "idealised": idealised_rows(args.canaries),
        "linear_mnist": linear_rows([m for m in args.methods.split(",") if m],
                                    [float(e) for e in args.epsilons.split(",")], args.canaries, args.seed),
        "machine": "2-core CPU (shared)",
    }
    out["seconds"] = time.perf_counter() - started
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
