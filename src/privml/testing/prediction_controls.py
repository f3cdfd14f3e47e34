"""NEGATIVE CONTROLS OF PRIVATE PREDICTION: DELIBERATELY BROKEN PREDICTORS. NEVER SERVE THEM.

The black-box audit of the prediction service
(:func:`privml.audit.audit_prediction_service`) measures
the epsilon of one answer from answers alone; it has power only if it
catches a planted bug. Two are planted here, one per private-prediction
method:

- :class:`HalfSensitivityPredictionSensitivity`: noise on the logits
  calibrated to ``L / (n lambda)`` (the add/remove bound of the minimiser)
  instead of the replace-one ``2 L / (n lambda)``; every answer is really
  ``2 epsilon_q``-DP.
- :class:`~privml.testing.negative_controls.UnhalvedSubsampleAggregate`
  (reused, not copied): the vote sampled with ``exp(epsilon_q votes)``
  instead of ``exp(epsilon_q votes / 2)``; really ``2 epsilon_q`` per answer.

:data:`PREDICTION_CONTROLS` names each with the correct method it breaks.
Both keep the *claimed* guarantee in ``privacy_`` on purpose: that false
claim is what the audit tests. Their model files name the correct method,
so :func:`privml.prediction.load_predictor` would read them back as the
correct class: the audit reopens a file with the class it was written by.
"""

from __future__ import annotations

from dataclasses import dataclass

from privml.linear._base import make_loss
from privml.linear._nonprivate import NonPrivateClassifier
from privml.prediction._base import BudgetedPredictor
from privml.prediction._calibration import PredictionNoise
from privml.prediction._sensitivity import PredictionSensitivity
from privml.testing.negative_controls import UnhalvedSubsampleAggregate
from privml.testing.planted import PlantedBug, by_name

__all__ = ["PREDICTION_CONTROLS", "HalfSensitivityPredictionSensitivity", "PredictionControl"]


class HalfSensitivityPredictionSensitivity(PredictionSensitivity):
    """BROKEN (negative control): prediction sensitivity with noise for half the logit sensitivity.

    The weights of the regularised minimiser move by at most ``L / (n lambda)``
    when a record is added or removed, but by ``2 L / (n lambda)`` when one is
    replaced (CMS11 Cor. 8; vdMH20 Lemma 1), and the guarantee is stated under
    replace-one. Calibrating the noise to the first bound leaves every answer
    ``2 epsilon_q``-DP while ``privacy_`` claims ``epsilon_q``. Never serve it.
    """

    BROKEN = True

    def _set_model(self, model: NonPrivateClassifier, noise: PredictionNoise, *, l2_rule: str) -> None:
        super()._set_model(model, noise, l2_rule=l2_rule)
        lipschitz = make_loss(self.classes_.size, model.loss, huber_width=model.huber_width).lipschitz
        n, l2 = self.fit_info_["n_train"], self.fit_info_["l2"]
        # THE BUG: the add/remove bound L / (n lambda) under replace-one neighbours.
        sensitivity = lipschitz / (n * l2)
        self.fit_info_.update(
            sensitivity=sensitivity,
            noise_scale=noise.noise_multiplier * sensitivity,
            noise_scales={name: m * sensitivity for name, m in noise.candidates.items()},
        )


@dataclass(frozen=True)
class PredictionControl(PlantedBug):
    """A planted bug of a private predictor.

    Attributes
    ----------
    method : str
        The correct method it breaks (``prediction-sensitivity`` or ``subsample-aggregate``).
    broken : type
        The broken class (constructed with the correct class's settings).
    """

    method: str
    broken: type[BudgetedPredictor]


#: Every planted bug of private prediction, by name.
PREDICTION_CONTROLS: dict[str, PredictionControl] = by_name(
    (
        PredictionControl(
            "half-sensitivity-prediction",
            "noise on the logits for L/(n lambda), the add/remove bound, under replace-one (half of 2L/(n lambda))",
            "prediction-sensitivity",
            HalfSensitivityPredictionSensitivity,
        ),
        PredictionControl(
            "unhalved-vote",
            "subsample-and-aggregate samples prop. to exp(eps_q votes): the exponential mechanism's 2 dropped",
            "subsample-aggregate",
            UnhalvedSubsampleAggregate,
        ),
    )
)
