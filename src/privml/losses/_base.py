"""The contract of a loss for a linear model, and the algebra all of them share.

Every loss in :mod:`privml.losses` depends on the parameters only through the
*scores* of a linear model, ``S = X @ W``:

* a binary or regression model has ``w`` of shape ``(d,)`` and scores ``(n,)``;
* a k-class model has ``W`` of shape ``(d, k)`` and scores ``(n, k)``.

Writing the per-example loss as ``l(s_i, y_i)``, the chain rule turns two
score-space quantities, the score gradient ``G_i = dl/ds_i`` and the score
curvature ``d2l/ds_i2``, into everything an optimiser or a private mechanism
needs:

* per-example gradient    ``x_i G_i^T`` (flattened row-major, see below),
* mean gradient           ``X^T G / n``,
* Hessian-vector product  ``X^T [d2l/ds2 (X V)] / n``,
* coordinate gradient     ``G_i[c] * x_i[j]`` for the parameter ``(j, c)``.

Subclasses implement the score-space kernels and the constants; this module
turns them into the public, validated interface.

Flattening. A ``(d, k)`` parameter matrix is flattened row-major,
``vec(W) = W.reshape(-1)``: flat index ``j * k + c`` is feature ``j``, class
``c`` (vdMH20 App. B also stacks the rows of W). Every method that accepts
``W`` also accepts its flat ``(d * k,)`` form, so a scipy optimiser can work on
flat vectors. Per-example gradients are always ``(n, n_parameters)`` rows in
that order, so DP-SGD clips the L2 norm of the whole per-example gradient,
which for a matrix is its Frobenius norm.

Constants. ``lipschitz``, ``smoothness``, ``hessian_rank``,
``coordinate_smoothness`` and ``coordinate_lipschitz`` are properties of the
loss, not of any dataset: they assume every record has ``||x||_2 <= 1`` (CMS11,
Sec. 2; the estimators project each record onto the unit ball), or, for
the coordinate constants, only the *public* per-feature bounds
``|x_j| <= b_j``. They therefore cost no privacy. For records with
``||x|| <= R`` instead, multiply ``lipschitz`` by R and ``smoothness`` by R^2.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privml._validation import check_count, check_finite, check_finite_array

FloatArray: TypeAlias = NDArray[np.float64]


def check_feature_bounds(feature_bounds: ArrayLike) -> FloatArray:
    """Return public per-feature bounds ``b`` (``|x_j| <= b_j``) as a float64 vector.

    Bounds must be finite and strictly positive: the DP-CD step size
    ``gamma / M_j`` divides by a constant proportional to ``b_j ** 2``.
    """
    bounds = check_finite_array(feature_bounds, "feature_bounds", ndim=1)
    if bounds.size == 0:
        raise ValueError("feature_bounds must hold one bound per feature, got an empty array")
    if not np.all(bounds > 0):
        raise ValueError(f"feature_bounds must all be > 0, got minimum {float(bounds.min())!r}")
    return bounds


class Loss(ABC):
    """A convex loss of a linear model's scores, with its privacy-relevant constants.

    Public methods validate their inputs and raise :class:`ValueError` naming
    the offending argument. The underscored kernels (``_values``,
    ``_value_and_grad``, ``_gradient``, ``_hessian_vector_product``,
    ``_hessian``) skip validation
    for callers that validated once with :meth:`check_data` and then call the
    loss many times, such as :class:`~privml.losses.RegularisedObjective`.

    Attributes
    ----------
    n_outputs : int or None
        Number of score columns ``k`` of a multi-output model; ``None`` for a
        model with one score per example (binary classification, regression).
    """

    n_outputs: int | None = None

    # ------------------------------------------------------------------ constants

    @property
    @abstractmethod
    def lipschitz(self) -> float:
        """Bound L on the L2 norm of a per-example gradient w.r.t. the parameters.

        Holds for every parameter value and every record with ``||x|| <= 1``;
        ``math.inf`` when no bound exists (the caller must clip).
        """

    @property
    @abstractmethod
    def smoothness(self) -> float:
        """Bound c on the operator norm of a per-example Hessian, for ``||x|| <= 1``."""

    @property
    @abstractmethod
    def hessian_rank(self) -> int:
        """Bound on the rank of a per-example Hessian w.r.t. the (flattened) parameters."""

    @abstractmethod
    def coordinate_smoothness(self, feature_bounds: ArrayLike) -> FloatArray:
        """Coordinate-wise smoothness constants ``M`` from public feature bounds.

        ``M[j]`` bounds ``d^2 f / d theta_j^2`` of the mean loss ``f`` for every
        parameter value, given only ``|x_ij| <= b_j``; equivalently ``f`` obeys
        the one-coordinate descent lemma
        ``f(theta + t e_j) <= f(theta) + t df/dtheta_j + M_j t^2 / 2``
        (Nesterov 2012, the regularity DP-CD's step ``gamma / M_j`` relies on).
        Returns one constant per flattened parameter.

        This is the coordinate-wise notion. It does *not* give the matrix
        inequality ``Hessian <= diag(M)`` (the "M-component-smoothness" of
        Mangold et al. 2022 as stated in their slides): two identical features
        with ``b = (1, 1)`` already give a Hessian with eigenvalue ``2c`` against
        ``diag(c, c)``. The constants only set step sizes and clipping shares,
        never a sensitivity, so a looser or tighter notion changes convergence,
        not privacy.
        """

    @abstractmethod
    def coordinate_lipschitz(self, feature_bounds: ArrayLike) -> FloatArray:
        """Bound on ``|d loss_i / d theta_j|`` per flattened parameter, given ``|x_j| <= b_j``.

        If a DP-CD clipping threshold ``C_j`` is at least this bound, clipping
        coordinate ``j`` never changes a gradient. ``inf`` where unbounded.
        """

    # --------------------------------------------------------------- label checks

    @abstractmethod
    def check_labels(self, y: ArrayLike) -> np.ndarray:
        """Return ``y`` as a validated 1-D array of labels (or targets) this loss accepts."""

    # ------------------------------------------------------ score-space kernels

    @abstractmethod
    def _values(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        """Per-example loss ``l(s_i, y_i)``, shape ``(n,)``."""

    @abstractmethod
    def _score_gradients(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        """``dl/ds`` with the shape of ``scores``."""

    @abstractmethod
    def _score_hessians(self, scores: FloatArray, y: np.ndarray) -> FloatArray:
        """``d2l/ds2``: shape ``(n,)`` for one score per example, ``(n, k, k)`` otherwise."""

    @abstractmethod
    def _score_hessian_vector(self, scores: FloatArray, y: np.ndarray, directions: FloatArray) -> FloatArray:
        """``d2l/ds2`` applied to ``directions`` (shape of ``scores``), per example."""

    # ------------------------------------------------------------------- shapes

    def parameter_shape(self, n_features: int) -> tuple[int, ...]:
        """Shape of the parameter for ``n_features`` features: ``(d,)`` or ``(d, k)``."""
        d = check_count(n_features, "n_features")
        return (d,) if self.n_outputs is None else (d, self.n_outputs)

    def n_parameters(self, n_features: int) -> int:
        """Number of scalar parameters: ``d``, or ``d * k`` for a k-output model."""
        return math.prod(self.parameter_shape(n_features))

    # --------------------------------------------------------------- validation

    def check_data(self, X: ArrayLike, y: ArrayLike) -> tuple[FloatArray, np.ndarray]:
        """Validate a dataset once: ``X`` finite 2-D float64, ``y`` labels of matching length.

        Does not check ``||x|| <= 1``: the loss is defined for any finite
        record; only the documented constants assume the unit ball.
        """
        X_arr = self._check_features(X)
        y_arr = self.check_labels(y)
        if y_arr.shape[0] != X_arr.shape[0]:
            raise ValueError(f"X has {X_arr.shape[0]} rows but y has {y_arr.shape[0]} labels")
        return X_arr, y_arr

    @staticmethod
    def _check_features(X: ArrayLike) -> FloatArray:
        X_arr = check_finite_array(X, "X", ndim=2)
        if X_arr.shape[0] == 0 or X_arr.shape[1] == 0:
            raise ValueError(f"X needs at least one row and one column, got shape {X_arr.shape}")
        return X_arr

    def _check_parameters(self, w: ArrayLike, n_features: int, name: str = "w") -> FloatArray:
        """Return ``w`` reshaped to :meth:`parameter_shape`; the flat form is accepted too."""
        arr = check_finite_array(w, name)
        shape = self.parameter_shape(n_features)
        size = math.prod(shape)
        if arr.shape == shape:
            return arr
        if arr.shape == (size,):
            return arr.reshape(shape)
        flat_hint = f" (or ({size},) flattened row-major)" if len(shape) > 1 else ""
        raise ValueError(f"{name} must have shape {shape}{flat_hint} for X with {n_features} features, got {arr.shape}")

    def _check_coordinate(self, j: object, n_features: int) -> int:
        index = check_count(j, "j", minimum=0)
        size = self.n_parameters(n_features)
        if index >= size:
            raise ValueError(f"j must be a flat parameter index in [0, {size}), got {index}")
        return index

    def _check_scores(self, scores: ArrayLike, n_samples: int) -> FloatArray:
        arr = np.asarray(scores, dtype=np.float64)
        expected = (n_samples,) if self.n_outputs is None else (n_samples, self.n_outputs)
        if arr.shape != expected:
            raise ValueError(f"scores must have shape {expected} (X @ w), got {arr.shape}")
        return arr

    # ----------------------------------------------------- unvalidated kernels

    def _value_and_grad(self, W: FloatArray, X: FloatArray, y: np.ndarray) -> tuple[float, FloatArray]:
        # One product X @ W serves both, which halves the cost of an L-BFGS step.
        scores = X @ W
        value = float(np.mean(self._values(scores, y)))
        return value, X.T @ self._score_gradients(scores, y) / X.shape[0]

    def _gradient(self, W: FloatArray, X: FloatArray, y: np.ndarray) -> FloatArray:
        return X.T @ self._score_gradients(X @ W, y) / X.shape[0]

    def _hessian_vector_product(self, W: FloatArray, X: FloatArray, y: np.ndarray, V: FloatArray) -> FloatArray:
        # Never forms the (p, p) Hessian: two products with X, as in a Gauss-Newton step.
        curvature_times_direction = self._score_hessian_vector(X @ W, y, X @ V)
        return X.T @ curvature_times_direction / X.shape[0]

    def _hessian(self, W: FloatArray, X: FloatArray, y: np.ndarray) -> FloatArray:
        n, d = X.shape
        curvature = self._score_hessians(X @ W, y)
        if curvature.ndim == 1:
            return (X.T * curvature) @ X / n
        k = curvature.shape[1]
        # H[(a, c), (b, e)] = mean_i x_ia x_ib A_i[c, e]: row-major vec(W) gives (x x^T) kron A.
        blocks = np.einsum("ia,ice,ib->acbe", X, curvature, X, optimize=True) / n
        return blocks.reshape(d * k, d * k)

    # ------------------------------------------------------------ public maths

    def scores(self, w: ArrayLike, X: ArrayLike) -> FloatArray:
        """Scores ``X @ w`` of the linear model: ``(n,)``, or ``(n, k)`` for k outputs.

        These are what DP coordinate descent keeps cached (see
        :meth:`coordinate_gradients_from_scores` and :meth:`update_scores`).
        """
        X_arr = self._check_features(X)
        return X_arr @ self._check_parameters(w, X_arr.shape[1])

    def per_example_values(self, w: ArrayLike, X: ArrayLike, y: ArrayLike) -> FloatArray:
        """Loss of each example, shape ``(n,)``."""
        X_arr, y_arr = self.check_data(X, y)
        return self._values(X_arr @ self._check_parameters(w, X_arr.shape[1]), y_arr)

    def value(self, w: ArrayLike, X: ArrayLike, y: ArrayLike) -> float:
        """Mean loss ``(1/n) sum_i loss(w; x_i, y_i)``."""
        return float(np.mean(self.per_example_values(w, X, y)))

    def gradient(self, w: ArrayLike, X: ArrayLike, y: ArrayLike) -> FloatArray:
        """Gradient of the mean loss, with the shape ``w`` was given in."""
        X_arr, y_arr = self.check_data(X, y)
        W = self._check_parameters(w, X_arr.shape[1])
        return self._gradient(W, X_arr, y_arr).reshape(np.shape(w))

    def value_and_grad(self, w: ArrayLike, X: ArrayLike, y: ArrayLike) -> tuple[float, FloatArray]:
        """``(value, gradient)`` of the mean loss from one pass over ``X``."""
        X_arr, y_arr = self.check_data(X, y)
        W = self._check_parameters(w, X_arr.shape[1])
        value, grad = self._value_and_grad(W, X_arr, y_arr)
        return value, grad.reshape(np.shape(w))

    def per_example_gradients(self, w: ArrayLike, X: ArrayLike, y: ArrayLike) -> FloatArray:
        """Per-example gradients as rows, shape ``(n, n_parameters)``.

        Row ``i`` is the flattened (row-major) gradient of ``loss(w; x_i, y_i)``;
        its L2 norm is what DP-SGD clips, and it never exceeds
        :attr:`lipschitz` when ``||x_i|| <= 1``. Their mean is :meth:`gradient`.
        """
        X_arr, y_arr = self.check_data(X, y)
        G = self._score_gradients(X_arr @ self._check_parameters(w, X_arr.shape[1]), y_arr)
        if G.ndim == 1:
            return X_arr * G[:, None]
        return (X_arr[:, :, None] * G[:, None, :]).reshape(X_arr.shape[0], -1)

    def hessian_vector_product(self, w: ArrayLike, X: ArrayLike, y: ArrayLike, v: ArrayLike) -> FloatArray:
        """Hessian of the mean loss at ``w`` applied to ``v``, with the shape ``v`` was given in.

        Costs two products with ``X``; suitable for Newton-CG (scipy's ``hessp``).
        """
        X_arr, y_arr = self.check_data(X, y)
        W = self._check_parameters(w, X_arr.shape[1])
        V = self._check_parameters(v, X_arr.shape[1], "v")
        return self._hessian_vector_product(W, X_arr, y_arr, V).reshape(np.shape(v))

    def hessian(self, w: ArrayLike, X: ArrayLike, y: ArrayLike) -> FloatArray:
        """Hessian of the mean loss, ``(n_parameters, n_parameters)`` in flat row-major order.

        Dense: memory ``O((d k)^2)``; prefer :meth:`hessian_vector_product` when
        the dimension is large.
        """
        X_arr, y_arr = self.check_data(X, y)
        return self._hessian(self._check_parameters(w, X_arr.shape[1]), X_arr, y_arr)

    # ------------------------------------------------- coordinate-wise access

    def score_gradients(self, scores: ArrayLike, y: ArrayLike) -> FloatArray:
        """Derivative of each example's loss w.r.t. its score(s), the shape of ``scores``."""
        y_arr = self.check_labels(y)
        return self._score_gradients(self._check_scores(scores, y_arr.shape[0]), y_arr)

    def per_example_coordinate_gradients(self, w: ArrayLike, X: ArrayLike, y: ArrayLike, j: int) -> FloatArray:
        """``d loss(w; x_i, y_i) / d theta_j`` for every example, shape ``(n,)``.

        ``j`` is a flat parameter index (``feature * k + class`` for k outputs).
        Equals column ``j`` of :meth:`per_example_gradients`, at ``O(n d)``
        cost for the scores; DP-CD should cache the scores and use
        :meth:`coordinate_gradients_from_scores` instead.
        """
        X_arr, y_arr = self.check_data(X, y)
        scores = X_arr @ self._check_parameters(w, X_arr.shape[1])
        return self._coordinate_column(self._score_gradients(scores, y_arr), X_arr, j)

    def coordinate_gradients_from_scores(self, scores: ArrayLike, X: ArrayLike, y: ArrayLike, j: int) -> FloatArray:
        """Per-example gradients for flat coordinate ``j`` from cached scores, shape ``(n,)``.

        ``scores`` must equal ``X @ w``; keep them current with
        :meth:`update_scores` after every coordinate step. The cost is
        ``O(n)`` (``O(n k)`` for k outputs, for the softmax), not ``O(n d)``.
        ``X`` is only shape-checked here, since scanning it for NaN would cost
        the ``O(n d)`` the cache saves: validate it once with :meth:`check_data`.
        """
        y_arr = self.check_labels(y)
        X_arr = self._check_feature_shape(X, y_arr.shape[0])
        G = self._score_gradients(self._check_scores(scores, y_arr.shape[0]), y_arr)
        return self._coordinate_column(G, X_arr, j)

    def update_scores(self, scores: FloatArray, X: ArrayLike, j: int, step: float) -> FloatArray:
        """Update cached scores **in place** after ``theta_j += step``; returns ``scores``.

        Changing one parameter moves one score column by ``step * X[:, feature]``,
        so the update costs ``O(n)``. Floating-point drift accumulates over many
        steps; recompute ``X @ w`` occasionally if it matters.
        """
        if not isinstance(scores, np.ndarray) or scores.dtype != np.float64:
            raise TypeError("scores must be a float64 numpy array (it is updated in place)")
        X_arr = self._check_feature_shape(X)
        self._check_scores(scores, X_arr.shape[0])
        index = self._check_coordinate(j, X_arr.shape[1])
        delta = check_finite(step, "step")
        if self.n_outputs is None:
            scores += delta * X_arr[:, index]
        else:
            feature, output = divmod(index, self.n_outputs)
            scores[:, output] += delta * X_arr[:, feature]
        return scores

    @staticmethod
    def _check_feature_shape(X: ArrayLike, n_samples: int | None = None) -> FloatArray:
        X_arr = np.asarray(X, dtype=np.float64)
        if X_arr.ndim != 2 or X_arr.shape[0] == 0 or X_arr.shape[1] == 0:
            raise ValueError(f"X must be 2-D with at least one row and one column, got shape {X_arr.shape}")
        if n_samples is not None and X_arr.shape[0] != n_samples:
            raise ValueError(f"X has {X_arr.shape[0]} rows but y has {n_samples} labels")
        return X_arr

    def _coordinate_column(self, G: FloatArray, X: FloatArray, j: object) -> FloatArray:
        index = self._check_coordinate(j, X.shape[1])
        if self.n_outputs is None:
            return G * X[:, index]
        feature, output = divmod(index, self.n_outputs)
        return G[:, output] * X[:, feature]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
