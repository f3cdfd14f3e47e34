"""Audit trials: run a mechanism many times with and without the canary, and white-box test statistics.

:func:`run_trials` runs one trial per seed in each world (D without, D' with
the canary), in parallel, from seeds derived once (:func:`trial_seeds`), so
results do not depend on the number of workers. :func:`white_box_statistic`
turns released parameter vectors into a likelihood-ratio test statistic, as
Nasr et al. 2021 ("Adversary instantiation: lower bounds for differentially
private machine learning") audit white-box parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from privml._progress import progress_bar
from privml._random import RandomState
from privml._validation import check_count

#: A trial: (canary inserted?, generator) -> a test statistic (higher: "canary in") or a vector.
Trial = Callable[[bool, np.random.Generator], Any]


# ----------------------------------------------------------------- trials
def trial_seeds(random_state: RandomState, trials: int) -> list[np.random.SeedSequence]:
    """``2 trials`` independent seeds, in the order [out_0, in_0, out_1, in_1, ...].

    Derived with :meth:`numpy.random.SeedSequence.spawn` from one root, so
    trial i gets the same randomness whatever the number of workers or the
    order they finish in.
    """
    return _root_seed(random_state).spawn(2 * trials)


def _root_seed(random_state: RandomState) -> np.random.SeedSequence:
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(int(random_state.integers(2**63)))
    return np.random.SeedSequence(random_state)


def _run(trial: Trial, inserted: bool, seed: np.random.SeedSequence) -> np.ndarray:
    return np.asarray(trial(inserted, np.random.default_rng(seed)), dtype=np.float64)


def run_trials(
    trial: Trial,
    *,
    trials: int,
    random_state: RandomState = None,
    n_jobs: int = 1,
    progress: bool = False,
    desc: str = "audit",
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``trial`` ``trials`` times in each world; return (outputs_out, outputs_in) in trial order.

    A trial returns a number (a test statistic) or a vector (e.g. released
    weights, for :func:`white_box_statistic`); the outputs have shape
    ``(trials,)`` or ``(trials, p)``.

    Parallel with joblib (``n_jobs``; -1 for every core); each run draws from
    its own seed (:func:`trial_seeds`), so results do not depend on
    ``n_jobs``.
    """
    trials = check_count(trials, "trials", minimum=2)
    seeds = trial_seeds(random_state, trials)
    worlds = [(i % 2 == 1, seeds[i]) for i in range(2 * trials)]
    results: list[np.ndarray] = []
    with progress_bar(2 * trials, desc=desc, unit="model", enabled=progress) as bar:
        runner = Parallel(n_jobs=n_jobs, return_as="generator")
        for value in runner(delayed(_run)(trial, inserted, seed) for inserted, seed in worlds):
            results.append(value)
            bar.update(1)
    values = np.asarray(results, dtype=np.float64)
    return values[0::2], values[1::2]


#: White-box statistics of released parameter vectors (see :func:`white_box_statistic`).
STATISTICS: tuple[str, ...] = ("projection", "distance")


def white_box_statistic(
    kind: str, outputs_out: np.ndarray, outputs_in: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """A likelihood-ratio statistic for released vectors, fitted on selection trials only.

    With ``m_out`` and ``m_in`` the coordinate-wise medians of the outputs
    on D and D' (the centres of symmetric noise), the log-likelihood ratio of
    ``w`` is, up to a positive factor,

    * ``"projection"``: ``w . (m_in - m_out)``, for isotropic Gaussian noise;
    * ``"distance"``: ``||w - m_out|| - ||w - m_in||``, for L2-Laplace noise
      (density proportional to ``exp(-||z|| / b)``; CMS11).

    By Neyman-Pearson these are the most powerful tests when the noise is of
    that kind and the centres are right (Nasr et al. 2021 audit white-box
    parameters the same way). Pass only the selection half: fitting on the
    bounding trials would void the bound.
    """
    if kind not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {kind!r}")
    m_out = np.median(np.asarray(outputs_out, dtype=np.float64), axis=0)
    m_in = np.median(np.asarray(outputs_in, dtype=np.float64), axis=0)
    if kind == "projection":
        direction = m_in - m_out
        return lambda w: np.asarray(w, dtype=np.float64) @ direction
    return lambda w: np.linalg.norm(np.asarray(w) - m_out, axis=-1) - np.linalg.norm(np.asarray(w) - m_in, axis=-1)
