"""The arithmetic of the per-example norms and clipped sums: exact float32, or TF32 with a proven bound.

Privacy rests on one inequality: each example's contribution to the
released clipped sum has L2 norm at most C. It holds only if the clip
factor of example k comes from (an upper bound on) the norm of what the sum
adds for k. In both arithmetics below, a norm formula whose terms can cancel
(a Gram trace, an instantiation over positions) is given a proven
floating-point error bound that the engine adds before clipping (see
:func:`gram_norm_slack`): a Gram trace of two nearly opposite positions can
come out as 0 in float32 while the gradient summed is not small, which
would let a crafted example move the sum by many times C. Two ways of
computing the products keep the rest true:

``"fp32"`` (:func:`exact_float32`)
    Every product of the clipping arithmetic runs in full float32: TF32 is
    turned off for matrix products and cuDNN convolutions while the norms
    and sums are formed. On Ampere and later GPUs this forgoes the TF32
    tensor cores, several times faster than float32 (the forward and
    backward passes keep using them).

``"tf32"`` (:func:`tf32_products`)
    Every matrix product of the norms and sums multiplies operands rounded
    to TF32 by privml (10 explicit mantissa bits, round to nearest:
    :func:`round_to_tf32`): each layer's rule rounds its input and output
    gradient, convolutions chunk by chunk as their patches are formed. A
    product of two TF32 numbers is exact in float32, so the norms of the
    per-example gradients of the rounded operands are exact up to float32
    accumulation whatever the hardware does with TF32, and the products may
    run on TF32 tensor cores. Per-example gradients that a layer keeps, and
    bias gradients, are summed without matrix products, so their sums are
    those of the values the norms were taken of. One rounding is left: a
    book-kept sum multiplies the *scaled* gradient ``c_k g_kt``, which is
    rounded to TF32 again (by privml, so the result does not depend on the
    GPU's own conversion). Its error in example k's contribution to a layer
    is at most ``ROUNDING_BOUND * c_k * S_k`` in L2, with
    ``S_k = sum_t |g_kt| |a_kt|`` over the positions t of the layer
    (triangle inequality; each element's relative error is at most
    ``ROUNDING_BOUND``; convolutions use the larger ``sqrt(K) |g_k| |a_k|``,
    see :func:`conv_position_bound`). So the engine clips to C over
    ``N'_k = sqrt(sum_l (|G_k^l| + ROUNDING_BOUND S_k^l)^2)`` instead of
    ``|G_k|`` (plus the norm formula's own bound): each contribution stays
    within C, the sensitivity the noise is calibrated to. On the benchmark
    models (Tramer-Boneh CNN, GroupNorm ResNet, WideResNet-16-4,
    transformer; initial weights, batch 16) the bounded norm over the
    computed one was 1.0003 to 1.0069 in ``"fp32"`` and 1.0011 to 1.0099 in
    ``"tf32"``: the clip in effect shrinks by less than 1%.

    Not covered: a scaled gradient ``c_k g`` in float32's subnormal range
    (below 2^-126) is rounded with an absolute, not relative, error of up to
    2^-137 per element. It can matter only when that error, times the
    layer's inputs, is comparable to C: a review needed C near 1e-22 with
    inputs of 2^60 to exceed C (by 2x).

The forward and backward passes are the user's (TF32, bf16 autocast): they
change which gradients are computed, not the bound on their clipped sum.

What is proven, then: the norm the engine clips over is at least the norm
of the per-example gradient (of the rounded operands, under ``"tf32"``)
plus what the sum's TF32 rounding adds. What is not: the float32
accumulation of each book-kept sum, formed by one matrix product over all
the batch's examples and positions (or, for a convolution under ``"fp32"``
on the CPU, by PyTorch's direct weight-gradient kernel; on a GPU products
of patches replace cuDNN's kernel, whose FFT and Winograd algorithms mix an
example's positions: see :data:`~privml.torch._ghost.conv.KERNEL_SUMS`).
Its worst case grows with the batch, and no DP-SGD implementation bounds
it; a review's crafted examples (positions that cancel, ``S / |G|`` from 10
to 10^4, in batches of 1 to 1024) moved the sum by at most 0.99964 C in
``"fp32"`` and 0.9903 C in ``"tf32"``.

Neither mode makes floating point exact; no DP-SGD implementation does.
Kernels chosen by batch size and float32 accumulation order make an
example's input and gradient differ in the last bits from batch to batch,
and rounding to TF32 can turn such a difference into one TF32 unit in an
element. Measured on a small convolutional model (CPU): the clipped sum of
a batch of 6 differs from the sum of its examples' terms computed alone by
3e-7 of its norm in ``"fp32"`` and 5e-5 in ``"tf32"``. The guarantee is that
of the arithmetic described, as everywhere in floating point.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

CLIP_PRECISIONS: tuple[str, ...] = ("fp32", "tf32")

#: Relative error of rounding a float32 product ``c * g`` to TF32 by :func:`round_to_tf32`: half a unit in the
#: 11th significant bit (2^-11), plus the float32 rounding of the product itself (2^-24), with room to spare.
#: (Normal values only: a subnormal element's error is up to 2^-137 in absolute terms; see the module's notes.)
ROUNDING_BOUND = 2.0**-11 + 2.0**-23

_LOW_BITS = 13  # float32 has 23 explicit mantissa bits, TF32 10: the 13 low bits are dropped
_HALF = 1 << (_LOW_BITS - 1)  # 0x1000: half a TF32 unit in the last place
_KEEP = -(1 << _LOW_BITS)  # 0xFFFFE000 as an int32: the sign, exponent and 10 mantissa bits
#: The largest finite TF32 value, (2 - 2^-10) 2^127. Any finite float32 is within 2^-11 of it or of a TF32 value.
TF32_MAX = (2.0 - 2.0**-10) * 2.0**127


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to the nearest finite TF32 value (ties away from zero), stored as float32; other dtypes as is.

    Done on the bits, in three elementwise passes (saturate at
    :data:`TF32_MAX`, add half a unit to the magnitude, clear the 13 low
    bits), so it is the same on every device. Ties go away from zero, as in
    PTX's ``cvt.rna.tf32.f32`` conversion. For every finite normal float32
    the error is at most half a unit in the 11th significant bit (``2^-11``
    relative): values above :data:`TF32_MAX` saturate there rather than
    become infinite, within the same bound, so a huge activation is clipped
    like any other instead of turning the sum into NaN. Infinities saturate
    too. The result is left unchanged by any conversion to TF32, so a
    product of two rounded values is exact in float32 unless it underflows.

    Not covered by the relative bound: subnormal values (below 2^-126),
    whose error is at most 2^-137 in absolute terms, and NaN, which stays
    NaN except for payloads with the top mantissa bits set (never produced
    by arithmetic), which may come out as zero.

    >>> import torch
    >>> x = torch.tensor([1.0 + 2.0**-11, 1.0 + 2.0**-12, -1.0 - 2.0**-11, 3.0, 3.4028e38])
    >>> [float(v) for v in round_to_tf32(x)]  # ties away from zero, exact values unchanged, saturation
    [1.0009765625, 1.0, -1.0009765625, 3.0, 3.4011621342146535e+38]
    """
    if x.dtype != torch.float32:
        return x
    rounded = torch.clamp(x, -TF32_MAX, TF32_MAX).view(torch.int32)  # a fresh tensor, rounded in place
    return rounded.add_(_HALF).bitwise_and_(_KEEP).view(torch.float32)  # a carry is the rounding up a binade


@contextmanager
def _products(matmul_tf32: bool) -> Iterator[None]:
    """Matrix products with or without TF32; cuDNN convolutions always without.

    Uses the per-backend precision settings of torch 2.9 and later where
    they exist: once a user has set them, reading the legacy ``allow_tf32``
    flags raises ("a mix of the legacy and new APIs"). ``"ieee"`` is full
    float32. The settings are process-wide (torch has no per-thread ones).
    """
    matmul, conv = torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(matmul, "fp32_precision") and hasattr(conv, "fp32_precision"):
        saved = matmul.fp32_precision, conv.fp32_precision
        matmul.fp32_precision, conv.fp32_precision = ("tf32" if matmul_tf32 else "ieee"), "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = saved
        return
    legacy = matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul_tf32, False
    try:
        yield
    finally:
        matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = legacy


def exact_float32() -> AbstractContextManager[None]:
    """Turn off TF32 in matrix products and cuDNN convolutions for the clipping arithmetic (``"fp32"``).

    With TF32 (relative error ~1e-3 per operand) norms and sums formed from
    unrounded float32 operands would disagree by ~1e-3, and an example could
    move the sum by about 1.001 C, more than the sensitivity the noise is
    calibrated to.
    """
    return _products(matmul_tf32=False)


def tf32_products() -> AbstractContextManager[None]:
    """TF32 matrix products for the clipping arithmetic (``"tf32"``), cuDNN convolutions in float32.

    Speed only: every matrix product of the ``"tf32"`` clipping arithmetic
    multiplies operands already rounded by :func:`round_to_tf32`, so its
    result is the same with TF32 on or off. Convolutions stay float32
    because cuDNN may transform its operands (Winograd) before rounding them.
    """
    return _products(matmul_tf32=True)


def weighted_sum(factors: torch.Tensor, grads: torch.Tensor, *, tf32: bool) -> torch.Tensor:
    """``sum_k factors[k] grads[k]``: the clipped sum of per-example values the norms were taken of.

    Under ``"tf32"`` (TF32 on for matrix products) by elementwise products and
    a reduction, no matrix product, so nothing is rounded; otherwise one
    matrix-vector product, in full float32 under :func:`exact_float32`.
    """
    factors = factors.to(grads.dtype)
    if tf32:
        return (grads * factors.reshape(-1, *([1] * (grads.dim() - 1)))).sum(0)
    # One matrix-vector product (four dispatched operations; tensordot's permutes made six).
    return torch.mv(grads.reshape(grads.shape[0], math.prod(grads.shape[1:])).t(), factors).view(grads.shape[1:])


def conv_position_bound(activation: torch.Tensor, grad_output: torch.Tensor, kernel: int) -> torch.Tensor:
    """``(B,)``: ``sqrt(K) |g_i| |x_i| (1 + 2^-11)^2``, at least ``S_i`` of a convolution with K weights per filter.

    ``S_i = sum_t |g_t| |a_t|`` over the output positions t, ``a_t`` the patch
    there, bounded without forming the patches: by Cauchy-Schwarz
    ``S <= |g| |P|`` with P the example's patches, and each input element
    lies in at most K patches (one per kernel offset, whatever the stride,
    dilation or padding), so ``|P| <= sqrt(K) |x|``. For a grouped
    convolution the sum over groups of the groups' S is at most the same.
    ``activation`` and ``grad_output`` may be given before their rounding to
    TF32, which grows no norm by more than a factor ``1 + 2^-11``.
    """
    batch = activation.shape[0]
    g = torch.linalg.vector_norm(grad_output.reshape(batch, -1), dim=1)
    x = torch.linalg.vector_norm(activation.reshape(batch, -1), dim=1)
    return kernel**0.5 * (1 + 2.0**-11) ** 2 * g * x


# ------------------------------------------------------------------ floating-point error of the norms
# The norm formulas that add terms of both signs can lose everything to cancellation: the Gram trace
# sum_ts (a_t . a_s)(g_t . g_s) of an example whose positions nearly cancel is computed as 0 while the
# gradient its sum adds is not (a review built a float32 example moving the sum by 10 C). Each such norm is
# therefore given a proven worst-case error bound (Higham 2002, "Accuracy and Stability of Numerical
# Algorithms", Sec. 3.1: a sum of n products in floating point errs by at most gamma_n = n eps / (1 - n eps)
# times the sum of their magnitudes), in units of S = sum_t |a_t| |g_t|, and the engine clips over the norm
# plus it. eps is the dtype's machine epsilon, twice the round-to-nearest unit, so that accumulation that
# truncates (tensor cores) is covered too. Sums of positive terms (a sum of squares) cannot cancel: their
# relative error is that of float32 accumulation, which no DP-SGD implementation bounds, and neither does this.


def gamma(n: int, dtype: torch.dtype) -> float:
    """Higham's ``gamma_n = n eps / (1 - n eps)`` for ``dtype`` (``inf`` when ``n eps >= 1``)."""
    eps = torch.finfo(dtype).eps
    return n * eps / (1 - n * eps) if n * eps < 1 else float("inf")


def position_sums(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``(B,)``: ``S_i = sum_t |a[i, t]| |g[i, t]|`` for ``a`` (B, T, d), ``g`` (B, T, p): every bound's scale."""
    return (torch.linalg.vector_norm(a, dim=-1) * torch.linalg.vector_norm(g, dim=-1)).sum(1)


def gram_norm_slack(squared: torch.Tensor, s: torch.Tensor, *, d: int, p: int, steps: int) -> torch.Tensor:
    """How far the true norm may exceed ``sqrt(squared)``, the Gram trace of ``steps`` positions, in floating point.

    Each entry ``a_t . a_s`` errs by at most ``gamma_d |a_t| |a_s|`` (Cauchy-Schwarz on the sum of the
    products' magnitudes), ``g_t . g_s`` by ``gamma_p |g_t| |g_s|``, their product by one more rounding, and
    the sum of the ``T^2`` products by ``gamma_{T^2}`` times their magnitudes; all of it is at most
    ``gamma S^2`` with ``gamma = (1 + gamma_d)(1 + gamma_p)(1 + eps)(1 + gamma_{T^2}) - 1``. So the true
    squared norm is at most ``squared + gamma S^2``.
    """
    factor = (1 + gamma(d, s.dtype)) * (1 + gamma(p, s.dtype)) * (1 + torch.finfo(s.dtype).eps)
    factor *= 1 + gamma(steps * steps, s.dtype)
    computed = squared.clamp(min=0)
    return (computed + (factor - 1) * s.square()).sqrt() - computed.sqrt()


def product_norm_slack(
    squared: torch.Tensor, s: torch.Tensor, *, gram: bool, d: int, p: int, steps: int, tf32: bool
) -> torch.Tensor:
    """The slack of a weight whose norms came from a Gram trace (``gram``) or an instantiation over ``steps``
    positions, and whose sum is a product of ``d``-wide inputs and ``p``-wide gradients: the norm formula's
    error, plus under ``"tf32"`` the rounding of the scaled gradient (``ROUNDING_BOUND S``)."""
    slack = gram_norm_slack(squared, s, d=d, p=p, steps=steps) if gram else instantiation_slack(s, steps)
    return slack + ROUNDING_BOUND * s if tf32 else slack


def instantiation_slack(s: torch.Tensor, steps: int) -> torch.Tensor:
    """How far ``|G|`` may exceed the norm of ``G`` instantiated by a product over ``steps`` positions.

    Each element ``sum_t g_ti a_tj`` errs by at most ``gamma_T sum_t |g_ti| |a_tj|``, and the Frobenius norm
    of those magnitudes is at most ``S`` (triangle inequality over t).
    """
    return gamma(steps, s.dtype) * s
