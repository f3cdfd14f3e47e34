"""ScatterNet features + DP-SGD (scatter-linear, scatter-cnn) against the end-to-end CNN, on 2 CPU cores (issue 31).

Three parts, each merged into ``benchmarks/results/scatter.json`` (a row per run, replaced when rerun):

- ``features``: the time to compute a data set's ScatterNet features on first use (a fresh, temporary cache);
- ``accuracy``: ScatterClassifier at (epsilon, 1e-5) from cached features, per data set, head, relation and seed
  (test accuracy on the published test split; fit time from cached features);
- ``e2e``: the end-to-end Tramer-Boneh CNN (TorchClassifier) rerun beside it, with BENCHMARKS.md's settings.

Usage::

    python benchmarks/scatter.py features --datasets mnist fashion-mnist --threads 2
    python benchmarks/scatter.py accuracy --datasets mnist fashion-mnist --heads linear --seeds 0 1 2 --threads 2
    python benchmarks/scatter.py accuracy --datasets mnist --neighbouring replace-one --seeds 0 --threads 2
    python benchmarks/scatter.py e2e --datasets mnist --seeds 0 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "scatter.json"
#: Tramer & Boneh's end-to-end settings as BENCHMARKS.md ran them (batch, learning rate)
E2E = {"mnist": (512, 0.5), "fashion-mnist": (2048, 4.0)}
#: Issue 31's acceptance: mean of 3 seeds at (3, 1e-5), add/remove
TARGETS = {"mnist": 0.988, "fashion-mnist": 0.898}


def _load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}


def _save(row: dict[str, Any]) -> None:
    data = _load()
    # keyed by what ran (the resolved settings too): a run of changed defaults keeps the earlier defaults' rows
    data["rows"] = [r for r in data["rows"] if _key(r) != _key(row)] + [row]
    data["machine"] = machine()
    write_json(RESULTS, data)


def _key(row: dict[str, Any]) -> tuple:
    resolved = tuple(row.get(k) for k in ("batch_size", "learning_rate", "averaging", "centering", "threads"))
    epochs = round(row["epochs"]) if row.get("epochs") is not None else None
    return (row["part"], row["dataset"], row["method"], row["neighbouring"], row["seed"], epochs, *resolved)


def _load_average() -> float:
    return os.getloadavg()[0]


def features(args: argparse.Namespace) -> None:
    import torch

    from privml.torch._data import load_images
    from privml.torch._scatter import Scattering2D, cached_features

    torch.set_num_threads(args.threads)
    for dataset in args.datasets:
        images = load_images(dataset)
        with tempfile.TemporaryDirectory() as cache:
            load = _load_average()
            start = time.perf_counter()
            net = Scattering2D((28, 28))
            for split in (images.X_train, images.X_test):
                cached_features(split, net, cache_dir=cache)
            seconds = time.perf_counter() - start
        _save({"part": "features", "dataset": dataset, "method": "scatter", "neighbouring": None, "seed": None,
               "settings": {"J": 2, "L": 8}, "seconds": seconds, "images": len(images.X_train) + len(images.X_test),
               "threads": args.threads, "load_before": load, "load_after": _load_average()})
        print(f"{dataset}: features of {len(images.X_train) + len(images.X_test)} images in {seconds:.0f} s")


def accuracy(args: argparse.Namespace) -> None:
    import numpy as np

    from privml.torch._data import load_images
    from privml.torch._scatter_classifier import ScatterClassifier

    for dataset in args.datasets:
        images = load_images(dataset)
        X, y = images.X_train.numpy(), images.y_train.numpy()
        X_test, y_test = images.X_test.numpy(), images.y_test.numpy()
        for head in args.heads:
            for seed in args.seeds:
                settings = {k: v for k, v in {"batch_size": args.batch_size, "learning_rate": args.learning_rate,
                                              "epochs": args.epochs, "averaging": args.averaging,
                                              "centering": args.centering}.items()
                            if v is not None}
                if settings.get("centering") == "none":
                    settings["centering"] = None
                model = ScatterClassifier(epsilon=args.epsilon, delta=1e-5, head=head, neighbouring=args.neighbouring,
                                          classes=list(range(10)), cache_features=True, random_state=seed,
                                          device="cpu", threads=args.threads, **settings)
                load = _load_average()
                start = time.perf_counter()
                model.fit(X, y)
                fit_seconds = time.perf_counter() - start
                acc = float(np.mean(model.predict(X_test) == y_test))
                info = model.fit_info_
                row = {"part": "accuracy", "dataset": dataset, "method": f"scatter-{head}",
                       "neighbouring": args.neighbouring, "seed": seed, "settings": settings,
                       "batch_size": info["expected_batch_size"], "learning_rate": model._learning_rate(),
                       "epochs": info["epochs"], "averaging": model._averaging(),
                       "centering": model._centering(len(X)), "epsilon": model.privacy_.epsilon,
                       "target_epsilon": args.epsilon, "noise_multiplier": info["noise_multiplier"],
                       "accuracy": acc, "fit_seconds": fit_seconds, "threads": args.threads,
                       "load_before": load, "load_after": _load_average()}
                _save(row)
                print(json.dumps(row), flush=True)


def e2e(args: argparse.Namespace) -> None:
    import numpy as np

    from privml.torch import TorchClassifier
    from privml.torch._data import load_images

    for dataset in args.datasets:
        images = load_images(dataset)
        batch, lr = E2E[dataset]
        for seed in args.seeds:
            model = TorchClassifier(epsilon=args.epsilon, delta=1e-5, batch_size=batch, learning_rate=lr,
                                    epochs=40, neighbouring=args.neighbouring, classes=list(range(10)),
                                    random_state=seed, device="cpu", threads=args.threads)
            load = _load_average()
            start = time.perf_counter()
            model.fit(images.X_train.numpy(), images.y_train.numpy())
            fit_seconds = time.perf_counter() - start
            acc = float(np.mean(model.predict(images.X_test.numpy()) == images.y_test.numpy()))
            info = model.fit_info_
            row = {"part": "e2e", "dataset": dataset, "method": "dpsgd-cnn", "neighbouring": args.neighbouring,
                   "seed": seed, "settings": {"batch_size": batch, "learning_rate": lr, "epochs": 40},
                   "batch_size": batch, "learning_rate": lr, "epochs": info["epochs"], "averaging": 0.0,
                   "epsilon": model.privacy_.epsilon, "target_epsilon": args.epsilon,
                   "noise_multiplier": info["noise_multiplier"], "accuracy": acc, "fit_seconds": fit_seconds,
                   "threads": args.threads, "load_before": load, "load_after": _load_average()}
            _save(row)
            print(json.dumps(row), flush=True)


def render(data: dict) -> str:
    m = data.get("machine", {})
    out = ["## ScatterNet features + DP-SGD against the end-to-end CNN (issue 31)", ""]
    out.append(f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores (shared with other jobs: the load "
               f"average is stated per row), Python {m.get('python', '?')}, commit {m.get('commit', '?')}, "
               f"{m.get('date', '?')}.")
    out.append("")
    out.append("Commands: `python benchmarks/scatter.py features|accuracy|e2e ...` (see the script's docstring; each "
               "row's settings are in `benchmarks/results/scatter.json`). ScatterNet J = 2, L = 8 (81 x 7 x 7 "
               "features), GroupNorm with 27 groups, SGD momentum 0.9, C = 0.1, PLD accounting, delta = 1e-5, test "
               "accuracy on the full published test split; batch is the expected Poisson batch; the torch threads "
               "of each fit beside its time. Centring s: the noise multiplier of the private feature mean the head "
               "subtracts, composed with the steps into the eps spent ('-': not centred, the rows before it "
               "existed).")
    out.append("")
    rows = data.get("rows", [])
    feats = [r for r in rows if r["part"] == "features"]
    if feats:
        out += ["| data set | images | features on first use (s) | load (1 min) before / after |", "|---|---|---|---|"]
        for r in feats:
            load = ("not recorded" if r.get("load_before") is None
                    else f"{r['load_before']:.1f} / {r['load_after']:.1f}")
            out.append(f"| {r['dataset']} | {r['images']} | {r['seconds']:.0f} ({r['threads']} thread(s)) | {load} |")
        out.append("")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["part"] in ("accuracy", "e2e"):
            key = (r["dataset"], r["method"], r["neighbouring"], r["target_epsilon"], r["batch_size"],
                   r["learning_rate"], round(r["epochs"]), r.get("averaging", 0.0), r.get("centering") or 0.0)
            groups.setdefault(key, []).append(r)
    if groups:
        out += ["| data set | method | relation | target eps | batch, lr | epochs | averaging | centring s | seeds | "
                "noise mult. | eps spent | test accuracy (mean ± std) | worst seed | fit time (median) | load (1 min) |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for key in sorted(groups):
            rs = groups[key]
            accs = [r["accuracy"] for r in rs]
            mean = statistics.mean(accs)
            spread = f" ± {100 * statistics.stdev(accs):.2f}" if len(accs) > 1 else ""
            seconds = statistics.median(r["fit_seconds"] for r in rs)
            load = statistics.mean(r["load_before"] for r in rs)
            out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]:g} | {key[4]:g}, {key[5]:g} | {key[6]} | "
                       f"{key[7]:g} | {key[8] or '-'} | {len(rs)} | {rs[0]['noise_multiplier']:.3f} | {max(r['epsilon'] for r in rs):.3f} "
                       f"| {100 * mean:.2f}%{spread} | {100 * min(accs):.2f}% | {seconds / 60:.1f} min "
                       f"({'/'.join(str(t) for t in sorted({r['threads'] for r in rs}))} thr.) | {load:.1f} |")
        out.append("")
    # Hand-written prose recorded with the figures (results file's "notes"); a rerun that changes rows should
    # update or drop them, as they describe the rows they were written for.
    for key in ("what_ran", "after"):
        if data.get("notes", {}).get(key):
            out += [data["notes"][key], ""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("features", "accuracy", "e2e", "render"))
    parser.add_argument("--datasets", nargs="+", default=["mnist", "fashion-mnist"])
    parser.add_argument("--heads", nargs="+", default=["linear"], choices=("linear", "cnn"))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--neighbouring", default="add/remove-one", choices=("add/remove-one", "replace-one"))
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--epochs", type=float)
    parser.add_argument("--averaging", type=float)
    parser.add_argument("--centering", type=lambda v: v if v in ("auto", "none") else float(v),
                        help="the feature mean's noise multiplier, 'auto' or 'none' (default: the estimator's)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.part == "render":
        print(render(_load()))
        return
    {"features": features, "accuracy": accuracy, "e2e": e2e}[args.part](args)


if __name__ == "__main__":
    main()
