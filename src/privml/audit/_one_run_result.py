"""What every one-run audit of a training run reports, linear or torch.

:class:`OneRunFitResult` holds the bound, the sizes and the times of the one
fit, and lays out the JSON row; :class:`~privml.audit._one_run_linear.LinearOneRunResult`
and :class:`~privml.audit._one_run_torch.TorchOneRunResult` add what their kind
of run knows (the method, or the engine's steps and noise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privml.audit._one_run import OneRunAudit

__all__ = ["OneRunFitResult"]


@dataclass(frozen=True, eq=False)
class OneRunFitResult:
    """A one-run audit of one fit.

    ``audit`` holds the bound and the claim; ``n_real`` and ``n_train`` count the real records and all the
    fit was planned for; ``scores`` and ``included`` are each canary's score and coin: the audit's own
    secret (this result is a test, not a release), left out of :meth:`to_dict`.
    """

    audit: OneRunAudit
    n_real: int
    n_train: int
    seconds_fit: float
    seconds_total: float
    scores: np.ndarray = field(repr=False)
    included: np.ndarray = field(repr=False)

    def audited(self) -> dict[str, Any]:
        """JSON-ready facts of what was audited (first in :meth:`to_dict`, after the bound)."""
        return {}

    def run_facts(self) -> dict[str, Any]:
        """JSON-ready public facts of the run (in :meth:`to_dict`, after the sizes)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the per-canary scores and coins are left out)."""
        return {
            **self.audit.to_dict(),
            **self.audited(),
            "n_real": self.n_real,
            "n_train": self.n_train,
            **self.run_facts(),
            "seconds_fit": self.seconds_fit,
            "seconds": self.seconds_total,
            "training_runs": 1,
        }
