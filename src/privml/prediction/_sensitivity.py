"""Prediction sensitivity: a non-private linear model whose every answer is noised.

vdMH20 (van der Maaten and Hannun 2020), Sec. 3.2 and App. C.1, Thm 5-6.
The model ``W* = argmin J(W)``, ``J(W) = (lambda/2)||W||_F^2 + (1/n) sum_i loss(W; x_i, y_i)``,
is trained without privacy and kept secret. A query ``x`` (public, projected
onto the unit ball) is answered with the noisy logits ``W*^T x + Z``: for
replace-one neighbours ``||W*(D) - W*(D')||_F <= 2L/(n lambda)`` (CMS11
Cor. 8; vdMH20 Lemma 1) and ``||x|| <= 1``, so the logits have L2 sensitivity
``Delta = 2L/(n lambda)`` (vdMH20 Eq. 42-44; :func:`logit_sensitivity`).
``Z`` is calibrated so that ``budget`` answers together are (epsilon, delta)-DP
(:mod:`privml.prediction._calibration`), and the ledger refuses answer B + 1.

The model file of this estimator holds the **non-private** weights: it is as
sensitive as the training data and must be protected like it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from scipy.special import expit, softmax

from privml._params import keep_params
from privml._random import RandomState, check_random_state
from privml._validation import (
    check_count,
    check_fitted,
    check_positive,
)
from privml.budget import charged_fit
from privml.data._preprocessing import project_to_unit_ball
from privml.guarantee import PrivacyGuarantee
from privml.ledger import BudgetLedger
from privml.linear._base import make_loss
from privml.linear._nonprivate import NonPrivateClassifier
from privml.linear._sensitivity import auto_l2, erm_sensitivity, rms_noise_multiplier
from privml.linear._solvers import DEFAULT_MAX_ITER, DEFAULT_TOL, check_l2_setting, check_solver_settings
from privml.mechanisms import sample_noise
from privml.neighbouring import Neighbouring
from privml.prediction._base import BudgetedPredictor
from privml.prediction._calibration import PredictionNoise, calibrate_prediction_noise

__all__ = ["AUTO_LOGIT_NOISE", "PredictionSensitivity", "logit_sensitivity"]

#: Root-mean-square noise on one logit that ``l2="auto"`` aims for (the ``tau``
#: of :func:`~privml.linear._sensitivity.auto_l2`). On a validation split of
#: MNIST's training set (50,000 / 10,000; benchmarks/prediction.py, never
#: test data), the lambda chosen from a grid put rms noise 0.19-0.22 on each
#: logit in every configuration (epsilon = 1, delta in {0, 1e-5}, B <= 100,
#: Laplace or Gaussian) that beat chance by a wide margin.
AUTO_LOGIT_NOISE = 0.2


def logit_sensitivity(lipschitz: float, n: int, l2: float, *, grad_tol: float = 0.0) -> float:
    """L2 sensitivity of the logits ``W*^T x`` of one query with ``||x|| <= 1``.

    Parameters
    ----------
    lipschitz : float
        ``L`` of the loss (1 binary logistic / Huber, sqrt(2) multinomial).
    n : int
        Training set size (public under replace-one).
    l2 : float
        lambda > 0 of the objective.
    grad_tol : float, default 0
        Certified bound on the solver's final gradient norm (adds ``2 grad_tol / lambda``).

    Returns
    -------
    float
        ``2L/(n lambda) + 2 grad_tol/lambda``.

    Notes
    -----
    Neighbouring relation: **replace-one**. ``||W^T x - W'^T x||_2 <= ||W - W'||_F ||x||_2``
    (Cauchy-Schwarz) with ``||x|| <= 1`` and the minimiser sensitivity of
    :func:`~privml.linear._sensitivity.erm_sensitivity` (CMS11 Cor. 8;
    vdMH20 Lemma 1, Thm 5 Eq. 42-44). The bound is for the exact
    minimiser; the ``grad_tol`` term covers the solver's residual.

    Examples
    --------
    >>> logit_sensitivity(1.0, 1000, 0.01)
    0.2
    """
    # One query of norm <= 1 cannot move the logits more than the weights move.
    return erm_sensitivity(lipschitz, n, l2, grad_tol=grad_tol)


def _rms_noise_multiplier(noise: PredictionNoise, n_outputs: int) -> float:
    """Root-mean-square noise per logit, in units of the sensitivity.

    The ``m`` of the ``l2="auto"`` rule (:func:`~privml.linear._sensitivity.auto_l2`
    with ``tau`` = :data:`AUTO_LOGIT_NOISE`): the lambda at which each logit gets
    noise of rms ``tau``. Larger lambda shrinks the noise but also the logits.
    A function of (k, epsilon, delta, B) only, all public.
    """
    if noise.distribution == "gaussian":
        return noise.noise_multiplier
    # L2-Laplace with scale b = Delta / eps_q in dimension p: rms_noise_multiplier's formula.
    return rms_noise_multiplier(1.0 / noise.noise_multiplier, 0.0, n_outputs)


class PredictionSensitivity(BudgetedPredictor):
    """Private prediction by noisy logits of a non-private linear model, for a budget of queries.

    Parameters
    ----------
    epsilon : float
        Total privacy parameter over all ``budget`` answers, > 0.
    delta : float, default 0
        0: L2-Laplace noise, epsilon-DP by basic composition. In (0, 1):
        Gaussian noise, calibrated by ``accountant``.
    budget : int
        B, the number of answers (rows) ever released; answer B + 1 is refused.
    l2 : "auto" or float, default "auto"
        lambda of the non-private model; ``"auto"`` applies
        :func:`~privml.linear._sensitivity.auto_l2` at the per-logit noise
        (:data:`AUTO_LOGIT_NOISE`).
    loss : {"logistic", "huber", "multinomial"}, default "logistic"
        As :class:`~privml.linear.NonPrivateClassifier` (more than two
        classes always use the multinomial logistic loss, ``L = sqrt(2)``).
    huber_width : float, default 0.5
        ``h`` of the Huber hinge loss.
    classes : sequence, optional
        The **public** class set; inferred from ``y`` with a
        :class:`~privml.exceptions.PrivacyLeakWarning` if omitted.
    accountant : {"auto", "basic", "advanced", "gdp"}, default "auto"
        Composition used to calibrate the Gaussian noise
        (:func:`~privml.prediction.calibrate_prediction_noise`);
        ``"auto"`` takes the smallest noise. Only ``"basic"`` with delta = 0.
    ledger : BudgetLedger, optional
        Where answers are counted; its budget must equal ``budget``. Default:
        a fresh :class:`~privml.ledger.MemoryLedger` at fit time, which is
        forgotten with the process. Pass a persistent ledger when the model
        is served across restarts.
    random_state : None, int or numpy Generator, optional
        Source of the noise; None draws OS entropy (use it in deployment).
        A generator is created once at fit, so repeated queries get fresh noise.
    tol, max_iter :
        Solver settings of the non-private fit; the sensitivity includes
        ``2 tol / lambda`` for the distance to the exact minimiser.

    Attributes
    ----------
    classes_, n_features_in_ :
        As for scikit-learn classifiers.
    weights_ : ndarray
        The **non-private** weights, (d,) or (d, k). Never release them.
    ledger_ : BudgetLedger
        The count of released answers.
    noise_ : PredictionNoise
        The per-query calibration.
    privacy_ : PrivacyGuarantee
        (epsilon, delta) over all ``budget`` answers, replace-one, with the accounting's name.
    fit_info_ : dict
        ``n_train``, ``l2``, ``l2_rule``, ``lipschitz``, ``sensitivity``,
        ``noise`` (distribution), ``accountant``, ``noise_multiplier``,
        ``noise_scale`` (sigma, or the L2-Laplace scale b), ``noise_scales``
        (every applicable accounting's scale, for comparison), ``budget``.
    nonprivate_diagnostics_ : dict
        The non-private solve's ``grad_norm`` and ``iterations`` (in memory
        only, never saved: :mod:`privml.release`).

    Notes
    -----
    Neighbouring relation: **replace-one**. Sensitivity of one answer:
    ``Delta = 2L/(n lambda) + 2 tol/lambda`` in L2 norm on the logits
    (:func:`logit_sensitivity`; vdMH20 Thm 5, Lemma 1; CMS11 Cor. 8), for
    rows and queries projected onto the unit ball. Theorems: vdMH20 Thm 5
    (L2-Laplace, basic composition), Thm 6 (Gaussian, basic or advanced
    composition), and exact Gaussian-DP composition (Dong, Roth and Su
    2022, Cor. 3.3) for ``"gdp"``. Labels and probabilities are
    post-processing of the noisy logits. Every answer draws fresh noise;
    ``predict``, ``predict_proba`` and ``decision_function`` each charge one
    answer per row *before* computing, so B + 1 rows are never answered.

    Examples
    --------
    >>> from privml.data import load_dataset
    >>> data = load_dataset("breast_cancer", random_state=0)
    >>> model = PredictionSensitivity(epsilon=1.0, delta=1e-5, budget=100, classes=[0, 1], random_state=0)
    >>> model = model.fit(data.X_train, data.y_train)
    >>> model.fit_info_["accountant"], model.remaining()
    ('gdp', 100)
    >>> model.predict(data.X_test[:10]).shape, model.remaining()
    ((10,), 90)
    """

    method = "prediction-sensitivity"
    released_info = frozenset({"n_train", "l2", "l2_rule", "lipschitz", "sensitivity", "noise", "accountant",
                               "budget", "noise_multiplier", "noise_scale", "noise_scales"})

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 0.0,
        budget: int,
        l2: float | Literal["auto"] = "auto",
        loss: str = "logistic",
        huber_width: float = 0.5,
        classes: Any = None,
        accountant: str = "auto",
        ledger: BudgetLedger | None = None,
        random_state: RandomState = None,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
    ) -> None:
        keep_params(self, locals())

    # ------------------------------------------------------------ validation
    def _check_hyperparameters(self) -> PredictionNoise:
        """Validate every setting and calibrate the per-query noise (no data involved)."""
        epsilon, delta, budget = self._check_privacy_settings()
        check_l2_setting(self.l2)
        check_solver_settings(self.tol, self.max_iter)
        return calibrate_prediction_noise(epsilon, delta, budget, self.accountant)

    # ------------------------------------------------------------------- fit
    def fit(self, X: Any, y: Any) -> PredictionSensitivity:
        """Train the non-private model on (X, y) and fix the per-query noise.

        Nothing is released by fitting; all settings are validated first.
        """
        self._check_refit()
        noise = self._check_hyperparameters()
        X, y, classes = self._fit_data(X, y)
        loss = make_loss(classes.size, self.loss, huber_width=self.huber_width)
        n_outputs = 1 if classes.size == 2 else classes.size
        if self.l2 == "auto":
            l2 = auto_l2(X.shape[0], loss.lipschitz, _rms_noise_multiplier(noise, n_outputs), AUTO_LOGIT_NOISE)
        else:
            l2 = check_positive(self.l2, "l2")
        # Under an active privml.budget.BudgetAccountant the guarantee over the whole answer budget is charged now.
        with charged_fit(self, lambda: self._planned_guarantee()):
            model = NonPrivateClassifier(
                l2=l2, loss=self.loss, huber_width=self.huber_width, classes=classes, tol=self.tol,
                max_iter=self.max_iter,
            ).fit(X, y)
            self._set_model(model, noise, l2_rule="auto" if self.l2 == "auto" else "given")
        return self

    @classmethod
    def from_model(
        cls,
        model: NonPrivateClassifier,
        *,
        epsilon: float,
        delta: float = 0.0,
        budget: int,
        accountant: str = "auto",
        ledger: BudgetLedger | None = None,
        random_state: RandomState = None,
    ) -> PredictionSensitivity:
        """Serve an already fitted :class:`~privml.linear.NonPrivateClassifier` privately.

        The sensitivity needs the model's training-set size and lambda, read
        from its ``fit_info_`` (``n_train``, ``l2``) and its ``tol``. The
        model must have been fitted by privml's solver (the bound assumes the
        minimiser of the regularised objective, to within ``tol``).

        Raises
        ------
        TypeError
            if ``model`` is not a NonPrivateClassifier.
        ValueError
            for bad privacy settings, an unfitted model, or a model that does
            not record ``n_train``.
        """
        if not isinstance(model, NonPrivateClassifier):
            raise TypeError(f"model must be a fitted NonPrivateClassifier, got {type(model).__name__}")
        check_fitted(model, "weights_")
        info = model.fit_info_
        if "n_train" not in info:
            raise ValueError(
                "the model does not record its training-set size n_train (written by an older privml?): "
                "the prediction sensitivity 2L/(n lambda) cannot be computed; refit it"
            )
        out = cls(
            epsilon=epsilon,
            delta=delta,
            budget=budget,
            l2=float(info["l2"]),
            loss=model.loss,
            huber_width=model.huber_width,
            classes=tuple(c.item() if hasattr(c, "item") else c for c in model.classes_),
            accountant=accountant,
            ledger=ledger,
            random_state=random_state,
            tol=model.tol,
            max_iter=model.max_iter,
        )
        out._set_model(model, out._check_hyperparameters(), l2_rule=str(info.get("l2_rule", "given")))
        return out

    def _set_model(self, model: NonPrivateClassifier, noise: PredictionNoise, *, l2_rule: str) -> None:
        """Fix the fitted state from a non-private model and the per-query calibration."""
        self.classes_ = np.asarray(model.classes_)
        self.n_features_in_ = int(model.n_features_in_)
        self.weights_ = np.asarray(model.weights_, dtype=np.float64)
        n, l2 = check_count(model.fit_info_["n_train"], "n_train"), check_positive(model.fit_info_["l2"], "l2")
        tol, _ = check_solver_settings(model.tol, model.max_iter)
        lipschitz = make_loss(self.classes_.size, model.loss, huber_width=model.huber_width).lipschitz
        sensitivity = logit_sensitivity(lipschitz, n, l2, grad_tol=tol)
        self.noise_ = noise
        self.fit_info_: dict[str, Any] = {
            "n_train": n,
            "l2": l2,
            "l2_rule": l2_rule,
            "lipschitz": lipschitz,
            "sensitivity": sensitivity,
            "noise": noise.distribution,
            "accountant": noise.accountant,
            "budget": noise.budget,
            "noise_multiplier": noise.noise_multiplier,
            "noise_scale": noise.noise_multiplier * sensitivity,
            "noise_scales": {name: m * sensitivity for name, m in noise.candidates.items()},
        }
        self.nonprivate_diagnostics_ = dict(getattr(model, "nonprivate_diagnostics_", {}))
        self.privacy_ = PrivacyGuarantee(noise.epsilon, noise.delta, Neighbouring.REPLACE_ONE, noise.accountant)
        self._rng = check_random_state(self.random_state)
        self._attach_ledger(self.ledger)

    # --------------------------------------------------------------- answers
    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """Fresh noise for ``shape[0]`` answers of ``shape[1:]`` logits each."""
        # One release per answer: L2-Laplace noise is one vector over an answer's logits.
        return sample_noise(self.noise_.distribution, self.fit_info_["noise_scale"], shape[1:], self._rng,
                            size=shape[0])

    def decision_function(self, X: Any, *, key: str | None = None) -> np.ndarray:
        """Noisy logits, one private answer per row: shape (n,) for two classes, else (n, k).

        Charges ``len(X)`` answers to the ledger first (all or nothing:
        :class:`~privml.exceptions.BudgetExhausted` and nothing computed when
        they do not fit); ``key`` charges an API key's quota too.
        """
        X = self._spend(X, key)
        scores = project_to_unit_ball(X) @ self.weights_
        return scores + self._noise(scores.shape)

    def predict(self, X: Any, *, key: str | None = None) -> np.ndarray:
        """Private labels: the argmax of the noisy logits (one answer per row)."""
        return self.labels_from_logits(self.decision_function(X, key=key))

    def predict_proba(self, X: Any, *, key: str | None = None) -> np.ndarray:
        """Private class probabilities: sigmoid / softmax of the noisy logits (one answer per row).

        Their argmax is the label the same answer's noisy logits give.
        """
        return self.proba_from_logits(self.decision_function(X, key=key))

    def labels_from_logits(self, logits: np.ndarray) -> np.ndarray:
        """Labels from noisy logits returned by :meth:`decision_function` (post-processing, free)."""
        index = (logits > 0).astype(np.int64) if logits.ndim == 1 else np.argmax(logits, axis=1)
        return self.classes_[index]

    @staticmethod
    def proba_from_logits(logits: np.ndarray) -> np.ndarray:
        """Probabilities from noisy logits returned by :meth:`decision_function` (post-processing, free)."""
        if logits.ndim == 1:
            p = expit(logits)
            return np.column_stack([1.0 - p, p])
        return softmax(logits, axis=1)

    # ------------------------------------------------------------ model file
    def _model_arrays(self) -> dict[str, np.ndarray]:
        self._check_fitted()
        return {"weights": self.weights_, "classes": self.classes_}

    def _restore_arrays(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        info = metadata.get("fit_info", {})
        model = NonPrivateClassifier(
            l2=float(info["l2"]), loss=self.loss, huber_width=self.huber_width, tol=self.tol, max_iter=self.max_iter
        )
        model.weights_ = np.asarray(arrays["weights"], dtype=np.float64)
        model.classes_ = np.asarray(arrays["classes"])
        model.n_features_in_ = int(model.weights_.shape[0])
        model.fit_info_ = {k: info[k] for k in ("n_train", "l2") if k in info}
        # The noise is recomputed from the settings, never read from the file.
        self._set_model(model, self._check_hyperparameters(), l2_rule=str(info.get("l2_rule", "given")))
