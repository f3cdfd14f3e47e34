"""Adult as the raw UCI CSV (categorical columns, '?' for missing) through a public schema, against privml's
built-in Adult pipeline (issue 32, acceptance): train, serve and audit; and the same CSVs without a schema.

    python benchmarks/adult_csv.py [--seeds 3]

Writes benchmarks/results/adult_csv.json. The CSVs are written from the fetched Adult data
(privml.data._adult.write_uci_csv: adult.data's text, with a header row) and read by the CLI exactly as a data
owner's file; the schema is privml.data._adult.uci_schema() (adult.names' levels, the documented ranges). Test
accuracy on both is Adult's published test split (public), printed for the CSV with --show-nonprivate because
the CLI cannot know the file's held-out rows are public.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, machine_line

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "adult_csv.json"
METHODS = ("objective", "output", "dpsgd")
EPSILON = 1.0


def cli(*argv: str) -> tuple[int, dict | None, str]:
    """Exit status, the JSON result (or None) and stderr of ``privml *argv --json`` in a fresh process."""
    done = subprocess.run([sys.executable, "-m", "privml.cli.main", *argv, "--json"], capture_output=True, text=True)
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else None), done.stderr


def accuracy(result: dict) -> float:
    return result["test_accuracy"] if "test_accuracy" in result else result["nonprivate"]["test_accuracy"]


def write_files(folder: Path) -> tuple[Path, Path, Path]:
    from privml.data import load_dataset
    from privml.data._adult import uci_schema, write_uci_csv

    raw = load_dataset("adult", preprocess=False)
    train = write_uci_csv(folder / "adult.csv", raw.X_train, raw.y_train)
    test = write_uci_csv(folder / "adult_test.csv", raw.X_test, raw.y_test)
    return train, test, uci_schema().save(folder / "adult_schema.toml")


def serve_check(model: Path, test: Path, n: int = 2000) -> dict:
    """Rows of cells from the raw test CSV (strings, '?' as null) answered by privml serve's service."""
    import numpy as np

    from privml.serve._model import ModelSpec, open_served_model
    from privml.serve._service import PredictionService

    lines = test.read_text().splitlines()
    header = [h.strip() for h in lines[0].split(",")]
    served = open_served_model(ModelSpec(model))
    schema = served.preprocess.schema
    keep = [header.index(name) for name in schema.feature_columns()]
    rows, labels = [], []
    for line in lines[1:n + 1]:
        cells = [c.strip() for c in line.split(",")]
        rows.append([None if cells[j] == "?" else cells[j] for j in keep])
        labels.append(cells[header.index("income")])
    service = PredictionService(served.predictor, preprocess=served.preprocess, class_names=served.class_names)
    answered: list[str] = []
    for start in range(0, len(rows), 500):  # the server's default limit is 1000 rows a request
        answered += service.predict(json.dumps({"rows": rows[start:start + 500]}).encode())["labels"]
    return {"rows": len(rows), "with_missing": sum(None in r for r in rows),
            "accuracy": float(np.mean(np.array(answered) == np.array(labels)))}


def audit_check(train: Path, test: Path, schema: Path, *, n: int = 300, trials: int = 100) -> dict:
    """An empirical epsilon lower bound of objective perturbation on records read through the schema."""
    from privml.audit._epsilon_lower_bound import audit_epsilon
    from privml.data import load_dataset
    from privml.linear import ObjectivePerturbationClassifier

    data = load_dataset(f"csv:{train}", schema=schema, test_path=test, bias=0.5, max_train=n, random_state=0)
    model = ObjectivePerturbationClassifier(epsilon=EPSILON, classes=(0, 1))
    start = time.perf_counter()
    result = audit_epsilon(model, data.X_train, data.y_train, trials=trials, canary="clipbkd", random_state=0)
    return {"n_train": n, "trials": trials, "claimed_epsilon": result.claimed.epsilon,
            "lower_bound": result.bound.epsilon, "violated": bool(result.violated),
            "seconds": time.perf_counter() - start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    seeds = [str(s) for s in range(args.seeds)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        train, test, schema = write_files(folder)
        csv_args = ["--dataset", f"csv:{train}", "--test", str(test), "--schema", str(schema), "--show-nonprivate"]
        rows = []
        for method in METHODS:
            row: dict = {"method": method}
            for name, data_args in (("builtin", ["--dataset", "adult"]), ("csv", csv_args)):
                figures, seconds = [], []
                for seed in seeds:
                    start = time.perf_counter()
                    code, result, err = cli("train", "--method", method, *data_args, "--epsilon", str(EPSILON),
                                            "--seed", seed)
                    if code != 0:
                        raise SystemExit(f"{method} on {name}: {err.strip()}")
                    seconds.append(time.perf_counter() - start)
                    figures.append(accuracy(result))
                    row["n_features_" + name] = result["n_features"]
                row[name] = figures
                row[name + "_mean"] = statistics.fmean(figures)
                row[name + "_seconds"] = statistics.median(seconds)
            row["difference_points"] = 100 * (row["csv_mean"] - row["builtin_mean"])
            rows.append(row)
            print(f"{method}: built-in {row['builtin_mean']:.4f}, CSV {row['csv_mean']:.4f}", file=sys.stderr)
        model = folder / "adult.npz"
        code, _, err = cli("train", "--method", "objective", *csv_args, "--epsilon", str(EPSILON), "--seed", "0",
                           "--out", str(model))
        if code != 0:
            raise SystemExit(err)
        served = serve_check(model, test)
        audited = audit_check(train, test, schema)
        # Without a schema: the one-line refusals (categorical columns have no public levels in the file).
        refusals = {}
        for option in ([], ["--bounds", "private"]):
            code, _, err = cli("train", "--method", "objective", "--dataset", f"csv:{train}", "--label-column",
                               "income", "--classes", "<=50K,>50K", "--epsilon", "1", *option)
            refusals[" ".join(option) or "(none)"] = {"exit": code, "stderr": err.strip().replace(str(train),
                                                                                                   "adult.csv")}
    data = {
        "machine": machine(),
        "command": f"python benchmarks/adult_csv.py --seeds {args.seeds}",
        "epsilon": EPSILON,
        "seeds": len(seeds),
        "rows": rows,
        "serve": served,
        "audit": audited,
        "without_schema": refusals,
    }
    RESULT.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {RESULT}", file=sys.stderr)
    return 0


def render(data: dict) -> str:
    m = data["machine"]
    out = [
        "## Adult as the raw UCI CSV through a public schema, against the built-in pipeline (issue 32)",
        "",
        f"Command: `{data['command']}`.  ",
        f"Machine: {machine_line(m)}.",
        "",
        "The CSVs hold adult.data and adult.test as UCI writes them (categorical text, `?` for missing, a header "
        "row added), read by `privml train --schema` with the schema of `privml.data._adult.uci_schema()` "
        "(adult.names' levels, the documented ranges, fnlwgt dropped, an indicator for `?` in workclass, "
        "occupation and native-country); the built-in pipeline is `--dataset adult` (log1p of the money "
        "columns, missing as an all-zero block). Test accuracy on Adult's published test split (16281 "
        f"records), epsilon {data['epsilon']:g}, delta 1e-5, the CLI's defaults, mean of {data['seeds']} seeds.",
        "",
        "| method | built-in | raw CSV + schema | difference (points) | features (built-in / CSV) | "
        "time per run (built-in / CSV) |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        out.append(f"| {r['method']} | {100 * r['builtin_mean']:.2f}% | {100 * r['csv_mean']:.2f}% | "
                   f"{r['difference_points']:+.2f} | {r['n_features_builtin']} / {r['n_features_csv']} | "
                   f"{r['builtin_seconds']:.1f} s / {r['csv_seconds']:.1f} s |")
    s, a = data["serve"], data["audit"]
    out += [
        "",
        f"Served: the objective-perturbation model file answered {s['rows']} raw test rows as `privml serve` "
        f"receives them (strings, `null` for `?`; {s['with_missing']} with a missing cell), accuracy "
        f"{100 * s['accuracy']:.2f}%. Audited: objective perturbation at epsilon {a['claimed_epsilon']:g} on "
        f"{a['n_train']} records read through the schema, {a['trials']} trials a world (ClipBKD canary): "
        f"empirical lower bound {a['lower_bound']:.3f}, {'above' if a['violated'] else 'below'} the claim "
        f"({a['seconds']:.0f} s).",
        "",
        "Without a schema (`--classes '<=50K,>50K' --label-column income`), no `--bounds`, then `--bounds "
        "private`: exit " + " and ".join(str(r["exit"]) for r in data["without_schema"].values()) + ", one line each:",
        "",
        "```text",
        *(r["stderr"] for r in data["without_schema"].values()),
        "```",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
