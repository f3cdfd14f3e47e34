"""Worker of the data-parallel test (a module, so torch.multiprocessing.spawn can import it)."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from privml.torch import DPSGD
from privml.torch._distributed import shard_bounds


def make_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3), torch.nn.GroupNorm(3, 3), torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(27, 4)
    ).double()
    x = torch.randn(10, 1, 5, 5, dtype=torch.float64)
    y = torch.arange(10) % 4
    return model, x, y


SETTINGS = dict(n_samples=10, clip_norm=0.2, sample_rate=0.3, steps=None, seed=5)


def run(rank: int, world: int, init_file: str, out_dir: str, sigma: float, draws: int) -> None:
    """Draw ``draws`` noisy gradients, the noiseless one, one step, and 300 sample sizes; save them."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        model, x, y = make_problem()
        if rank == 1:
            # Different starting weights on rank 1: the engine must broadcast rank 0's.
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
        engine = DPSGD(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), noise_multiplier=sigma,
                       distributed=True, **SETTINGS)
        lo, hi = shard_bounds(10, rank, world)
        xs, ys = x[lo:hi], y[lo:hi]
        gradients = [
            torch.cat([g.flatten() for g in engine._noisy_gradient(xs, ys).values()]).numpy() for _ in range(draws)
        ]
        # The same engine without noise exposes the all-reduced clipped sum itself.
        sigma_in_use, engine.noise_multiplier = engine.noise_multiplier, 0.0
        exact = torch.cat([g.flatten() for g in engine._noisy_gradient(xs, ys).values()]).numpy()
        engine.noise_multiplier = sigma_in_use
        engine.step(xs, ys)
        params = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
        sizes = [len(b) for b in engine.sampler(n_local=hi - lo, steps=300)]
        try:
            engine.fit(x, y)  # every rank given the whole set: each record would be sampled on both ranks
            refused = ""
        except ValueError as exc:
            refused = str(exc)
        np.savez(f"{out_dir}/rank{rank}.npz", gradients=np.stack(gradients), exact=exact, params=params,
                 sizes=np.array(sizes), refused=np.array(refused))
        # Both ranks done before either tears gloo down: destroying the group while the other rank's last
        # collective is still in flight aborts a worker ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()
