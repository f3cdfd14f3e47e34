"""Argument checks shared by every public entry point.

All checks raise :class:`ValueError` (or :class:`TypeError` for wrong types)
with a one-line message naming the parameter, *before* any noise is drawn or any
privacy is spent. The CLI turns these into exit status 2.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings

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


def check_n_jobs(value: object, name: str = "n_jobs") -> int:
    """Return a joblib worker count: a positive int, or -k for every core but k - 1 (joblib's
    ``cpu_count + 1 + n_jobs``; -1 is every core, -2 all but one), down to -cpu_count. 0, and a negative count
    beyond the machine's cores (a mistyped -100), are refused here rather than failing, or running serially,
    deep inside joblib."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer or -1 (every core), got {type(value).__name__} {value!r}")
    count = int(value)
    cores = os.cpu_count() or 1
    if count == 0 or count < -cores:
        raise ValueError(f"{name} must be a positive integer, or from -1 (every core) to -{cores} (one), "
                         f"got {value!r}")
    return count


def check_port(value: object, name: str = "port") -> int:
    """Return a TCP port number, 0 to 65535 (0: the system picks a free one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
        raise ValueError(f"{name} must be an integer in [0, 65535], got {value!r}")
    return value


def check_planned_steps(steps: float, epochs: float | None) -> int:
    """The planned step count of a DP-SGD run, at most MAX_COMPOSITIONS (what the accountants compose): more
    failed inside the PLD convolution (epochs=1e300) or allocated terabytes (steps=10**12)."""
    if steps > MAX_COMPOSITIONS:
        where = f"epochs={epochs:g} gives at least {steps:.3g} steps" if epochs is not None else f"steps={steps:,}"
        raise ValueError(f"{where}, more than the {MAX_COMPOSITIONS:,} the accountants compose")
    return int(steps)


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


def _is_sparse(x: object) -> bool:
    # Without scipy.sparse imported nothing can be a sparse matrix: no import on the hot path.
    module = sys.modules.get("scipy.sparse")
    return module is not None and bool(module.issparse(x))


def check_finite_array(x: object, name: str = "X", *, ndim: int | None = None) -> np.ndarray:
    """Return ``x`` as a float64 array; reject sparse, complex and non-numeric input, NaN/inf and the wrong rank."""
    if _is_sparse(x):
        # Densifying silently could need far more memory than the caller expects.
        raise TypeError(f"{name} is a sparse matrix; privml needs a dense array (call {name}.toarray() first)")
    raw = np.asarray(x)
    if raw.dtype.kind == "c":  # float64 conversion would silently drop the imaginary part
        raise ValueError(f"{name} must be real-valued: Complex data not supported")
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except TypeError as exc:  # e.g. a dict inside an object array: numpy's message names the type
        raise TypeError(f"{name} must hold numbers: {str(exc).splitlines()[0]}") from None
    except ValueError:
        raise ValueError(f"{name} must hold numbers, got {raw.dtype} values") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    return arr


# ----------------------------------------------------------------- estimator inputs
# One set of checks for every numpy estimator's X and y. Messages are one line and
# never echo the data (error logs are not private); their wording follows
# scikit-learn's where its estimator checks look for it.


def check_X(X: object, *, n_features: int | None = None, owner: str = "the model") -> np.ndarray:
    """Feature rows as a finite float64 array of shape (n, d) with n, d >= 1.

    ``n_features``: the width the estimator was fitted with (predict time);
    ``owner`` names the estimator in the width error.
    """
    arr = check_finite_array(X, "X")
    if arr.ndim != 2:
        raise ValueError(
            f"X must be 2-dimensional (rows x features), got shape {arr.shape}: Reshape your data, "
            "e.g. X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single row"
        )
    if arr.shape[0] == 0:
        raise ValueError(f"X has no rows (shape={arr.shape}); a minimum of 1 is required")
    if arr.shape[1] == 0:
        raise ValueError(f"X has 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"X has {arr.shape[1]} features, but {owner} is expecting {n_features} features as input")
    return arr


def check_y(y: object, n_rows: int, *, numeric: bool = False) -> np.ndarray:
    """One target per row, as a 1-d array (float64 and finite when ``numeric``).

    A column vector of shape (n, 1) is flattened with scikit-learn's
    DataConversionWarning, as its estimators do.
    """
    if y is None:
        raise ValueError("this estimator requires y to be passed, but the target y is None")
    if _is_sparse(y):
        raise TypeError("y is a sparse matrix; privml needs a dense array")
    arr = check_finite_array(y, "y") if numeric else np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        from sklearn.exceptions import DataConversionWarning  # lazy(startup): scikit-learn, not for privml account

        warnings.warn(
            "A column-vector y was passed when a 1d array was expected: it is flattened (use y.ravel())",
            DataConversionWarning,
            stacklevel=3,
        )
        arr = arr.ravel()
    if arr.shape != (n_rows,):
        raise ValueError(f"y must have shape ({n_rows},), one target per row of X, got {arr.shape}")
    return arr


def check_fitted(estimator: object, attribute: str) -> None:
    """scikit-learn's NotFittedError (via ``check_is_fitted``) unless ``estimator`` has ``attribute``."""
    from sklearn.utils.validation import check_is_fitted  # lazy(startup): scikit-learn, not for privml account

    check_is_fitted(estimator, attribute, msg="this %(name)s is not fitted yet: call fit(X, y) first")
