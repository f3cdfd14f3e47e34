"""Peak memory of one DP-SGD step without a GPU: the rows of ``torch_gpu.py``, tracked on the CPU.

``torch.cuda.max_memory_allocated`` needs a GPU, which most sessions and CI
do not have. This script measures the same rows (same models, batch sizes,
variants and step functions as :mod:`torch_gpu`) on the CPU with torch's
``MemTracker``, which sees every tensor storage a step allocates and frees
(parameters, gradients, optimiser state, activations, temporaries) and
reports the peak of the live bytes: the number the CUDA caching allocator's
peak approximates, less its rounding, fragmentation and cuDNN workspaces.
``BENCHMARKS.md`` puts the GPU figures of the same code next to it where
they were measured, so the proxy can be checked against the real thing.

Run in the peers venv (Opacus importable); ``--src`` measures another
checkout's privml (for a before/after pair)::

    nice -n 10 .venv-peers/bin/python benchmarks/torch_memory.py
    nice -n 10 .venv-peers/bin/python benchmarks/torch_memory.py --label before --src ../old/src \\
        --variants privml-ghost
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, write_json  # noqa: E402

RESULT = HERE / "results" / "torch_memory.json"
VARIANTS = ("nonprivate", "privml-ghost", "privml-ghost-tf32", "opacus-hooks", "opacus-ghost")
GPU_RESULT = HERE / "results" / "torch_gpu.json"


def peak_mib(step) -> float:  # noqa: ANN001
    """Peak live tensor bytes (MiB) of one call of ``step``, after one untracked call (optimiser state exists)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    step()
    tracker = MemTracker()
    with tracker:
        step()
    return sum(device["Total"] for device in tracker.get_tracker_snapshot("peak").values()) / 2**20


def use_gpu_code_paths() -> None:
    """Make the CPU take the GPU's code paths, so a measurement on the CPU stands for the GPU's.

    The CPU takes four of its own: the pool's channels-last copies, per-example convolution gradients by a
    grouped kernel rather than patches, book-kept convolution sums by the backward kernel, and no floor under
    a layer's chunks. Each switch is applied only where the checkout has it (``--src`` of an older commit).
    """
    from torch import nn

    from privml.torch._ghost import base, conv
    from privml.torch.models import _tramer_boneh as tramer_boneh

    if hasattr(tramer_boneh, "ChannelsLastMaxPool2d"):
        tramer_boneh.ChannelsLastMaxPool2d.forward = nn.MaxPool2d.forward  # type: ignore[method-assign]
    if hasattr(conv, "GROUPED_INSTANTIATION"):
        conv.GROUPED_INSTANTIATION["cpu"] = conv.GROUPED_INSTANTIATION.get("cuda", False)
    if hasattr(conv, "KERNEL_SUMS"):  # book-kept convolutions' float32 sums: products of patches on a GPU
        conv.KERNEL_SUMS["cpu"] = conv.KERNEL_SUMS.get("cuda", False)
    if hasattr(base, "CHUNK_FLOOR"):  # a layer's chunks take at least this many numbers on a GPU
        base.CHUNK_FLOOR["cpu"] = base.CHUNK_FLOOR.get("cuda", 0)


def run(rows: list[str], variants: list[str]) -> dict[str, Any]:
    import torch_gpu

    use_gpu_code_paths()  # this proxy stands for the GPU's memory
    out: dict[str, Any] = {}
    for row in rows:
        model_name, size = torch_gpu.ROWS[row]
        X, y = torch_gpu.batch(model_name, size, "cpu")
        result: dict[str, Any] = {"model": torch_gpu.LABELS[model_name], "batch": size}
        for variant in variants:
            gc.collect()
            try:
                result[variant] = {"peak_mib": peak_mib(torch_gpu.make_step(variant, model_name, X, y))}
            except Exception as exc:  # noqa: BLE001 - a peer's failure is recorded, not fatal
                result[variant] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"{row} {variant}: {result[variant]}", file=sys.stderr, flush=True)
        out[row] = result
    return out


def render(data: dict) -> str:
    """Markdown section for BENCHMARKS.md from the stored results."""
    runs = data.get("runs", {})
    now = runs.get("now", {})
    if not now:
        return ""
    before = runs.get("before", {})
    gpu_run = json.loads(GPU_RESULT.read_text()) if GPU_RESULT.exists() else {}
    gpu = gpu_run.get("steps", {})
    m = now.get("machine", {})
    out = ["## DP-SGD peak memory without a GPU (tracked on the CPU)", ""]
    out.append(
        f"Machine: {m.get('cpu')}, {m.get('cores')} cores, torch {now.get('torch')}, Opacus {now.get('opacus')}, "
        f"commit {m.get('commit')}, {m.get('date')}. Command: `.venv-peers/bin/python benchmarks/torch_memory.py`"
        + (f"; before: the same with `--label before --src` at commit {before['machine'].get('commit')}"
           if before else "") + "."
    )
    out += [
        "",
        "Peak live tensor storage (MiB) of one DP-SGD step, measured with torch's MemTracker on the CPU: the rows "
        "and step functions of the GPU table above (same models, batch sizes and variants). It is the quantity "
        "`torch.cuda.max_memory_allocated` approximates, without the allocator's rounding and cuDNN workspaces; "
        "the last column gives the GPU figures (GiB) of privml's ghost step and Opacus's lowest where the GPU "
        "benchmark has measured them, for the commit named there.",
        "",
        "| model, batch | non-private | privml ghost (before) | privml ghost | privml ghost tf32 | Opacus hooks "
        "| Opacus ghost | privml / Opacus lowest (fp32, tf32) | privml / non-private (fp32, tf32) "
        "| GPU: privml, Opacus lowest (GiB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    met = 0
    for row, r in now.get("rows", {}).items():
        def cell(run: dict, variant: str) -> str:
            v = run.get(variant, {})
            return f"{v['peak_mib']:.0f}" if "peak_mib" in v else ("error" if "error" in v else "-")

        ours = [r.get(v, {}).get("peak_mib") for v in ("privml-ghost", "privml-ghost-tf32")]
        peers = [r.get(v, {}).get("peak_mib") for v in ("opacus-hooks", "opacus-ghost")]
        peers = [p for p in peers if p]
        nonpriv = r.get("nonprivate", {}).get("peak_mib")

        def ratios(base: float | None, ours: list = ours) -> str:
            return ", ".join(f"{x / base:.2f}x" if x and base else "-" for x in ours)

        ratio = ratios(min(peers) if peers else None)
        met += bool(peers and all(x and x <= min(peers) for x in ours))
        vs_np = ratios(nonpriv)
        g = gpu.get(row, {})
        gpu_peers = [g.get(v, {}).get("peak_gib") for v in ("opacus-hooks", "opacus-ghost")]
        gpu_peers = [p for p in gpu_peers if p]
        gpu_cell = (f"{g['privml-ghost']['peak_gib']:.2f}, {min(gpu_peers):.2f}"
                    if "peak_gib" in g.get("privml-ghost", {}) and gpu_peers else "-")
        out.append(f"| {r['model']}, {r['batch']} | {cell(r, 'nonprivate')} | "
                   f"{cell(before.get('rows', {}).get(row, {}), 'privml-ghost')} | {cell(r, 'privml-ghost')} | "
                   f"{cell(r, 'privml-ghost-tf32')} | {cell(r, 'opacus-hooks')} | {cell(r, 'opacus-ghost')} | {ratio} | {vs_np} | {gpu_cell} |")
    errors = [f"{row} {v}: {r[v]['error']}" for row, r in now.get("rows", {}).items() for v in VARIANTS
              if isinstance(r.get(v), dict) and "error" in r[v]]
    if errors:
        out += ["", "Errors (recorded, not hidden): " + "; ".join(errors)]
    checks = []
    for row, r in now.get("rows", {}).items():
        # The proxy against the GPU: privml's ghost step over Opacus's lowest, both ways (the commits are named,
        # since the GPU measurement may be of a later engine than the proxy's run).
        proxy, g = r.get("privml-ghost", {}).get("peak_mib"), gpu.get(row, {})
        peers = [r.get(v, {}).get("peak_mib") for v in ("opacus-hooks", "opacus-ghost")]
        gpu_peers = [g.get(v, {}).get("peak_gib") for v in ("opacus-hooks", "opacus-ghost")]
        if proxy and any(peers) and "peak_gib" in g.get("privml-ghost", {}) and any(gpu_peers):
            checks.append(f"{row} {proxy / min(x for x in peers if x):.2f}x (GPU "
                          f"{g['privml-ghost']['peak_gib'] / min(x for x in gpu_peers if x):.2f}x)")
    if checks:
        out += ["", f"Proxy against GPU: privml's ghost step over Opacus's lowest, on the proxy at commit "
                f"{m.get('commit')} and (in brackets) on the GPU at commit {gpu_run['machine'].get('commit')}: "
                + "; ".join(checks) + "."]
    rows = len(now.get("rows", {}))
    out += ["", f"Issue 15's memory target (at most Opacus's lowest on every row, in both clipping arithmetics), on "
            f"this proxy: {met} of {rows} rows. "
            "The GPU figure is the acceptance measure and is taken with `benchmarks/torch_gpu.py` on a GPU.", ""]
    return "\n".join(out)


def proxy_main(argv: list[str] | None, *, doc: str, variants: tuple[str, ...], result: Path,
               run: Callable[[list[str], list[str]], dict[str, Any]], render: Callable[[dict], str]) -> int:
    """The command line of a CPU proxy of the GPU table (this script, ``torch_ops.py``): rows, variants, and a
    ``now`` or ``before`` run (``--src``: another checkout's privml) stored side by side in ``result``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=None, help="default: every row of torch_gpu.py")
    parser.add_argument("--variants", nargs="+", default=list(variants), choices=list(variants))
    parser.add_argument("--label", default="now", choices=["now", "before"])
    parser.add_argument("--src", default=None, help="import privml from this source directory")
    parser.add_argument("--out", default=str(result))
    args = parser.parse_args(argv)
    if args.src:
        sys.path.insert(0, str(Path(args.src).resolve()))
    try:
        import torch
    except ImportError:
        print(f"{result.stem}: torch is not installed; nothing to measure", file=sys.stderr)
        return 0
    import torch_gpu

    rows = args.rows or list(torch_gpu.ROWS)
    record: dict[str, Any] = {"machine": machine(), "torch": torch.__version__, "opacus": torch_gpu._opacus_version(),
                              "rows": run(rows, args.variants)}
    if args.src:  # the commit measured is the source checkout's
        record["machine"]["commit"] = _commit_of(Path(args.src))
    path = Path(args.out)
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("runs", {})[args.label] = record
    write_json(path, data)
    print(render(data))
    return 0


def main(argv: list[str] | None = None) -> int:
    return proxy_main(argv, doc=__doc__, variants=VARIANTS, result=RESULT, run=run, render=render)


def _commit_of(src: Path) -> str:
    import subprocess

    done = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
