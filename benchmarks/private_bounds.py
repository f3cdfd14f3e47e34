"""Private bounds (`privml train --bounds private`) against public ranges, on CSVs without a schema (issue 32).

    python benchmarks/private_bounds.py [--seeds 3]

Two raw-unit CSVs of numeric columns: breast_cancer (455 training rows, 30 columns: the public rank-error bound
says the ranges' budget is too small, and privml warns) and Adult's five numeric columns with documented ranges (32,561 rows: it is not).
Each is trained at epsilon 1 with --bounds private (a quarter of the budget on the ranges) and with the same
columns' documented ranges as a schema (free), objective perturbation. Accuracy on each file's test split, shown
with --show-nonprivate (benchmark data); the majority class's rate on the same split beside it.
Writes benchmarks/results/private_bounds.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import machine, machine_line

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "private_bounds.json"
#: Adult's numeric columns with a documented range (privml.data._adult.NUMERIC_BOUNDS); fnlwgt has none.
ADULT_NUMERIC = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week")


def write(path: Path, names: list[str], X: np.ndarray, labels: list[str]) -> Path:
    lines = [",".join([*names, "label"])] + [",".join([*(repr(float(v)) for v in row), t]) for row, t in zip(X, labels)]
    path.write_text("\n".join(lines) + "\n")
    return path


def tables(folder: Path) -> list[dict]:
    from sklearn.datasets import load_breast_cancer

    from privml.data import load_dataset
    from privml.data._adult import CLASSES, COLUMNS, NUMERIC_BOUNDS
    from privml.data._bundled import BREAST_CANCER_BOUNDS
    from privml.data._schema import Label, Numeric, Schema
    from privml.data._split import fixed_split

    bc = load_breast_cancer()
    names = [str(n) for n in bc.feature_names]
    train, test = fixed_split(len(bc.target))
    labels = ["yes" if t else "no" for t in bc.target]
    bc_path = write(folder / "bc.csv", names, bc.data, labels)
    bc_schema = Schema(columns=tuple(Numeric(name=n, lower=lo, upper=hi) for n, (lo, hi) in
                                     zip(names, BREAST_CANCER_BOUNDS, strict=True)),
                       label=Label(column="label", classes=("no", "yes"))).save(folder / "bc.toml")
    raw = load_dataset("adult", preprocess=False)
    keep = [COLUMNS.index(c) for c in ADULT_NUMERIC]
    adult_train = write(folder / "adult.csv", list(ADULT_NUMERIC), raw.X_train[:, keep],
                        [CLASSES[int(t)] for t in raw.y_train])
    adult_test = write(folder / "adult_test.csv", list(ADULT_NUMERIC), raw.X_test[:, keep],
                       [CLASSES[int(t)] for t in raw.y_test])
    adult_schema = Schema(columns=tuple(Numeric(name=c, lower=NUMERIC_BOUNDS[c][0], upper=NUMERIC_BOUNDS[c][1])
                                        for c in ADULT_NUMERIC),
                          label=Label(column="label", classes=CLASSES)).save(folder / "adult.toml")
    return [
        {"name": "breast_cancer (30 numeric columns)", "data": ["--dataset", f"csv:{bc_path}"],
         "classes": "no,yes", "schema": bc_schema,
         "majority": float(max(np.mean(bc.target[test]), 1 - np.mean(bc.target[test]))), "n_train": len(train)},
        {"name": "Adult (its 5 documented numeric columns)", "data": ["--dataset", f"csv:{adult_train}", "--test",
                                                             str(adult_test)],
         "classes": ",".join(CLASSES), "schema": adult_schema,
         "majority": float(1 - np.mean(raw.y_test)), "n_train": len(raw.y_train)},
    ]


def train(*argv: str) -> tuple[dict, list[str]]:
    done = subprocess.run([sys.executable, "-m", "privml.cli.main", "train", "--method", "objective", "--epsilon",
                           "1", "--show-nonprivate", "--json", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: private bounds")]
    return json.loads(done.stdout), warnings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for table in tables(Path(tmp)):
            row = {key: table[key] for key in ("name", "majority", "n_train")}
            for mode, extra in (("private", ["--bounds", "private"]), ("schema", ["--schema", str(table["schema"])])):
                figures, warned = [], []
                for seed in range(args.seeds):
                    options = [*table["data"], "--seed", str(seed), *extra]
                    if mode == "private":
                        options += ["--classes", table["classes"]]
                    result, warnings = train(*options)
                    figures.append(result["nonprivate"]["test_accuracy"])
                    warned.append(bool(warnings))
                    if mode == "private":
                        row["split"] = result["privacy_split"]
                        row["guarantee"] = f"{result['epsilon']:g}, {result['delta']:g}, {result['accountant']}"
                        row["warning"] = warnings[0] if warnings else ""
                row[mode] = statistics.fmean(figures)
                row[mode + "_warned"] = sum(warned)
            rows.append(row)
            print(f"{row['name']}: private {row['private']:.4f}, schema {row['schema']:.4f}", file=sys.stderr)
    data = {"machine": machine(), "command": f"python benchmarks/private_bounds.py --seeds {args.seeds}",
            "seeds": args.seeds, "rows": rows}
    RESULT.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {RESULT}", file=sys.stderr)
    return 0


def render(data: dict) -> str:
    m = data["machine"]
    out = [
        "## Private bounds against public ranges: CSVs without a schema (issue 32)",
        "",
        f"Command: `{data['command']}`.  ",
        f"Machine: {machine_line(m)}.",
        "",
        "`privml train --method objective --epsilon 1 --bounds private` (a quarter of the budget on the numeric "
        "columns' 5% and 95% quantiles, exponential mechanism over a public grid; the guarantee printed is the "
        "total, (1, 1e-05)-DP) against the same columns with their documented ranges as a schema (no cost). Test "
        f"accuracy, mean of {data['seeds']} seeds; 'warned': runs where privml printed the public rank-error "
        "warning.",
        "",
        "| data | training rows | majority class | --bounds private | warned | schema (public ranges) |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        out.append(f"| {r['name']} | {r['n_train']} | {100 * r['majority']:.2f}% | {100 * r['private']:.2f}% | "
                   f"{r['private_warned']} of {data['seeds']} | {100 * r['schema']:.2f}% |")
    out += ["", "The warning on breast_cancer:", "", "```text",
            *(r["warning"] for r in data["rows"] if r["warning"]), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
