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
    no privacy (unlike dividing by a norm found in the data; SPEC "Pitfalls").
    """
    key = name.lower().replace("_", "-")
    if key not in NORMALISATION:
        raise ValueError(f"load_images supports {', '.join(NORMALISATION)}, got {name!r}")
    data = load_dataset(key, preprocess=False, max_train=max_train, random_state=random_state, cache_dir=cache_dir)
    mean, std = NORMALISATION[key]

    def images(x: np.ndarray) -> torch.Tensor:
        x = np.asarray(x, dtype=np.float32).reshape(-1, 1, 28, 28) / 255.0
        return torch.from_numpy((x - mean) / std)

    return ImageData(
        X_train=images(data.X_train),
        y_train=torch.from_numpy(np.asarray(data.y_train, dtype=np.int64)),
        X_test=images(data.X_test),
        y_test=torch.from_numpy(np.asarray(data.y_test, dtype=np.int64)),
        classes=tuple(range(len(data.info.classes))),
        class_names=tuple(data.info.classes),
    )
