"""Data-parallel DP-SGD with ``torch.distributed``: clip on every rank, add the noise once.

How it works and how to launch it: the docstring of :func:`shard_bounds` (exported by
:mod:`privml.torch`).
"""

from __future__ import annotations


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[lo, hi)`` of rank ``rank``'s contiguous shard of ``n`` records (sizes differ by at most one).

    The split depends on n, the rank and the world size only (public), never
    on the data.

    Data-parallel DP-SGD with ``torch.distributed``: clip on every rank, add the noise once.

    Each of ``world`` processes holds a disjoint shard of the training set
    (these bounds) and a replica of the model (``DPSGD(...,
    distributed=True)`` broadcasts rank 0's initial weights). At each logical
    step every rank

    1. Poisson-samples its own shard at rate q with its own coins. The coins of
       all records are then independent Bernoulli(q) draws, so the union of the
       ranks' samples *is* a Poisson sample of the global dataset, exactly as
       in single-process DP-SGD (Mironov, Talwar and Zhang 2019);
    2. computes the sum of its examples' flat-clipped gradients (sensitivity C
       under add/remove-one: one record lives on one rank and moves one
       rank's sum by at most C, hence the global sum by at most C);
    3. joins an ``all_reduce(SUM)`` of the sums, to which **rank 0 alone** has
       added N(0, s^2 C^2 I);
    4. divides by q n (n the global size) and steps; every rank applies the same
       update, so the replicas stay identical.

    The global noisy sum is then distributed exactly as in one process: the
    same clipped sum plus one N(0, s^2 C^2 I), and the accounting is unchanged
    (one sampled Gaussian step per logical step). Each rank adding
    N(0, s^2 C^2 / world) would give the same total variance, but spreads the
    guarantee over ``world`` generators (any one seeded predictably, or a rank
    that skips its share, silently lowers the noise); one draw on rank 0 has a
    single point to secure (``secure_noise=True``) and to test.

    Launch on one machine with ``torch.multiprocessing.spawn`` or ``torchrun``;
    across nodes, on each of N nodes::

        torchrun --nnodes=N --nproc-per-node=P --node-rank=<i> \\
            --rdzv-backend=c10d --rdzv-endpoint=<host of node 0>:29500 train.py

    and in ``train.py``::

        import torch.distributed as dist
        from privml.torch import DPSGD, shard_bounds

        dist.init_process_group("gloo")          # "nccl" on GPUs
        lo, hi = shard_bounds(n, dist.get_rank(), dist.get_world_size())
        engine = DPSGD(model, optimizer=opt, n_samples=n, ..., seed=seed, distributed=True)
        engine.fit(X[lo:hi], y[lo:hi])

    Give every rank the same ``seed``: the sampling streams are offset by the
    rank (independent coins), the noise stream is used by rank 0 only.
    """
    if not (0 <= rank < world_size):
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


__all__ = ["shard_bounds"]
