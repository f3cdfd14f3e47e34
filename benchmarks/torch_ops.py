"""Operations one DP-SGD step dispatches: what a GPU's host launches, counted without a GPU.

On a GPU the eager ghost step is bound by the host: every dispatched
operation costs it microseconds (about 15 on the H200 machine of
BENCHMARKS.md, where the benchmark ResNet's step took 43 ms while its
kernels were busy 26). A ``TorchDispatchMode`` counts the operations one
step dispatches (after one warm-up step), on the CPU with the GPU's code
paths (:func:`torch_memory.use_gpu_code_paths`), for the rows and step
functions of :mod:`torch_gpu`. Views count too: the host pays for them.

Run in the peers venv (Opacus importable); ``--src`` counts another
checkout's privml (a before/after pair)::

    nice -n 10 .venv-peers/bin/python benchmarks/torch_ops.py
    nice -n 10 .venv-peers/bin/python benchmarks/torch_ops.py --label before --src ../old/src \\
        --variants privml-ghost
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

RESULT = HERE / "results" / "torch_ops.json"
VARIANTS = ("nonprivate", "privml-ghost", "opacus-hooks")


def dispatched(step) -> int:  # noqa: ANN001
    """Operations one call of ``step`` dispatches, after one uncounted call (lazy set-up, optimiser state)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    step()
    with Count():
        step()
    return Count.calls


def run(rows: list[str], variants: list[str]) -> dict[str, Any]:
    import torch
    import torch_gpu
    from torch_memory import use_gpu_code_paths

    torch.set_num_threads(2)
    out: dict[str, Any] = {}
    for row in rows:
        model_name, size = torch_gpu.ROWS[row]
        X, y = torch_gpu.batch(model_name, size, "cpu")
        result: dict[str, Any] = {"model": torch_gpu.LABELS[model_name], "batch": size}
        for variant in variants:
            try:
                step = torch_gpu.make_step(variant, model_name, X, y)
                use_gpu_code_paths()  # after the model is built: an old checkout's rule registry needs its import order
                result[variant] = {"operations": dispatched(step)}
            except Exception as exc:  # noqa: BLE001 - a peer's failure is recorded, not fatal
                result[variant] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"{row} {variant}: {result[variant]}", file=sys.stderr, flush=True)
        out[row] = result
    return out


def render(data: dict) -> str:
    """Markdown section for BENCHMARKS.md from the stored results."""
    runs = data.get("runs", {})
    now, before = runs.get("now", {}), runs.get("before", {})
    if not now:
        return ""
    m = now.get("machine", {})
    out = ["## Operations per DP-SGD step (what a GPU's host launches, counted on the CPU)", ""]
    out.append(
        f"Machine: {m.get('cpu')}, torch {now.get('torch')}, commit {m.get('commit')}, {m.get('date')}. Command: "
        "`.venv-peers/bin/python benchmarks/torch_ops.py`"
        + (f"; before: `--label before --src` at commit {before['machine'].get('commit')}" if before else "") + "."
    )
    out += [
        "",
        "Operations one step dispatches (a `TorchDispatchMode`, views included), on the CPU with the GPU's code "
        "paths, for the rows and step functions of the GPU table. On a GPU each costs the host microseconds, and "
        "the eager ghost step is bound by them where its kernels are short.",
        "",
        "| model, batch | non-private | privml ghost (before) | privml ghost | Opacus hooks | privml / non-private |",
        "|---|---|---|---|---|---|",
    ]

    def cell(run: dict, row: str, variant: str) -> str:
        v = run.get("rows", {}).get(row, {}).get(variant, {})
        return str(v["operations"]) if "operations" in v else ("error" if "error" in v else "-")

    for row, r in now.get("rows", {}).items():
        ours, base = r.get("privml-ghost", {}).get("operations"), r.get("nonprivate", {}).get("operations")
        ratio = f"{ours / base:.2f}x" if ours and base else "-"
        out.append(f"| {r['model']}, {r['batch']} | {cell(now, row, 'nonprivate')} | "
                   f"{cell(before, row, 'privml-ghost')} | {cell(now, row, 'privml-ghost')} | "
                   f"{cell(now, row, 'opacus-hooks')} | {ratio} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    from torch_memory import proxy_main

    return proxy_main(argv, doc=__doc__, variants=VARIANTS, result=RESULT, run=run, render=render)


if __name__ == "__main__":
    sys.exit(main())
