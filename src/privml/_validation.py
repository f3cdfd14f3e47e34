"""Argument checks shared by every public entry point.

All checks raise :class:`ValueError` (or :class:`TypeError` for wrong types)
with a one-line message naming the parameter, *before* any noise is drawn or any
privacy is spent. The CLI turns these into exit status 2.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

#: Public upper limits on resource-bounded parameters: a number beyond them is an
#: error up front, not a process that grows until the kernel kills it.
MAX_BUDGET = 10**15  #: answers a prediction budget may count (fits every ledger's 64-bit integers)
MAX_SEARCH_STEPS = 10_000  #: levels of an Accuracy First grid
MAX_TRIALS = 1_000_000  #: models per world of an audit
MAX_COMPOSITIONS = 10**9  #: runs or steps composed by the accountants


def _as_real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must be a number, got NaN")
    return out


def check_epsilon(epsilon: object, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """Return epsilon as a float; require 0 < epsilon (< inf unless ``allow_inf``)."""
    eps = _as_real(epsilon, name)
    if not eps > 0:
        raise ValueError(f"{name} must be > 0, got {eps!r}")
    if math.isinf(eps) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {eps!r}")
    return eps


def check_delta(delta: object, name: str = "delta") -> float:
    """Return delta as a float; require 0 <= delta < 1."""
    d = _as_real(delta, name)
    if not 0 <= d < 1:
        raise ValueError(f"{name} must be in [0, 1), got {d!r}")
    return d


def check_positive_delta(delta: object, name: str = "delta") -> float:
    """Return delta as a float; require 0 < delta < 1 (approximate DP only)."""
    d = check_delta(delta, name)
    if d == 0:
        raise ValueError(f"{name} must be > 0 here (this mechanism is not pure DP), got 0")
    return d


def check_positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    """Return a finite float > 0 (or >= 0 with ``allow_zero``)."""
    v = _as_real(value, name)
    if math.isinf(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    if allow_zero and v < 0:
        raise ValueError(f"{name} must be >= 0, got {v!r}")
    if not allow_zero and not v > 0:
        raise ValueError(f"{name} must be > 0, got {v!r}")
    return v


def check_finite(value: object, name: str) -> float:
    """Return a finite float (any sign)."""
    v = _as_real(value, name)
    if math.isinf(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return v


def check_probability(q: object, name: str = "sample_rate") -> float:
    """Return a sampling probability in (0, 1]."""
    v = _as_real(q, name)
    if not 0 < v <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {v!r}")
    return v


def check_count(count: object, name: str = "count", *, minimum: int = 1, maximum: int | None = None) -> int:
    """Return an integer >= ``minimum`` (and <= ``maximum``; floats with integral values are accepted)."""
    if isinstance(count, bool):
        raise TypeError(f"{name} must be an integer, got bool")
    if isinstance(count, (numbers.Integral, np.integer)):
        out = int(count)
    elif isinstance(count, (numbers.Real, np.floating)) and float(count).is_integer():
        # typeshed's numbers.Real declares no __int__, though float, Fraction and np.floating all define it
        # (math.trunc is no way round: np.float16/32 and longdouble have no __trunc__).
        out = int(count)  # type: ignore[arg-type]
    else:
        raise TypeError(f"{name} must be an integer, got {count!r}")
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    if maximum is not None and out > maximum:
        raise ValueError(f"{name} must be <= {maximum:,}, got {out:,}")
    return out


def check_finite_array(x: object, name: str = "X", *, ndim: int | None = None) -> np.ndarray:
    """Return ``x`` as a float64 array; reject complex values, NaN/inf and (optionally) the wrong rank."""
    raw = np.asarray(x)
    if raw.dtype.kind == "c":  # float64 conversion would silently drop the imaginary part
        raise ValueError(f"{name} must be real-valued, got complex numbers")
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers, got {raw.dtype} values") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    return arr
