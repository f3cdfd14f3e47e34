"""The release rule: what privml may write, and the one way to break it on purpose.

Every byte privml writes (model files, CLI output and ``--json``, HTTP
responses, logs, study stores, reports, plots) is one of

- a **public input**: something the user states and the adversary may know
  (epsilon, delta, lambda, the class set, the record count n under the
  method's neighbouring relation, a dataset's published test split);
- a **DP output**: covered by the stated guarantee (noisy weights, noisy
  answers, the index AboveThreshold stops at);
- a function of those alone (post-processing, Dwork & Roth 2014, Prop. 2.1).

Anything else computed from the private records without noise is a
*non-private diagnostic*: a solver's final gradient norm or iteration count,
an exact validation or held-out score, a noise-free objective value, the wall
time of a data-dependent loop. Such values stay in memory under a name that
says so (``nonprivate_diagnostics_`` on estimators, ``nonprivate_value`` in an
Accuracy First trace) and are never saved. They are printed only when the user
opts in (``--show-nonprivate`` on the CLI), and opting in warns with
:class:`~privml.exceptions.PrivacyLeakWarning` through :func:`reveal_nonprivate`.

Why it matters: a deterministic solver's exact final gradient norm is a
fingerprint of the training set. An adversary who knows every record but one
re-runs the solver on both candidate datasets and names the true one with
certainty, whatever epsilon the weights were noised for.

Seeds are the other half: a seed stored next to a noisy release lets anyone
replay the noise and subtract it. Model files therefore never hold a seed
(:data:`SEED_PARAMETERS` are written as ``null``), and a loaded model draws
fresh OS entropy unless the caller passes a seed explicitly.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from privml.exceptions import PrivacyLeakWarning, PrivmlError

__all__ = [
    "NONPRIVATE_ATTRIBUTE",
    "SEED_PARAMETERS",
    "UndeclaredReleaseError",
    "check_released_info",
    "partition_info",
    "reveal_nonprivate",
    "strip_seeds",
]

#: The in-memory attribute that holds an estimator's non-private diagnostics.
NONPRIVATE_ATTRIBUTE = "nonprivate_diagnostics_"

#: Constructor parameters that seed noise; never written to a model file.
SEED_PARAMETERS = frozenset({"random_state", "seed"})


class UndeclaredReleaseError(PrivmlError, ValueError):
    """privml was about to write a field that no method declares public or DP.

    This is a bug in privml (or in a subclass), not in the user's input: a new
    diagnostic must be either declared public with a reason, or kept in
    ``nonprivate_diagnostics_``.
    """


def partition_info(info: Mapping[str, Any], public: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a fit's ``info`` into (releasable, non-private) by an allow-list.

    ``public`` names the keys that are public inputs, DP outputs or functions
    of those. Everything else (including any key added later and not
    declared) is non-private: the allow-list makes forgetting safe.
    """
    allowed = frozenset(public)
    released = {k: v for k, v in info.items() if k in allowed}
    held = {k: v for k, v in info.items() if k not in allowed}
    return released, held


def check_released_info(owner: str, info: Mapping[str, Any], public: Iterable[str]) -> None:
    """Refuse to write ``info`` if it holds a key outside the allow-list ``public``."""
    extra = sorted(set(info) - frozenset(public))
    if extra:
        raise UndeclaredReleaseError(
            f"{owner} would write {', '.join(extra)}, which it does not declare public or DP "
            "(non-private diagnostics are never saved)"
        )


def strip_seeds(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every seed parameter set to None (a stored seed lets the noise be replayed)."""
    return {k: (None if k in SEED_PARAMETERS else v) for k, v in params.items()}


def reveal_nonprivate(values: Mapping[str, Any], *, what: str, stacklevel: int = 2) -> dict[str, Any]:
    """Return ``values`` for display after warning that they are not private.

    The one sanctioned way to print non-private diagnostics; call it only when
    the user asked for them (e.g. ``--show-nonprivate``).
    """
    if values:
        warnings.warn(
            f"showing {what}: {', '.join(sorted(values))} are computed from the private data without noise and are "
            "NOT covered by the privacy guarantee; do not publish them",
            PrivacyLeakWarning,
            stacklevel=stacklevel + 1,
        )
    return dict(values)
