"""The contract of a ghost-clipping rule for one layer type, and the registry."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

from privml.torch._clipping import drop_rows
from privml.torch._ghost.precision import (
    ROUNDING_BOUND,
    position_sums,
    product_norm_slack,
    round_to_tf32,
    weighted_sum,
)


class Prepared(ABC):
    """One layer's per-example quantities for one micro-batch, computed once and reused."""

    @abstractmethod
    def squared_norms(self) -> torch.Tensor:
        """``(B,)``: squared L2 norm of the gradient of all the layer's trainable parameters, per example."""

    @abstractmethod
    def clipped_sum(self, factors: torch.Tensor, *, tf32: bool = False) -> dict[str, torch.Tensor]:
        """``sum_i factors[i] * grad_i`` for each trainable parameter, by its attribute name.

        With ``tf32`` (the ``"tf32"`` clipping arithmetic, see
        :mod:`privml.torch._ghost.precision`), every matrix product rounds its
        operands to TF32 itself; :meth:`norm_slack` bounds what that moves.
        """

    def norm_slack(self) -> torch.Tensor | None:  # a hook with a default: most norms are those of what is summed
        """``(B,)``, after :meth:`squared_norms`: how far the norm of example i's term of :meth:`clipped_sum`,
        over ``factors[i]``, may exceed the computed norm; ``None`` for nothing.

        Two parts: the floating-point error of a norm formula whose terms can
        cancel (the Gram trace, an instantiation over positions; see
        :func:`~privml.torch._ghost.precision.gram_norm_slack`), and under the
        ``"tf32"`` arithmetic the rounding of the sum's scaled gradient
        (:data:`~privml.torch._ghost.precision.ROUNDING_BOUND` ``S``). The
        engine adds it to the layer's norm before clipping, so neither can
        lift a contribution above C. Per-example gradients that are summed
        as they were normed need none.
        """
        return None

    def compact(self) -> Prepared | None:  # a hook with a default: most layers have nothing smaller to keep
        """After :meth:`squared_norms`: what :meth:`clipped_sum` needs, if smaller than the input and gradient.

        The engine computes each layer's norms as soon as its output gradient
        arrives in the backward pass and then keeps, until the clip factors
        are known, either this (the per-example gradients, when they are
        fewer numbers: GroupNorm, LayerNorm, early convolutions) or, when
        this is ``None``, the layer's input and output gradient (book-keeping).
        Sizes are compared in numbers here; under bf16 autocast the engine
        compares bytes (:meth:`nbytes`), the kept gradients being float32 and
        what they replace half precision.
        """
        return None

    def drop_examples(self, keep: torch.Tensor) -> None:
        """Set to zero, in every per-example tensor held, the rows of the examples not kept (``keep`` False).

        For the examples whose norm is not finite (clip factor 0, see
        :func:`~privml.torch.clip_factors`): ``0 * inf`` is NaN, so
        their terms are made exact zeros before any sum is formed. By this
        class's convention, a floating-point tensor held (directly or in a
        dict) whose first dimension is the batch is per-example; the rest
        (integer indices, shapes, modules) is left as it is.
        """
        batch = keep.shape[0]

        def dropped(value: object) -> object:
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                return value
            return drop_rows(value, keep) if value.dim() and value.shape[0] == batch else value
            return value

        for name, value in list(vars(self).items()):
            if isinstance(value, dict):
                setattr(self, name, {key: dropped(item) for key, item in value.items()})
            else:
                setattr(self, name, dropped(value))

    def nbytes(self) -> int:
        """Bytes of the tensors this holds: what keeping it costs."""
        total = 0
        for value in vars(self).values():
            for tensor in value.values() if isinstance(value, dict) else (value,):
                if isinstance(tensor, torch.Tensor):
                    total += tensor.nbytes
        return total


class LayerRule(ABC):
    """Ghost clipping of one layer type.

    ``activation`` is the layer's input and ``grad_output`` the gradient of
    the *sum* of the per-example losses in the layer's output; because no
    supported model mixes examples (see :mod:`privml.torch._validation`), row
    ``i`` of ``grad_output`` is the gradient of example ``i``'s loss alone.
    """

    @abstractmethod
    def prepare(
        self, module: nn.Module, activation: torch.Tensor, grad_output: torch.Tensor, *, tf32: bool = False
    ) -> Prepared:
        """The per-example norms and the means to form the clipped sum for this micro-batch.

        With ``tf32`` (the ``"tf32"`` clipping arithmetic, float32 operands),
        every matrix product of the norms and of the sum multiplies operands
        rounded by :func:`~privml.torch._ghost.precision.round_to_tf32`: the
        whole tensors, or chunk by chunk where the rule works by chunks (so
        no rounded copy of a whole input is held).
        """

    #: The attribute names of the trainable parameters this rule forms gradients for; a module of its type that holds
    #: any other is refused (its gradient would be missing from the sum).
    parameters: tuple[str, ...] = ("weight", "bias")

    def check(self, module: nn.Module) -> None:  # a hook with a default: most rules accept every configuration
        """Raise :class:`ValueError` for a configuration this rule cannot handle."""
        return None


def ghost_norm_is_cheaper(steps: int, d: int, p: int) -> bool:
    """Whether the Gram trace takes fewer operations than instantiating the ``(p, d)`` per-example gradient.

    Mixed ghost clipping (Bu, Mao and Xu 2022, "Scalable and efficient
    training of large convolutional neural networks with differential
    privacy", Section 3) picks, per layer, the ghost norm (two ``T x T`` Gram
    matrices: about ``2 T^2 (p + d)`` operations per example) or the
    instantiated gradient (one ``p x d`` product over T positions: about
    ``2 T p d``). The paper compares their memory, ``2 T^2`` against ``p d``;
    here each layer's transient is bounded by chunking instead (see
    :func:`rows_per_chunk`), so the choice is by operations. On the benchmark
    ResNet this moves the 16 x 16 convolutions (T = 256, p = 128, d = 1152)
    to instantiation, 2.2 times fewer operations than their Gram matrices.

    >>> ghost_norm_is_cheaper(256, 1152, 128), ghost_norm_is_cheaper(64, 2304, 256)
    (False, True)
    """
    return steps * steps * (p + d + 1) < (steps + 1) * p * d


#: Numbers a layer's transient may always take, by device type, whatever the size of its input and gradient. On a
#: GPU each operation costs the host microseconds to launch, and a layer chunked by its own size (patches are K times
#: its input) issued five to ten rounds of a dozen operations: the eager ghost step of the benchmark ResNet ran 3,698
#: operations against 1,201 before chunking and took 43 ms on an H200 whose kernels were busy for 26 (BENCHMARKS.md,
#: profile part). At 2^25 numbers (128 MiB in float32) the ResNet's step at batch 256 runs 2,664 operations with the
#: same tracked peak (1,395 MiB; its 32 x 32 layers are given as much already). The CPU, where a launch costs little,
#: chunks by the layer's own size only.
CHUNK_FLOOR: dict[str, int] = {"cuda": 2**25}


def chunk_room(given: int, device: torch.device) -> int:
    """The numbers a layer's transient may take: ``given`` (its input and output gradient), at least the device's floor.

    >>> chunk_room(1000, torch.device("cpu")), chunk_room(1000, torch.device("cuda"))
    (1000, 33554432)
    """
    return max(given, CHUNK_FLOOR.get(device.type, 0))


def rows_per_chunk(batch: int, per_example: int, budget: int) -> int:
    """Examples per chunk so that a transient of ``per_example`` numbers per example stays within ``budget``.

    The engine bounds each layer's transient working memory (input patches,
    Gram matrices, instantiated gradients) by the size of what the layer was
    given, its input and output gradient, so that no layer's norm
    computation raises the step's peak above the backward pass's own; on a
    GPU by at least :data:`CHUNK_FLOOR` (see :func:`chunk_room`).

    >>> rows_per_chunk(256, 10, 1000), rows_per_chunk(256, 10**6, 1000), rows_per_chunk(4, 1, 10**6)
    (100, 1, 4)
    """
    return max(1, min(batch, budget // max(per_example, 1)))


def squared_frobenius(t: torch.Tensor) -> torch.Tensor:
    """``(B,)``: the squared L2 norm of each example's slice of ``t`` (a fused reduction: no squared copy)."""
    return torch.linalg.vector_norm(t.reshape(t.shape[0], -1), dim=1).square()


def outer_product_norms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Squared Frobenius norms of ``sum_t g[i, t] a[i, t]^T`` for each i; ``a`` (B,T,d), ``g`` (B,T,p).

    Exact either way; the cheaper formula of :func:`ghost_norm_is_cheaper` is
    used, by chunks of examples whose transient is at most the size of ``a``
    and ``g`` (or the device's :data:`CHUNK_FLOOR`), and nothing is kept.
    """
    batch, steps, d = a.shape
    p = g.shape[-1]
    if steps == 1:
        return a.reshape(batch, d).square().sum(1) * g.reshape(batch, p).square().sum(1)
    gram = ghost_norm_is_cheaper(steps, d, p)
    rows = rows_per_chunk(batch, 2 * steps * steps if gram else p * d, chunk_room(steps * (p + d) * batch, a.device))
    parts = []
    for lo in range(0, batch, rows):
        a_i, g_i = a[lo : lo + rows], g[lo : lo + rows]
        if gram:
            parts.append((torch.bmm(a_i, a_i.transpose(1, 2)) * torch.bmm(g_i, g_i.transpose(1, 2))).sum((1, 2)))
        else:
            parts.append(squared_frobenius(torch.bmm(g_i.transpose(1, 2), a_i)))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def instantiation_is_kept(steps: int, d: int, p: int, given: int) -> bool:
    """Whether to keep a layer's instantiated ``(p, d)`` per-example gradients rather than its input and gradient.

    Only when they are at most the ``given`` numbers per example (input and
    output gradient) they replace, and when keeping takes fewer operations
    than the alternative. Kept, the gradients cost their instantiation
    (``T p d``) and a weighted sum (``p d``) besides their norms (``p d``);
    the clipped sum is then that weighted sum, which saves the layer's
    weight-gradient product. Not kept, the norms cost the cheaper of the
    Gram trace (``T^2 (p + d + 1)``) and an instantiation, and the clipped
    sum a weight-gradient product (``T p d``; book-keeping, Bu et al. 2023).
    So keeping wins whenever the norms instantiate anyway, and over the Gram
    trace whenever ``2 p d < T^2 (p + d + 1)``: on a transformer's 256 x 256
    projections over 128 positions, where the Gram trace is the cheaper norm
    by 1%, keeping saves the whole product (Bu, Mao and Xu 2022, mixed ghost
    clipping: keep the cheaper of the two representations of each layer).

    >>> instantiation_is_kept(128, 256, 256, 128 * 512), instantiation_is_kept(128, 256, 1024, 128 * 1280)
    (True, False)
    >>> instantiation_is_kept(2, 256, 256, 2 * 512)  # two positions: the Gram trace and the product are cheap
    False
    """
    return steps > 1 and p * d <= given and 2 * p * d < steps * steps * (p + d + 1)


class OuterProduct(Prepared):
    """A layer whose example-i weight gradient is ``sum_t g[i, t] a[i, t]^T`` (plus ``sum_t g`` for a bias).

    ``a`` is ``(B, T, d)``, ``g`` is ``(B, T, p)``. The norms use
    :func:`outer_product_norms` (mixed ghost clipping); the clipped sum is
    one product ``(c g)^T a`` over all examples and positions at once
    (book-keeping, Bu et al. 2023). When the norms instantiate the
    per-example gradients and they are fewer numbers than ``a`` and ``g``
    (:func:`instantiation_is_kept`), they are what the layer keeps instead.
    """

    def __init__(
        self,
        a: torch.Tensor,
        g: torch.Tensor,
        *,
        weight: bool,
        bias: bool,
        weight_shape: torch.Size,
        tf32: bool = False,
    ) -> None:
        self.a, self.g, self.weight, self.bias, self.weight_shape = a, g, weight, bias, weight_shape
        self.tf32 = tf32  # a and g are rounded to TF32 (by the rule), and the sum rounds its scaled gradient
        self._instantiated: torch.Tensor | None = None  # (B, p, d), when kept (set by squared_norms)
        self._weight_squared: torch.Tensor | None = None  # the weight's part of the squared norms
        self._gram = False  # whether the weight's norms came from the Gram trace (else instantiated, or one position)
        self._bias: torch.Tensor | None = None  # (B, p): each example's bias gradient, formed once

    def _bias_grads(self) -> torch.Tensor:
        if self._bias is None:
            self._bias = self.g.sum(1)
        return self._bias

    def squared_norms(self) -> torch.Tensor:
        total = torch.zeros(self.g.shape[0], dtype=self.g.dtype, device=self.g.device)
        if self.weight:
            _, steps, d = self.a.shape
            p = self.g.shape[-1]
            if instantiation_is_kept(steps, d, p, steps * (p + d)):
                self._instantiated = torch.bmm(self.g.transpose(1, 2), self.a)  # (B, p, d): the weight layout
                self._weight_squared = squared_frobenius(self._instantiated)
            else:
                self._weight_squared = outer_product_norms(self.a, self.g)
                self._gram = steps > 1 and ghost_norm_is_cheaper(steps, d, p)  # the formula it chose
            total = total + self._weight_squared
        if self.bias:
            total = total + self._bias_grads().square().sum(1)
        return total

    def compact(self) -> Prepared | None:
        if self._instantiated is None:
            return None
        grads = {"weight": self._instantiated.reshape(-1, *self.weight_shape)}
        if self.bias:
            grads["bias"] = self._bias_grads()
        return Materialised(grads)

    def clipped_sum(self, factors: torch.Tensor, *, tf32: bool = False) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if self.weight:
            scaled = (self.g * factors[:, None, None]).reshape(-1, self.g.shape[-1])
            if tf32:
                scaled = round_to_tf32(scaled)  # a and g are rounded already (by the rule, see LinearRule)
            out["weight"] = (scaled.T @ self.a.reshape(-1, self.a.shape[-1])).reshape(self.weight_shape)
        if self.bias:
            out["bias"] = weighted_sum(factors, self._bias_grads(), tf32=tf32)
        return out

    def norm_slack(self) -> torch.Tensor | None:
        # Of this object's own sum, a product of a and the scaled g (kept gradients are summed by Materialised).
        if not self.weight:
            return None
        assert self._weight_squared is not None  # squared_norms ran
        _, steps, d = self.a.shape
        s = position_sums(self.a, self.g)
        if steps == 1:  # |a|^2 |g|^2: a product of two sums of squares, nothing to cancel
            return ROUNDING_BOUND * s if self.tf32 else torch.zeros_like(s)
        return product_norm_slack(
            self._weight_squared, s, gram=self._gram, d=d, p=self.g.shape[-1], steps=steps, tf32=self.tf32
        )


class Materialised(Prepared):
    """Per-example gradients small enough to hold: ``{name: (B, *shape)}``; the clipped sum is a weighted sum."""

    def __init__(self, grads: dict[str, torch.Tensor]) -> None:
        self.grads = grads

    def squared_norms(self) -> torch.Tensor:
        return sum(squared_frobenius(grad) for grad in self.grads.values())  # type: ignore[return-value]

    def compact(self) -> Prepared:
        return self

    def clipped_sum(self, factors: torch.Tensor, *, tf32: bool = False) -> dict[str, torch.Tensor]:
        # The same values the norms were taken of: nothing to bound.
        return {name: weighted_sum(factors, grad, tf32=tf32) for name, grad in self.grads.items()}


def trainable(module: nn.Module, name: str) -> bool:
    param = getattr(module, name, None)
    return isinstance(param, nn.Parameter) and param.requires_grad

