"""The small datasets bundled with scikit-learn: digits, breast_cancer, wine, iris.

None of them has a test split, so each is split 80/20 with a fixed seed
(:func:`privml.data._split.fixed_split`): every run and every caller sees the
same test set.

Feature bounds. Digits pixels are counts in ``0..16`` by construction (the
dataset description: 4x4 blocks of a 32x32 bitmap). The other three sets have
no range fixed by their definition, so privml uses the per-feature Min/Max
table **published in each dataset's description** (UCI / scikit-learn
``DESCR``, copied below), rounded as published; the few values beyond a
rounded bound are clipped. Those tables were computed by the publishers from
these very records: acceptable for public benchmark data, never for private
data, where bounds must come from domain knowledge (see
:func:`privml.data.scale_by_bounds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privml.data._dataset import RawSplits
from privml.data._pipelines import bounded_features, image_features
from privml.data._split import fixed_split

#: Published (Min, Max) of the 30 features of breast_cancer, in column order
#: (scikit-learn ``load_breast_cancer().DESCR``, "Summary Statistics").
BREAST_CANCER_BOUNDS: tuple[tuple[float, float], ...] = (
    (6.981, 28.11), (9.71, 39.28), (43.79, 188.5), (143.5, 2501.0), (0.053, 0.163),
    (0.019, 0.345), (0.0, 0.427), (0.0, 0.201), (0.106, 0.304), (0.05, 0.097),
    (0.112, 2.873), (0.36, 4.885), (0.757, 21.98), (6.802, 542.2), (0.002, 0.031),
    (0.002, 0.135), (0.0, 0.396), (0.0, 0.053), (0.008, 0.079), (0.001, 0.03),
    (7.93, 36.04), (12.02, 49.54), (50.41, 251.2), (185.2, 4254.0), (0.071, 0.223),
    (0.027, 1.058), (0.0, 1.252), (0.0, 0.291), (0.156, 0.664), (0.055, 0.208),
)  # fmt: skip
#: Published (Min, Max) of the 13 features of wine (``load_wine().DESCR``).
WINE_BOUNDS: tuple[tuple[float, float], ...] = (
    (11.0, 14.8), (0.74, 5.80), (1.36, 3.23), (10.6, 30.0), (70.0, 162.0), (0.98, 3.88), (0.34, 5.08),
    (0.13, 0.66), (0.41, 3.58), (1.3, 13.0), (0.48, 1.71), (1.27, 4.00), (278.0, 1680.0),
)  # fmt: skip
#: Published (Min, Max) of the 4 features of iris, in cm (``load_iris().DESCR``).
IRIS_BOUNDS: tuple[tuple[float, float], ...] = ((4.3, 7.9), (2.0, 4.4), (1.0, 6.9), (0.1, 2.5))
DIGITS_MAX = 16.0


@dataclass(frozen=True)
class BundledSet:
    """How to load and featurise one scikit-learn dataset."""

    name: str
    description: str
    loader: str  # name of the sklearn.datasets function
    classes: tuple[object, ...]
    n_features: int
    featurize: Callable[[np.ndarray], tuple[np.ndarray, list[str]]]

    def locate(self, cache_dir: Path) -> str:
        """Where the records are read from: always available (``cache_dir`` is unused)."""
        return f"scikit-learn datasets.{self.loader}()"

    def how_to_get(self, cache_dir: Path) -> str:
        """One line saying how to get the dataset (nothing to do)."""
        return "bundled with scikit-learn; nothing to download"

    def load(self, cache_dir: Path | None = None) -> RawSplits:
        """Load the records from scikit-learn and apply the fixed 80/20 split (``cache_dir`` is unused)."""
        import sklearn  # lazy(startup): scikit-learn, to load a bundled set
        from sklearn import datasets  # lazy(startup): scikit-learn, to load a bundled set

        bunch = getattr(datasets, self.loader)()
        X, y = np.asarray(bunch.data), np.asarray(bunch.target, dtype=np.int64)
        train, test = fixed_split(X.shape[0])
        return RawSplits(
            X_train=X[train],
            y_train=y[train],
            X_test=X[test],
            y_test=y[test],
            source=f"scikit-learn {sklearn.__version__} datasets.{self.loader}() (fixed 80/20 split, seed 0)",
        )


def _bounded(
    bounds: tuple[tuple[float, float], ...], source: str
) -> Callable[[np.ndarray], tuple[np.ndarray, list[str]]]:
    lower = np.array([lo for lo, _ in bounds])
    upper = np.array([hi for _, hi in bounds])
    return lambda X: bounded_features(X, lower, upper, bounds_source=source)


def _published(
    name: str, description: str, classes: tuple[object, ...], bounds: tuple[tuple[float, float], ...]
) -> BundledSet:
    """A set read by ``sklearn.datasets.load_<name>`` and scaled by its published Min/Max table (one per feature)."""
    return BundledSet(
        name=name,
        description=description,
        loader=f"load_{name}",
        classes=classes,
        n_features=len(bounds),
        featurize=_bounded(bounds, "published Min/Max of the dataset description"),
    )


BUNDLED: dict[str, BundledSet] = {
    s.name: s
    for s in (
        BundledSet(
            name="digits",
            description="8x8 handwritten digits (UCI optdigits test set), 1,797 records, pixels in 0..16, 10 classes",
            loader="load_digits",
            classes=tuple(range(10)),
            n_features=64,
            featurize=lambda X: image_features(X, max_value=DIGITS_MAX),
        ),
        _published(
            "breast_cancer",
            "Wisconsin diagnostic breast cancer, 569 records, 30 features, binary (0 malignant, 1 benign)",
            ("malignant", "benign"),
            BREAST_CANCER_BOUNDS,
        ),
        _published(
            "wine",
            "UCI wine recognition, 178 records, 13 chemical measurements, 3 cultivars",
            ("class_0", "class_1", "class_2"),
            WINE_BOUNDS,
        ),
        _published(
            "iris",
            "Fisher's iris, 150 records, 4 measurements in cm, 3 species",
            ("setosa", "versicolor", "virginica"),
            IRIS_BOUNDS,
        ),
    )
}
