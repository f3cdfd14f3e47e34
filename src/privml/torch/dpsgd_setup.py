"""Setting up a run of :class:`privml.torch.dpsgd.DPSGD`: its options, the model's device, the plan.

The checks the engine makes on its arguments before any computation: the
accountants, samplers and precisions it accepts, the device of the model and
the default per-example loss, the clipping mode (ghost clipping where every
layer supports it), the Poisson rate q and the planned number of
steps T (Abadi et al. 2016, Algorithm 1), the sampler against the
neighbouring relation (fixed-size batches are analysed under replace-one
neighbours only, by Wang, Balle and Kasiviswanathan 2019), and the
data-parallel group. None of them draws randomness or touches the data.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from privml._validation import MAX_COMPOSITIONS, check_count, check_planned_steps, check_positive, check_probability
from privml.accounting.calibration import DPSGD_METHODS
from privml.neighbouring import Neighbouring
from privml.torch.ghost.engine import ghost_modules

__all__ = [
    "DPSGD_ACCOUNTANTS",
    "PRECISIONS",
    "check_precisions",
    "SAMPLINGS",
    "cross_entropy_per_example",
    "module_device",
]

#: Accountants that can account for the sampled Gaussian mechanism.
DPSGD_ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")
#: Batch samplers: independent coins (rate q), or exactly b records without replacement.
SAMPLINGS: tuple[str, ...] = ("poisson", "fixed-size")
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


def sample_rate_of(sample_rate: float | None, batch_size: float | None, n_samples: int) -> float:
    """The Poisson rate q: ``sample_rate``, or ``batch_size`` / n (give exactly one)."""
    if (sample_rate is None) == (batch_size is None):
        raise ValueError("give exactly one of sample_rate and batch_size (the expected batch size q n)")
    if sample_rate is not None:
        return check_probability(sample_rate, "sample_rate")
    size = check_positive(batch_size, "batch_size")
    if size > n_samples:
        raise ValueError(f"batch_size={size} exceeds n_samples={n_samples}")
    return size / n_samples


def planned_steps(epochs: float | None, steps: int | None, sample_rate: float) -> int | None:
    """The planned number of logical steps T: ``steps``, or round(epochs / q); None for an open-ended run."""
    if epochs is not None and steps is not None:
        raise ValueError("give epochs or steps, not both")
    if steps is not None:
        if not (isinstance(steps, int) and steps >= 1):
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        return check_count(steps, "steps", maximum=MAX_COMPOSITIONS)
    if epochs is not None:
        # The accountants compose at most MAX_COMPOSITIONS steps (as linear DP-SGD and `privml account` cap
        # them): more would fail inside the PLD convolution (epochs=1e300) or run for ever (1e7 epochs).
        return check_planned_steps(max(1, round(check_positive(epochs, "epochs") / sample_rate)), epochs)
    return None


def check_sampling(
    sampling: str, bound: str, distributed: bool, *, neighbouring: Neighbouring, accountant: str,
    sample_rate: float, n_samples: int,
) -> str:
    """Validate the sampler and the replace-one bound against the relation (before any computation)."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if bound not in DPSGD_METHODS:
        raise ValueError(f"replace_one_bound must be one of {', '.join(DPSGD_METHODS)}, got {bound!r}")
    if sampling == "fixed-size":
        if neighbouring is not Neighbouring.REPLACE_ONE:
            raise ValueError(
                "fixed-size sampling is analysed under replace-one neighbours only (Wang, Balle and "
                "Kasiviswanathan 2019): set neighbouring='replace-one'"
            )
        if accountant != "rdp":
            raise ValueError("fixed-size sampling is accounted by RDP only: set accountant='rdp'")
        if bound != "tight":
            raise ValueError("group privacy needs an add/remove-one analysis, which fixed-size sampling lacks")
        if distributed:
            raise ValueError("fixed-size sampling draws one batch from all n records: not with distributed=True")
        size = sample_rate * n_samples
        if abs(size - round(size)) > 1e-9 * max(1.0, size) or round(size) < 1:
            raise ValueError(f"fixed-size sampling needs a whole batch size b = q n, got {size!r}")
    return sampling


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
    import torch.distributed as dist

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
    import torch.distributed as dist

    count = torch.tensor([local], dtype=torch.int64, device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    return int(count.item())


def check_precisions(precision: str, clip_precision: str, mode: str | None) -> tuple[str, str]:
    """``(precision, clip_precision)`` if valid together with the engine's resolved ``mode`` (None: not known yet,
    as in an estimator before its model is built); else ValueError."""
    from privml.torch.ghost.precision import CLIP_PRECISIONS

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if clip_precision not in CLIP_PRECISIONS:
        raise ValueError(f"clip_precision must be one of {', '.join(CLIP_PRECISIONS)}, got {clip_precision!r}")
    if clip_precision == "tf32" and mode is not None and mode != "ghost":
        # The vmap path forms per-example gradients inside torch.func, whose products privml cannot round.
        raise ValueError(f"clip_precision='tf32' needs ghost clipping, and this engine runs mode={mode!r}; "
                         "use clip_precision='fp32'")
    return precision, clip_precision
