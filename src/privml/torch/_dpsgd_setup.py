"""Setting up a run of :class:`privml.torch.DPSGD`: its options, the model's device, the plan.

The checks the engine makes on its arguments before any computation that
are its own: the precisions it accepts, the device of the model and the
default per-example loss, the clipping mode (ghost clipping where every
layer supports it) and the data-parallel group. The privacy rules (rate,
steps, sampler, relation, accountant, noise) are DP-SGD's, shared with the
linear trainer: :func:`privml.accounting.plan_dpsgd`. None of them
draws randomness or touches the data.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from privml.torch._ghost.engine import ghost_modules
from privml.torch._ghost.precision import CLIP_PRECISIONS

__all__ = [
    "PRECISIONS",
    "check_distributed_sampling",
    "check_precisions",
    "cross_entropy_per_example",
    "module_device",
]

#: Arithmetic of the forward and backward passes (clipping and noise are always float32 or wider).
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")


def module_device(module: nn.Module) -> torch.device:
    """The one device holding ``module``'s parameters and buffers (CPU for a module without any).

    Raises
    ------
    ValueError
        if they are spread over several devices (model parallelism is not supported).
    """
    devices = {t.device for t in (*module.parameters(), *module.buffers())}
    if len(devices) > 1:
        raise ValueError(f"the model's tensors are on several devices ({', '.join(sorted(map(str, devices)))}); "
                         "move it to one with model.to(device)")
    return devices.pop() if devices else torch.device("cpu")


def cross_entropy_per_example(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each example (``reduction="none"``): the default loss."""
    return F.cross_entropy(outputs, targets, reduction="none")


def check_distributed_sampling(sampling: str, distributed: bool) -> None:
    """Fixed-size batches are drawn from all n records at once: not across data-parallel shards."""
    if sampling == "fixed-size" and distributed:
        raise ValueError("fixed-size sampling draws one batch from all n records: not with distributed=True")


def resolve_mode(module: nn.Module, mode: str) -> tuple[str, list]:
    """The clipping mode in use ("ghost" or "vmap") and the modules ghost clipping covers (none for vmap)."""
    ghost: list = []
    if mode == "vmap":
        return "vmap", ghost
    try:
        ghost = ghost_modules(module)
    except ValueError:
        if mode == "ghost":
            raise
        return "vmap", ghost
    return "ghost", ghost


def init_distributed(module: nn.Module, distributed: bool) -> tuple[int, int]:
    """(rank, world size) of a data-parallel run, after broadcasting rank 0's weights; (0, 1) otherwise."""
    if not distributed:
        return 0, 1

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("distributed=True needs torch.distributed.init_process_group() first")
    # Every rank must start from the same weights: the updates are then identical everywhere.
    for param in module.parameters():
        dist.broadcast(param.data, src=0)
    return dist.get_rank(), dist.get_world_size()


def shards_total(local: int, device: torch.device) -> int:
    """The records over all ranks' shards: ``local`` summed by an ``all_reduce`` (every rank calls it).

    ``DPSGD.fit`` checks it against the public ``n_samples``: shards that
    overlap entirely (every rank given the whole set) would sample each
    record on every rank, and its term in a step's sum would be
    ``world_size`` C.
    """
    count = torch.tensor([local], dtype=torch.int64, device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    return int(count.item())


def check_precisions(precision: str, clip_precision: str, mode: str | None) -> tuple[str, str]:
    """``(precision, clip_precision)`` if valid together with the engine's resolved ``mode`` (None: not known yet,
    as in an estimator before its model is built); else ValueError."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if clip_precision not in CLIP_PRECISIONS:
        raise ValueError(f"clip_precision must be one of {', '.join(CLIP_PRECISIONS)}, got {clip_precision!r}")
    if clip_precision == "tf32" and mode is not None and mode != "ghost":
        # The vmap path forms per-example gradients inside torch.func, whose products privml cannot round.
        raise ValueError(f"clip_precision='tf32' needs ghost clipping, and this engine runs mode={mode!r}; "
                         "use clip_precision='fp32'")
    return precision, clip_precision
