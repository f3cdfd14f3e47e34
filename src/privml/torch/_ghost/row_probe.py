"""Check, before the first ghost step, that row i of every tapped layer belongs to example i.

Ghost clipping adds each example's squared norm layer by layer by row
index (:mod:`privml.torch._ghost.engine`): example i's norm is the sum over
layers of the norm formed from row i of the layer's recorded input and of
its output gradient. That is the norm of example i's gradient only if row i
of every layer's input and output gradient is a function of example i
alone. Layer types cannot tell: a model whose ``forward`` transposes
``(B, T, d)`` to ``(T, B, d)`` around a Linear feeds it positions as rows
(undetectable by shapes when T == B), and one that reorders the batch and
restores it (``head(mix(x.flip(0)).flip(0))``, as a sort by length and its
inverse would) feeds ``mix`` example B-1-i in row i. A review measured one
replaced record moving the clipped sum by 7.97 where replace-one allows 2C
= 2, and one added record by 1.85 where add/remove allows C = 1.

So the model is probed with synthetic batches whose size matches no other
dimension of any recorded tensor (the size is chosen among small primes,
and a second size guards against a coincidence): example k is changed,
each in turn, and no row but row k of any layer's recorded input or output
gradient may move. Over every k, row j of each layer is then unmoved by
every other example: a function of example j alone (or of nothing, as a
positional embedding's input is), which is what the row sum needs. Row k
itself need not move: a layer whose input is data-independent is fine.

Only public facts are read: the shapes and dtypes of the batch (never its
values; see :func:`probe_batch`), the model and the loss. Whether a model
passes is a function of those alone, so the mode it then runs in is too.
Like :func:`~privml.torch._validation.check_examples_independent`, this is a
check of gross mixing (a coupling below the tolerance is not seen), not a
proof; it is exact for the reorderings and layouts above.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privml.exceptions import PrivmlError
from privml.torch._ghost.base import LayerRule

#: Probe batch sizes, tried in order: primes, so that a size rarely equals a model's own dimension by chance.
PROBE_SIZES: tuple[int, ...] = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47)


class RowOrderError(PrivmlError, ValueError):
    """Row i of a tapped layer's input or output gradient is not example i's alone: ghost clipping would be wrong.

    ``layer`` names the layer (``"Linear (mix)"``), or is ``None`` when the
    model could not be probed at all.
    """

    def __init__(self, message: str, *, layer: str | None = None) -> None:
        super().__init__(message)
        self.layer = layer


@dataclass(frozen=True)
class _Record:
    """One tapped layer call of a probe run: its label, its input and the gradient in its output."""

    label: str
    activation: torch.Tensor
    grad: torch.Tensor | None  # None: the output did not reach the losses


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def check_rows_are_examples(
    model: nn.Module,
    loss_fn: LossFn,
    modules: list[tuple[str, nn.Module, LayerRule]],
    x: torch.Tensor,
    y: torch.Tensor,
) -> None:
    """Raise :class:`RowOrderError` unless row k of every tapped layer moves only with example k.

    ``modules`` is :func:`~privml.torch._ghost.engine.ghost_modules`'s list;
    ``x`` and ``y`` give the shapes and dtypes of a batch (their values are
    not read). Two probe sizes are run: every example changed in turn at
    the first, the first, middle and last at the second.
    """
    if not modules:
        return
    labels = {id(m): f"{type(m).__name__} ({name or 'the model'})" for name, m, _ in modules}
    taken = {int(d) for d in (*x.shape[1:], *y.shape[1:])}
    checked = 0
    for size in PROBE_SIZES:
        if checked == 2:
            return
        if size in taken:
            continue
        base_inputs = probe_batch(x, size)
        targets = torch.zeros((size, *y.shape[1:]), dtype=y.dtype, device=x.device)
        base = _record(model, loss_fn, labels, base_inputs[0], targets)
        if base is None:
            raise RowOrderError(
                f"ghost clipping could not check which example each layer's rows belong to: the model or the loss "
                f"failed on a synthetic batch of {size} rows shaped like the training batch; use mode='vmap'"
            )
        _check_leading(base, size)
        if _coincides(base, size):
            continue  # a layer has another dimension of this very size: a moved row could hide there, try another
        ks = range(size) if checked == 0 else sorted({0, size // 2, size - 1})
        for k in ks:
            changed = _record(model, loss_fn, labels, _changed(base_inputs, k), targets)
            _compare(base, changed, k, size)
        checked += 1
    if checked == 0:  # pragma: no cover - every probe size is a dimension of the model's tensors
        raise RowOrderError("ghost clipping found no probe batch size distinct from the model's dimensions; "
                            "use mode='vmap'")


def ghost_rows_hold(
    model: nn.Module,
    loss_fn: LossFn,
    modules: list[tuple[str, nn.Module, LayerRule]],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    requested: str,
    clip_precision: str,
) -> bool:
    """Whether ghost clipping may train ``model`` (:func:`check_rows_are_examples`), for an engine's first step.

    Under ``requested="ghost"`` a model that fails is refused
    (:class:`RowOrderError`); under ``"auto"`` this warns once and returns
    False, and the engine trains on the per-example (vmap) path, which
    runs each example alone whatever the model does with its batch
    dimension. ``clip_precision="tf32"`` exists only on the ghost path, so
    it is refused then.
    """
    try:
        check_rows_are_examples(model, loss_fn, modules, x, y)
    except RowOrderError as exc:
        if requested == "ghost":
            raise
        if clip_precision == "tf32":
            raise ValueError(f"{exc}; clip_precision='tf32' needs ghost clipping: use clip_precision='fp32'") from None
        warnings.warn(f"mode='auto': {exc.layer or 'the model'} fails ghost clipping's row check (row i of its "
                      "recorded input or output gradient is not example i's alone, so its norms would be "
                      "misattributed): training on the per-example (vmap) path", UserWarning, stacklevel=5)
        return False
    return True


def probe_batch(x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, other)``: ``size`` synthetic rows shaped like ``x``'s, and a second value for any one of them.

    Floating-point data: values in [0, 1) from a fixed generator (features
    read through a log or a square root stay finite), and ``1 - rows`` as
    the changed values. Integer data (token ids): every row 1, changed to 2
    (0 is often padding, and a row of padding only can be NaN under
    attention). Only ``x``'s shape, dtype and device are read.
    """
    shape, device = (size, *x.shape[1:]), x.device
    if x.is_floating_point():
        generator = torch.Generator(device=device).manual_seed(size)
        rows = torch.rand(shape, generator=generator, device=device, dtype=x.dtype)
        return rows, 1.0 - rows
    return torch.ones(shape, dtype=x.dtype, device=device), torch.full(shape, 2, dtype=x.dtype, device=device)


def _changed(inputs: tuple[torch.Tensor, torch.Tensor], k: int) -> torch.Tensor:
    rows, other = inputs
    changed = rows.clone()
    changed[k] = other[k]
    return changed


@contextmanager
def fixed_randomness(device: torch.device) -> Iterator[None]:
    """One fixed random state (torch's, numpy's, Python's) for a probe run, the caller's restored after."""
    saved = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(0)
            random.seed(0)
            np.random.seed(0)
            yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])


def _record(
    model: nn.Module, loss_fn: LossFn, labels: dict[int, str], inputs: torch.Tensor, targets: torch.Tensor
) -> list[_Record] | None:
    """Every tapped layer call's input and output gradient for one probe batch; None if the model refuses it."""
    calls: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        calls.append((labels[id(module)], args[0].detach().clone(), output))

    handles = [module.register_forward_hook(hook) for module in {id(m): m for m in _modules(model, labels)}.values()]
    try:
        with fixed_randomness(inputs.device), torch.enable_grad():
            losses = loss_fn(model(inputs), targets)
            outputs = [out for _, _, out in calls]
            wanted = [i for i, out in enumerate(outputs) if isinstance(out, torch.Tensor) and out.requires_grad]
            grads: list[torch.Tensor | None] = [None] * len(outputs)
            if wanted and isinstance(losses, torch.Tensor) and losses.requires_grad:
                found = torch.autograd.grad(losses.sum(), [outputs[i] for i in wanted], allow_unused=True)
                for i, grad in zip(wanted, found):
                    grads[i] = grad
    except Exception:  # noqa: BLE001 - synthetic inputs this model or loss cannot take
        return None
    finally:
        for handle in handles:
            handle.remove()
    return [
        _Record(label, activation, None if grad is None else grad.detach())
        for (label, activation, _), grad in zip(calls, grads)
    ]


def _modules(model: nn.Module, labels: dict[int, str]) -> list[nn.Module]:
    return [m for m in model.modules() if id(m) in labels]


def _tensors(record: _Record) -> list[tuple[str, torch.Tensor]]:
    parts = [("input", record.activation)]
    if record.grad is not None:
        parts.append(("output gradient", record.grad))
    return parts


def _coincides(records: list[_Record], size: int) -> bool:
    """Whether some recorded tensor has a dimension other than the first of the probe's own size."""
    return any(size in tuple(t.shape[1:]) for record in records for _, t in _tensors(record))


def _check_leading(records: list[_Record], size: int) -> None:
    for record in records:
        for what, t in _tensors(record):
            if t.dim() == 0 or t.shape[0] != size:
                raise RowOrderError(
                    f"{record.label} saw an {what} of shape {tuple(t.shape)} for a batch of {size}: ghost clipping "
                    "needs example i in row i of every layer (dimension 0); use mode='vmap'",
                    layer=record.label,
                )


def _compare(base: list[_Record], changed: list[_Record] | None, k: int, size: int) -> None:
    """Raise unless, with example k changed, no layer's row other than k moved."""
    if changed is None or [r.label for r in changed] != [r.label for r in base]:
        raise RowOrderError(
            "changing one example of a synthetic batch changed which layers ran (or the model failed on it): "
            "ghost clipping cannot check its row assumption; use mode='vmap'"
        )
    others = torch.ones(size, dtype=torch.bool, device=base[0].activation.device)
    others[k] = False
    for before, after in zip(base, changed):
        for (what, first), (_, second) in zip(_tensors(before), _tensors(after)):
            if first.shape != second.shape or (after.grad is None) != (before.grad is None):
                raise RowOrderError(f"{before.label}'s recorded shapes changed with one example; use mode='vmap'",
                                    layer=before.label)
            if rows_moved(first[others], second[others]):
                raise RowOrderError(
                    f"{before.label}: changing example {k} of a batch of {size} moved other rows of its {what}, so "
                    "its rows are not its examples (the model reorders, transposes or mixes the batch); ghost "
                    "clipping would misattribute gradient norms: use mode='vmap'",
                    layer=before.label,
                )


def rows_moved(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether two recordings of the same rows differ: where they are finite (to a tolerance), or in where not.

    Relative to the tensor's scale: rows computed from identical inputs differ, if at all, by rounding (a kernel
    may block a batch differently), never by a whole value.
    """
    a, b = first.double(), second.double()
    finite = torch.isfinite(a)
    if not torch.equal(finite, torch.isfinite(b)):
        return True
    a, b = a[finite], b[finite]
    if a.numel() == 0:
        return False
    return not torch.allclose(a, b, rtol=1e-4, atol=1e-5 * (1.0 + float(a.abs().max())))


__all__ = [
    "PROBE_SIZES",
    "RowOrderError",
    "check_rows_are_examples",
    "fixed_randomness",
    "ghost_rows_hold",
    "probe_batch",
    "rows_moved",
]
