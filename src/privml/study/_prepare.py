"""The data of one study point: k classes, n private records, d PCA dimensions.

How the data are cut (all by index, with the study's fixed ``seed``, so the
cuts are data-independent and the same for every method and repeat):

1. Keep the first ``k`` classes (as the paper does: digits 0..k-1).
2. Set aside ``public_size`` training records as **public** data. They are
   never trained on; they exist only to fit PCA. Fitting PCA on the private
   training records would release their principal directions, a leak no
   method accounts for, so privml treats a disjoint split as public instead
   (an assumption the report states; in a deployment it would be data that is
   genuinely public, e.g. an earlier release).
3. Draw ``n`` private training records from the rest, uniformly.
4. Project onto the top-``d`` principal directions of the public split,
   project every row onto the unit ball and append the bias feature (each a
   fixed per-record map once PCA is fitted on public data: no privacy cost).

The test set is the dataset's own, with the same classes, kept whole; user
data given a ``test_fraction`` is split again by the fixed seeded split of
:func:`privml.data._split.fixed_split` with that share (data-independent).
A ``csv:`` file with a ``schema`` is read through it, as ``privml train
--schema`` reads it (:func:`privml.data.load_dataset`, the same function).
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass

import numpy as np

from privml.data import add_bias_feature, load_dataset, project_to_unit_ball
from privml.data._registry import is_user_data
from privml.data._split import fixed_split

#: Public constant feature appended to every record (privml.data.add_bias_feature).
BIAS = 0.5
#: Fewest private training records a point may keep after the public split.
_MIN_PRIVATE = 20


@dataclass(frozen=True, eq=False)
class StudyData:
    """Arrays for one point. ``X_*`` rows have norm <= 1 and end with the bias feature."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    steps: tuple[str, ...]
    image_shape: tuple[int, ...] | None = None

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])


def prepare(
    dataset: str,
    *,
    n: int | None,
    d: int | None,
    k: int | None,
    public_size: float,
    seed: int,
    label_column: str = "label",
    images: bool = False,
    classes: tuple[str, ...] | None = None,
    schema: str | None = None,
    bounds: str | None = None,
    test_fraction: float | None = None,
) -> StudyData:
    """Cut ``dataset`` for one point; see the module docstring.

    With ``images=True`` (for CNNs) the records are the images' pixels
    divided by their public maximum 255, flattened, with no PCA, projection
    or bias; ``image_shape`` says how to fold them back.

    Cached per process (runs of one worker share the loaded data).

    Raises
    ------
    ValueError
        If ``k``, ``n`` or ``d`` exceed what the data offer (naming them).
    """
    source = Source(dataset, label_column, None if classes is None else tuple(classes), schema, bounds,
                    _file_version(dataset), None if schema is None else _file_version(f"csv:{schema}"))
    return _prepare(source, n, d, k, float(public_size), int(seed), images, test_fraction)


@dataclass(frozen=True)
class Source:
    """How a dataset is read: the key of the per-process caches (a user file's and a schema's versions included)."""

    dataset: str
    label_column: str = "label"
    classes: tuple[str, ...] | None = None
    schema: str | None = None
    bounds: str | None = None
    version: tuple[int, int] | None = None
    schema_version: tuple[int, int] | None = None


def _file_version(dataset: str) -> tuple[int, int] | None:
    """A user file's (modification time, size): part of the per-process cache keys, so a file edited in place is
    read again (a review: a second run_study in one process trained on the old rows). None for built-in sets."""
    if not is_user_data(dataset):
        return None
    try:
        info = os.stat(dataset.split(":", 1)[1])
    except OSError:
        return None  # load_dataset says what is wrong
    return info.st_mtime_ns, info.st_size


@functools.lru_cache(maxsize=8)
def _prepare(
    source: Source, n: int | None, d: int | None, k: int | None, public_size: float, seed: int, images: bool,
    test_fraction: float | None = None,
) -> StudyData:
    dataset = source.dataset
    X_train, y_train, X_test, y_test, n_classes = _load(source, images)
    image_shape = X_train.shape[1:] if images else None
    steps = []
    if test_fraction is not None:
        X_all, y_all = np.concatenate([X_train, X_test]), np.concatenate([y_train, y_test])
        train, test = fixed_split(y_all.shape[0], test_fraction=test_fraction)
        X_train, y_train, X_test, y_test = X_all[train], y_all[train], X_all[test], y_all[test]
        steps.append(f"test split of {test.size} of the {y_all.size} records (test_fraction = {test_fraction:.4g}; "
                     "fixed seeded split by index)")
    if images:
        if X_train.ndim < 3:
            raise ValueError(f"{dataset} holds no images: CNN methods need image data such as mnist or fashion-mnist")
        if d is not None:
            raise ValueError("d (PCA) does not apply to CNN methods, which read the images")
        X_train = X_train.reshape(X_train.shape[0], -1) / 255.0
        X_test = X_test.reshape(X_test.shape[0], -1) / 255.0
    if k is not None:
        _check_k(k, n_classes)
        keep, keep_test = y_train < k, y_test < k
        X_train, y_train, X_test, y_test = X_train[keep], y_train[keep], X_test[keep_test], y_test[keep_test]
        steps.append(f"keep the first {k} of {n_classes} classes")
        n_classes = k
    rng = np.random.default_rng(seed)
    order = rng.permutation(X_train.shape[0])
    n_public = _n_public(public_size, X_train.shape[0], n)
    public, private = order[:n_public], order[n_public:]
    if n is not None:
        private = private[:n]
    steps.append(f"{n_public} training records set aside as public data (PCA only, never trained on); "
                 f"{private.size} private training records (seeded shuffle by index)")
    Xp, Xtr, ytr = X_train[public], X_train[private], y_train[private]
    Xte = X_test
    if d is not None:
        _check_d(d, Xp.shape[0], Xp.shape[1])
        components, mean = _pca(Xp, d)
        Xtr, Xte = (Xtr - mean) @ components.T, (Xte - mean) @ components.T
        steps.append(f"PCA to d = {d} fitted on the public records only")
    if images:
        steps.append("CNN input: pixels divided by 255 (the public maximum), no PCA")
    else:
        Xtr = add_bias_feature(project_to_unit_ball(Xtr), value=BIAS)
        Xte = add_bias_feature(project_to_unit_ball(Xte), value=BIAS)
        steps.append(f"project rows onto the unit ball, append bias feature {BIAS} (per-record maps)")
    return StudyData(X_train=Xtr, y_train=ytr, X_test=Xte, y_test=y_test, n_classes=n_classes, steps=tuple(steps),
                     image_shape=None if image_shape is None else tuple(int(s) for s in image_shape))


def check_point(dataset: str, n: int | None, d: int | None, k: int | None, public_size: float,
                images: bool) -> None:
    """Refuse a point of a built-in dataset that :func:`prepare` would refuse in every run, from the sizes alone.

    For the public built-in sets only (their sizes are public): a study checks this before it writes
    anything (:func:`privml.study._runner.check_dataset`). No PCA, no split: just the counts.
    """
    X_train, y_train, _, _, n_classes = _load(Source(dataset), images)
    if images and d is not None:
        raise ValueError("d (PCA) does not apply to CNN methods, which read the images")
    if k is not None:
        _check_k(k, n_classes)
        y_train = y_train[y_train < k]
    n_public = _n_public(public_size, int(y_train.shape[0]), n)
    if d is not None:
        _check_d(d, n_public, int(np.prod(X_train.shape[1:])))


def _check_k(k: int, n_classes: int) -> None:
    if not 2 <= k <= n_classes:
        raise ValueError(f"k = {k} classes requested, the dataset has {n_classes} (k must be in [2, {n_classes}])")


def _n_public(public_size: float, rows: int, n: int | None) -> int:
    """The public records of ``rows`` training records; refuses too few private ones, or fewer than ``n``."""
    n_public = int(public_size) if public_size >= 1 else int(round(public_size * rows))
    n_public = max(n_public, 1)
    if rows - n_public < _MIN_PRIVATE:
        raise ValueError(f"public_size = {public_size:g} leaves {max(rows - n_public, 0)} of "
                         f"{rows} training records private; give a smaller count or a fraction")
    if n is not None and n > rows - n_public:
        raise ValueError(f"n = {n} training records requested, {rows - n_public} are available after the "
                         f"{n_public} public records")
    return n_public


def _check_d(d: int, n_public: int, n_features: int) -> None:
    if d > min(n_public, n_features):
        raise ValueError(f"d = {d} dimensions requested, PCA on {n_public} public records of "
                         f"{n_features} features gives at most {min(n_public, n_features)}")


@functools.lru_cache(maxsize=2)
def _load(source: Source, raw: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    dataset, label_column, classes = source.dataset, source.label_column, source.classes
    user = is_user_data(dataset)
    with warnings.catch_warnings():
        # Without public classes the CSV's class set is read from its labels (a leak load_dataset warns
        # about): the study warns once before its runs (check_dataset) and notes it in the report
        # (plan), rather than once per worker.
        warnings.simplefilter("ignore")
        data = load_dataset(dataset, label_column=label_column if user else "label", preprocess=not raw,
                            classes=list(classes) if user and classes is not None else None,
                            schema=source.schema, bounds=source.bounds)
    return data.X_train, data.y_train, data.X_test, data.y_test, data.info.n_classes


def _pca(X: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``d`` principal directions (rows) and the mean of ``X`` (the public records)."""
    mean = X.mean(axis=0)
    # Economy SVD of the centred public data: the right singular vectors are the directions.
    _, _, vt = np.linalg.svd(X - mean, full_matrices=False)
    return vt[:d], mean
