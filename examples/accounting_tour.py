"""The accounting tour run by `make demo` (until private training lands).

It answers the questions a practitioner asks before training privately:
how much noise does a Gaussian release need, what does DP-SGD on MNIST cost
under each accountant, how much noise buys epsilon = 1, and how fast do
repeated queries eat a budget.
"""

from __future__ import annotations

import time

import numpy as np

from privml.accounting import (
    RDPAccountant,
    advanced_composition,
    analytic_gaussian_sigma,
    basic_composition,
    calibrate_dpsgd,
    classic_gaussian_sigma,
    dpsgd_event,
    make_accountant,
    optimal_composition_epsilon,
)
from privml.audit import neighbour_distribution_test
from privml.mechanisms import GaussianMechanism


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 72 - len(title)))


def main() -> None:
    section("Gaussian mechanism, sensitivity 1, delta = 1e-5")
    print(f"{'epsilon':>8} {'analytic sigma':>15} {'classic sigma':>14}")
    for eps in (0.1, 0.5, 1.0, 2.0, 4.0):
        classic = f"{classic_gaussian_sigma(eps, 1e-5, 1.0):14.4f}" if eps < 1 else f"{'n/a (eps>=1)':>14}"
        print(f"{eps:8.2f} {analytic_gaussian_sigma(eps, 1e-5, 1.0):15.4f} {classic}")

    section("DP-SGD on MNIST (Abadi et al.): sigma 1.1, batch 256 of 60000, 60 epochs, delta 1e-5")
    event = dpsgd_event(1.1, 256 / 60000, 14040)
    rows = [
        ("RDP, classic moments-accountant conversion", lambda: RDPAccountant(conversion="classic")),
        ("RDP, improved conversion (Balle et al. 2020)", lambda: make_accountant("rdp")),
        ("PLD, privml (pessimistic upper bound)", lambda: make_accountant("pld")),
    ]
    for label, factory in rows:
        start = time.perf_counter()
        eps = factory().compose(event).get_epsilon(1e-5)
        print(f"{label:48s} epsilon = {eps:.4f}   ({(time.perf_counter() - start) * 1e3:.0f} ms)")

    section("Noise multiplier for a target epsilon (same sampling, PLD)")
    for target in (0.5, 1.0, 2.0, 8.0):
        start = time.perf_counter()
        res = calibrate_dpsgd(target, sample_rate=256 / 60000, steps=14040, delta=1e-5, accountant="pld")
        print(
            f"target {target:4.1f}: noise multiplier {res.noise_multiplier:.4f} "
            f"(epsilon {res.epsilon:.4f}, {time.perf_counter() - start:.2f} s)"
        )

    section("100 queries at (0.1, 1e-6)-DP each, delta' = 1e-5")
    b = basic_composition([0.1] * 100, [1e-6] * 100)
    a = advanced_composition(0.1, 1e-6, 100, 1e-5)
    o = optimal_composition_epsilon(0.1, 1e-6, 100, a[1])
    print(f"basic    : epsilon {b[0]:.3f}, delta {b[1]:.2g}")
    print(f"advanced : epsilon {a[0]:.3f}, delta {a[1]:.2g}")
    print(f"optimal  : epsilon {o:.3f}, delta {a[1]:.2g}")

    section("Empirical check: Gaussian mechanism at (1, 1e-5) on neighbouring inputs")
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0, random_state=0)
    n = 200_000
    result = neighbour_distribution_test(
        mech.randomise(np.zeros(n)), mech.randomise(np.ones(n)), epsilon=1.0, delta=1e-5
    )
    print(f"violated: {result.violated}; empirical epsilon lower bound {result.epsilon_lower_bound:.3f} <= 1")


if __name__ == "__main__":
    main()
