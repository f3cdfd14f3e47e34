"""Private prediction on MNIST: prediction sensitivity and subsample-and-aggregate
for a budget of B answers, every applicable accounting, at epsilon = 1.

For delta in {0, 1e-5} and B in {1, 10, 100, 1000, 10000}: test accuracy of one
private answer per test image, and the ratio of the paper's Gaussian noise
(the better of basic and advanced composition, vdMH20 Thm 6) to the exact
Gaussian-DP noise. The regularisation lambda of prediction sensitivity and the
number of teachers m of subsample-and-aggregate are chosen per (delta, B,
accounting) on a validation split carved from MNIST's training set
(50,000 / 10,000), never on the test set; as in vdMH20, the privacy cost of
that tuning is not accounted for.

Every answer goes through the library: prediction sensitivity answers through
``PredictionSensitivity.predict`` in chunks of B rows, each chunk a fresh
deployment with its own ledger of B answers. Subsample-and-aggregate computes
the teachers' votes once per m (they do not depend on epsilon or B) and draws
each answer from the estimator's own per-query mechanism. Fits are cached
across B and accountings (only the noise changes), and on disk across runs.
Run (slow: ~30 min on 2 busy cores, minutes once the fits are cached)::

    nice -n 10 .venv/bin/python benchmarks/prediction.py --out benchmarks/results/prediction.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import machine, machine_line, write_json

from privml.data import load_dataset
from privml.io import load_model, save_model
from privml.linear import NonPrivateClassifier
from privml.prediction import PredictionSensitivity, SubsampleAndAggregate, calibrate_vote_epsilon
from privml.prediction._calibration import (
    SENSITIVITY_ACCOUNTANTS,
    VOTE_ACCOUNTANTS,
    gaussian_noise_multiplier_advanced,
    gaussian_noise_multiplier_basic,
    gaussian_noise_multiplier_gdp,
)

EPSILON = 1.0
DELTAS = (0.0, 1e-5)
BUDGETS = (1, 10, 100, 1000, 10000)
L2_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0, 3.0)
M_GRID = (25, 100, 250, 500, 1000)
N_VALIDATION = 10_000
#: Teachers' solver tolerance. Subsample-and-aggregate's guarantee treats the
#: teachers as black boxes (it needs no exact minimiser), so they are solved
#: to 1e-6 to save time; prediction sensitivity keeps the default 1e-10.
TEACHER_TOL = 1e-6


def accountings(method: str, delta: float) -> tuple[str, ...]:
    if delta == 0:
        return ("basic",)
    return SENSITIVITY_ACCOUNTANTS if method == "prediction-sensitivity" else VOTE_ACCOUNTANTS


def ps_accuracy(model: NonPrivateClassifier, X, y, *, delta: float, budget: int, accounting: str, seed: int) -> float:
    """Accuracy of one private answer per row, B rows per fresh deployment."""
    ps = PredictionSensitivity.from_model(
        model, epsilon=EPSILON, delta=delta, budget=budget, accountant=accounting, random_state=seed
    )
    correct = 0
    for start in range(0, X.shape[0], budget):
        ps._attach_ledger(None)  # a new deployment: a fresh ledger of B answers
        correct += int(np.sum(ps.predict(X[start:start + budget]) == y[start:start + budget]))
    return correct / X.shape[0]


def sa_accuracy(model: SubsampleAndAggregate, votes: np.ndarray, y, *, delta: float, budget: int,
                accounting: str, seed: int) -> float:
    """Accuracy of one private answer per row from precomputed votes, with the estimator's own mechanism."""
    calibration = calibrate_vote_epsilon(EPSILON, delta, budget, accounting)
    mechanism = model._mechanism(calibration.epsilon_query, np.random.default_rng(seed))
    labels = np.array([mechanism.select(v) for v in votes])
    return float(np.mean(model.classes_[labels] == y))


def sigma_ratios(delta: float) -> list[dict]:
    """Per-query Gaussian noise multipliers and the paper's (best of basic, advanced) over GDP."""
    rows = []
    for budget in BUDGETS:
        basic = gaussian_noise_multiplier_basic(EPSILON, delta, budget)
        advanced = gaussian_noise_multiplier_advanced(EPSILON, delta, budget).noise_multiplier
        gdp = gaussian_noise_multiplier_gdp(EPSILON, delta, budget)
        rows.append({"budget": budget, "basic": basic, "advanced": advanced, "gdp": gdp,
                     "paper_over_gdp": min(basic, advanced) / gdp})
    return rows


def cached_fit(path: Path, fit) -> tuple[object, float]:
    """The fitted model stored at ``path``, fitting (and storing) it first if absent; with the fit time."""
    if path.exists():
        model = load_model(path)
        return model, float(model.model_metadata_["extra"]["fit_seconds"])
    start = time.perf_counter()
    model = fit()
    seconds = time.perf_counter() - start
    save_model(model, path, extra={"fit_seconds": seconds})
    return model, seconds


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/prediction.json")
    parser.add_argument("--seeds", type=int, default=3, help="noise seeds per test configuration")
    parser.add_argument("--max-train", type=int, help="subsample the training set (smoke runs)")
    parser.add_argument("--l2-grid", nargs="+", type=float, default=list(L2_GRID))
    parser.add_argument("--m-grid", nargs="+", type=int, default=list(M_GRID))
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--cache", default="~/.cache/privml/benchmark-prediction",
                        help="where fitted models are kept between runs")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    data = load_dataset("mnist", bias=0.5)
    classes = tuple(range(len(data.info.classes)))
    split = np.random.default_rng(12345).permutation(data.X_train.shape[0])
    val, train = split[:N_VALIDATION], split[N_VALIDATION:]
    if args.max_train:
        train = train[: args.max_train]
    X_tr, y_tr = data.X_train[train], data.y_train[train]
    X_val, y_val = data.X_train[val], data.y_train[val]
    X_te, y_te = data.X_test, data.y_test
    log(f"MNIST: {X_tr.shape[0]} train, {X_val.shape[0]} validation, {X_te.shape[0]} test, d={X_tr.shape[1]}")

    # ---- fits, cached across B and accountings (and on disk across runs: only the noise changes)
    cache = Path(args.cache).expanduser() / f"n{X_tr.shape[0]}"
    cache.mkdir(parents=True, exist_ok=True)
    ps_models, fit_seconds = {}, {}
    for l2 in args.l2_grid:
        ps_models[l2], fit_seconds[f"nonprivate l2={l2:g}"] = cached_fit(
            cache / f"nonprivate-l2={l2:g}.npz",
            lambda l2=l2: NonPrivateClassifier(l2=l2, classes=classes).fit(X_tr, y_tr),
        )
        log(f"nonprivate l2={l2:g}: {fit_seconds[f'nonprivate l2={l2:g}']:.0f}s, "
            f"test accuracy {ps_models[l2].score(X_te, y_te):.4f}")
    sa_models, sa_votes = {}, {}
    for m in args.m_grid:
        teacher = NonPrivateClassifier(classes=classes, tol=TEACHER_TOL)
        sa_models[m], fit_seconds[f"subsample-aggregate m={m}"] = cached_fit(
            cache / f"subsample-aggregate-m={m}.npz",
            lambda m=m, teacher=teacher: SubsampleAndAggregate(
                estimator=teacher, n_models=m, epsilon=EPSILON, budget=1, classes=classes, n_jobs=args.n_jobs,
                random_state=0).fit(X_tr, y_tr),
        )
        sa_votes[m] = {"val": sa_models[m]._votes(X_val), "test": sa_models[m]._votes(X_te)}
        plurality = float(np.mean(np.argmax(sa_votes[m]["test"], axis=1) == y_te))
        log(f"subsample-aggregate m={m}: {fit_seconds[f'subsample-aggregate m={m}']:.0f}s, "
            f"non-private plurality test accuracy {plurality:.4f}")

    # ---- choose lambda / m on validation, then measure on test
    runs = []
    for delta in DELTAS:
        for budget in BUDGETS:
            for method in ("prediction-sensitivity", "subsample-aggregate"):
                for accounting in accountings(method, delta):
                    kw = {"delta": delta, "budget": budget, "accounting": accounting}
                    if method == "prediction-sensitivity":
                        val_acc = {l2: ps_accuracy(ps_models[l2], X_val, y_val, seed=999, **kw) for l2 in ps_models}
                        chosen = max(val_acc, key=val_acc.get)
                        test = [ps_accuracy(ps_models[chosen], X_te, y_te, seed=s, **kw) for s in range(args.seeds)]
                        setting = {"l2": chosen}
                    else:
                        val_acc = {m: sa_accuracy(sa_models[m], sa_votes[m]["val"], y_val, seed=999, **kw)
                                   for m in sa_models}
                        chosen = max(val_acc, key=val_acc.get)
                        test = [sa_accuracy(sa_models[chosen], sa_votes[chosen]["test"], y_te, seed=s, **kw)
                                for s in range(args.seeds)]
                        setting = {"n_models": chosen}
                    row = {"method": method, "delta": delta, "budget": budget, "accounting": accounting, **setting,
                           "validation_accuracy": {str(k): v for k, v in val_acc.items()},
                           "accuracy_mean": statistics.mean(test),
                           "accuracy_std": statistics.stdev(test) if len(test) > 1 else 0.0,
                           "accuracies": test}
                    runs.append(row)
                    log(f"delta={delta:g} B={budget:<6d} {method:23s} {accounting:9s} {setting} "
                        f"acc={row['accuracy_mean']:.4f} +- {row['accuracy_std']:.4f}")

    payload = {
        "machine": machine(),
        "dataset": data.info.to_dict(),
        "n_train": int(X_tr.shape[0]),
        "n_validation": int(X_val.shape[0]),
        "epsilon": EPSILON,
        "seeds": args.seeds,
        "l2_grid": list(args.l2_grid),
        "m_grid": list(args.m_grid),
        "teacher_tol": TEACHER_TOL,
        "nonprivate_test_accuracy": {str(l2): float(m.score(X_te, y_te)) for l2, m in ps_models.items()},
        "fit_seconds": fit_seconds,
        "sigma_ratios": sigma_ratios(1e-5),
        "runs": runs,
    }
    write_json(args.out, payload)
    return 0


def render(data: dict) -> str:
    """The BENCHMARKS.md section for ``benchmarks/results/prediction.json``."""
    out = [
        f"## Private prediction on MNIST (epsilon = {data['epsilon']:g})",
        "",
        "Command: `nice -n 10 .venv/bin/python benchmarks/prediction.py`.  ",
        f"Machine: {machine_line(data['machine'])}.",
        "",
        f"Test accuracy of one private answer per test image (mean +- std over {data['seeds']} noise seeds), "
        f"for a budget of B answers at epsilon = {data['epsilon']:g}. Trained on {data['n_train']} images; lambda "
        f"(prediction sensitivity, grid {', '.join(f'{x:g}' for x in data['l2_grid'])}) and the number of "
        f"teachers m (subsample-and-aggregate, grid {', '.join(str(x) for x in data['m_grid'])}) chosen on "
        f"{data['n_validation']} validation images carved from the training set (the tuning's own privacy cost "
        "is not accounted, as in vdMH20). Teachers: non-private multinomial logistic regression with lambda = "
        f"1/(part size), solved to a gradient norm of {data.get('teacher_tol', 1e-6):g}. Non-private test accuracy: "
        + ", ".join(f"{acc:.4f} (lambda {l2})" for l2, acc in data["nonprivate_test_accuracy"].items())
        + ".",
        "",
        "| delta | B | method | accounting | chosen | accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        chosen = f"lambda = {r['l2']:g}" if "l2" in r else f"m = {r['n_models']}"
        out.append(f"| {r['delta']:g} | {r['budget']} | {r['method']} | {r['accounting']} | {chosen} "
                   f"| {r['accuracy_mean']:.4f} +- {r['accuracy_std']:.4f} |")
    best: dict[tuple[float, int], dict] = {}
    for r in data["runs"]:
        key = (r["delta"], r["budget"])
        if key not in best or r["accuracy_mean"] > best[key]["accuracy_mean"]:
            best[key] = r
    out += ["", "Best configuration per (delta, B):", "", "| delta | B | best | accuracy |", "|---|---|---|---|"]
    for (delta, budget), r in sorted(best.items()):
        out.append(f"| {delta:g} | {budget} | {r['method']} ({r['accounting']}) | {r['accuracy_mean']:.4f} |")
    out += [
        "",
        "Gaussian noise per answer in units of the logit sensitivity (delta = 1e-5): basic and advanced "
        "composition (the paper takes the better of the two) against exact Gaussian-DP composition.",
        "",
        "| B | basic | advanced | GDP | paper / GDP |",
        "|---|---|---|---|---|",
    ]
    for r in data["sigma_ratios"]:
        out.append(f"| {r['budget']} | {r['basic']:.2f} | {r['advanced']:.2f} | {r['gdp']:.2f} "
                   f"| {r['paper_over_gdp']:.2f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
