"""The options of ``privml predict`` and ``privml serve`` that set a served model's guarantee and ledger.

They are what :meth:`privml.serve.ModelSpec.from_args` reads, with ``--model``, ``--seed`` and
``--device``, which each command adds with its own help.
"""

from __future__ import annotations

from typing import Any

from privml.cli._common import add_accountant_option, finite_float, integer
from privml.prediction._calibration import PREDICTION_ACCOUNTANTS
from privml.prediction._loading import PREDICTION_METHODS

__all__ = ["add_privacy_options"]


def add_privacy_options(group: Any, *, ledger_help: str) -> None:
    """``--method``, ``--epsilon``, ``--delta``, ``--budget``, ``--accountant``, ``--ledger`` and ``--ledger-name``."""
    group.add_argument("--method", choices=PREDICTION_METHODS,
                       help="private-prediction method (default: the file's; a non-private file needs "
                            "prediction-sensitivity)")
    group.add_argument("--epsilon", type=finite_float, help="total epsilon over the budget of answers")
    group.add_argument("--delta", type=finite_float,
                       help="total delta in [0, 1); 0 asks for pure DP (default: the file's, 0 for a non-private "
                            "file)")
    group.add_argument("--budget", type=integer, help="number of answers (rows) the guarantee covers")
    add_accountant_option(group, PREDICTION_ACCOUNTANTS,
                          "composition used to calibrate each answer (default: the file's, or the tightest; "
                          "zcdp: subsample-aggregate only)")
    group.add_argument("--ledger", help=ledger_help)
    group.add_argument("--ledger-name", help="budget name inside --ledger, which it needs (default: default)")
