"""CIFAR-10 (Krizhevsky 2009): 60,000 32x32 colour images, 10 classes.

privml cannot download CIFAR-10 (no PyPI or Debian mirror carries it); place
the "CIFAR-10 python version" archive ``cifar-10-python.tar.gz`` from
https://www.cs.toronto.edu/~kriz/cifar.html in the cache directory, or its
extracted folder ``cifar-10-batches-py/``. The archive holds
``data_batch_1`` ... ``data_batch_5`` (50,000 training images) and
``test_batch`` (10,000), each a Python 2 pickle of a dict with ``data`` (a
uint8 array, 10000 x 3072, channel-major: 1024 red, 1024 green, 1024 blue
values per image) and ``labels`` (a list of ints 0..9).

Pickles can run code when loaded, so the batches are read with
:func:`privml.data._safe_pickle.load_restricted`, which builds only plain
containers and numeric arrays and rejects anything else without running it.
Archive members are read in memory by name (never ``extractall``), so a
crafted archive cannot write outside the cache either.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from privml.data._dataset import RawSplits
from privml.data._safe_pickle import load_restricted

NAME = "cifar10"
TITLE = "CIFAR-10"
#: Class names in label order, from the archive's ``batches.meta``.
CLASSES: tuple[str, ...] = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCHES = ("test_batch",)
IMAGE_SHAPE = (3, 32, 32)


def find_source(cache_dir: Path) -> Path | None:
    """Return ``<cache>/cifar-10-python.tar.gz`` or ``<cache>/cifar-10-batches-py/``, or ``None``."""
    for candidate in (cache_dir / ARCHIVE, cache_dir / FOLDER):
        if candidate.exists():
            return candidate
    return None


def convert(source: Path) -> RawSplits:
    """Read the six batches from the archive or the extracted folder.

    Raises
    ------
    ValueError
        If a batch is missing or malformed, or refers to anything but plain
        data (:class:`~privml.data._safe_pickle.UnsafePickleError`).
    """
    if source.is_dir():

        def read(member: str) -> bytes:
            path = source / member
            if not path.is_file():
                raise ValueError(f"{source} has no {member}")
            return path.read_bytes()

        return _read_batches(read, origin=f"{FOLDER} in {source.parent}")
    with tarfile.open(source, mode="r:gz") as tar:

        def read(member: str) -> bytes:
            name = f"{FOLDER}/{member}"
            try:
                info = tar.getmember(name)
            except KeyError:
                raise ValueError(f"{source} has no {name}") from None
            fh = tar.extractfile(info) if info.isfile() else None
            if fh is None:
                raise ValueError(f"{source}: {name} is not a regular file")
            return fh.read()

        return _read_batches(read, origin=source.name)


def _read_batches(read: Callable[[str], bytes], *, origin: str) -> RawSplits:
    splits = {}
    for split, members in (("train", TRAIN_BATCHES), ("test", TEST_BATCHES)):
        parts = [parse_batch(read(member), what=f"{origin}: {member}") for member in members]
        splits[f"X_{split}"] = np.concatenate([p[0] for p in parts])
        splits[f"y_{split}"] = np.concatenate([p[1] for p in parts])
    raw = RawSplits(**splits, source=origin)
    raw.check_images(image_shape=IMAGE_SHAPE, n_classes=len(CLASSES))
    return raw


def parse_batch(payload: bytes, *, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode one pickled batch into images ``(n, 3, 32, 32)`` uint8 and labels ``(n,)`` uint8.

    Raises
    ------
    ValueError
        If the batch is not a dict with a ``(n, 3072)`` uint8 ``data`` array
        and ``n`` integer ``labels`` in 0..9, or if the pickle is unsafe.
    """
    batch = load_restricted(payload, encoding="bytes")
    if not isinstance(batch, dict):
        raise ValueError(f"{what}: expected a dict, got {type(batch).__name__}")
    # Python 2 wrote str keys; read back as bytes they are b"data", b"labels".
    fields = {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = fields.get("data"), fields.get("labels")
    n_pixels = int(np.prod(IMAGE_SHAPE))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != n_pixels:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ValueError(f"{what}: 'data' must be a uint8 array of shape (n, {n_pixels}), got {got}")
    if not isinstance(labels, list) or not all(type(v) is int and 0 <= v < len(CLASSES) for v in labels):
        raise ValueError(f"{what}: 'labels' must be a list of ints in 0..{len(CLASSES) - 1}")
    if len(labels) != data.shape[0]:
        raise ValueError(f"{what}: {data.shape[0]} images but {len(labels)} labels")
    return data.reshape((-1, *IMAGE_SHAPE)), np.asarray(labels, dtype=np.uint8)
