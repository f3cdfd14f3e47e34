"""``privml account``: privacy accounting from the command line.

Forms (each takes ``--json``)::

    privml account dpsgd --noise-multiplier S --sample-rate Q --steps T --delta D [--accountant rdp|pld]
    privml account dpsgd --target-epsilon E --sample-rate Q --steps T --delta D [--accountant rdp|pld]
    privml account gaussian --epsilon E --delta D --sensitivity S
    privml account compose --epsilon E --delta D --count K --delta-slack DS
"""

from __future__ import annotations

import argparse
import time

from privml._validation import check_count, check_delta, check_epsilon, check_positive, check_probability
from privml.accounting.analytic_gaussian import analytic_gaussian_sigma, classic_gaussian_sigma
from privml.accounting.calibration import calibrate_dpsgd, make_accountant
from privml.accounting.composition import advanced_composition, basic_composition, optimal_composition_epsilon
from privml.accounting.events import dpsgd_event
from privml.cli._common import add_json_flag, emit, finite_float, fmt, integer, table
from privml.neighbouring import Neighbouring

DPSGD_ACCOUNTANTS = ("pld", "rdp")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "account",
        help="compute or calibrate privacy guarantees",
        description="Privacy accounting: epsilon of DP-SGD, noise calibration, Gaussian sigma, composition.",
    )
    forms = parser.add_subparsers(dest="form", metavar="FORM", parser_class=type(parser))
    forms.required = True

    dpsgd = forms.add_parser(
        "dpsgd",
        help="epsilon of DP-SGD, or the noise multiplier for a target epsilon",
        description=(
            "DP-SGD with Poisson sampling (add/remove-one neighbours): give --noise-multiplier to get "
            "epsilon, or --target-epsilon to get the smallest noise multiplier that meets it."
        ),
    )
    noise = dpsgd.add_mutually_exclusive_group(required=True)
    noise.add_argument("--noise-multiplier", type=finite_float, help="noise std / clipping norm")
    noise.add_argument("--target-epsilon", type=finite_float, help="calibrate the noise to this epsilon")
    dpsgd.add_argument("--sample-rate", type=finite_float, required=True, help="Poisson sampling rate q in (0, 1]")
    dpsgd.add_argument("--steps", type=integer, required=True, help="number of noisy steps")
    dpsgd.add_argument("--delta", type=finite_float, required=True, help="target delta in [0, 1)")
    dpsgd.add_argument("--accountant", choices=DPSGD_ACCOUNTANTS, default="pld", help="default: pld (tightest)")
    add_json_flag(dpsgd)
    dpsgd.set_defaults(handler=_dpsgd, prog=dpsgd.prog)

    gaussian = forms.add_parser(
        "gaussian",
        help="noise std of the Gaussian mechanism for (epsilon, delta)",
        description="Smallest sigma for (epsilon, delta): analytic (Balle & Wang 2018) and classic calibration.",
    )
    gaussian.add_argument("--epsilon", type=finite_float, required=True)
    gaussian.add_argument("--delta", type=finite_float, required=True)
    gaussian.add_argument("--sensitivity", type=finite_float, default=1.0, help="L2 sensitivity (default 1)")
    add_json_flag(gaussian)
    gaussian.set_defaults(handler=_gaussian, prog=gaussian.prog)

    compose = forms.add_parser(
        "compose",
        help="k-fold composition of an (epsilon, delta) mechanism",
        description="Basic, advanced (Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) composition.",
    )
    compose.add_argument("--epsilon", type=finite_float, required=True, help="per-run epsilon")
    compose.add_argument("--delta", type=finite_float, default=0.0, help="per-run delta (default 0)")
    compose.add_argument("--count", type=integer, required=True, help="number of runs k")
    compose.add_argument("--delta-slack", type=finite_float, required=True, help="extra delta' of advanced composition")
    add_json_flag(compose)
    compose.set_defaults(handler=_compose, prog=compose.prog)


def _dpsgd(args: argparse.Namespace) -> None:
    q = check_probability(args.sample_rate, "--sample-rate")
    steps = check_count(args.steps, "--steps")
    delta = check_delta(args.delta, "--delta")
    if delta == 0:
        raise ValueError("--delta must be > 0 for DP-SGD (the Gaussian mechanism is not pure DP)")
    start = time.perf_counter()
    if args.target_epsilon is not None:
        target = check_epsilon(args.target_epsilon, "--target-epsilon")
        calibrated = calibrate_dpsgd(target, sample_rate=q, steps=steps, delta=delta, accountant=args.accountant)
        noise_multiplier, epsilon = calibrated.noise_multiplier, calibrated.epsilon
    else:
        noise_multiplier = check_positive(args.noise_multiplier, "--noise-multiplier")
        target = None
        accountant = make_accountant(args.accountant).compose(dpsgd_event(noise_multiplier, q, steps))
        epsilon = accountant.get_epsilon(delta)
    result = {
        "epsilon": epsilon,
        "delta": delta,
        "noise_multiplier": noise_multiplier,
        "sample_rate": q,
        "steps": steps,
        "accountant": args.accountant,
        "neighbouring": Neighbouring.ADD_REMOVE_ONE.value,
        "neighbouring_detail": Neighbouring.ADD_REMOVE_ONE.detail,
        "seconds": time.perf_counter() - start,
    }
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
        ("accountant", r["accountant"]),
    ]
    if "target_epsilon" in r:
        rows.insert(0, ("target epsilon", fmt(r["target_epsilon"])))
    return table(rows)


def _gaussian(args: argparse.Namespace) -> None:
    epsilon = check_epsilon(args.epsilon, "--epsilon")
    delta = check_delta(args.delta, "--delta")
    if delta == 0:
        raise ValueError("--delta must be > 0: the Gaussian mechanism is not pure DP")
    sensitivity = check_positive(args.sensitivity, "--sensitivity")
    sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
    # The classic bound is only a theorem for epsilon < 1 (Dwork & Roth Thm A.1).
    classic = classic_gaussian_sigma(epsilon, delta, sensitivity) if epsilon < 1 else None
    result = {"sigma": sigma, "classic_sigma": classic, "epsilon": epsilon, "delta": delta, "sensitivity": sensitivity}
    emit(result, as_json=args.json, render=_render_gaussian)


def _render_gaussian(r: dict) -> str:
    classic = fmt(r["classic_sigma"]) if r["classic_sigma"] is not None else "n/a (only valid for epsilon < 1)"
    return table(
        [
            ("epsilon, delta", f"{fmt(r['epsilon'])}, {fmt(r['delta'])}"),
            ("L2 sensitivity", fmt(r["sensitivity"])),
            ("sigma (analytic)", fmt(r["sigma"])),
            ("sigma (classic)", classic),
        ]
    )


def _compose(args: argparse.Namespace) -> None:
    epsilon = check_epsilon(args.epsilon, "--epsilon")
    delta = check_delta(args.delta, "--delta")
    count = check_count(args.count, "--count")
    slack = check_delta(args.delta_slack, "--delta-slack")
    if slack == 0:
        raise ValueError("--delta-slack must be > 0 (advanced composition needs delta' > 0)")
    basic_eps, basic_delta = basic_composition([epsilon] * count, [delta] * count)
    adv_eps, adv_delta = advanced_composition(epsilon, delta, count, slack)
    if adv_delta >= 1:
        raise ValueError(f"total delta {adv_delta:.3g} = count * delta + delta-slack must be < 1")
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
    return head + "\n" + table(rows)

