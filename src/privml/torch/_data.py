"""Image datasets as float tensors for CNNs (MNIST, Fashion-MNIST), from privml's cache."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from privml.data import load_dataset

#: Public per-dataset pixel mean and standard deviation (of the published
#: training sets, the constants used by torchvision's examples and by Tramer
#: and Boneh 2021). Fixed constants, not computed from the data loaded here.
NORMALISATION: dict[str, tuple[float, float]] = {
    "mnist": (0.1307, 0.3081),
    "fashion-mnist": (0.2860, 0.3530),
}


def standardise_images(name: str, pixels: np.ndarray) -> np.ndarray:
    """Raw 28x28 grey-level images (0-255) as ``(n, 1, 28, 28)`` float32, standardised by public constants.

    ``pixels`` is ``(n, 784)``, ``(n, 28, 28)`` or ``(n, 1, 28, 28)``: the
    dataset files' values, as ``load_dataset(name, preprocess=False)``
    returns them. The same per-record map is applied to training images and
    to images sent to a served model (``privml predict``), so a model never
    sees differently scaled inputs.

    Raises
    ------
    ValueError
        For an unknown dataset, a record that is not 784 pixels, or a value
        outside [0, 255] (e.g. images already standardised, which would
        otherwise be standardised twice and misread) or not finite.
    """
    key = name.lower().replace("_", "-")
    if key not in NORMALISATION:
        raise ValueError(f"no image normalisation for {name!r} (known: {', '.join(NORMALISATION)})")
    x = np.asarray(pixels, dtype=np.float32)
    if x.ndim < 2 or int(np.prod(x.shape[1:])) != 28 * 28:
        raise ValueError(f"{key} images are 28 x 28 = 784 pixels per record, got an array of shape {x.shape}")
    if not np.all(np.isfinite(x)) or (x.size and (x.min() < 0 or x.max() > 255)):
        raise ValueError(f"{key} pixels must be raw grey levels in [0, 255], as in the dataset files")
    mean, std = NORMALISATION[key]
    return (x.reshape(-1, 1, 28, 28) / 255.0 - mean) / std


@dataclass(frozen=True)
class ImageData:
    X_train: torch.Tensor  # (n, 1, 28, 28) float32
    y_train: torch.Tensor  # (n,) int64
    X_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple  # the label codes 0..k-1 that y holds (public)
    class_names: tuple  # what each code means (public)


def load_images(
    name: str, *, max_train: int | None = None, random_state: int | None = None, cache_dir: str | None = None
) -> ImageData:
    """MNIST or Fashion-MNIST as ``(n, 1, 28, 28)`` float32 tensors, standardised by public constants.

    Labels are int64 codes ``0..k-1`` (``classes``), named by ``class_names``.

    Pixels are scaled to [0, 1] by the public range 255 and standardised with
    :data:`NORMALISATION`: per-record maps with fixed constants, so they cost
    no privacy (unlike dividing by a norm found in the data, as vdMH20's reference preprocessing does).
    """
    key = name.lower().replace("_", "-")
    if key not in NORMALISATION:
        raise ValueError(f"load_images supports {', '.join(NORMALISATION)}, got {name!r}")
    data = load_dataset(key, preprocess=False, max_train=max_train, random_state=random_state, cache_dir=cache_dir)

    def images(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(standardise_images(key, x))

    return ImageData(
        X_train=images(data.X_train),
        y_train=torch.from_numpy(np.asarray(data.y_train, dtype=np.int64)),
        X_test=images(data.X_test),
        y_test=torch.from_numpy(np.asarray(data.y_test, dtype=np.int64)),
        classes=tuple(range(len(data.info.classes))),
        class_names=tuple(data.info.classes),
    )
