"""DP-SGD step time on the CPU for the GPU table's larger models: privml vs Opacus 1.6 vs non-private.

``torch_dpsgd.py speed`` times the Tramer-Boneh CNN, the model of the MNIST
results; users without a GPU also train the GroupNorm ResNet, the
WideResNet-16-4 and the transformer encoder of ``torch_gpu.py``. This script
times one DP-SGD step of each (flat clipping to C = 0.1, noise multiplier 1,
synthetic batch of 32 with the GPU table's shapes) for non-private training,
privml's ghost step and Opacus's two modes, using ``torch_gpu.make_step``
(same models, initial weights and step functions). The variants' steps are
interleaved round by round, alternating their order, so that load from
other work on the machine hits all of them alike; the median and the
fastest step of each are reported.

Run in the peers venv (Opacus importable)::

    nice -n 5 .venv-peers/bin/python benchmarks/torch_cpu_models.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, write_json  # noqa: E402

RESULT = HERE / "results" / "torch_cpu_models.json"
MODELS = ("resnet", "wide-resnet", "transformer")
VARIANTS = ("nonprivate", "privml-ghost", "opacus-hooks", "opacus-ghost")


def run(models: list[str], batch_size: int, rounds: int, threads: int) -> dict[str, Any]:
    import torch
    import torch_gpu

    torch.set_num_threads(threads)
    out: dict[str, Any] = {}
    for model in models:
        X, y = torch_gpu.batch(model, batch_size, "cpu")
        steps, errors = {}, {}
        for variant in VARIANTS:
            try:
                steps[variant] = torch_gpu.make_step(variant, model, X, y)
                steps[variant]()  # warm-up: allocator, oneDNN primitives, optimiser state
            except Exception as exc:  # noqa: BLE001 - a peer's failure is recorded, not hidden
                steps.pop(variant, None)
                errors[variant] = f"{type(exc).__name__}: {exc}"[:300]
        times: dict[str, list[float]] = {v: [] for v in steps}
        for r in range(rounds):
            for variant in list(steps) if r % 2 == 0 else reversed(list(steps)):
                began = time.perf_counter()
                steps[variant]()
                times[variant].append((time.perf_counter() - began) * 1e3)
        result: dict[str, Any] = {"model": torch_gpu.LABELS[model], "batch": batch_size}
        for variant, ts in times.items():
            result[variant] = {"median_ms": statistics.median(ts), "min_ms": min(ts), "steps": len(ts)}
        for variant, error in errors.items():
            result[variant] = {"error": error}
        print(f"{model}: {json.dumps(result)}", file=sys.stderr, flush=True)
        out[model] = result
    return out


def render(data: dict) -> str:
    """Markdown section for BENCHMARKS.md from the stored results."""
    rows = data.get("rows")
    if not rows:
        return ""
    m = data.get("machine", {})
    out = ["## DP-SGD step time on the CPU: the GPU table's larger models", "",
           f"Machine: {m.get('cpu')}, {m.get('cores')} cores, {data.get('threads')} torch threads, torch "
           f"{data.get('torch')}, Opacus {data.get('opacus')}, commit {m.get('commit')}, {m.get('date')}; load average "
           f"{data.get('load_average', {}).get('before', float('nan')):.1f} before, "
           f"{data.get('load_average', {}).get('after', float('nan')):.1f} after.", "",
           "Command: `nice -n 5 .venv-peers/bin/python benchmarks/torch_cpu_models.py`. One DP-SGD step (C = 0.1, "
           f"noise multiplier 1) on a synthetic batch of {data.get('batch_size')}, the models and step functions of "
           f"the GPU table; median (fastest) ms over {data.get('rounds')} interleaved rounds.", "",
           "| model, batch | " + " | ".join(VARIANTS) + " | privml / best Opacus | privml / non-private |",
           "|---|" + "---|" * (len(VARIANTS) + 2)]
    for r in rows.values():
        cells = [f"{r[v]['median_ms']:.0f} ({r[v]['min_ms']:.0f})" if "median_ms" in r.get(v, {})
                 else ("error" if "error" in r.get(v, {}) else "-") for v in VARIANTS]
        ours = r.get("privml-ghost", {}).get("median_ms")
        peers = [r[v]["median_ms"] for v in ("opacus-hooks", "opacus-ghost") if "median_ms" in r.get(v, {})]
        nonpriv = r.get("nonprivate", {}).get("median_ms")
        out.append(f"| {r['model']}, {r['batch']} | " + " | ".join(cells)
                   + f" | {f'{ours / min(peers):.2f}x' if ours and peers else '-'}"
                   + f" | {f'{ours / nonpriv:.2f}x' if ours and nonpriv else '-'} |")
    errors = [f"{name} {v}: {r[v]['error']}" for name, r in rows.items() for v in VARIANTS if "error" in r.get(v, {})]
    if errors:
        out += ["", "Errors (recorded, not hidden): " + "; ".join(errors)]
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args(argv)
    try:
        import torch
        import torch_gpu
    except ImportError:
        print("torch_cpu_models: torch is not installed; nothing to measure", file=sys.stderr)
        return 0
    before = os.getloadavg()[0]
    rows = run(args.models, args.batch_size, args.rounds, args.threads)
    data = {"machine": machine(), "torch": torch.__version__, "opacus": torch_gpu._opacus_version(),
            "threads": args.threads, "batch_size": args.batch_size, "rounds": args.rounds,
            "load_average": {"before": before, "after": os.getloadavg()[0]}, "rows": rows}
    write_json(Path(args.out), data)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
