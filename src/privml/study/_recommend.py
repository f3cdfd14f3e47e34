"""Which private method to use: the best measured method per setting, and a nearest-setting look-up.

A setting is a full assignment of (epsilon, delta, budget, n, d, k). The
recommendation for a setting is the private method with the highest mean
test accuracy there (the non-private baseline is shown for reference, never
recommended). :func:`recommend` answers a question about *your* setting with
the nearest measured one (distance on log scales), and says how far it is.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from privml.study._aggregate import StudyResults
from privml.study._cells import Cell

#: The settings a recommendation is indexed by.
KEYS = ("epsilon", "delta", "budget", "n", "d", "k")


@dataclass(frozen=True)
class Recommendation:
    """The best private method at one measured setting.

    Attributes
    ----------
    setting : dict
        epsilon, delta, budget, n, d, k (None: the dataset's own n, d or k).
    method, label : str
        The best private method.
    accuracy, std : float
        Its mean test accuracy and standard deviation over repeats.
    runner_up : tuple or None
        (label, mean accuracy) of the second best.
    nonprivate : float or None
        Non-private accuracy at the same data setting.
    leaky : bool
        Whether its hyper-parameters were chosen without charging privacy.
    chosen : dict
        The hyper-parameters most of its repeats chose (the first such in
        repeat order on a tie); empty when nothing was tuned.
    """

    setting: dict[str, Any]
    method: str
    label: str
    accuracy: float
    std: float
    runner_up: tuple[str, float] | None
    nonprivate: float | None
    leaky: bool
    chosen: dict[str, Any] = field(default_factory=dict)


def not_like_for_like(neighbouring: str) -> str:
    """Why a study under the paper's ``mixed`` protocol recommends no method."""
    return (f"the study's guarantees are not like for like (neighbouring = {neighbouring!r}: DP-SGD under "
            "add/remove-one, the other methods under replace-one), so its methods are not ranked at one epsilon; "
            "rerun it with --neighbouring replace-one (or add/remove-one) to compare equal promises")


def recommendations(results: StudyResults) -> list[Recommendation]:
    """The best private method at every distinct measured setting, in sweep order."""
    table: dict[tuple[Any, ...], dict[str, tuple[str, str, Cell]]] = {}
    baseline: dict[tuple[Any, ...], float] = {}
    order: list[tuple[Any, ...]] = []
    for sweep in results.spec.sweeps:
        if sweep.parameter in ("l2", "m"):
            continue  # method-specific knobs, not a user's setting
        for curve in results.curves.get(sweep.name, []):
            for cell in curve.cells:
                key = tuple(cell.setting.get(k) for k in KEYS)
                if curve.kind == "baseline":
                    baseline[key[3:]] = cell.mean
                    continue
                if key not in table:
                    table[key] = {}
                    order.append(key)
                table[key][curve.method] = (curve.method, curve.label, cell)
    out = []
    for key in order:
        ranked = sorted(table[key].values(), key=lambda t: -t[2].mean)
        method, label, cell = ranked[0]
        out.append(Recommendation(
            setting=dict(zip(KEYS, key)), method=method, label=label, accuracy=cell.mean, std=cell.std,
            runner_up=(ranked[1][1], ranked[1][2].mean) if len(ranked) > 1 else None,
            nonprivate=baseline.get(key[3:]), leaky="validation" in cell.selection_modes,
            chosen=most_common_choice(cell.chosen),
        ))
    return out


def most_common_choice(chosen: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The hyper-parameters most repeats chose (``Counter`` keeps first-seen order on ties: the earliest repeat's)."""
    if not chosen:
        return {}
    counts = Counter(json.dumps(c, sort_keys=True) for c in chosen)
    return dict(json.loads(counts.most_common(1)[0][0]))


def recommend(results: StudyResults, **setting: float | int | None) -> tuple[Recommendation, float]:
    """The recommendation at the measured setting nearest to ``setting``.

    Parameters
    ----------
    results : StudyResults
    **setting
        Any of epsilon, delta, budget, n, d, k; omitted ones match anything.

    Returns
    -------
    (Recommendation, distance)
        Distance: sum over the given keys of ``|log10(asked) - log10(measured)|``
        (delta compared as ``log10(delta + 1e-12)``); 0 means an exact match.

    Raises
    ------
    ValueError
        For an unknown key, when the study measured no setting, or when its
        guarantees are not like for like (``neighbouring = "mixed"``).
    """
    unknown = sorted(set(setting) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r}; settings are {', '.join(KEYS)}")
    if not results.spec.like_for_like:
        # Ranked at one epsilon, DP-SGD's add/remove promise is the weaker (by group privacy only (2 eps, ...) under
        # replace-one): it won on accuracy the others, stated under replace-one, could not buy (a review).
        raise ValueError(not_like_for_like(results.spec.neighbouring))
    recs = recommendations(results)
    if not recs:
        raise ValueError("the study has no private results to recommend from")

    def distance(rec: Recommendation) -> float:
        total = 0.0
        for name, asked in setting.items():
            if asked is None:
                continue
            have = rec.setting.get(name)
            if have is None:
                total += 1.0  # the study's "all records/features/classes": unknown size, penalise mildly
                continue
            shift = 1e-12 if name == "delta" else 0.0
            total += abs(math.log10(asked + shift) - math.log10(have + shift))
        return total

    best = min(recs, key=distance)
    return best, distance(best)
