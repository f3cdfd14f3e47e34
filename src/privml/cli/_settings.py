"""The estimator's own check of the settings the CLI gives it, run before any data is read (issue 33, Build 6).

Each value is validated at one layer: ``privml train`` and ``privml audit``
build the estimator from their options first (a constructor only stores
them) and run its data-free check, the one its ``fit`` runs first, so that a
bad ``--epsilon``, ``--delta``, ``--l2``, ``--clip-norm``, ``--learning-rate``,
``--epochs``, ``--batch-size`` or ``--threads`` is refused in the estimator's
words (one line, naming the parameter), before any data is read, fetched or
any privacy spent. What needs the data (a batch larger than n, the steps
epochs / q) is checked at fit, before any noise is drawn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["checked"]


def checked(model: Any) -> Any:
    """``model`` once its data-free check passed: the torch classifiers' ``_check_fit_settings`` (theirs and
    DP-SGD's settings), the other estimators' ``_check_hyperparameters``; a ValueError or TypeError otherwise."""
    check = getattr(model, "_check_fit_settings", None) or model._check_hyperparameters
    check()
    return model
