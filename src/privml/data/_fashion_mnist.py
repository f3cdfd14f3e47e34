"""Fashion-MNIST (Xiao, Rasul and Vollgraf 2017): 70,000 28x28 clothing images, 10 classes.

Offline sources, in the order they are tried after the cache file:

1. ``<cache>/fashion-mnist/`` holding the four IDX files (as published at
   https://github.com/zalandoresearch/fashion-mnist);
2. the Debian/Ubuntu package ``dataset-fashion-mnist``, which installs them in
   ``/usr/share/datasets/fashion-mnist/``.
"""

from __future__ import annotations

from pathlib import Path

from privml.data._dataset import RawSplits
from privml.data._idx import has_idx_splits, read_idx_splits

NAME = "fashion-mnist"
TITLE = "Fashion-MNIST"
#: Class names in label order, from the dataset's README.
CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
DEBIAN_PACKAGE = "dataset-fashion-mnist"
#: Where system packages put the IDX files (checked with ``dpkg -L dataset-fashion-mnist``).
SYSTEM_DIRS: tuple[Path, ...] = (Path("/usr/share/datasets/fashion-mnist"),)


def find_source(cache_dir: Path) -> Path | None:
    """Return the first directory holding the four Fashion-MNIST IDX files, or ``None``."""
    for directory in (cache_dir / NAME, *SYSTEM_DIRS):
        if has_idx_splits(directory):
            return directory
    return None


def convert(source: Path) -> RawSplits:
    """Read the four IDX files of ``source`` into uint8 arrays."""
    raw = RawSplits(**read_idx_splits(source), source=f"IDX files in {source}")
    raw.check_images(image_shape=(28, 28), n_classes=len(CLASSES))
    return raw
