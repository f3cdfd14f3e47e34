"""Private prediction: answer up to B queries about a model trained without privacy.

Instead of training privately, keep an ordinary model secret and randomise
each answer (van der Maaten and Hannun 2020, "vdMH20", Sec. 3.2). The
guarantee covers the whole budget of B answers (rows), is stated under
**replace-one** neighbours, and is enforced: every answer is charged to a
:class:`~privml.ledger.BudgetLedger` *before* it is computed, and answer B + 1
raises :class:`~privml.exceptions.BudgetExhausted` with nothing released.

==============================  ======================================  ===================================
estimator                       answer                                  per-query calibration
==============================  ======================================  ===================================
:class:`PredictionSensitivity`  noisy logits of a non-private linear    L2-Laplace (delta = 0) or Gaussian:
                                model (labels, probabilities)           basic / advanced / exact GDP
:class:`SubsampleAndAggregate`  a label drawn prop. to                  beta = eps_q / 2; eps_q by basic /
                                exp(beta votes) of m teachers           advanced composition or zCDP
==============================  ======================================  ===================================

:func:`calibrate_prediction_noise` and :func:`calibrate_vote_epsilon` hold the
per-query math as pure functions of (epsilon, delta, B); :func:`load_predictor`
turns a model file into a query-answering object.
"""

from privml.prediction._aggregate import SubsampleAndAggregate
from privml.prediction._calibration import (
    PredictionNoise,
    VoteCalibration,
    calibrate_prediction_noise,
    calibrate_vote_epsilon,
    gaussian_noise_multipliers,
    vote_epsilons,
)
from privml.prediction._loading import load_predictor
from privml.prediction._sensitivity import PredictionSensitivity, logit_sensitivity

__all__ = [
    "PredictionNoise",
    "PredictionSensitivity",
    "SubsampleAndAggregate",
    "VoteCalibration",
    "calibrate_prediction_noise",
    "calibrate_vote_epsilon",
    "gaussian_noise_multipliers",
    "load_predictor",
    "logit_sensitivity",
    "vote_epsilons",
]
