"""The paper's claims, tested on this study's results (never hard-coded).

Each check reads the curves of one or more sweeps and returns a
:class:`Finding`: the claim, whether the results support it (``holds``,
``refuted`` or ``untested`` when the sweep or the methods it needs did not
run), and the numbers behind the verdict. The report prints each finding
beside the figure it comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from privml.study.aggregate import Curve, StudyResults

#: Accuracy differences below this (absolute) are treated as ties.
TIE = 0.005


@dataclass(frozen=True)
class Finding:
    """One claim and its verdict on these results."""

    claim: str
    source: str
    status: str
    evidence: str
    sweeps: tuple[str, ...]


def _private(curves: list[Curve]) -> list[Curve]:
    return [c for c in curves if c.kind != "baseline"]


def _mean(curve: Curve, value: object) -> float:
    """Mean accuracy of ``curve`` at ``value``, which the caller has checked it has."""
    cell = curve.at(value)
    if cell is None:
        raise ValueError(f"{curve.method} has no result at {value!r}")
    return cell.mean


def _best(curves: list[Curve], value: object) -> tuple[Curve, float] | None:
    scored = [(c, _mean(c, value)) for c in curves if c.at(value) is not None]
    return max(scored, key=lambda t: t[1]) if scored else None


def _fmt(x: float) -> str:
    return f"{100 * x:.1f}%"


def training_beats_prediction_at_large_budget(results: StudyResults) -> list[Finding]:
    claim = "Private training beats private prediction for large inference budgets B."
    out = []
    for sweep in results.sweeps_of("budget"):
        curves = _private(results.curves.get(sweep.name, []))
        big = max(sweep.values)
        training = _best([c for c in curves if c.kind == "training"], big)
        prediction = _best([c for c in curves if c.kind == "prediction"], big)
        if training is None or prediction is None:
            missing = "private prediction" if prediction is None else "private training"
            out.append(Finding(claim, "paper Section 4.2, Figure 2", "untested",
                               f"no {missing} method ran in sweep {sweep.name!r}", (sweep.name,)))
            continue
        holds = training[1] >= prediction[1] - TIE
        out.append(Finding(claim, "paper Section 4.2, Figure 2", "holds" if holds else "refuted",
                           f"at B = {big:g}: best private training {training[0].label} {_fmt(training[1])} vs best "
                           f"private prediction {prediction[0].label} {_fmt(prediction[1])}", (sweep.name,)))
    return out


def aggregate_best_at_small_budget_pure(results: StudyResults) -> list[Finding]:
    claim = "Subsample-and-aggregate is the best method at small B when delta = 0."
    out = []
    for sweep in results.sweeps_of("budget"):
        if {**results.spec.defaults, **sweep.fixed}.get("delta") != 0:
            continue
        curves = _private(results.curves.get(sweep.name, []))
        small = min(sweep.values)
        saa = next((c for c in curves if c.method.startswith("subsample-aggregate") and c.at(small)), None)
        best = _best([c for c in curves if c is not saa], small)
        if saa is None or best is None:
            out.append(Finding(claim, "paper Section 4.2, Figure 2a", "untested",
                               f"subsample-and-aggregate did not run in sweep {sweep.name!r}", (sweep.name,)))
            continue
        holds = _mean(saa, small) >= best[1] - TIE
        out.append(Finding(claim, "paper Section 4.2, Figure 2a", "holds" if holds else "refuted",
                           f"at B = {small:g}, delta = 0: subsample-and-aggregate {_fmt(_mean(saa, small))}, best "
                           f"other method {best[0].label} {_fmt(best[1])}", (sweep.name,)))
    return out


def _trend_claim(parameter: str, claim: str, source: str, direction: int) -> Callable[[StudyResults], list[Finding]]:
    """Claim: accuracy moves in ``direction`` (+1 up, -1 down) from the first to the last value, for every method."""

    def check(results: StudyResults) -> list[Finding]:
        out = []
        for sweep in results.sweeps_of(parameter):
            curves = results.curves.get(sweep.name, [])
            if parameter == "epsilon":
                curves = _private(curves)  # the non-private baseline does not depend on epsilon
            first, last = sweep.values[0], sweep.values[-1]
            moves = [(c, _mean(c, last) - _mean(c, first)) for c in curves if c.at(first) and c.at(last)]
            if not moves:
                out.append(Finding(claim, source, "untested", f"sweep {sweep.name!r} has no complete curve",
                                   (sweep.name,)))
                continue
            agree = [c for c, change in moves if direction * change > -TIE]
            detail = ", ".join(f"{c.label} {'+' if ch >= 0 else ''}{100 * ch:.1f} pts" for c, ch in moves)
            out.append(Finding(claim, source, "holds" if len(agree) == len(moves) else "refuted",
                               f"{len(agree)}/{len(moves)} methods from {parameter} = {first:g} to {last:g}: {detail}",
                               (sweep.name,)))
        return out

    return check


def delta_helps_perturbation(results: StudyResults) -> list[Finding]:
    claim = "Model and loss perturbation benefit greatly from delta > 0 (Gaussian instead of Laplace noise)."
    out = []
    for sweep in results.sweeps_of("delta"):
        if 0.0 not in sweep.values or not any(v > 0 for v in sweep.values):
            continue
        positive = max(v for v in sweep.values if v > 0)
        curves = [c for c in results.curves.get(sweep.name, []) if c.method in ("output", "objective")]
        gains = [(c, _mean(c, positive) - _mean(c, 0.0)) for c in curves if c.at(0.0) and c.at(positive)]
        if not gains:
            out.append(Finding(claim, "paper Section 4.2, Figures 2-3", "untested",
                               "output or objective perturbation did not run at delta = 0 and delta > 0",
                               (sweep.name,)))
            continue
        holds = all(g > TIE for _, g in gains)
        detail = ", ".join(f"{c.label} {100 * g:+.1f} pts" for c, g in gains)
        out.append(Finding(claim, "paper Section 4.2, Figures 2-3", "holds" if holds else "refuted",
                           f"from delta = 0 to {positive:g}: {detail}", (sweep.name,)))
    return out


def perturbation_competitive_at_small_d(results: StudyResults) -> list[Finding]:
    claim = "Loss and model perturbation are more competitive when d is small."
    out = []
    for sweep in results.sweeps_of("d"):
        curves = _private(results.curves.get(sweep.name, []))
        lo, hi = sweep.values[0], sweep.values[-1]

        def gap(value: object, curves: list = curves) -> float | None:
            ours = _best([c for c in curves if c.method in ("output", "objective")], value)
            others = _best([c for c in curves if c.method not in ("output", "objective")], value)
            return None if ours is None or others is None else ours[1] - others[1]

        g_lo, g_hi = gap(lo), gap(hi)
        if g_lo is None or g_hi is None:
            out.append(Finding(claim, "paper Section 4.2, Figure 5a", "untested",
                               "needs output or objective perturbation and another private method", (sweep.name,)))
            continue
        holds = g_lo > g_hi - TIE
        out.append(Finding(claim, "paper Section 4.2, Figure 5a", "holds" if holds else "refuted",
                           f"best perturbation minus best other private method: {100 * g_lo:+.1f} pts at d = {lo:g}, "
                           f"{100 * g_hi:+.1f} pts at d = {hi:g}", (sweep.name,)))
    return out


def _interior_optimum(parameter: str, claim: str, source: str) -> Callable[[StudyResults], list[Finding]]:
    def check(results: StudyResults) -> list[Finding]:
        out = []
        for sweep in results.sweeps_of(parameter):
            for curve in results.curves.get(sweep.name, []):
                if len(curve.cells) < 3:
                    out.append(Finding(claim, source, "untested", f"{curve.label}: fewer than 3 values",
                                       (sweep.name,)))
                    continue
                means = [c.mean for c in curve.cells]
                peak = max(range(len(means)), key=means.__getitem__)
                inside = 0 < peak < len(means) - 1
                out.append(Finding(claim, source, "holds" if inside else "refuted",
                                   f"{curve.label}: best {parameter} = {curve.cells[peak].value:g} "
                                   f"({_fmt(means[peak])}) of {', '.join(f'{c.value:g}' for c in curve.cells)}",
                                   (sweep.name,)))
        return out

    return check


CHECKS: tuple[Callable[[StudyResults], list[Finding]], ...] = (
    _trend_claim("epsilon", "Every method gets more accurate as epsilon grows (less privacy).",
                 "paper Section 4.2, Figure 1", +1),
    training_beats_prediction_at_large_budget,
    aggregate_best_at_small_budget_pure,
    delta_helps_perturbation,
    _trend_claim("n", "Every method gets more accurate with more training records.",
                 "paper Section 4.2, Figure 4", +1),
    perturbation_competitive_at_small_d,
    _trend_claim("k", "Every method gets less accurate as the number of classes grows.",
                 "paper Section 4.2, Figure 5b", -1),
    _interior_optimum("l2", "Accuracy rises then falls with lambda: too little overfits the noise, too much underfits.",
                      "paper Section 4.2, Figure 6a"),
    _interior_optimum("m", "Accuracy rises then falls with the number of models m.", "paper Section 4.2, Figure 6b"),
)


def findings(results: StudyResults) -> list[Finding]:
    """Every check's findings on ``results``."""
    return [f for check in CHECKS for f in check(results)]
