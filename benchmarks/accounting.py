"""Accounting benchmark: privml's RDP and PLD accountants against dp_accounting
(RdpAccountant, PLDAccountant) and opacus (RDP, PRV), side by side in one run.

For each DP-SGD setting (noise multiplier, sample rate, steps, delta) it
records every accountant's epsilon and median wall time, then times noise
calibration to a target epsilon with privml's PLD (and dp_accounting's PLD for
comparison). Run it in the peers venv (``make bench``)::

    .venv-peers/bin/python benchmarks/accounting.py --out benchmarks/results/accounting.json
"""

from __future__ import annotations

import argparse
import sys
import warnings

from _common import machine, timed, write_json

from privml.accounting import calibrate_dpsgd, dpsgd_event, make_accountant

# (noise multiplier, sample rate, steps, delta, description)
SETTINGS = [
    (1.1, 256 / 60000, 14040, 1e-5, "MNIST, Abadi et al. 2016: batch 256, 60 epochs"),
    (0.7, 0.01, 120, 1e-5, "few steps, low noise"),
    (1.0, 0.01, 10000, 1e-5, "q = 0.01, 100 epochs"),
    (2.0, 0.001, 100000, 1e-6, "many steps, small q"),
    (0.8, 0.05, 1000, 1e-5, "large batches"),
    (4.0, 0.1, 5000, 1e-5, "high noise, q = 0.1"),
    (1.5, 512 / 50000, 9766, 1e-5, "CIFAR-10 style: batch 512, 100 epochs"),
    (0.6, 0.004, 2000, 1e-7, "low noise, small delta"),
]
CALIBRATION = [(1.0, 256 / 60000, 14040, 1e-5), (3.0, 0.01, 1000, 1e-5), (8.0, 0.004, 25000, 1e-5)]


def privml_epsilon(name: str, s: float, q: float, t: int, d: float) -> float:
    return make_accountant(name).compose(dpsgd_event(s, q, t)).get_epsilon(d)


def dp_accounting_epsilon(kind: str, s: float, q: float, t: int, d: float) -> float:
    import dp_accounting

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), t
    )
    acc = dp_accounting.rdp.RdpAccountant() if kind == "rdp" else dp_accounting.pld.PLDAccountant()
    return acc.compose(event).get_epsilon(d)


def opacus_epsilon(kind: str, s: float, q: float, t: int, d: float) -> float:
    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = RDPAccountant() if kind == "rdp" else PRVAccountant()
    acc.history = [(s, q, t)]
    return float(acc.get_epsilon(delta=d))


def dp_accounting_calibrate(target: float, q: float, t: int, d: float) -> float:
    import dp_accounting

    def make_event(s: float):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), t
        )

    return dp_accounting.calibrate_dp_mechanism(
        dp_accounting.pld.PLDAccountant, make_event, target, d, dp_accounting.LowerEndpointAndGuess(0.1, 1.0)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/accounting.json")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-peer-calibration", action="store_true")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    rows = []
    for s, q, t, d, label in SETTINGS:
        row = {"noise_multiplier": s, "sample_rate": q, "steps": t, "delta": d, "setting": label, "results": {}}
        runs = {
            "privml-rdp": lambda: privml_epsilon("rdp", s, q, t, d),
            "privml-pld": lambda: privml_epsilon("pld", s, q, t, d),
            "dp_accounting-rdp": lambda: dp_accounting_epsilon("rdp", s, q, t, d),
            "dp_accounting-pld": lambda: dp_accounting_epsilon("pld", s, q, t, d),
            "opacus-rdp": lambda: opacus_epsilon("rdp", s, q, t, d),
            "opacus-prv": lambda: opacus_epsilon("prv", s, q, t, d),
        }
        for name, fn in runs.items():
            repeats = 1 if name.startswith(("dp_accounting-pld", "opacus-prv")) else args.repeats
            eps, seconds = timed(fn, repeats=repeats)
            row["results"][name] = {"epsilon": float(eps), "seconds": seconds}
            print(f"{label:48s} {name:18s} eps={eps:.5f} t={seconds:.4f}s", file=sys.stderr)
        rows.append(row)

    calibration = []
    for target, q, t, d in CALIBRATION:
        entry = {"target_epsilon": target, "sample_rate": q, "steps": t, "delta": d}
        res, seconds = timed(lambda: calibrate_dpsgd(target, sample_rate=q, steps=t, delta=d, accountant="pld"))
        entry["privml-pld"] = {"noise_multiplier": res.noise_multiplier, "epsilon": res.epsilon, "seconds": seconds}
        if not args.skip_peer_calibration:
            sigma, seconds = timed(lambda: dp_accounting_calibrate(target, q, t, d), repeats=1)
            entry["dp_accounting-pld"] = {
                "noise_multiplier": float(sigma),
                "epsilon": dp_accounting_epsilon("pld", sigma, q, t, d),
                "seconds": seconds,
            }
        print(f"calibrate {entry}", file=sys.stderr)
        calibration.append(entry)

    write_json(args.out, {"machine": machine(), "settings": rows, "calibration": calibration})
    return 0


if __name__ == "__main__":
    sys.exit(main())
