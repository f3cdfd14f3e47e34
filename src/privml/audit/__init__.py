"""Empirical privacy checks: measure what a mechanism or model leaks.

- :func:`neighbour_distribution_test`: statistical test of (epsilon, delta) on
  one pair of neighbouring inputs of a mechanism.
- :func:`loss_threshold_attack`, :func:`likelihood_ratio_attack`: membership
  inference attacks (loss threshold, shadow-free likelihood ratio), and their
  ROC metrics (:func:`membership_metrics`, :func:`roc_curve`, :func:`roc_auc`).
- :func:`audit_epsilon`, :func:`audit_mechanism`: train with and without a
  canary, lower-bound epsilon with Clopper-Pearson intervals
  (:func:`epsilon_lower_bound`).
- :func:`make_canary`, :func:`clipbkd_canary`, :func:`neighbouring_pair`:
  canary records and neighbouring datasets.
- :func:`one_run_epsilon_lower_bound`, :func:`audit_from_scores`: one-run
  auditing (Steinke, Nasr and Jagielski 2023): m canaries each in with
  probability 1/2, one training run, an epsilon lower bound from the count of
  correct membership guesses. ``privml audit --one-run`` runs it on torch
  DP-SGD (white-box gradient canaries, black-box input canaries), on privml's
  linear methods (black-box) and on linear DP-SGD (white-box), each against
  the claim it reads from the fit.
- :func:`exposure_from_scores`, :func:`label_sequence_exposure`: canary
  exposure (Carlini et al. 2019).
- :func:`audit_prediction_service` (``privml audit --prediction-service``):
  black-box audit of the private prediction service, a lower bound on the
  epsilon of one served answer.
- ``privml.testing.negative_controls``: deliberately broken implementations
  that an audit must catch. Never train with them; they are not exported here.
"""

from privml.audit._canaries import Canary, NeighbouringPair, clipbkd_canary, make_canary, neighbouring_pair
from privml.audit._epsilon_lower_bound import AuditResult, audit_epsilon, audit_mechanism, canary_log_odds
from privml.audit._exposure import (
    ExposureResult,
    LabelCanary,
    exposure_from_scores,
    insert_label_canary,
    label_sequence_exposure,
)
from privml.audit._membership import (
    MembershipResult,
    likelihood_ratio_attack,
    loss_threshold_attack,
    membership_metrics,
    roc_auc,
    roc_curve,
)
from privml.audit._neighbour_test import NeighbourTestResult, neighbour_distribution_test
from privml.audit._one_run import OneRunAudit, audit_from_scores, one_run_epsilon_lower_bound
from privml.audit._prediction_service import audit_prediction_service
from privml.audit._threshold_test import EpsilonLowerBound, epsilon_from_rates, epsilon_lower_bound

__all__ = [
    "AuditResult",
    "Canary",
    "EpsilonLowerBound",
    "ExposureResult",
    "LabelCanary",
    "MembershipResult",
    "NeighbourTestResult",
    "NeighbouringPair",
    "OneRunAudit",
    "audit_epsilon",
    "audit_from_scores",
    "audit_mechanism",
    "audit_prediction_service",
    "canary_log_odds",
    "clipbkd_canary",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "exposure_from_scores",
    "insert_label_canary",
    "label_sequence_exposure",
    "likelihood_ratio_attack",
    "loss_threshold_attack",
    "make_canary",
    "membership_metrics",
    "neighbour_distribution_test",
    "neighbouring_pair",
    "one_run_epsilon_lower_bound",
    "roc_auc",
    "roc_curve",
]
