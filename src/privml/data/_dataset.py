"""The containers a loader returns: :class:`Dataset` and :class:`DatasetInfo`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DatasetInfo:
    """What a :class:`Dataset` is and how it was made.

    Attributes
    ----------
    name : str
        Canonical dataset name (``"mnist"``, ``"csv:/path/data.csv"``...).
    n_train, n_test : int
        Number of training and test records.
    n_features : int
        Number of columns of ``X_train`` (after flattening, encoding and the
        optional bias feature).
    classes : tuple
        The **public** class set: ``y == j`` means class ``classes[j]``. For
        built-in datasets it is fixed by the dataset's definition, never read
        from the data; for user data it is what the caller passed (or what was
        inferred, with a :class:`~privml.exceptions.PrivacyLeakWarning`).
    source : str
        Where the records were read from (a cache file and what it was
        converted from, a system path, a scikit-learn version).
    preprocessing : tuple of str
        Every step applied to the records, in order, each saying whether it is
        data-independent. Empty when ``preprocess=False``.
    """

    name: str
    n_train: int
    n_test: int
    n_features: int
    classes: tuple[Any, ...]
    source: str
    preprocessing: tuple[str, ...] = field(default=())

    @property
    def n_classes(self) -> int:
        """Size of the public class set."""
        return len(self.classes)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable description (for ``--json`` output)."""
        return {
            "name": self.name,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "n_features": self.n_features,
            "classes": [c.item() if isinstance(c, np.generic) else c for c in self.classes],
            "source": self.source,
            "preprocessing": list(self.preprocessing),
        }


# eq=False: comparing numpy arrays field by field has no single truth value.
@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split ready for training.

    Attributes
    ----------
    X_train, X_test : numpy.ndarray
        Features, one record per row. After the default preprocessing every
        row has Euclidean norm at most 1 (float64).
    y_train, y_test : numpy.ndarray
        Labels as int64 indices ``0..k-1`` into ``info.classes``. Binary sets
        use ``{0, 1}``; see :func:`privml.data.to_signed` for ``{-1, +1}``.
    info : DatasetInfo
        Sizes, the public class set, the source and the preprocessing steps.
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    info: DatasetInfo


@dataclass(frozen=True, eq=False)
class RawSplits:
    """Arrays as stored in the cache, before preprocessing.

    Labels are already indices into the dataset's public class list; ``source``
    says where the arrays came from.
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    source: str

    def check_images(self, *, image_shape: tuple[int, ...], n_classes: int) -> None:
        """Check uint8 images of shape ``(n, *image_shape)`` and labels in ``0..n_classes-1``.

        Raises
        ------
        ValueError
            Naming the source and the first array that does not fit.
        """
        expected = ", ".join(map(str, image_shape))
        for split, X, y in (("train", self.X_train, self.y_train), ("test", self.X_test, self.y_test)):
            if X.dtype != np.uint8 or X.shape[1:] != image_shape:
                raise ValueError(
                    f"{self.source}: {split} images have dtype {X.dtype} shape {X.shape}, "
                    f"expected uint8 (n, {expected})"
                )
            if y.ndim != 1 or y.shape[0] != X.shape[0]:
                raise ValueError(f"{self.source}: {split} labels have shape {y.shape} for {X.shape[0]} images")
            if y.size and (y.min() < 0 or y.max() >= n_classes):
                raise ValueError(f"{self.source}: {split} labels outside 0..{n_classes - 1}")
