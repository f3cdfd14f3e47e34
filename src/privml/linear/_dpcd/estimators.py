"""The scikit-learn estimators trained by DP-CD: :class:`DPCDClassifier` and
:class:`DPCDRegressor`; see :mod:`privml.linear._dpcd`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from privml._params import keep_params
from privml._random import RandomState, check_random_state
from privml._validation import check_y
from privml.budget import charged_fit
from privml.guarantee import PrivacyGuarantee
from privml.linear._base import PrivateLinearClassifier, PrivateLinearModel, make_loss
from privml.linear._dpcd.solver import (
    DPCDResult,
    _check_settings,
    _resolve_feature_bounds,
    _run,
    _Settings,
)
from privml.losses import Loss, SquaredLoss

_DPCD_PARAMS = (
    "epsilon",
    "delta",
    "passes",
    "inner_steps",
    "gamma",
    "clip_norm",
    "clipping",
    "l1",
    "l2",
    "calibration",
    "progress",
)


#: Every fact a DP-CD run reports is a public setting or a function of public ones
#: (feature bounds taken from the data are flagged by ``feature_bounds_from_data``
#: and warned about when they are inferred).
_RELEASED_INFO = frozenset({
    "calibration", "passes", "inner_steps", "steps", "gamma", "gamma_default", "blocks", "n_coordinates",
    "n_blocks", "block_size", "noise_multiplier", "noise_multiplier_gdp", "noise_multiplier_closed_form",
    "noise_ratio_closed_form_to_gdp", "closed_form_applies", "mu", "sensitivity", "sigma", "sigma_gdp",
    "sigma_closed_form", "clip_thresholds", "step_sizes", "coordinate_smoothness", "feature_bounds",
    "feature_bounds_from_data", "l1", "l2",
})


class _DPCDMixin:
    """Hyper-parameter handling shared by the two DP-CD estimators."""

    released_info = _RELEASED_INFO

    def _check_hyperparameters(self) -> _Settings:
        params = {name: getattr(self, name) for name in _DPCD_PARAMS}
        # Only the classifier has a choice of blocks (one-output models have one coordinate per feature).
        return _check_settings(blocks=getattr(self, "blocks", "feature"), **params)

    def _validate_X(self, X: Any, *, fitted: bool) -> np.ndarray:
        X = super()._validate_X(X, fitted=fitted)  # type: ignore[misc]
        bounds = getattr(self, "fit_info_", {}).get("feature_bounds") if fitted else None
        if bounds is not None:
            # Predict on rows clipped as the training rows were (_run clips to the public bounds): a model trained
            # on clipped features scored unclipped ones (a review measured 0.33 against 0.92 accuracy on iris).
            b = np.asarray(bounds, dtype=np.float64)
            X = np.clip(X, -b, b)
        return X

    def _fit_dpcd(self, X: np.ndarray, y: np.ndarray, loss: Loss, rng: np.random.Generator) -> DPCDResult:
        settings = self._check_hyperparameters()
        X, y = loss.check_data(X, y)
        bounds, from_data = _resolve_feature_bounds(self.feature_bounds, X)  # type: ignore[attr-defined]
        return _run(X, y, loss, settings, bounds, from_data, rng)


class DPCDClassifier(_DPCDMixin, PrivateLinearClassifier):
    """Linear classifier trained by DP coordinate descent (Mangold et al. 2022).

    Binary: logistic loss on y in {-1, +1}, weights ``(d,)``, one coordinate
    per step. More classes: multinomial logistic loss, weights ``W`` of shape
    ``(d, k)``, one row ``W[j, :]`` per step by default (``blocks``).
    Minimises ``(1/n) sum_i loss + psi`` privately; see :mod:`privml.linear._dpcd`.

    Parameters
    ----------
    epsilon : float
        Privacy budget, > 0 (required).
    delta : float, default 1e-5
        > 0 (Gaussian noise); should be well below 1/n.
    passes : int, default 10
        Outer iterations ``T``. Each costs about one pass over the non-zero
        features (``k`` scores each); more passes help at large epsilon and
        cost time, while the default ``gamma`` shrinks the steps to keep the
        noise in check.
    inner_steps : int or None, default None
        Inner iterations ``K``; None means the number of blocks (``d``, or
        ``d k`` with ``blocks="entry"``).
    gamma : float or None, default None
        Step scale, ``eta_j = gamma / M_j``. None: :func:`default_gamma`, a
        public function of ``n``, epsilon, delta, ``T``, ``K``, ``C`` and the
        feature bounds (``fit_info_["gamma"]`` reports the value used).
    clip_norm : float, default 0.5
        Overall clipping threshold ``C`` (``sum_j C_j^2 = C^2`` over blocks).
        With rows in the unit ball, ``C_j = C / sqrt(d)`` is about the size of
        a typical record's ``|x_ij|``.
    clipping : {"uniform", "lipschitz"}, default "uniform"
        ``C_j = C / sqrt(B)`` or ``C sqrt(M_j / sum M)`` over the ``B`` blocks.
    l2 : float, default 1e-5
        Ridge strength lambda >= 0: ``psi`` has the term ``(l2/2) ||w||_2^2``,
        applied by its prox. The steps are large (rows in the unit ball
        spread over many features, and a good model has large weights), so
        the shrinkage ``1 / (1 + eta_j l2)`` of each step bites much harder
        than ``l2`` suggests: keep it small.
    l1 : float, default 0
        Lasso strength >= 0: the term ``l1 ||w||_1`` of ``psi`` (soft-thresholding).
    feature_bounds : None, "data" or array_like of shape (d,), default None
        **Public** bounds ``|x_j| <= b_j`` (capped at 1). None: all 1, implied
        by ``||x|| <= 1``. ``"data"`` reads them from the training data and
        warns (:class:`~privml.exceptions.PrivacyLeakWarning`). Features
        outside the given bounds are clipped to them (after the unit-ball
        projection, a per-record map: no privacy cost), never refused: an
        error would reveal that some private record lies outside.
    calibration : {"gdp", "closed_form"}, default "gdp"
        Exact GDP composition, or the paper's Theorem 4.1 (epsilon < 1 only).
    blocks : {"feature", "entry"}, default "feature"
        k classes: update a feature's row ``W[j, :]`` per step (L2 clipping of
        each record's k-vector, ``M_j = b_j^2 / 2``), or a single entry
        ``W[j, c]`` as in the paper (``M_j = b_j^2 / 4``). Same privacy
        accounting either way; rows are much more accurate (see the module
        notes). Ignored for two classes.
    classes : sequence or None, default None
        The public class set (taken from y with a warning if None).
    random_state : None, int, SeedSequence or Generator, default None
    progress : bool, default False
        Progress bar on stderr.

    Attributes
    ----------
    weights_, coef_, classes_, n_features_in_ :
        As in :class:`~privml.linear.PrivateLinearClassifier`.
    privacy_ : PrivacyGuarantee
        Replace-one; accountant ``"gdp"`` (or ``"rdp"`` for the closed form).
    fit_info_ : dict
        Public diagnostics: the ``gamma`` used, both noise multipliers and
        per-block noise scales (``sigma_gdp``, ``sigma_closed_form``) and
        their ratio, sensitivities, clipping thresholds, step sizes, counts.

    Notes
    -----
    Neighbouring relation: replace-one. L2 sensitivity ``2 C_j / n`` of each
    clipped block step (:func:`coordinate_sensitivity`), whatever the width
    of the block. Guarantee: exact GDP composition of the ``T K`` Gaussian
    steps (Dong, Roth and Su 2019, Corollary 3.3), see
    :func:`gdp_noise_multiplier`. The defaults read only public quantities.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 3)) / 2
    >>> y = (X[:, 0] > 0).astype(int)
    >>> clf = DPCDClassifier(epsilon=1.0, classes=[0, 1], random_state=0).fit(X, y)
    >>> clf.privacy_.accountant, clf.privacy_.epsilon <= 1.0
    ('gdp', True)
    """

    method = "dpcd"
    requires_delta = True

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 1e-5,
        passes: int = 10,
        inner_steps: int | None = None,
        gamma: float | None = None,
        clip_norm: float = 0.5,
        clipping: str = "uniform",
        l2: float = 1e-5,
        l1: float = 0.0,
        feature_bounds: Any = None,
        calibration: str = "gdp",
        blocks: str = "feature",
        classes: Any = None,
        random_state: RandomState = None,
        progress: bool = False,
    ) -> None:
        keep_params(self, locals())

    def _fit_private(
        self, X: np.ndarray, y: np.ndarray, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, PrivacyGuarantee, dict]:
        result = self._fit_dpcd(X, y, make_loss(n_classes), rng)
        weights = result.weights if n_classes == 2 else result.weights.reshape(X.shape[1], n_classes)
        return weights, result.guarantee, result.info


class DPCDRegressor(_DPCDMixin, PrivateLinearModel, RegressorMixin, BaseEstimator):
    """Least-squares linear regression trained by DP coordinate descent (Mangold et al. 2022).

    Minimises ``(1/(2n)) sum_i (w.x_i - y_i)^2 + psi(w)`` privately, the
    setting of Mangold et al. (2022)'s experiments. No intercept is
    fitted: append a constant feature (:func:`privml.data.add_bias_feature`).
    Each row of ``X`` is projected onto the unit ball (a per-record map, no
    privacy cost); targets are used as given.

    Parameters
    ----------
    epsilon, delta, passes, inner_steps, gamma, clip_norm, clipping, l2, l1,
    feature_bounds, calibration, random_state, progress :
        As in :class:`DPCDClassifier` (``M_j = b_j^2`` for the squared loss),
        but with the paper's conservative defaults ``gamma = 1``, ``C = 1``,
        ``l2 = 1e-3``: the squared loss has no bounded residual to make
        :func:`default_gamma`'s average-curvature step safe, and its scores
        are in the target's units, not logits. ``gamma=None`` applies
        :func:`default_gamma` all the same.

    Attributes
    ----------
    weights_ : numpy.ndarray, shape (d,)
    coef_ : numpy.ndarray, shape (d,)
        The same weights (scikit-learn's layout); ``intercept_`` is 0.
    n_features_in_ : int
    privacy_ : PrivacyGuarantee
    fit_info_ : dict
        Public diagnostics, as for :class:`DPCDClassifier`.

    Notes
    -----
    Neighbouring relation: replace-one. The squared loss has no Lipschitz
    constant (its gradient ``(w.x - y) x_j`` grows with ``w`` and ``y``), so
    the clipping to ``[-C_j, C_j]`` is what bounds the sensitivity of each step
    by ``2 C_j / n``; choose ``C`` near the typical size of the coordinate
    gradients (too small biases the solution, too large adds noise).
    Guarantee: exact GDP composition of the ``T K`` Gaussian steps (Dong, Roth
    and Su 2019, Corollary 3.3), see :func:`gdp_noise_multiplier`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(2000, 2)) / 2
    >>> reg = DPCDRegressor(epsilon=5.0, l2=0.0, random_state=0).fit(X, X @ [1.0, -1.0])
    >>> reg.score(X, X @ [1.0, -1.0]) > 0.5
    True
    """

    method = "dpcd-regressor"
    requires_delta = True

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 1e-5,
        passes: int = 10,
        inner_steps: int | None = None,
        gamma: float = 1.0,
        clip_norm: float = 1.0,
        clipping: str = "uniform",
        l2: float = 1e-3,
        l1: float = 0.0,
        feature_bounds: Any = None,
        calibration: str = "gdp",
        random_state: RandomState = None,
        progress: bool = False,
    ) -> None:
        keep_params(self, locals())

    def fit(self, X: Any, y: Any) -> DPCDRegressor:
        """Train privately on (X, y); every check runs before any noise is drawn."""
        self._check_hyperparameters()
        X = self._validate_X(X, fitted=False)
        y = check_y(y, X.shape[0], numeric=True)
        rng = check_random_state(self.random_state)
        with charged_fit(self, lambda: self._planned_guarantee(X.shape[0])):  # privml.budget, when one is active
            result = self._fit_dpcd(X, y, SquaredLoss(), rng)
            self._set_fitted(X.shape[1], result.weights, result.guarantee, result.info)
        return self

    @property
    def coef_(self) -> np.ndarray:
        self._check_fitted()
        return self.weights_

    @property
    def intercept_(self) -> float:
        self._check_fitted()
        return 0.0

    def predict(self, X: Any) -> np.ndarray:
        """Predictions ``x.w`` for each row (rows projected onto the unit ball first)."""
        self._check_fitted()
        return self._validate_X(X, fitted=True) @ self.weights_
