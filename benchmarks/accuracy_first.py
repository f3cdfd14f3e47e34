"""Accuracy First on Adult: the ex-post epsilon of noise reduction against the doubling
baseline and against the a-priori epsilon of the worst-case utility bound.

Logistic regression by output perturbation (``lambda`` from the library's public
``l2="auto"`` rule), Adult's training set split once by a public permutation into
80% training / 20% validation records, 20 trials per accuracy target and search
(only the noise differs between trials, so the exact minimiser is computed once
and shared). Two kinds of target:

* validation **error** (the check has sensitivity 1/n_val; eps_AT = 0.1, the
  library's default), Gaussian releases at delta = 1e-6 and pure-DP releases, with
  the threshold as is (margin 0) and made stricter by one query-noise scale
  ``4 / (n_val eps_AT)`` (margin, about 0.006), which makes a passing model more
  likely to truly meet the target. Doubling is measured with the chain's own
  mechanism (the paper's like-for-like baseline: the searches differ only in how
  the levels' noises are coupled) and, for pure DP where the two differ, also with
  the best single-release mechanism (L2-Laplace, ``doubling_noise="best"``);
* **excess empirical risk** ``J(w) - min J`` on the training records (Ligett et al.'s
  target; the check's sensitivity is 4LR/n, so eps_AT = 0.5), Gaussian releases, with the
  a-priori epsilon of output perturbation's worst-case bound at beta = 0.1
  (:func:`privml.selection.apriori_epsilon_excess_risk`).

Reported per target: the median (and quartiles) of the ex-post epsilon, its ratio
noise reduction / doubling, and the fraction of trials whose published model truly
meets the target (non-private evaluation, for the benchmark only). Run::

    nice -n 10 .venv/bin/python benchmarks/accuracy_first.py --out benchmarks/results/accuracy_first.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from _common import machine, timed, write_json

from privml.data import load_dataset
from privml.linear._base import make_loss
from privml.linear._output_perturbation import AUTO_SCORE_NOISE
from privml.linear._sensitivity import auto_l2, erm_sensitivity, rms_noise_multiplier
from privml.linear._solvers import minimise_objective
from privml.losses import RegularisedObjective
from privml.selection import apriori_epsilon_excess_risk, doubling_grid, epsilon_grid, select_output_perturbation
from privml.selection._accuracy_first import reference_epsilon
from privml.selection._queries import (
    accuracy_query,
    error_rate_sensitivity,
    excess_risk_query,
    excess_risk_sensitivity,
    minimiser_radius,
    project_to_ball,
)

EPSILON_MIN, EPSILON_MAX, N_STEPS = 0.01, 10.0, 40
ERROR_TARGETS = (0.24, 0.22, 0.20, 0.19, 0.18)
EXCESS_TARGETS = (0.2, 0.1, 0.05, 0.03)
AT_EPSILON_ERROR, AT_EPSILON_EXCESS = 0.1, 0.5
DELTA = 1e-6
BETA = 0.1
TRIALS = 20
SEARCHES = ("noise-reduction", "doubling")
#: Benchmark columns: (label, search, doubling_noise). "doubling-best" differs from
#: "doubling" only for pure DP (L2-Laplace instead of the chain's per-coordinate Laplace).
COLUMNS = (("noise-reduction", "noise-reduction", "best"), ("doubling", "doubling", "chain"),
           ("doubling-best", "doubling", "best"))


def columns_for(delta: float) -> tuple[tuple[str, str, str], ...]:
    return COLUMNS if delta == 0 else COLUMNS[:2]


def prepare(seed: int = 0) -> dict:
    """Adult, the public split, lambda, and the shared exact minimiser."""
    data = load_dataset("adult", bias=True)
    X, y = data.X_train, 2 * data.y_train - 1
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = len(y) // 5
    val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
    loss = make_loss(2)
    n_train, dim = train.size, X.shape[1]
    reference = reference_epsilon(EPSILON_MIN, EPSILON_MAX)
    l2 = auto_l2(n_train, loss.lipschitz, rms_noise_multiplier(reference, DELTA, dim), AUTO_SCORE_NOISE)
    objective = RegularisedObjective(loss, X[train], y[train], l2)
    start = time.perf_counter()
    solution = minimise_objective(objective)
    return {
        "data": data,
        "X_val": X[val],
        "y_val": y[val],
        "objective": objective,
        "solution": solution,
        "solve_seconds": time.perf_counter() - start,
        "loss": loss,
        "l2": l2,
        "n_train": n_train,
        "n_val": n_val,
        "dim": dim,
        "sensitivity": erm_sensitivity(loss.lipschitz, n_train, l2, grad_tol=1e-10),
    }


def grid_for(search: str) -> tuple[float, ...]:
    return epsilon_grid(EPSILON_MIN, EPSILON_MAX, N_STEPS) if search == "noise-reduction" else doubling_grid(
        EPSILON_MIN, EPSILON_MAX
    )


def summarise(values: list[float]) -> dict:
    q = np.quantile(values, [0.25, 0.5, 0.75])
    return {"median": float(q[1]), "q25": float(q[0]), "q75": float(q[2]), "mean": statistics.fmean(values)}


def _ratio(row: dict, key: str, baseline: str = "doubling") -> float:
    """Median over trials of noise reduction's cost, divided by the baseline's."""
    return row["noise-reduction"][key]["median"] / row[baseline][key]["median"]


def run_error(ctx: dict, delta: float, margin: float) -> list[dict]:
    query = accuracy_query(ctx["X_val"], ctx["y_val"])
    test_query = accuracy_query(ctx["data"].X_test, 2 * ctx["data"].y_test - 1)
    rows = []
    for target in ERROR_TARGETS:
        row: dict = {"target": target, "delta": delta, "margin": margin}
        for label, search, doubling_noise in columns_for(delta):
            eps, met_val, met_test, stopped, failures, seconds = [], [], [], [], 0, []
            for trial in range(TRIALS):
                start = time.perf_counter()
                result = select_output_perturbation(
                    ctx["solution"].weights,
                    sensitivity=ctx["sensitivity"],
                    query=query,
                    query_sensitivity=error_rate_sensitivity(ctx["n_val"]),
                    threshold=1.0 - target + margin,
                    epsilons=grid_for(search),
                    at_epsilon=AT_EPSILON_ERROR,
                    delta=delta,
                    search=search,
                    doubling_noise=doubling_noise,
                    metric="error",
                    target=target,
                    random_state=np.random.SeedSequence([trial, int(target * 1e4), len(search), int(delta > 0)]),
                )
                seconds.append(time.perf_counter() - start)
                eps.append(result.guarantee.epsilon)
                met_val.append(1.0 - query(result.weights) <= target)
                met_test.append(1.0 - test_query(result.weights) <= target)
                stopped.append(result.steps[-1].epsilon)
                failures += not result.met_target
            row[label] = {
                "ex_post_epsilon": summarise(eps),
                "release_epsilon": summarise([e - AT_EPSILON_ERROR for e in eps]),
                "level_reached": summarise(stopped),
                "met_target_validation": float(np.mean(met_val)),
                "met_target_test": float(np.mean(met_test)),
                "no_model_passed": failures,
                "median_seconds": statistics.median(seconds),
            }
        row["ratio"] = _ratio(row, "ex_post_epsilon")
        row["ratio_releases"] = _ratio(row, "release_epsilon")
        if "doubling-best" in row:
            row["ratio_best"] = _ratio(row, "ex_post_epsilon", "doubling-best")
        rows.append(row)
        print(f"error {target} delta {delta} margin {margin:.4f}: ratio {row['ratio']:.3f}", file=sys.stderr)
    return rows


def run_excess(ctx: dict) -> list[dict]:
    objective, solution, loss = ctx["objective"], ctx["solution"], ctx["loss"]
    radius = minimiser_radius(loss, ctx["l2"])
    query = excess_risk_query(objective, solution.value, radius)
    rows = []
    for target in EXCESS_TARGETS:
        row: dict = {
            "target": target,
            "delta": DELTA,
            "apriori_epsilon": apriori_epsilon_excess_risk(
                target, dim=ctx["dim"], sensitivity=ctx["sensitivity"], smoothness=objective.smoothness,
                delta=DELTA, beta=BETA,
            ),
        }
        for search in SEARCHES:
            eps, met, stopped, failures = [], [], [], 0
            for trial in range(TRIALS):
                result = select_output_perturbation(
                    solution.weights,
                    sensitivity=ctx["sensitivity"],
                    query=query,
                    query_sensitivity=excess_risk_sensitivity(loss.lipschitz, ctx["n_train"], radius),
                    threshold=-target,
                    epsilons=grid_for(search),
                    at_epsilon=AT_EPSILON_EXCESS,
                    delta=DELTA,
                    search=search,
                    post_process=lambda w: project_to_ball(w, radius),
                    metric="excess_risk",
                    target=target,
                    random_state=np.random.SeedSequence([trial, int(target * 1e4), len(search), 7]),
                )
                eps.append(result.guarantee.epsilon)
                met.append(-query(result.weights) <= target)
                stopped.append(result.steps[-1].epsilon)
                failures += not result.met_target
            row[search] = {
                "ex_post_epsilon": summarise(eps),
                "release_epsilon": summarise([e - AT_EPSILON_EXCESS for e in eps]),
                "level_reached": summarise(stopped),
                "met_target": float(np.mean(met)),
                "no_model_passed": failures,
            }
        row["ratio"] = _ratio(row, "ex_post_epsilon")
        row["ratio_releases"] = _ratio(row, "release_epsilon")
        rows.append(row)
        print(f"excess {target}: ratio {row['ratio']:.3f}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/accuracy_first.json")
    args = parser.parse_args(argv)
    ctx = prepare()
    # One standard unit of the check's per-query noise, Lap(4 Delta / eps_AT) with Delta = 1/n_val.
    noise_scale = 4.0 / (ctx["n_val"] * AT_EPSILON_ERROR)
    nonprivate = accuracy_query(ctx["data"].X_test, 2 * ctx["data"].y_test - 1)(ctx["solution"].weights)
    _, search_seconds = timed(
        lambda: select_output_perturbation(
            ctx["solution"].weights, sensitivity=ctx["sensitivity"], query=accuracy_query(ctx["X_val"], ctx["y_val"]),
            query_sensitivity=1.0 / ctx["n_val"], threshold=0.8, epsilons=grid_for("noise-reduction"),
            at_epsilon=AT_EPSILON_ERROR, delta=DELTA, random_state=0,
        ),
        repeats=5,
    )
    payload = {
        "machine": machine(),
        "setup": {
            "dataset": "adult",
            "n_train": ctx["n_train"],
            "n_validation": ctx["n_val"],
            "n_parameters": ctx["dim"],
            "l2": ctx["l2"],
            "sensitivity": ctx["sensitivity"],
            "nonprivate_test_accuracy": nonprivate,
            "minimiser_seconds": ctx["solve_seconds"],
            "search_seconds": search_seconds,
            "epsilon_min": EPSILON_MIN,
            "epsilon_max": EPSILON_MAX,
            "noise_reduction_steps": N_STEPS,
            "doubling_grid": list(doubling_grid(EPSILON_MIN, EPSILON_MAX)),
            "at_epsilon_error": AT_EPSILON_ERROR,
            "margin_error": noise_scale,
            "at_epsilon_excess": AT_EPSILON_EXCESS,
            "excess_check_noise_scale": 4.0 * excess_risk_sensitivity(
                ctx["loss"].lipschitz, ctx["n_train"], minimiser_radius(ctx["loss"], ctx["l2"])) / AT_EPSILON_EXCESS,
            "trials": TRIALS,
            "beta": BETA,
        },
        "error": [row for delta in (DELTA, 0.0) for margin in (0.0, noise_scale) for row in run_error(ctx, delta, margin)],
        "excess_risk": run_excess(ctx),
    }
    write_json(args.out, payload)
    return 0


def _fmt(summary: dict) -> str:
    return f"{summary['median']:.3g} [{summary['q25']:.3g}, {summary['q75']:.3g}]"


def render(data: dict) -> str:
    """Markdown section for BENCHMARKS.md."""
    s = data["setup"]
    m = data["machine"]
    lines = [
        "## Accuracy First: ex-post privacy of a target-driven search (Adult)",
        "",
        f"Output-perturbation logistic regression on Adult ({s['n_train']} training / {s['n_validation']} "
        f"validation records, {s['n_parameters']} parameters, lambda = {s['l2']:.3g} from the public auto rule; "
        f"non-private test accuracy {100 * s['nonprivate_test_accuracy']:.2f}%). Search range "
        f"[{s['epsilon_min']}, {s['epsilon_max']}]: noise reduction on {s['noise_reduction_steps']} geometric "
        f"levels, doubling on {', '.join(f'{e:g}' for e in s['doubling_grid'])}. {s['trials']} trials per cell; "
        "the exact minimiser is computed once "
        f"({s['minimiser_seconds']:.2f} s) and each search takes {1000 * s['search_seconds']:.1f} ms. "
        "Ex-post epsilon: median [quartiles], including the check's eps_AT. "
        "\"Met\": fraction of trials whose published model truly meets the target (evaluated non-privately).",
        "",
        f"### Validation-error targets (eps_AT = {s['at_epsilon_error']}; margin: threshold made stricter by one "
        f"query-noise scale, {s['margin_error']:.2g})",
        "",
        "Doubling uses the chain's own mechanism (the paper's like-for-like baseline); for delta = 0 the "
        "`best-mechanism doubling` columns use the L2-Laplace instead, a stronger baseline privml adds.",
        "",
        "| target error | delta | margin | noise reduction | doubling | NR / doubling (releases only) "
        "| best-mechanism doubling | NR / best-mechanism doubling "
        "| met (NR, val / test) | met (doubling, val / test) | no model passed (NR / dbl) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["error"]:
        nr, db = r["noise-reduction"], r["doubling"]
        best = r.get("doubling-best")
        lines.append(
            f"| {r['target']:g} | {r['delta']:g} | {r['margin']:.2g} | {_fmt(nr['ex_post_epsilon'])} "
            f"| {_fmt(db['ex_post_epsilon'])} "
            f"| {r['ratio']:.2f} ({r['ratio_releases']:.2f}) "
            f"| {_fmt(best['ex_post_epsilon']) if best else 'same as doubling'} "
            f"| {format(r['ratio_best'], '.2f') if best else '-'} "
            f"| {nr['met_target_validation']:.2f} / {nr['met_target_test']:.2f} "
            f"| {db['met_target_validation']:.2f} / {db['met_target_test']:.2f} "
            f"| {nr['no_model_passed']} / {db['no_model_passed']} |"
        )
    lines += [
        "",
        f"### Excess-empirical-risk targets (eps_AT = {s['at_epsilon_excess']}, delta = 1e-6)",
        "",
        f"A-priori: the epsilon at which output perturbation's worst-case bound "
        f"J(w* + b) - J(w*) <= (c + lambda)/2 ||b||^2 meets the target with probability {1 - s['beta']:.2g} "
        "(one release, no search, no check).",
        "",
        "| target excess risk | a-priori epsilon | noise reduction | doubling | NR / doubling (releases only) "
        "| met (NR / dbl) "
        "| no model passed (NR / dbl) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data["excess_risk"]:
        nr, db = r["noise-reduction"], r["doubling"]
        lines.append(
            f"| {r['target']:g} | {r['apriori_epsilon']:.3g} | {_fmt(nr['ex_post_epsilon'])} "
            f"| {_fmt(db['ex_post_epsilon'])} | {r['ratio']:.2f} ({r['ratio_releases']:.2f}) | {nr['met_target']:.2f} / {db['met_target']:.2f} "
            f"| {nr['no_model_passed']} / {db['no_model_passed']} |"
        )
    ratios = [r["ratio"] for r in data["error"] + data["excess_risk"]]
    error_ratios = [r["ratio"] for r in data["error"]]
    excess_ratios = [r["ratio"] for r in data["excess_risk"]]
    best = [r["ratio_best"] for r in data["error"] if "ratio_best" in r]
    above = ", ".join(f"{r:.2f}" for r in ratios if r > 0.6) or "none"
    lines += [
        "",
        f"Noise reduction / doubling, median ex-post epsilon, over all {len(ratios)} rows: median "
        f"{statistics.median(ratios):.2f}, range {min(ratios):.2f} to {max(ratios):.2f}, at most 0.6 in "
        f"{sum(r <= 0.6 for r in ratios)} of them (above: {above}). Validation-error grid: median "
        f"{statistics.median(error_ratios):.2f}, at most 0.6 in {sum(r <= 0.6 for r in error_ratios)} of "
        f"{len(error_ratios)}; excess risk: median {statistics.median(excess_ratios):.2f}, at most 0.6 in "
        f"{sum(r <= 0.6 for r in excess_ratios)} of {len(excess_ratios)}. Against the stronger best-mechanism "
        f"doubling (pure DP only): median {statistics.median(best):.2f}, range {min(best):.2f} to "
        f"{max(best):.2f} (at most 0.6 in {sum(r <= 0.6 for r in best)} of {len(best)}). "
        "Doubling's levels are powers of two, so a row's ratio depends on where the needed epsilon falls "
        "between two of them; rows just above 0.6 are those where it falls just below a doubling level. "
        f"In the excess-risk rows the check's noise scale 4 Delta / eps_AT ({s['excess_check_noise_scale']:.2g} "
        "here) is comparable to the "
        "tightest targets, so fewer searches publish a model that truly meets them: raise eps_AT or "
        "use a margin for such targets. "
        "The check's eps_AT is paid by both searches; without it (releases only, in brackets) the gap is wider. "
        "The pure-DP chain exists only for per-coordinate Laplace, calibrated to the L1 sensitivity "
        "sqrt(d) Delta_2: about sqrt(2) times the noise norm of the L2-Laplace, which is why the best-mechanism "
        "doubling narrows the gap there. With Gaussian releases doubling also pays t delta against the "
        "chain's single delta.",
        "",
        f"Measured on {m['cpu']} ({m['cores']} cores), Python {m['python']}, commit {m['commit']}, {m['date']}. "
        "Reproduce: `nice -n 10 .venv/bin/python benchmarks/accuracy_first.py`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
