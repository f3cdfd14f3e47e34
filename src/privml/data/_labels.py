"""The one label module: a public class set, and labels encoded as indices into it.

The class set is a public parameter (as in diffprivlib, which warns likewise): the number of outputs of a model,
and therefore its sensitivity and noise, must not depend on which classes
happen to occur in the private data. When the caller does not give it, it is
read from the labels with a :class:`~privml.exceptions.PrivacyLeakWarning`.

Data loaders call :func:`encode_labels`; estimators call :func:`fit_classes`
at fit time and :func:`label_codes` to map labels (a teacher's predictions)
into a fitted class set. The order of a given class set defines the indices
(a binary loss maps ``classes[0]`` to -1 and ``classes[1]`` to +1).

How labels match classes (:func:`class_key`), decided by the class set (given,
or read from the labels):

* every class is a number or a numeric string: labels compare as numbers
  (:func:`label_key`), so the CSV cell ``"1"``, ``"1.0"``, ``"01"``, the int
  ``1`` and the float ``1.0`` are one class;
* otherwise (``"cat"``, or a mix such as ``0, 1, x``): labels compare as their
  text, stripped of surrounding spaces, so ``"01"`` and ``"1"`` are two classes
  and a class set read from the labels keeps their spelling. A number given
  as a Python int or float is spelt without a fractional part when it is
  integral (``1.0`` matches ``"1"``, not ``"1.0"``).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privml.exceptions import PrivacyLeakWarning


def label_key(value: Any) -> float | str:
    """Comparison key of a label in an all-numeric class set: numbers and numeric strings compare as floats.

    So the CSV cell ``"3"``, the int ``3`` and the float ``3.0`` are one class,
    while ``"cat"`` stays a string (and makes the set a text one: :func:`class_key`).
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return text


def label_text(value: Any) -> str:
    """Comparison key of a label in a class set that is not all numeric: its text, stripped.

    Python and numpy numbers are spelt as ints when integral (``1.0`` -> ``"1"``).
    """
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_)):
        number = float(value)
        return str(int(number)) if number.is_integer() else repr(number)
    return str(value).strip()


def class_key(classes: Sequence[Any]) -> Callable[[Any], float | str]:
    """How labels are matched to ``classes``: :func:`label_key` if every class is numeric, else :func:`label_text`."""
    if all(isinstance(label_key(c), float) for c in classes):
        return label_key
    return label_text


def _present(values: list[Any]) -> tuple[Any, ...]:
    # A readable class tuple: ints when every label is an integral number; the labels' own text when the
    # set is not all numeric ("01" and "1" stay two classes, "0" is not renamed "0.0").
    keys = {label_key(v) for v in values}
    numbers_only = [k for k in keys if isinstance(k, float)]
    if len(numbers_only) == len(keys):
        ordered = sorted(numbers_only)
        if all(k.is_integer() for k in ordered):
            return tuple(int(k) for k in ordered)
        return tuple(ordered)
    return tuple(sorted({label_text(v) for v in values}))


def check_classes(classes: Sequence[Any] | np.ndarray, *, what: str = "classes") -> tuple[Any, ...]:
    """Validate a public class set: at least two distinct, non-NaN labels.

    Returns
    -------
    tuple
        The classes, in the given order (that order defines the indices).
    """
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence | np.ndarray):
        raise TypeError(f"{what} must be a sequence of labels, got {classes!r}")
    if isinstance(classes, np.ndarray) and classes.ndim != 1:
        raise ValueError(f"{what} must be a one-dimensional list of labels, got shape {classes.shape}")
    out = tuple(c.item() if isinstance(c, np.generic) else c for c in classes)
    if len(out) < 2:
        # The count only: the set may have been read from private labels (user data without --classes).
        raise ValueError(f"{what} must list at least 2 classes, got {len(out)} class(es)")
    if any(isinstance(k, float) and math.isnan(k) for k in map(label_key, out)):
        raise ValueError(f"{what} contains NaN: {out!r}")
    keys = [class_key(out)(c) for c in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{what} contains duplicates: {out!r}")
    return out


def encode_labels(
    labels: Sequence[np.ndarray],
    classes: Sequence[Any] | np.ndarray | None,
    *,
    what: str,
    positions: Sequence[np.ndarray] | None = None,
    stacklevel: int = 2,
) -> tuple[list[np.ndarray], tuple[Any, ...]]:
    """Encode one or more label arrays as int64 indices into the class set.

    Parameters
    ----------
    labels : sequence of array_like
        Label arrays sharing one class set (e.g. train and test labels).
    classes : sequence or None
        The public class set. ``None`` reads it from the labels (sorted) and
        warns with :class:`~privml.exceptions.PrivacyLeakWarning`.
    what : str
        Name of the data in messages (``"csv:data.csv"``).
    positions : sequence of array_like, optional
        For each label array, the file line of each record, used in error
        messages instead of the 0-based row index.
    stacklevel : int, default 2
        Passed to :func:`warnings.warn`; the default points at the caller of
        this function.

    Returns
    -------
    encoded : list of numpy.ndarray of int64
        ``encoded[i][r] = j`` when the label is ``classes[j]``.
    classes : tuple
        The class set used.

    Raises
    ------
    ValueError
        If a label is NaN, empty, or outside the given class set (naming its row).
    """
    arrays = [np.asarray(y).ravel() for y in labels]

    def where(i: int, row: int) -> str:
        return f"line {int(positions[i][row])}" if positions is not None else f"row {row}"

    # Work on the unique values: the Python-level key work is per class, not per record.
    uniques, inverses = [], []
    for i, y in enumerate(arrays):
        values, inv = np.unique(y, return_inverse=True)
        for u, k in enumerate(map(label_key, values.tolist())):
            # A missing label: NaN, or empty (any source: CSV cells are refused earlier, npz arrays here).
            problem = "NaN" if isinstance(k, float) and math.isnan(k) else "empty" if k == "" else None
            if problem is not None:
                row = int(np.flatnonzero(inv.ravel() == u)[0])
                raise ValueError(f"{what}: the label at {where(i, row)} is {problem}")
        uniques.append(values.tolist())
        inverses.append(inv.ravel())
    if classes is None:
        found = _present([v for values in uniques for v in values])
        warnings.warn(
            f"{what}: the class set {found!r} was read from the labels; the class set is a public parameter and "
            "reading it from private data leaks which classes occur. Pass classes=... to silence this warning.",
            PrivacyLeakWarning,
            stacklevel=stacklevel,
        )
        classes = found
    classes = check_classes(classes)
    key = class_key(classes)
    index = {key(c): j for j, c in enumerate(classes)}
    encoded = []
    for i, (values, inv) in enumerate(zip(uniques, inverses, strict=True)):
        lookup = np.zeros(len(values), dtype=np.int64)
        for u, k in enumerate(map(key, values)):
            if k not in index:
                row = int(np.flatnonzero(inv == u)[0])
                raise ValueError(
                    # The place, not the value: the label is a private record's (the user finds it there).
                    f"{what}: the label at {where(i, row)} is not in the public class set {classes!r}"
                )
            lookup[u] = index[k]
        encoded.append(lookup[inv])
    return encoded, classes


def fit_classes(
    y: Any, classes: Sequence[Any] | None, *, owner: str, stacklevel: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """An estimator's fitted class set and the index of each label in it.

    Parameters
    ----------
    y : array_like, shape (n,)
        The training labels (already checked to be one per row).
    classes : sequence or None
        The estimator's public ``classes``; None reads them from ``y`` with a
        :class:`~privml.exceptions.PrivacyLeakWarning` (see :func:`encode_labels`).
    owner : str
        The estimator's name, for messages.
    stacklevel : int, default 2
        Passed to :func:`warnings.warn` (2: the caller of this function).

    Returns
    -------
    classes_ : numpy.ndarray
        The class set, in the given order (sorted when read from ``y``).
    codes : numpy.ndarray of int64
        ``codes[i] = j`` when ``y[i]`` is ``classes_[j]``.

    Raises
    ------
    ValueError
        For fewer than two classes, a label outside the given set, a NaN label,
        or (class set not given) real-valued targets, which are regression
        targets rather than labels: reading each distinct value as a class
        would publish every value present.
    """
    y = np.asarray(y)
    if classes is None and y.dtype.kind == "f" and y.size and not np.all(np.mod(y[np.isfinite(y)], 1) == 0):
        raise ValueError(
            f"{owner}: Unknown label type: continuous (y holds non-integer numbers); "
            "a classifier needs labels, passed with their public class set as classes=..."
        )
    (codes,), found = encode_labels([y], classes, what=owner, stacklevel=stacklevel + 1)
    if classes is None and y.dtype.kind in "biuf":
        # Classes read from numeric or boolean labels keep the labels' dtype (as np.unique(y)
        # would), so predictions compare equal to them; label_key spells booleans "False"/"True".
        return (np.array([c == "True" for c in found]) if y.dtype.kind == "b" else np.asarray(found, y.dtype)), codes
    return np.asarray(found), codes


def label_codes(labels: Any, classes: Sequence[Any] | np.ndarray, *, what: str = "labels") -> np.ndarray:
    """Indices of ``labels`` in a known class set; a label outside it raises ValueError."""
    (codes,), _ = encode_labels([np.asarray(labels)], classes, what=what)
    return codes
