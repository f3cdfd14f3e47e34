"""Ground truth for clipped sums: one backward pass per example, the whole gradient clipped, summed."""

from __future__ import annotations

import torch

from privml.torch import cross_entropy_per_example, ghost_clipped_sum, vmap_clipped_sum


def brute_force_clipped_sum(model, x, y, clip_norm):
    """``({name: sum_i min(1, C / ||g_i||) g_i}, norms)`` from one ordinary backward per example."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    sums = {name: torch.zeros_like(p) for name, p in params}
    norms = []
    for i in range(x.shape[0]):
        loss = cross_entropy_per_example(model(x[i : i + 1]), y[i : i + 1]).sum()
        grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for (_, p), g in zip(params, grads)]
        norm = torch.cat([g.flatten() for g in grads]).norm()
        norms.append(norm)
        factor = min(1.0, clip_norm / float(norm))
        for (name, _), g in zip(params, grads):
            sums[name] += factor * g
    return sums, torch.stack(norms)


def _flat(sums, names):
    return torch.cat([sums[name].detach().flatten() for name in names])


def assert_clipped_sums_match(model, x, y, *, rtol=1e-10):
    """Ghost and vmap clipped sums equal the brute force at a clip norm that binds for some examples only."""
    _, norms = brute_force_clipped_sum(model, x, y, 1.0)
    clip_norm = float(norms.median())
    assert float(norms.min()) < clip_norm < float(norms.max())  # clipped and unclipped examples both present
    truth, truth_norms = brute_force_clipped_sum(model, x, y, clip_norm)
    names = sorted(truth)
    expected = _flat(truth, names)
    for method in (ghost_clipped_sum, vmap_clipped_sum):
        sums, got_norms = method(model, cross_entropy_per_example, x, y, clip_norm)
        assert set(sums) == set(names), method.__name__
        error = float((_flat(sums, names) - expected).norm() / expected.norm())
        assert error <= rtol, f"{method.__name__}: relative error {error:.3g}"
        torch.testing.assert_close(got_norms.detach(), truth_norms.detach(), rtol=rtol, atol=0)
