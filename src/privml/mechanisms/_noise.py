"""Noise at a given scale: the one sampler behind every additive mechanism.

The mechanism classes (:class:`~privml.mechanisms.GaussianMechanism`,
:class:`~privml.mechanisms.LaplaceMechanism`,
:class:`~privml.mechanisms.L2LaplaceMechanism`) calibrate the scale from
(epsilon, delta, sensitivity) for one release. Algorithms whose scale is
calibrated elsewhere (DP-SGD's noise multiplier for many composed steps, the
per-query noise of private prediction, objective perturbation's ``b``, DP
coordinate descent's per-block sigma, noise-reduction chains) draw through
:func:`sample_noise` with that scale, so privml has one place where additive
noise is sampled:

``"gaussian"``
    ``N(0, scale^2)`` on every coordinate (the Gaussian mechanism; Dwork and
    Roth 2014, Theorem A.1; Balle and Wang 2018, Theorem 8 for the analytic
    calibration).
``"laplace"``
    ``Lap(scale)`` on every coordinate (Dwork, McSherry, Nissim and Smith
    2006; Dwork and Roth 2014, Theorem 3.6): for L1 sensitivity ``Delta_1``,
    ``scale = Delta_1 / epsilon``.
``"l2-laplace"``
    One vector of density proportional to ``exp(-||z||_2 / scale)`` per
    release (Chaudhuri, Monteleoni and Sarwate 2011, Algorithm 1 and
    Theorem 6; :func:`~privml.mechanisms.sample_l2_laplace`): for
    L2 sensitivity ``Delta_2``, ``scale = Delta_2 / epsilon``.

Floating-point samplers (numpy): see the caveat in :mod:`privml.mechanisms`.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from privml._random import RandomState, check_random_state
from privml._validation import check_positive
from privml.mechanisms._l2_laplace import sample_l2_laplace

__all__ = ["NOISE_DISTRIBUTIONS", "NoiseDistribution", "sample_noise"]

NoiseDistribution = Literal["gaussian", "laplace", "l2-laplace"]

#: The distributions :func:`sample_noise` draws.
NOISE_DISTRIBUTIONS: tuple[str, ...] = ("gaussian", "laplace", "l2-laplace")


def sample_noise(
    distribution: NoiseDistribution | str,
    scale: float | ArrayLike,
    shape: int | tuple[int, ...],
    rng: RandomState,
    *,
    size: int | None = None,
) -> np.ndarray:
    """Draw additive noise of ``distribution`` at ``scale`` for a release of ``shape``.

    Parameters
    ----------
    distribution : {"gaussian", "laplace", "l2-laplace"}
        See the module docstring.
    scale : float or array_like
        Standard deviation (Gaussian), Laplace scale ``b`` (Laplace), or the
        scale ``b`` of the density ``exp(-||z|| / b)`` (L2-Laplace), > 0.
        The per-coordinate distributions also accept an array of scales
        broadcastable to the output (e.g. a sigma per coordinate block, 0
        for a block of sensitivity 0); L2-Laplace needs one scale.
    shape : int or tuple of int
        Shape of one release. For L2-Laplace the whole release is one vector
        (a matrix is its flattening, e.g. ``vec(W)``); ``()`` is a scalar.
    rng : numpy Generator, int or None
        Source of randomness (see :func:`privml._random.check_random_state`);
        pass the caller's Generator to share its stream.
    size : int, optional
        Number of independent releases; the result then has shape
        ``(size, *shape)``. None: one release of ``shape``.

    Returns
    -------
    ndarray

    Notes
    -----
    The draw order is numpy's: ``Generator.normal`` and
    ``Generator.laplace`` fill the output in C order; L2-Laplace draws all
    radii (Gamma) first, then all directions. A fixed seed therefore gives
    the same numbers as calling those samplers directly.

    Examples
    --------
    >>> sample_noise("gaussian", 2.0, (3,), 0).shape
    (3,)
    >>> sample_noise("l2-laplace", 0.5, (2, 3), 0, size=4).shape
    (4, 2, 3)
    """
    one = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    full = one if size is None else (int(size), *one)
    gen = check_random_state(rng)
    if distribution == "l2-laplace":
        b = check_positive(scale, "scale")
        dim = math.prod(one)
        return sample_l2_laplace(dim, b, 1 if size is None else int(size), gen).reshape(full)
    if distribution not in ("gaussian", "laplace"):
        raise ValueError(f"distribution must be one of {NOISE_DISTRIBUTIONS}, got {distribution!r}")
    if np.ndim(scale) == 0:
        scales: float | np.ndarray = check_positive(scale, "scale")
    else:
        scales = np.asarray(scale, dtype=np.float64)
        # An entry may be 0: a block whose sensitivity is 0 needs no noise.
        if not (np.all(np.isfinite(scales)) and np.all(scales >= 0) and np.any(scales > 0)):
            raise ValueError("scale must be finite, >= 0 everywhere and > 0 somewhere")
    if distribution == "gaussian":
        return gen.normal(0.0, scales, size=full)
    return gen.laplace(0.0, scales, size=full)
