"""Preprocessing that keeps records inside the unit ball without spending privacy.

Every function here is a pure function of its arguments. A step is
*data-independent* when its output for one record depends only on that record
and on public constants (bounds, category lists, a norm bound): such a step is
a fixed per-record map, so applying it to a dataset costs no privacy and
neighbouring datasets stay neighbouring. Each docstring says whether its
function is data-independent. None of them reads a minimum, maximum, norm or
category list off the data: that would make a "public" constant depend on the
private records (the reference code's MNIST preprocessing divides by the
largest norm in the data; privml does not).

Feature convention (CMS11, Sec. 2; vdMH20, Sec. 3): every record satisfies
``||x||_2 <= 1``, guaranteed by :func:`project_to_unit_ball`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from privml._validation import check_finite_array, check_positive

#: Default value ``b`` of the appended bias coordinate (see :func:`add_bias_feature`).
DEFAULT_BIAS = 0.5

# Relative slack when checking that input rows are in the ball: a row scaled to
# norm 1 elsewhere may come out as 1 + a few ulp.
_NORM_SLACK = 1e-12
# project_to_unit_ball lands rows at radius * (1 - _SAFETY), not exactly on the
# sphere: summing d squares in another order (BLAS, pairwise, naive) moves a
# norm by up to ~d ulp, and the bound ||x|| <= radius must hold however a
# caller computes it. 1e-12 covers d up to ~10^4 and changes nothing measurable.
_SAFETY = 1e-12


def _row_norms(X: np.ndarray) -> np.ndarray:
    """Euclidean norm of each row (without the ``n x d`` temporary of ``np.linalg.norm``)."""
    return np.sqrt(np.einsum("ij,ij->i", X, X))


def flatten_images(X: ArrayLike) -> np.ndarray:
    """Reshape ``(n, h, w[, c])`` images into ``(n, h*w[*c])`` rows.

    Data-independent (a fixed reshaping of each record).

    Parameters
    ----------
    X : array_like, shape (n, ...)
        One record per entry of the first axis.

    Returns
    -------
    numpy.ndarray, shape (n, prod(...))
        A view when possible; the dtype is unchanged.
    """
    arr = np.asarray(X)
    if arr.ndim < 1:
        raise ValueError(f"X must have a record axis, got a scalar of shape {arr.shape}")
    # An explicit width, not -1: an empty split (0 records) must still flatten.
    return arr.reshape(arr.shape[0], math.prod(arr.shape[1:]))


def scale_by_bounds(X: ArrayLike, lower: ArrayLike, upper: ArrayLike, *, clip: bool = True) -> np.ndarray:
    """Map feature ``j`` from the public interval ``[lower_j, upper_j]`` to ``[0, 1]``.

    Data-independent **provided the bounds are public**: fixed by the data's
    definition (pixel range, a census field's width), never the data's own
    minimum and maximum, which would leak. Values outside the bounds are
    clipped (a per-record map, so clipping costs no privacy either).

    Parameters
    ----------
    X : array_like, shape (n, d)
        Numeric features.
    lower, upper : array_like, shape (d,) or scalar
        Public bounds with ``lower < upper`` for every feature.
    clip : bool, default True
        Clip to ``[0, 1]`` after scaling. With ``clip=False`` an out-of-range
        value raises :class:`ValueError` instead.

    Returns
    -------
    numpy.ndarray, shape (n, d), float64
    """
    arr = check_finite_array(X, "X", ndim=2)
    lo = np.broadcast_to(check_finite_array(lower, "lower"), arr.shape[1:])
    hi = np.broadcast_to(check_finite_array(upper, "upper"), arr.shape[1:])
    if np.any(hi <= lo):
        j = int(np.argmax(hi <= lo))
        raise ValueError(f"bounds must satisfy lower < upper, feature {j} has [{lo[j]}, {hi[j]}]")
    out = (arr - lo) / (hi - lo)
    if clip:
        return np.clip(out, 0.0, 1.0)
    outside = (out < 0.0) | (out > 1.0)
    if np.any(outside):
        i, j = (int(k) for k in np.argwhere(outside)[0])
        raise ValueError(f"X[{i}, {j}] = {arr[i, j]} lies outside its bounds [{lo[j]}, {hi[j]}]")
    return out


def scale_pixels(X: ArrayLike, *, max_value: float = 255.0) -> np.ndarray:
    """Divide pixel intensities by their public maximum (255 for 8-bit images).

    Data-independent: the range ``[0, max_value]`` is fixed by the image
    format, not read from the data. Values are not clipped; 8-bit pixels
    cannot leave the range.

    Parameters
    ----------
    X : array_like
        Pixel intensities in ``[0, max_value]``, any shape.
    max_value : float, default 255.0
        The format's largest intensity (16 for scikit-learn's 8x8 digits).

    Returns
    -------
    numpy.ndarray, float64, same shape as ``X``
    """
    peak = check_positive(max_value, "max_value")
    return np.asarray(X, dtype=np.float64) / peak


def one_hot(codes: ArrayLike, n_categories: int) -> np.ndarray:
    """One-hot encode integer category codes; code ``-1`` (missing) gives a zero row.

    Data-independent given a **public, fixed** category list: the width
    ``n_categories`` must come from the data's definition (for Adult, the
    lists in ``adult.names``), never from the categories seen in the data.

    Parameters
    ----------
    codes : array_like of int, shape (n,)
        Index of each record's category in the public list, or -1 if missing.
    n_categories : int
        Length of the public category list.

    Returns
    -------
    numpy.ndarray, shape (n, n_categories), float64
        Each row has norm 1 (a category) or 0 (missing).
    """
    arr = np.asarray(codes)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"codes must be a 1-D numeric array, got shape {arr.shape} dtype {arr.dtype}")
    idx = arr.astype(np.int64)
    if np.any(idx != arr) or np.any((idx < -1) | (idx >= n_categories)):
        bad = arr[(idx != arr) | (idx < -1) | (idx >= n_categories)][0]
        raise ValueError(f"category code {bad!r} is not an integer in [-1, {n_categories - 1}]")
    out = np.zeros((idx.shape[0], n_categories), dtype=np.float64)
    rows = np.flatnonzero(idx >= 0)
    out[rows, idx[rows]] = 1.0
    return out


def scale_by_norm_bound(X: ArrayLike, bound: float) -> np.ndarray:
    """Divide every row by a public bound on the row norms.

    Data-independent when ``bound`` is public, e.g. ``sqrt(d)`` for ``d``
    features already scaled into ``[0, 1]``: unlike projecting each row, it
    keeps the relative lengths of the records (a single rescaling, equivalent
    to changing the regularisation strength). Never pass the data's largest
    norm: that is data-dependent and leaks.

    Parameters
    ----------
    X : array_like, shape (n, d)
    bound : float
        Public bound with ``||x_i|| <= bound`` for every possible record.

    Returns
    -------
    numpy.ndarray, shape (n, d), float64, rows of norm at most 1

    Raises
    ------
    ValueError
        If some row is longer than ``bound``: the "bound" is not one.
    """
    arr = check_finite_array(X, "X", ndim=2)
    b = check_positive(bound, "bound")
    norms = _row_norms(arr)
    if np.any(norms > b * (1 + _NORM_SLACK)):
        i = int(np.argmax(norms))
        raise ValueError(f"row {i} has norm {norms[i]:.6g} > bound {b:.6g}; the bound must hold for every record")
    return arr / b


def project_to_unit_ball(X: ArrayLike, *, radius: float = 1.0) -> np.ndarray:
    """Project each row onto the L2 ball: ``x / max(1, ||x|| / radius)``.

    Data-independent: each record is mapped on its own, by a fixed function,
    so the projection **costs no privacy** and neighbouring datasets remain
    neighbouring. Rows inside the ball are unchanged; longer rows keep their
    direction. This is how privml enforces ``||x|| <= 1``, the assumption
    behind every sensitivity bound of its linear models.

    Rows are projected onto the radius ``radius * (1 - 1e-12)`` (as are rows
    within 5e-13 of the sphere), so that ``||x|| <= radius`` holds exactly
    whatever summation order computes the norm; the change is far below any
    other numerical error. The map is idempotent.

    Parameters
    ----------
    X : array_like, shape (n, d)
    radius : float, default 1.0

    Returns
    -------
    numpy.ndarray, shape (n, d), float64, every row of norm ``<= radius``

    Examples
    --------
    >>> project_to_unit_ball([[3.0, 4.0], [0.3, 0.4]]).round(9).tolist()
    [[0.6, 0.8], [0.3, 0.4]]
    """
    arr = check_finite_array(X, "X", ndim=2)
    r = check_positive(radius, "radius")
    target = r * (1.0 - _SAFETY)
    norms = _row_norms(arr)
    huge = ~np.isfinite(norms)
    if huge.any():
        # Finite entries whose squares overflow (e.g. 1e200): divide such rows by their
        # largest entry first, so they keep their direction instead of collapsing to 0.
        arr = arr.copy()
        arr[huge] /= np.abs(arr[huge]).max(axis=1, keepdims=True)
        norms[huge] = _row_norms(arr[huge])
    scale = np.ones_like(norms)
    # Threshold halfway to the target, so projected rows count as inside: idempotent.
    long = norms > r * (1.0 - _SAFETY / 2)
    scale[long] = target / norms[long]
    return arr * scale[:, None]


def add_bias_feature(X: ArrayLike, *, value: float = DEFAULT_BIAS) -> np.ndarray:
    """Append a constant bias coordinate ``b`` while keeping rows in the unit ball.

    Rows (norm at most 1) are first scaled by ``sqrt(1 - b^2)``, then ``b`` is
    appended, so ``||(sqrt(1 - b^2) x, b)||^2 = (1 - b^2)||x||^2 + b^2 <= 1``.
    The linear model's intercept is then ``b * w_bias``: a larger ``b`` makes
    the intercept cheaper under L2 regularisation but shrinks the features;
    the default 0.5 keeps 87% of the feature scale. Appending ``b`` to
    unscaled rows would break the norm bound of every sensitivity argument;
    projecting after appending would make the bias coordinate vary by row.

    Data-independent (a fixed per-record map).

    Parameters
    ----------
    X : array_like, shape (n, d)
        Rows of norm at most 1 (apply :func:`project_to_unit_ball` first).
    value : float, default 0.5
        The bias coordinate ``b``, with ``0 < b < 1``.

    Returns
    -------
    numpy.ndarray, shape (n, d + 1), float64, last column equal to ``b``

    Raises
    ------
    ValueError
        If ``b`` is not in ``(0, 1)`` or a row of ``X`` is longer than 1.
    """
    arr = check_finite_array(X, "X", ndim=2)
    b = check_positive(value, "value")
    if not b < 1:
        raise ValueError(f"value must be in (0, 1) so that the features keep some room, got {b!r}")
    norms = _row_norms(arr)
    if np.any(norms > 1 + _NORM_SLACK):
        i = int(np.argmax(norms))
        raise ValueError(f"row {i} has norm {norms[i]:.6g} > 1; project onto the unit ball before adding a bias")
    # Projecting first absorbs the slack; the projection's 1e-12 margin then keeps
    # (1 - b^2)||x||^2 + b^2 below 1 however the norm is summed.
    scaled = project_to_unit_ball(arr) * math.sqrt(1.0 - b * b)
    return np.hstack([scaled, np.full((arr.shape[0], 1), b)])


def to_signed(y: ArrayLike) -> np.ndarray:
    """Map binary labels ``{0, 1}`` to ``{-1, +1}`` (the binary convention of CMS11).

    Data-independent (a fixed relabelling).

    Parameters
    ----------
    y : array_like, shape (n,)
        Labels in ``{0, 1}``, e.g. ``Dataset.y_train`` of a binary dataset.

    Returns
    -------
    numpy.ndarray, shape (n,), int64 in ``{-1, +1}``

    Examples
    --------
    >>> to_signed([0, 1, 1]).tolist()
    [-1, 1, 1]
    """
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool) or not np.all((arr == 0) | (arr == 1)):
        bad = [v for v in np.unique(arr).tolist() if v not in (0, 1)]
        raise ValueError(f"to_signed needs labels in {{0, 1}}, found {bad[:5]}")
    return 2 * arr.astype(np.int64) - 1
