"""Reader for the IDX format of MNIST and Fashion-MNIST (``*-idx3-ubyte[.gz]``).

Format (LeCun et al., http://yann.lecun.com/exdb/mnist/): two zero bytes, a
type code (``0x08`` = unsigned byte), the number of dimensions ``k``, then
``k`` big-endian uint32 sizes, then the values in C order.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

_UBYTE = 0x08


def read_idx(path: Path) -> np.ndarray:
    """Read an unsigned-byte IDX file, gzip-compressed if its name ends in ``.gz``.

    Parameters
    ----------
    path : Path
        An IDX file such as ``train-images-idx3-ubyte.gz``.

    Returns
    -------
    numpy.ndarray of uint8
        Shape as declared in the header, e.g. ``(60000, 28, 28)``.

    Raises
    ------
    ValueError
        If the header is malformed, the type is not unsigned byte, or the
        payload is shorter or longer than the header declares.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    type_code, ndim = data[2], data[3]
    if type_code != _UBYTE:
        raise ValueError(f"{path}: IDX type 0x{type_code:02x} is not supported (only unsigned byte, 0x08)")
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(shape))
    if len(data) - header != expected:
        raise ValueError(f"{path}: header declares shape {shape} ({expected} bytes), payload has {len(data) - header}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape).copy()


_STEMS = {
    "X_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "X_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def read_idx_splits(directory: Path) -> dict[str, np.ndarray]:
    """Read the four standard IDX files of an MNIST-like directory.

    Looks for ``{train,t10k}-{images-idx3,labels-idx1}-ubyte`` with or
    without ``.gz``.

    Returns
    -------
    dict
        ``X_train, y_train, X_test, y_test`` as uint8 arrays.
    """
    out = {}
    for key, stem in _STEMS.items():
        path = find_idx_file(directory, stem)
        if path is None:
            raise FileNotFoundError(f"{directory} has no {stem}[.gz]")
        out[key] = read_idx(path)
    for split in ("train", "test"):
        n_x, n_y = out[f"X_{split}"].shape[0], out[f"y_{split}"].shape[0]
        if n_x != n_y or out[f"y_{split}"].ndim != 1:
            raise ValueError(f"{directory}: {split} has {n_x} images but labels of shape {out[f'y_{split}'].shape}")
    return out


def find_idx_file(directory: Path, stem: str) -> Path | None:
    """Return ``directory/stem.gz`` or ``directory/stem`` if either exists."""
    for candidate in (directory / f"{stem}.gz", directory / stem):
        if candidate.is_file():
            return candidate
    return None


def has_idx_splits(directory: Path) -> bool:
    """Whether ``directory`` holds all four MNIST-style IDX files."""
    return directory.is_dir() and all(find_idx_file(directory, s) is not None for s in _STEMS.values())
