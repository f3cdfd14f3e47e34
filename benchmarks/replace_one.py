"""Replace-one accounting for DP-SGD (issue 14): checks against oracles, and the noise it costs.

Prints, and writes as JSON with ``--out``:

1. privml's PLD for Poisson sampling under replace-one against dp_accounting's
   REPLACE_ONE PLD of the same pair (ratio of epsilons);
2. the same PLD against the privacy curve of its dominating pair computed
   directly (one step: mpmath at 40 digits; two steps: a 1-d quadrature);
3. privml's RDP of the pair against its Rényi divergence by mpmath quadrature;
4. privml's RDP for fixed-size sampling without replacement against
   dp_accounting's RdpAccountant(REPLACE_ONE) with SampledWithoutReplacementDpEvent;
5. noise multipliers at q = 256/60000, 40 epochs, delta = 1e-5 for epsilon
   0.1, 1, 10: add/remove-one, replace-one tight, replace-one by group privacy
   (PLD and RDP), and fixed-size sampling (RDP);
6. with ``--accuracy``: MNIST test accuracy of linear DP-SGD (``DPSGDClassifier``
   with its defaults, PLD) at the same epsilons under add/remove-one,
   replace-one tight and replace-one by group privacy, ``--seeds`` seeds each.

Run in the dev venv (dp_accounting and mpmath are test extras)::

    .venv/bin/python benchmarks/replace_one.py --accuracy --seeds 2 --out benchmarks/results/replace_one.json

:func:`render` turns the JSON into the BENCHMARKS.md section.
"""

from __future__ import annotations

import argparse
import sys
import time

import mpmath as mp
import numpy as np
from _common import machine, machine_line, write_json
from dp_accounting import NeighboringRelation, dp_event
from dp_accounting.pld import privacy_loss_distribution as reference_pld
from dp_accounting.rdp import rdp_privacy_accountant as reference_rdp
from scipy import integrate
from scipy.special import ndtr
from scipy.stats import norm

from privml.accounting import PLDAccountant, RDPAccountant, calibrate_dpsgd, dpsgd_event
from privml.accounting._events import GaussianEvent, PoissonSampledEvent
from privml.accounting._rdp_replace_one import rdp_poisson_gaussian_replace_one

PLD_SETTINGS = [
    (1.1, 256 / 60000, 14040, 1e-5),
    (0.7, 0.01, 120, 1e-5),
    (2.0, 0.05, 500, 1e-6),
    (5.0, 0.3, 50, 1e-5),
    (0.8, 0.5, 3, 1e-5),
]
CURVE_SETTINGS = [(0.01, 0.8), (0.2, 1.5), (0.5, 3.0), (0.05, 0.4)]
RDP_SETTINGS = [(0.01, 1.0, 2.0), (0.01, 1.0, 10.5), (256 / 60000, 1.1, 16.0), (0.1, 0.8, 3.3), (0.004, 5.0, 128.0)]
WOR_SETTINGS = [(1.1, 14040, 1e-5), (2.0, 2000, 1e-6), (0.8, 300, 1e-5), (6.0, 50000, 1e-5)]


def pld_vs_dp_accounting() -> list[dict]:
    rows = []
    for s, q, t, d in PLD_SETTINGS:
        ours = PLDAccountant().compose(dpsgd_event(s, q, t, neighbouring="replace-one")).get_epsilon(d)
        theirs = (
            reference_pld.from_gaussian_mechanism(
                s, sensitivity=1.0, sampling_prob=q, neighboring_relation=NeighboringRelation.REPLACE_ONE
            )
            .self_compose(t)
            .get_epsilon_for_delta(d)
        )
        rows.append({"noise_multiplier": s, "q": q, "steps": t, "delta": d, "privml": ours, "dp_accounting": theirs,
                     "ratio": ours / theirs})
    return rows


def _loss(q: float, s: float, x: np.ndarray) -> np.ndarray:
    p = np.logaddexp(np.log1p(-q) + norm.logpdf(x, 0, s), np.log(q) + norm.logpdf(x, 1, s))
    r = np.logaddexp(np.log1p(-q) + norm.logpdf(x, 0, s), np.log(q) + norm.logpdf(x, -1, s))
    return p - r


def exact_one_step(q: float, s: float, eps: float) -> float:
    mp.mp.dps = 40
    q_, s_ = mp.mpf(q), mp.mpf(s)

    def loss(x):
        return mp.log(((1 - q_) * mp.npdf(x, 0, s_) + q_ * mp.npdf(x, 1, s_))
                      / ((1 - q_) * mp.npdf(x, 0, s_) + q_ * mp.npdf(x, -1, s_)))

    t = mp.findroot(lambda x: loss(x) - eps, mp.mpf(0.5 + s * s * eps))
    tail = lambda m: 1 - mp.ncdf(t, m, s_)  # noqa: E731
    return float((1 - q_) * tail(0) + q_ * tail(1) - mp.e**eps * ((1 - q_) * tail(0) + q_ * tail(-1)))


def exact_two_steps(q: float, s: float, eps: float) -> float:
    x = np.linspace(-1 - 14 * s, 2 + 14 * s, 20001)
    target = eps - _loss(q, s, x)
    low, high = np.full(x.shape, -400.0), np.full(x.shape, 400.0)
    for _ in range(60):
        mid = 0.5 * (low + high)
        above = _loss(q, s, mid) > target
        high, low = np.where(above, mid, high), np.where(above, low, mid)
    t = 0.5 * (low + high)
    p = (1 - q) * norm.pdf(x, 0, s) + q * norm.pdf(x, 1, s)
    r = (1 - q) * norm.pdf(x, 0, s) + q * norm.pdf(x, -1, s)
    p_tail = (1 - q) * ndtr(-t / s) + q * ndtr(-(t - 1) / s)
    r_tail = (1 - q) * ndtr(-t / s) + q * ndtr(-(t + 1) / s)
    return float(integrate.trapezoid(p * p_tail - np.exp(eps) * r * r_tail, x))


def pld_vs_direct_curve() -> list[dict]:
    rows = []
    for q, s in CURVE_SETTINGS:
        event = PoissonSampledEvent(q, GaussianEvent(s), neighbouring="replace-one")
        one, two = PLDAccountant().compose(event), PLDAccountant().compose(event, count=2)
        for eps in (0.1, 1.0):
            e1, e2 = exact_one_step(q, s, eps), exact_two_steps(q, s, eps)
            rows.append({"q": q, "noise_multiplier": s, "epsilon": eps, "exact_1": e1, "pld_1": one.get_delta(eps),
                         "ratio_1": one.get_delta(eps) / e1, "exact_2": e2, "pld_2": two.get_delta(eps),
                         "ratio_2": two.get_delta(eps) / e2})
    return rows


def exact_rdp(q: float, s: float, alpha: float) -> float:
    mp.mp.dps = 25
    q, s, a = mp.mpf(q), mp.mpf(s), mp.mpf(alpha)
    p = lambda x: (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, 1, s)  # noqa: E731
    r = lambda x: (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, -1, s)  # noqa: E731
    f = lambda x: r(x) * ((p(x) / r(x)) ** a - 1 - a * (p(x) / r(x) - 1))  # noqa: E731
    top = float(2 * a + 1 + 40 * s)
    points = [-1 - 40 * s, -1, 0, 1] + [mp.mpf(t) for t in np.geomspace(2, top, 12)]
    return float(mp.log1p(mp.quad(f, points)) / (a - 1))


def rdp_vs_quadrature() -> list[dict]:
    rows = []
    for q, s, alpha in RDP_SETTINGS:
        ours = float(rdp_poisson_gaussian_replace_one(q, s, [alpha])[0])
        exact = exact_rdp(q, s, alpha)
        rows.append({"q": q, "noise_multiplier": s, "order": alpha, "privml": ours, "mpmath": exact,
                     "ratio": ours / exact})
    return rows


def wor_vs_dp_accounting() -> list[dict]:
    b, n = 256, 60000
    rows = []
    for s, t, d in WOR_SETTINGS:
        event = dpsgd_event(s, b / n, t, neighbouring="replace-one", sampling="fixed-size", population=n)
        ours = RDPAccountant().compose(event).get_epsilon(d)
        reference = reference_rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
        reference.compose(dp_event.SelfComposedDpEvent(
            dp_event.SampledWithoutReplacementDpEvent(n, b, dp_event.GaussianDpEvent(s / 2)), t))
        theirs = reference.get_epsilon(d)
        rows.append({"noise_multiplier": s, "batch": b, "population": n, "steps": t, "delta": d, "privml": ours,
                     "dp_accounting": theirs, "ratio": ours / theirs})
    return rows


def noise_table() -> list[dict]:
    q, n = 256 / 60000, 60000
    steps = round(40 / q)
    rows = []
    for eps in (0.1, 1.0, 10.0):
        row = {"epsilon": eps, "q": q, "steps": steps, "delta": 1e-5}
        for acct in ("pld", "rdp"):
            base = {"sample_rate": q, "steps": steps, "delta": 1e-5, "accountant": acct}
            row[f"{acct}_add_remove"] = calibrate_dpsgd(eps, **base).noise_multiplier
            row[f"{acct}_tight"] = calibrate_dpsgd(eps, neighbouring="replace-one", **base).noise_multiplier
            row[f"{acct}_group"] = calibrate_dpsgd(eps, neighbouring="replace-one", replace_one_bound="group", **base).noise_multiplier
        row["rdp_fixed_size"] = calibrate_dpsgd(
            eps, sample_rate=q, steps=steps, delta=1e-5, accountant="rdp", neighbouring="replace-one",
            sampling="fixed-size", population=n,
        ).noise_multiplier
        rows.append(row)
    return rows


RELATIONS = {  # label -> DPSGDClassifier settings
    "add/remove-one": {},
    "replace-one (tight)": {"neighbouring": "replace-one", "replace_one_bound": "tight"},
    "replace-one (group privacy)": {"neighbouring": "replace-one", "replace_one_bound": "group"},
}


def accuracy(seeds: int) -> list[dict]:
    """MNIST test accuracy of linear DP-SGD at epsilon 0.1, 1, 10 under each relation (defaults otherwise)."""
    from privml.data import load_dataset
    from privml.linear import DPSGDClassifier

    data = load_dataset("mnist", bias=0.5, random_state=0)
    rows = []
    for eps in (0.1, 1.0, 10.0):
        for label, settings in RELATIONS.items():
            scores, multiplier, seconds = [], None, 0.0
            for seed in range(seeds):
                start = time.perf_counter()
                model = DPSGDClassifier(epsilon=eps, delta=1e-5, classes=range(10), random_state=seed, **settings)
                model.fit(data.X_train, data.y_train)
                seconds += time.perf_counter() - start
                scores.append(float(model.score(data.X_test, data.y_test)))
                multiplier = float(model.fit_info_["noise_multiplier"])
                guarantee = model.privacy_
            rows.append({"epsilon": eps, "relation": label, "noise_multiplier": multiplier,
                         "guarantee": str(guarantee), "accuracy_mean": float(np.mean(scores)),
                         "accuracy_std": float(np.std(scores)), "seeds": seeds, "seconds_per_fit": seconds / seeds})
            print(f"   eps={eps:<4g} {label:<28} noise {multiplier:.4f}  accuracy {100 * np.mean(scores):.2f}%",
                  file=sys.stderr)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--accuracy", action="store_true", help="also train linear DP-SGD on MNIST (minutes)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per accuracy point (default 2)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = {
        "pld_vs_dp_accounting": pld_vs_dp_accounting(),
        "pld_vs_direct_curve": pld_vs_direct_curve(),
        "rdp_vs_quadrature": rdp_vs_quadrature(),
        "fixed_size_rdp_vs_dp_accounting": wor_vs_dp_accounting(),
        "noise": noise_table(),
    }
    if args.accuracy:
        results["accuracy"] = accuracy(args.seeds)
    print("1. PLD, Poisson, replace-one: privml vs dp_accounting (REPLACE_ONE PLD of the same pair)")
    for r in results["pld_vs_dp_accounting"]:
        print(f"   s={r['noise_multiplier']:<4} q={r['q']:.5f} T={r['steps']:<6} delta={r['delta']:g}: "
              f"{r['privml']:.6f} vs {r['dp_accounting']:.6f}  ratio {r['ratio']:.7f}")
    print("2. PLD delta vs the pair's exact curve (1 step: mpmath; 2 steps: quadrature)")
    for r in results["pld_vs_direct_curve"]:
        print(f"   q={r['q']:<5} s={r['noise_multiplier']:<4} eps={r['epsilon']:<4}: 1 step ratio {r['ratio_1']:.8f}, "
              f"2 steps ratio {r['ratio_2']:.8f}")
    print("3. RDP of the replace-one pair: privml (trapezoid) vs mpmath quadrature")
    for r in results["rdp_vs_quadrature"]:
        print(f"   q={r['q']:.5f} s={r['noise_multiplier']:<4} alpha={r['order']:<6}: {r['privml']:.10g} vs "
              f"{r['mpmath']:.10g}  ratio {r['ratio']:.10f}")
    print("4. RDP, fixed-size (256 of 60000) under replace-one: privml vs dp_accounting (WBK19)")
    for r in results["fixed_size_rdp_vs_dp_accounting"]:
        print(f"   s={r['noise_multiplier']:<4} T={r['steps']:<6} delta={r['delta']:g}: {r['privml']:.6f} vs "
              f"{r['dp_accounting']:.6f}  ratio {r['ratio']:.9f}")
    print("5. Noise multiplier, q = 256/60000, 40 epochs (9375 steps), delta = 1e-5")
    print("   eps   acct  add/remove  RO tight  RO group  tight/group  fixed-size(RDP)")
    for r in results["noise"]:
        for acct in ("pld", "rdp"):
            fixed = f"{r['rdp_fixed_size']:.4f}" if acct == "rdp" else ""
            print(f"   {r['epsilon']:<5g} {acct:<4}  {r[f'{acct}_add_remove']:10.4f}  {r[f'{acct}_tight']:8.4f}  "
                  f"{r[f'{acct}_group']:8.4f}  {r[f'{acct}_tight'] / r[f'{acct}_group']:11.4f}  {fixed}")
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.out:
        command = ".venv/bin/python benchmarks/replace_one.py" + (f" --accuracy --seeds {args.seeds}" if args.accuracy
                                                                  else "")
        write_json(args.out, {"machine": machine(), "command": command, "seconds": time.perf_counter() - start,
                              **results})
    return 0


def render(data: dict) -> str:
    m = data["machine"]
    out = [
        "## Replace-one accounting for DP-SGD (issue 14)",
        "",
        f"Command: `{data.get('command', '.venv/bin/python benchmarks/replace_one.py')}`.  ",
        f"Machine: {machine_line(m)}.",
        "",
        "Checks of the new accountants against their oracles (ratio of privml's epsilon to the oracle's):",
        "",
        "| check | settings | ratio range |",
        "|---|---|---|",
    ]

    def span(rows: list[dict], key: str = "ratio") -> str:
        values = [r[key] for r in rows]
        return f"{min(values):.9f} to {max(values):.9f}"

    out += [
        f"| PLD, Poisson, replace-one vs dp_accounting's REPLACE_ONE PLD | {len(data['pld_vs_dp_accounting'])} "
        f"| {span(data['pld_vs_dp_accounting'])} |",
        f"| PLD vs the dominating pair's exact curve, 1 step (mpmath) | {len(data['pld_vs_direct_curve'])} "
        f"| {span(data['pld_vs_direct_curve'], 'ratio_1')} |",
        f"| PLD vs the pair's curve, 2 steps (quadrature) | {len(data['pld_vs_direct_curve'])} "
        f"| {span(data['pld_vs_direct_curve'], 'ratio_2')} |",
        f"| RDP of the pair vs mpmath quadrature | {len(data['rdp_vs_quadrature'])} "
        f"| {span(data['rdp_vs_quadrature'])} |",
        f"| RDP, fixed-size without replacement vs dp_accounting (WBK19) "
        f"| {len(data['fixed_size_rdp_vs_dp_accounting'])} | {span(data['fixed_size_rdp_vs_dp_accounting'])} |",
        "",
        "Noise multiplier for DP-SGD at q = 256/60000, 40 epochs (9375 steps), delta = 1e-5:",
        "",
        "| epsilon | accountant | add/remove-one | replace-one, tight | replace-one, group privacy | tight / group "
        "| fixed-size, replace-one (RDP) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data["noise"]:
        for acct in ("pld", "rdp"):
            fixed = f"{r['rdp_fixed_size']:.4f}" if acct == "rdp" else ""
            out.append(f"| {r['epsilon']:g} | {acct} | {r[f'{acct}_add_remove']:.4f} | {r[f'{acct}_tight']:.4f} "
                       f"| {r[f'{acct}_group']:.4f} | {r[f'{acct}_tight'] / r[f'{acct}_group']:.4f} | {fixed} |")
    out += ["", "The tight replace-one noise is strictly below group privacy's at every epsilon.", ""]
    if "accuracy" in data:
        seeds = data["accuracy"][0]["seeds"]
        out += [
            f"MNIST test accuracy of linear DP-SGD (`DPSGDClassifier` defaults, PLD, delta = 1e-5; mean ± std over "
            f"{seeds} seeds) under each relation. At the same nominal epsilon replace-one is the stronger promise, "
            "so it costs noise and accuracy:",
            "",
            "| epsilon | relation | noise multiplier | accuracy |",
            "|---|---|---|---|",
        ]
        for r in data["accuracy"]:
            out.append(f"| {r['epsilon']:g} | {r['relation']} | {r['noise_multiplier']:.4f} "
                       f"| {100 * r['accuracy_mean']:.2f} ± {100 * r['accuracy_std']:.2f}% |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
