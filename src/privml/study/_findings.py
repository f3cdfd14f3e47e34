"""The paper's claims, tested on this study's results (never hard-coded).

Each check reads the curves of one or more sweeps and returns a
:class:`Finding`: the claim, whether the results support it, and the
numbers behind the verdict. A verdict is ``holds`` or ``refuted`` only when
the study's repeats support it: every comparison is a paired 95%
confidence interval across repeats (:mod:`privml.study._evidence`), and a
claim whose intervals straddle zero is ``inconclusive``; ``untested`` when
the sweep or the methods it needs did not run. The report prints each
finding beside the figure it comes from, with its intervals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from privml.study._aggregate import StudyResults
from privml.study._cells import Cell, Curve
from privml.study._evidence import combine, contrast, difference


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


def _cell(curve: Curve, value: object) -> Cell:
    cell = curve.at(value)
    assert cell is not None  # the caller picked the curve for having it
    return cell


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
        gap = difference(_cell(training[0], big), _cell(prediction[0], big))
        out.append(Finding(claim, "paper Section 4.2, Figure 2", gap.verdict,
                           f"at B = {big:g}: best private training {training[0].label} {_fmt(training[1])} vs best "
                           f"private prediction {prediction[0].label} {_fmt(prediction[1])}: {gap.describe()}",
                           (sweep.name,)))
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
        gap = difference(_cell(saa, small), _cell(best[0], small))
        out.append(Finding(claim, "paper Section 4.2, Figure 2a", gap.verdict,
                           f"at B = {small:g}, delta = 0: subsample-and-aggregate {_fmt(_mean(saa, small))}, best "
                           f"other method {best[0].label} {_fmt(best[1])}: {gap.describe()}", (sweep.name,)))
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
            # The change in the claimed direction, per method: it must be above zero, with confidence.
            moves = [(c, contrast([(direction, _cell(c, last)), (-direction, _cell(c, first))]))
                     for c in curves if c.at(first) and c.at(last)]
            if not moves:
                out.append(Finding(claim, source, "untested", f"sweep {sweep.name!r} has no complete curve",
                                   (sweep.name,)))
                continue
            agree = [c for c, change in moves if change.verdict == "holds"]
            detail = ", ".join(f"{c.label} {change.describe()}" for c, change in moves)
            way = "gain" if direction > 0 else "loss"
            out.append(Finding(claim, source, combine([change.verdict for _, change in moves]),
                               f"{len(agree)}/{len(moves)} methods with a confident {way} from {parameter} = "
                               f"{first:g} to {last:g}: {detail}", (sweep.name,)))
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
        gains = [(c, difference(_cell(c, positive), _cell(c, 0.0))) for c in curves if c.at(0.0) and c.at(positive)]
        if not gains:
            out.append(Finding(claim, "paper Section 4.2, Figures 2-3", "untested",
                               "output or objective perturbation did not run at delta = 0 and delta > 0",
                               (sweep.name,)))
            continue
        detail = ", ".join(f"{c.label} {g.describe()}" for c, g in gains)
        out.append(Finding(claim, "paper Section 4.2, Figures 2-3", combine([g.verdict for _, g in gains]),
                           f"from delta = 0 to {positive:g}: {detail}", (sweep.name,)))
    return out


def perturbation_competitive_at_small_d(results: StudyResults) -> list[Finding]:
    claim = "Loss and model perturbation are more competitive when d is small."
    out = []
    for sweep in results.sweeps_of("d"):
        curves = _private(results.curves.get(sweep.name, []))
        lo, hi = sweep.values[0], sweep.values[-1]

        def gap(value: object, curves: list = curves) -> tuple[Cell, Cell] | None:
            ours = _best([c for c in curves if c.method in ("output", "objective")], value)
            others = _best([c for c in curves if c.method not in ("output", "objective")], value)
            return None if ours is None or others is None else (_cell(ours[0], value), _cell(others[0], value))

        g_lo, g_hi = gap(lo), gap(hi)
        if g_lo is None or g_hi is None:
            out.append(Finding(claim, "paper Section 4.2, Figure 5a", "untested",
                               "needs output or objective perturbation and another private method", (sweep.name,)))
            continue
        # (ours - others) at small d minus the same at large d: positive when perturbation is more competitive.
        shift = contrast([(1.0, g_lo[0]), (1.0, g_hi[1]), (-1.0, g_lo[1]), (-1.0, g_hi[0])])
        out.append(Finding(claim, "paper Section 4.2, Figure 5a", shift.verdict,
                           f"best perturbation minus best other private method: "
                           f"{100 * (g_lo[0].mean - g_lo[1].mean):+.1f} pts at d = {lo:g}, "
                           f"{100 * (g_hi[0].mean - g_hi[1].mean):+.1f} pts at d = {hi:g}; the change "
                           f"{shift.describe()}", (sweep.name,)))
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
                cells = curve.cells
                if 0 < peak < len(means) - 1:  # rises to the peak and falls after it, each with confidence
                    rise, fall = difference(cells[peak], cells[0]), difference(cells[peak], cells[-1])
                    status = combine([rise.verdict, fall.verdict])
                    how = f"rise {rise.describe()}, fall {fall.describe()}"
                else:  # the best value is at an end: refuted if it beats every inner value with confidence
                    inner = max(range(1, len(means) - 1), key=means.__getitem__)
                    over = difference(cells[peak], cells[inner])
                    status = "refuted" if over.verdict == "holds" else "inconclusive"
                    how = f"the end over the best inner value {over.describe()}"
                out.append(Finding(claim, source, status,
                                   f"{curve.label}: best {parameter} = {cells[peak].value:g} "
                                   f"({_fmt(means[peak])}) of {', '.join(f'{c.value:g}' for c in cells)}; {how}",
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
