"""Private linear classifiers on MNIST: every privml method against diffprivlib's
LogisticRegression at the same (epsilon, delta), side by side in one run.

Accuracy on the MNIST test set for eps in {0.1, 0.3, 1, 3, 10}, delta in
{1e-5, 0} (methods that need delta > 0 are skipped at delta = 0), over several
seeds. Hyper-parameters are each estimator's defaults (chosen from public
quantities only), never tuned on the test set. Also times output/objective
perturbation against scikit-learn's non-private LogisticRegression with the
same regularisation. Run in the peers venv (``make bench``)::

    .venv-peers/bin/python benchmarks/linear.py --out benchmarks/results/linear.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import machine, write_json

from privml.data import load_dataset
from privml.registry import estimator_class

METHODS = ("output", "objective", "dpsgd", "dpcd")
NEEDS_DELTA = {"dpsgd", "dpcd"}
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
DELTAS = (1e-5, 0.0)


def make(method: str, **kwargs):
    return estimator_class(method)(**kwargs)


def fit_score(model, data) -> tuple[float, float]:
    start = time.perf_counter()
    model.fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    return float(np.mean(model.predict(data.X_test) == data.y_test)), seconds


def diffprivlib_score(data, epsilon: float, seed: int) -> tuple[float, float]:
    from diffprivlib.models import LogisticRegression

    model = LogisticRegression(epsilon=epsilon, data_norm=1.0, random_state=seed, max_iter=200)
    start = time.perf_counter()
    model.fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    return float(np.mean(model.predict(data.X_test) == data.y_test)), seconds


def reference(data, classes) -> dict:
    """Non-private accuracy and the training-time comparison with scikit-learn."""
    from sklearn.linear_model import LogisticRegression

    baseline = make("nonprivate", classes=classes)
    base_acc, base_sec = fit_score(baseline, data)
    timing = {}
    for method in ("output", "objective"):
        model = make(method, epsilon=1.0, delta=1e-5, classes=classes, random_state=0)
        _, sec = fit_score(model, data)
        l2 = float(model.fit_info_.get("l2", 1e-4))
        sk = LogisticRegression(C=1.0 / (data.info.n_train * l2), max_iter=1000, tol=1e-6)
        start = time.perf_counter()
        sk.fit(data.X_train, data.y_train)
        sk_sec = time.perf_counter() - start
        timing[method] = {"privml_seconds": sec, "sklearn_seconds": sk_sec, "ratio": sec / sk_sec, "l2": l2}
        print(f"timing {method}: privml {sec:.2f}s vs sklearn {sk_sec:.2f}s (ratio {sec / sk_sec:.2f})",
              file=sys.stderr)
    return {"nonprivate": {"accuracy": base_acc, "seconds": base_sec}, "timing": timing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/linear.json")
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    parser.add_argument("--deltas", nargs="+", type=float, default=list(DELTAS))
    parser.add_argument("--no-diffprivlib", dest="diffprivlib", action="store_false")
    parser.add_argument("--no-reference", dest="reference", action="store_false",
                        help="skip the non-private baseline and the timing comparison")
    parser.add_argument("--merge", action="store_true",
                        help="update matching rows of an existing --out file instead of replacing it")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    data = load_dataset(args.dataset, bias=0.5)
    k = len(data.info.classes)
    classes = tuple(range(k))
    print(f"{data.info.name}: {data.info.n_train} train, {data.info.n_test} test, d={data.info.n_features}",
          file=sys.stderr)

    runs = []
    for delta in args.deltas:
        for eps in args.epsilons:
            for method in list(args.methods) + (["diffprivlib"] if args.diffprivlib else []):
                if delta > 0 and method == "diffprivlib":
                    continue  # diffprivlib's LogisticRegression is pure eps-DP: run it once, at delta = 0
                if delta == 0 and method in NEEDS_DELTA:
                    continue
                accs, times = [], []
                for seed in range(args.seeds):
                    if method == "diffprivlib":
                        acc, sec = diffprivlib_score(data, eps, seed)
                    else:
                        model = make(method, epsilon=eps, delta=delta, classes=classes, random_state=seed)
                        acc, sec = fit_score(model, data)
                    accs.append(acc)
                    times.append(sec)
                row = {
                    "method": method, "epsilon": eps, "delta": delta,
                    "accuracy_mean": statistics.mean(accs),
                    "accuracy_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                    "accuracies": accs, "seconds_mean": statistics.mean(times),
                }
                runs.append(row)
                print(f"delta={delta:g} eps={eps:<5g} {method:12s} acc={row['accuracy_mean']:.4f} "
                      f"+- {row['accuracy_std']:.4f}  {row['seconds_mean']:.1f}s", file=sys.stderr)

    payload = {"machine": machine(), "dataset": data.info.to_dict(), "seeds": args.seeds, "runs": runs}
    if args.reference:
        payload.update(reference(data, classes))
    out = Path(args.out)
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        key = lambda r: (r["method"], r["epsilon"], r["delta"])  # noqa: E731
        fresh = {key(r) for r in runs}
        payload["runs"] = [r for r in old.get("runs", []) if key(r) not in fresh] + runs
        for name in ("nonprivate", "timing"):
            payload.setdefault(name, old.get(name))
        payload["machines"] = sorted({json.dumps(old["machine"]), json.dumps(payload["machine"])})
    write_json(out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
