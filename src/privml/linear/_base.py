"""What every privml linear estimator shares: validation, public class sets,
the unit-ball projection, prediction, the fitted guarantee and model files.

A subclass implements one method, :meth:`PrivateLinearClassifier._fit_private`,
which receives validated data (rows projected onto the unit ball, labels
encoded for the loss) and returns the released weights and the guarantee.
Everything before it runs before any noise is drawn, so bad input never
spends privacy.

Conventions (Chaudhuri, Monteleoni and Sarwate 2011, Sec. 2; van der Maaten and Hannun 2020, Sec. 3):

- Features: each row is projected onto the unit ball, ``x / max(1, ||x||)``,
  at fit *and* predict time. The projection is a fixed per-record map, so it
  costs no privacy and neighbouring datasets stay neighbouring. Pass rows with
  norm <= 1 (e.g. from :mod:`privml.data`) to make it a no-op.
- Labels: the class set is a **public** input (``classes=``). If it is not
  given it is taken from ``y`` and a :class:`~privml.exceptions.PrivacyLeakWarning`
  says so: the set of labels present is itself a function of the data
  (:func:`privml.data._labels.fit_classes`; X and y are checked by
  :mod:`privml._validation`).
  Two classes use a binary loss on y in {-1, +1} (``classes[0]`` -> -1);
  more use the multinomial logistic loss on y in {0..k-1}.
- No intercept is fitted: append a constant feature with
  :func:`privml.data.add_bias_feature`, which keeps ``||x|| <= 1``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from privml._random import check_random_state
from privml._validation import check_delta, check_epsilon, check_fitted, check_positive, check_X, check_y
from privml.budget import charged_fit
from privml.data._labels import fit_classes
from privml.data._preprocessing import project_to_unit_ball
from privml.guarantee import PrivacyGuarantee
from privml.losses import HuberHingeLoss, LogisticLoss, Loss, MultinomialLogisticLoss
from privml.neighbouring import Neighbouring
from privml.registry import get_spec
from privml.release import partition_info

#: default ``huber_width`` of every estimator that has one
DEFAULT_HUBER_WIDTH = 0.5


def make_loss(n_classes: int, name: str = "logistic", *, huber_width: float = DEFAULT_HUBER_WIDTH) -> Loss:
    """The loss for ``n_classes``: binary ``logistic``/``huber``, else multinomial.

    A ``huber_width`` other than the default with a loss that is not Huber's is refused: it would be ignored.
    (Every estimator calls this at fit, before any randomness is drawn.)
    """
    if huber_width != DEFAULT_HUBER_WIDTH and not (n_classes == 2 and name == "huber"):
        raise ValueError(f"huber_width applies to loss='huber' (two classes) only, got loss={name!r} "
                         f"with {n_classes} classes")
    if n_classes == 2:
        if name == "logistic":
            return LogisticLoss()
        if name == "huber":
            return HuberHingeLoss(huber_width)
        raise ValueError(f"loss must be 'logistic' or 'huber' for two classes, got {name!r}")
    if name not in ("logistic", "multinomial"):
        raise ValueError(f"only the multinomial logistic loss handles {n_classes} classes, got loss={name!r}")
    return MultinomialLogisticLoss(n_classes)


def loss_labels(y_index: np.ndarray, n_classes: int) -> np.ndarray:
    """Labels as the loss wants them: {-1, +1} for binary, {0..k-1} otherwise."""
    return 2 * y_index - 1 if n_classes == 2 else y_index


class PrivateLinearModel:
    """What every privml linear model shares, classifier or regressor.

    Validation of X (the unit-ball projection at fit and predict time), the
    epsilon/delta check, the fitted state (``n_features_in_``, ``weights_``,
    ``privacy_``, ``fit_info_``, ``nonprivate_diagnostics_``) and the model
    file's arrays. Not an estimator on its own: a subclass adds scikit-learn's
    mixin and :class:`~sklearn.base.BaseEstimator` (in that order).
    """

    #: short method name used in model files and the CLI
    method: str = "abstract"
    #: whether fit needs delta > 0 (Gaussian noise) / allows delta == 0
    requires_delta: bool = False
    #: keys of ``fit_info_`` that are public inputs, DP outputs or functions of those;
    #: every other key a fit reports stays in ``nonprivate_diagnostics_`` (an allow-list)
    released_info: ClassVar[frozenset[str]] = frozenset()

    def _check_hyperparameters(self) -> Any:
        """Validate every constructor setting (no data involved); returns what fit needs of them.

        Here (epsilon, delta); subclasses extend it with their own settings.
        """
        epsilon = check_epsilon(self.epsilon)  # type: ignore[attr-defined]
        delta = check_delta(self.delta)  # type: ignore[attr-defined]
        if self.requires_delta and delta == 0:
            raise ValueError(f"{type(self).__name__} needs delta > 0, got 0")
        return epsilon, delta

    def _planned_guarantee(self, n: int) -> PrivacyGuarantee | None:
        """The guarantee a fit on ``n`` records will give, from the settings alone (for :mod:`privml.budget`).

        Here the target (epsilon, delta) under the method's relation (an
        estimator's ``neighbouring`` setting, else the registry's); methods
        that calibrate otherwise override it. ``None``: not private.
        """
        relation = getattr(self, "neighbouring", None) or get_spec(self.method).neighbouring
        if relation is None:
            return None  # a baseline: no relation, no guarantee
        epsilon, delta = float(self.epsilon), float(self.delta)  # type: ignore[attr-defined]
        return PrivacyGuarantee(epsilon, delta, Neighbouring.parse(relation), "planned")

    def _validate_X(self, X: Any, *, fitted: bool) -> np.ndarray:
        X = check_X(X, n_features=self.n_features_in_ if fitted else None, owner=type(self).__name__)
        return project_to_unit_ball(X)

    def _set_fitted(self, n_features: int, weights: Any, guarantee: PrivacyGuarantee, info: dict) -> None:
        """Store a fit's release; only the keys of ``info`` in :attr:`released_info` become ``fit_info_``."""
        self.n_features_in_ = n_features
        self.weights_ = np.asarray(weights, dtype=np.float64)
        self.privacy_ = guarantee
        self.fit_info_, self.nonprivate_diagnostics_ = partition_info(info, self.released_info)

    def _check_fitted(self) -> None:
        check_fitted(self, "weights_")

    def _model_arrays(self) -> dict[str, np.ndarray]:
        """Arrays saved in the model file by :func:`privml.io.save_model` (subclasses may add more)."""
        self._check_fitted()
        return {"weights": self.weights_}

    def _restore_arrays(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        self.weights_ = np.asarray(arrays["weights"], dtype=np.float64)
        self.n_features_in_ = int(self.weights_.shape[0])
        self.privacy_ = PrivacyGuarantee.from_dict(metadata["privacy"])
        self.fit_info_, _ = partition_info(metadata.get("fit_info", {}), self.released_info)
        self.nonprivate_diagnostics_ = {}


class PrivateLinearClassifier(PrivateLinearModel, ClassifierMixin, BaseEstimator):
    """Base class of privml's linear classifiers (scikit-learn compatible).

    Subclasses define ``__init__`` with keyword-only hyper-parameters stored
    as given (scikit-learn convention), including at least ``epsilon``,
    ``delta``, ``l2``, ``classes`` and ``random_state``, and implement
    :meth:`_fit_private`. :meth:`_check_hyperparameters` is the one hook that
    validates the settings; it runs first in :meth:`fit` and when a model file
    is read back.

    Fitted attributes: ``classes_``, ``n_features_in_``, ``weights_`` (shape
    ``(d,)`` binary or ``(d, k)``), ``coef_`` (scikit-learn layout ``(1, d)`` or
    ``(k, d)``), ``privacy_`` (:class:`~privml.PrivacyGuarantee`) and
    ``fit_info_`` (method-specific facts that are public or DP: noise scale,
    lambda, steps, ...; saved with the model) and ``nonprivate_diagnostics_``
    (facts computed from the private data without noise, such as a solver's
    final gradient norm and iteration count: for your own inspection, never
    saved or printed unless you opt in; see :mod:`privml.release`).
    """

    # ------------------------------------------------------------ validation
    def _check_l2(self) -> float:
        return check_positive(self.l2, "l2")

    # ------------------------------------------------------------------- fit
    def fit(self, X: Any, y: Any) -> PrivateLinearClassifier:
        """Train privately on (X, y); sets ``privacy_`` to the guarantee of the release.

        All validation happens before any noise is drawn.
        """
        self._check_hyperparameters()
        X = self._validate_X(X, fitted=False)
        y = check_y(y, X.shape[0])
        classes, y_index = fit_classes(y, self.classes, owner=type(self).__name__, stacklevel=3)
        n_classes = classes.size
        rng = check_random_state(self.random_state)
        # Under an active privml.budget.BudgetAccountant the planned guarantee is charged first (or refused).
        with charged_fit(self, lambda: self._planned_guarantee(X.shape[0])):
            weights, guarantee, info = self._fit_private(X, loss_labels(y_index, n_classes), n_classes, rng)
            self.classes_ = classes
            self._set_fitted(X.shape[1], weights, guarantee, info)
        return self

    @abstractmethod
    def _fit_private(
        self, X: np.ndarray, y: np.ndarray, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, PrivacyGuarantee, dict]:
        """Return (weights, guarantee, info) for validated data.

        ``info`` may mix releasable facts and non-private diagnostics: only the
        keys in :attr:`released_info` become ``fit_info_``.

        ``X`` rows have norm <= 1; ``y`` is in {-1, +1} when ``n_classes == 2``
        and in {0..k-1} otherwise. Weights have shape (d,) or (d, k).
        """

    # --------------------------------------------------------------- predict
    @property
    def coef_(self) -> np.ndarray:
        self._check_fitted()
        w = self.weights_
        return w[None, :] if w.ndim == 1 else w.T

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores ``X @ w``: shape (n,) for two classes (positive -> classes_[1]), else (n, k)."""
        self._check_fitted()
        return self._validate_X(X, fitted=True) @ self.weights_

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities under the logistic / softmax link, shape (n, n_classes)."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = 0.5 * (1.0 + np.tanh(0.5 * scores))  # stable sigmoid
            return np.column_stack([1.0 - p, p])
        shifted = scores - scores.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """Most likely class label for each row."""
        scores = self.decision_function(X)
        index = (scores > 0).astype(np.int64) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return self.classes_[index]

    # ------------------------------------------------------------ model file
    def _model_arrays(self) -> dict[str, np.ndarray]:
        """Arrays saved in the model file (subclasses may add more)."""
        return {**super()._model_arrays(), "classes": self.classes_}

    def _restore_arrays(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        super()._restore_arrays(arrays, metadata)
        self.classes_ = np.asarray(arrays["classes"])
