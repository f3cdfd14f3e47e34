"""Default feature pipelines shared by several datasets.

Each returns the features and the list of steps it applied, in the words that
end up in :attr:`DatasetInfo.preprocessing`. All steps are data-independent.
"""

from __future__ import annotations

import math

import numpy as np

from privml.data._preprocessing import (
    flatten_images,
    project_to_unit_ball,
    scale_by_bounds,
    scale_by_norm_bound,
    scale_pixels,
)

PROJECT_STEP = "project each row onto the unit L2 ball, x / max(1, ||x||) (per-record map: no privacy cost)"


def image_features(images: np.ndarray, *, max_value: float) -> tuple[np.ndarray, list[str]]:
    """Flatten images, divide by the public pixel maximum, project onto the unit ball.

    Images are projected rather than divided by their public norm bound
    (``max_value * sqrt(#pixels)``, e.g. 28 for MNIST): typical records are
    far shorter than that bound, and dividing by it would shrink every image
    to norm about 0.3, wasting most of the unit ball.
    """
    flat = flatten_images(images)
    steps = []
    if images.ndim > 2:
        steps.append(f"flatten {'x'.join(map(str, images.shape[1:]))} images to {flat.shape[1]} features")
    scaled = scale_pixels(flat, max_value=max_value)
    steps.append(f"divide pixels by their public maximum {max_value:g} (data-independent)")
    steps.append(PROJECT_STEP)
    return project_to_unit_ball(scaled), steps


def bounded_features(
    X: np.ndarray, lower: np.ndarray, upper: np.ndarray, *, bounds_source: str
) -> tuple[np.ndarray, list[str]]:
    """Scale features by public per-feature bounds, then by the public norm bound sqrt(d).

    After :func:`scale_by_bounds` every feature is in ``[0, 1]``, so
    ``sqrt(d)`` bounds every row norm whatever the data; dividing by it keeps
    the relative lengths of the records. The final projection is then the
    identity, and stays only as the guarantee.
    """
    d = X.shape[1]
    scaled = scale_by_bounds(X, lower, upper, clip=True)
    normed = scale_by_norm_bound(scaled, math.sqrt(d))
    steps = [
        f"scale each feature to [0, 1] by public bounds ({bounds_source}); values outside are clipped "
        "(data-independent)",
        f"divide by the public norm bound sqrt({d}) = {math.sqrt(d):.4g} (data-independent)",
        PROJECT_STEP,
    ]
    return project_to_unit_ball(normed), steps
