"""``privml account``: privacy accounting from the command line.

Forms (each takes ``--json``)::

    privml account dpsgd --noise-multiplier S --sample-rate Q --steps T --delta D [--accountant rdp|pld]
    privml account dpsgd --target-epsilon E --sample-rate Q --steps T --delta D [--accountant rdp|pld]
        [--neighbouring add/remove-one|replace-one] [--replace-one-bound tight|group]
        [--sampling poisson|fixed-size --batch-size B --population N]
    privml account gaussian --epsilon E --delta D --sensitivity S
    privml account compose --epsilon E --delta D --count K --delta-slack DS
"""

from __future__ import annotations

import argparse
import time

from privml._validation import check_count
from privml.accounting._analytic_gaussian import analytic_gaussian_sigma, classic_gaussian_sigma
from privml.accounting._composition import advanced_composition, basic_composition, optimal_composition_epsilon
from privml.accounting._dpsgd import DPSGD_ACCOUNTANTS, REPLACE_ONE_BOUNDS, SAMPLINGS, plan_dpsgd
from privml.cli._common import add_command, add_json_flag, emit, finite_float, fmt, integer, table
from privml.neighbouring import Neighbouring

# Public limits: numbers outside them are errors at once, never a computation that runs
# without end or overflows (an epsilon of 1e308, a noise multiplier of 1e-300).
EPSILON_RANGE = (1e-6, 1e4)
NOISE_MULTIPLIER_RANGE = (1e-3, 1e6)
SENSITIVITY_RANGE = (1e-12, 1e12)
MAX_COMPOSE_COUNT = 10**6  # optimal (KOV) composition sums over every count


def _bounded(value: float, flag: str, bounds: tuple[float, float]) -> float:
    low, high = bounds
    if not low <= value <= high:
        raise ValueError(f"{flag} must be between {low:g} and {high:g}, got {value:g}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "account",
        description="Privacy accounting: epsilon of DP-SGD, noise calibration, Gaussian sigma, composition.",
    )
    forms = parser.add_subparsers(dest="form", metavar="FORM", parser_class=type(parser))
    forms.required = True

    dpsgd = add_command(
        forms, "dpsgd", _dpsgd,
        summary="epsilon of DP-SGD, or the noise multiplier for a target epsilon",
        description=(
            "DP-SGD: give --noise-multiplier to get epsilon, or --target-epsilon to get the smallest noise "
            "multiplier that meets it. Poisson sampling under add/remove-one neighbours by default; "
            "--neighbouring replace-one for the same-n, one-record-replaced relation (tight dominating pair, or "
            "--replace-one-bound group: group privacy from add/remove-one), --sampling fixed-size for batches of "
            "exactly --batch-size records drawn without replacement (replace-one, RDP)."
        ),
    )
    noise = dpsgd.add_mutually_exclusive_group(required=True)
    noise.add_argument("--noise-multiplier", type=finite_float, help="noise std / clipping norm")
    noise.add_argument("--target-epsilon", type=finite_float, help="calibrate the noise to this epsilon")
    dpsgd.add_argument("--sample-rate", type=finite_float, help="sampling rate q in (0, 1] (b / n for fixed-size)")
    dpsgd.add_argument("--steps", type=integer, required=True, help="number of noisy steps")
    dpsgd.add_argument("--delta", type=finite_float, required=True, help="target delta in [0, 1)")
    dpsgd.add_argument("--accountant", choices=DPSGD_ACCOUNTANTS, default="pld", help="default: pld (tightest)")
    dpsgd.add_argument(
        "--neighbouring",
        choices=[n.value for n in Neighbouring],
        default=Neighbouring.ADD_REMOVE_ONE.value,
        help="relation of the guarantee (default: add/remove-one)",
    )
    dpsgd.add_argument("--replace-one-bound", choices=REPLACE_ONE_BOUNDS, default="tight",
                       help="how a replace-one guarantee is obtained: tight (default) or group")
    dpsgd.add_argument("--sampling", choices=SAMPLINGS, default="poisson", help="default: poisson")
    dpsgd.add_argument("--batch-size", type=integer, help="fixed-size sampling: records per batch b")
    dpsgd.add_argument("--population", type=integer, help="fixed-size sampling: number of records n")
    add_json_flag(dpsgd)

    gaussian = add_command(
        forms, "gaussian", _gaussian,
        summary="noise std of the Gaussian mechanism for (epsilon, delta)",
        description="Smallest sigma for (epsilon, delta): analytic (Balle & Wang 2018) and classic calibration.",
    )
    gaussian.add_argument("--epsilon", type=finite_float, required=True)
    gaussian.add_argument("--delta", type=finite_float, required=True)
    gaussian.add_argument("--sensitivity", type=finite_float, default=1.0, help="L2 sensitivity (default 1)")
    add_json_flag(gaussian)

    compose = add_command(
        forms, "compose", _compose,
        summary="k-fold composition of an (epsilon, delta) mechanism",
        description="Basic, advanced (Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) composition.",
    )
    compose.add_argument("--epsilon", type=finite_float, required=True, help="per-run epsilon")
    compose.add_argument("--delta", type=finite_float, default=0.0, help="per-run delta (default 0)")
    compose.add_argument("--count", type=integer, required=True, help="number of runs k")
    compose.add_argument("--delta-slack", type=finite_float, required=True, help="extra delta' of advanced composition")
    add_json_flag(compose)


#: What each (relation, sampling, replace-one bound) accounts with, as reported in ``bound``.
_BOUNDS = {
    ("add/remove-one", "poisson", "tight"): "sampled Gaussian (Mironov, Talwar & Zhang 2019)",
    ("replace-one", "poisson", "tight"): (
        "replace-one dominating pair (1-q)N(0,s^2)+qN(1,s^2) vs (1-q)N(0,s^2)+qN(-1,s^2)"
    ),
    ("replace-one", "poisson", "group"): "group privacy from add/remove-one: (2 eps, (1 + e^eps) delta)",
    ("replace-one", "fixed-size", "tight"): "sampling without replacement (Wang, Balle & Kasiviswanathan 2019)",
}


def _sampling(args: argparse.Namespace) -> tuple[float, int | None]:
    """(q, n): the rate, and the population for fixed-size sampling; one-line errors for bad combinations."""
    if args.sampling == "poisson":
        if args.batch_size is not None or args.population is not None:
            if args.sample_rate is not None or args.batch_size is None or args.population is None:
                raise ValueError("give --sample-rate, or --batch-size with --population (q = b / n)")
            return check_count(args.batch_size, "--batch-size") / check_count(args.population, "--population"), None
        if args.sample_rate is None:
            raise ValueError("--sample-rate is required")
        return args.sample_rate, None  # checked by plan_dpsgd
    if args.neighbouring != Neighbouring.REPLACE_ONE.value:
        raise ValueError("--sampling fixed-size is analysed under replace-one only: add --neighbouring replace-one")
    if args.population is None:
        raise ValueError("--sampling fixed-size needs --population (the number of records n)")
    n = check_count(args.population, "--population")
    if args.batch_size is not None:
        if args.sample_rate is not None:
            raise ValueError("give --batch-size or --sample-rate, not both")
        return check_count(args.batch_size, "--batch-size", maximum=n) / n, n
    if args.sample_rate is None:
        raise ValueError("--sampling fixed-size needs --batch-size (or --sample-rate with q n a whole number)")
    return args.sample_rate, n  # checked by plan_dpsgd


def _dpsgd(args: argparse.Namespace) -> None:
    q, population = _sampling(args)
    target = None
    if args.target_epsilon is not None:
        target = _bounded(args.target_epsilon, "--target-epsilon", EPSILON_RANGE)
    else:
        _bounded(args.noise_multiplier, "--noise-multiplier", NOISE_MULTIPLIER_RANGE)
    start = time.perf_counter()
    # DP-SGD's rules and noise, as the trainers plan them (privml.accounting._dpsgd): one place for all three, and
    # for the checks of --steps, --delta and --sample-rate.
    plan = plan_dpsgd(
        population, delta=args.delta, epsilon=target, sample_rate=q, steps=args.steps, accountant=args.accountant,
        neighbouring=args.neighbouring, sampling=args.sampling, replace_one_bound=args.replace_one_bound,
        noise_multiplier=args.noise_multiplier,
    )
    assert plan.guarantee is not None  # steps are given
    result = {
        "epsilon": plan.guarantee.epsilon,
        "delta": plan.delta,
        "noise_multiplier": plan.noise_multiplier,
        "sample_rate": q,
        "steps": plan.steps,
        "accountant": plan.guarantee.accountant,
        "neighbouring": plan.neighbouring.value,
        "neighbouring_detail": plan.neighbouring.detail,
        "sampling": args.sampling,
        "replace_one_bound": plan.bound,
        "bound": _BOUNDS[(plan.neighbouring.value, args.sampling, plan.bound)],
        "seconds": time.perf_counter() - start,
    }
    if population is not None:
        result["batch_size"] = round(q * population)
        result["population"] = population
    if target is not None:
        result["target_epsilon"] = target
    emit(result, as_json=args.json, render=_render_dpsgd)


def _render_dpsgd(r: dict) -> str:
    rows = [
        ("noise multiplier", fmt(r["noise_multiplier"])),
        ("sample rate", fmt(r["sample_rate"])),
        ("steps", str(r["steps"])),
        ("epsilon", fmt(r["epsilon"])),
        ("delta", fmt(r["delta"])),
        ("neighbouring", r["neighbouring_detail"]),
        ("sampling", r["sampling"]),
        ("bound", r["bound"]),
        ("accountant", r["accountant"]),
    ]
    if "population" in r:
        rows.insert(2, ("batch / population", f"{r['batch_size']} / {r['population']}"))
    if "target_epsilon" in r:
        rows.insert(0, ("target epsilon", fmt(r["target_epsilon"])))
    return table(rows)


#: The relations of ``account gaussian`` and ``account compose``, which hold under any one relation: said, not implied.
GAUSSIAN_RELATION = "the relation --sensitivity is measured under (replace-one: twice an add/remove bound)"
COMPOSE_RELATION = "the composed mechanisms' own, one relation for all of them (never mix relations)"


def _gaussian(args: argparse.Namespace) -> None:
    epsilon = _bounded(args.epsilon, "--epsilon", EPSILON_RANGE)
    sensitivity = _bounded(args.sensitivity, "--sensitivity", SENSITIVITY_RANGE)
    delta = args.delta
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)  # checks delta in (0, 1)
    # The classic bound is only a theorem for epsilon < 1 (Dwork & Roth Thm A.1).
    classic = classic_gaussian_sigma(epsilon, delta, sensitivity) if epsilon < 1 else None
    result = {"sigma": sigma, "classic_sigma": classic, "epsilon": epsilon, "delta": delta, "sensitivity": sensitivity,
              # Every guarantee carries its relation: here whichever the sensitivity was measured under.
              "neighbouring": GAUSSIAN_RELATION}
    emit(result, as_json=args.json, render=_render_gaussian)


def _render_gaussian(r: dict) -> str:
    classic = fmt(r["classic_sigma"]) if r["classic_sigma"] is not None else "n/a (only valid for epsilon < 1)"
    return table(
        [
            ("epsilon, delta", f"{fmt(r['epsilon'])}, {fmt(r['delta'])}"),
            ("L2 sensitivity", fmt(r["sensitivity"])),
            ("neighbouring", r["neighbouring"]),
            ("sigma (analytic)", fmt(r["sigma"])),
            ("sigma (classic)", classic),
        ]
    )


def _compose(args: argparse.Namespace) -> None:
    epsilon = _bounded(args.epsilon, "--epsilon", EPSILON_RANGE)
    count = check_count(args.count, "--count", maximum=MAX_COMPOSE_COUNT)
    delta, slack = args.delta, args.delta_slack
    # advanced_composition checks delta in [0, 1) and delta_slack in (0, 1); optimal_composition_epsilon that
    # their total count * delta + delta_slack is below 1.
    basic_eps, basic_delta = basic_composition([epsilon], [delta], counts=[count])
    adv_eps, adv_delta = advanced_composition(epsilon, delta, count, slack)
    # Same total delta as advanced composition, so the three epsilons compare directly.
    opt_eps = optimal_composition_epsilon(epsilon, delta, count, adv_delta)
    result = {
        "epsilon": epsilon,
        "delta": delta,
        "count": count,
        "delta_slack": slack,
        "basic": {"epsilon": basic_eps, "delta": basic_delta},
        "advanced": {"epsilon": adv_eps, "delta": adv_delta},
        "optimal": {"epsilon": opt_eps, "delta": adv_delta},
        "neighbouring": COMPOSE_RELATION,
    }
    emit(result, as_json=args.json, render=_render_compose)


def _render_compose(r: dict) -> str:
    head = f"{r['count']}-fold composition of ({fmt(r['epsilon'])}, {fmt(r['delta'])})-DP"
    rows = [
        (name, f"epsilon = {fmt(r[key]['epsilon'])}, delta = {fmt(r[key]['delta'])}")
        for name, key in (
            ("basic", "basic"),
            ("advanced (DRV 2010)", "advanced"),
            ("optimal (KOV 2015)", "optimal"),
        )
    ]
    return head + "\n" + table([*rows, ("neighbouring", r["neighbouring"])])

