"""Named phases of a DP-SGD step, visible to ``torch.profiler`` and free when no profiler runs.

A ghost step's time splits into the forward pass, the backward pass to the
layers' outputs, the per-example norms (formed inside that backward pass),
the clipped sums, the noise and the optimiser. Each is wrapped in a
:func:`phase`, so a profile (``benchmarks/torch_gpu.py profile``) can
attribute every kernel to the phase that launched it. Entering a
``record_function`` costs several microseconds even with no profiler
running, which is a measurable share of a small model's step on a GPU
(bound by host launches), so :func:`phase` is a no-op unless a profiler is
active.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.profiler import record_function

#: The phase names, in the order a step runs them (``privml::`` prefixed in a profile).
PHASES = ("forward", "backward", "norms", "clipped_sums", "noise", "optimizer")


def phase(name: str) -> AbstractContextManager[object]:
    """``record_function("privml::<name>")`` while a profiler is active, else a no-op."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
    if torch.autograd.profiler._is_profiler_enabled:
        return record_function(f"privml::{name}")
    return nullcontext()
