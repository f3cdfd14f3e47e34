"""From a study to a model: what ``privml study recommend`` tells to run, and ``privml train --from-study``.

The study ranks methods on data it prepared itself (:func:`privml.study._prepare.prepare`: a
public record set aside, the test split the study chose) with the hyper-parameters each repeat
selected and one neighbouring relation. ``train --from-study RESULTS --epsilon E`` trains the
recommended method exactly so: the same preparation and split, the point's settings, the
hyper-parameters most repeats chose, the study's relation (DP-SGD under replace-one unless the
study said otherwise); the model file it writes is read by ``predict`` and ``serve`` as any
other. :func:`recipe` is what ``study recommend`` prints: the hyper-parameters, the relation,
the exact ``--from-study`` command, and the equivalent standalone ``privml train`` command (on
train's own 80/20 split of all the records), or, for a private prediction method, which
commands serve it (``train`` writes no such model).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any, cast

from privml._validation import check_count, check_delta, check_epsilon
from privml.cli._common import (
    BIAS,
    CliError,
    emit,
    held_out_is_public,
    nonprivate_block,
    schema_extra,
    table,
    warnings_as_lines,
)
from privml.data import load_dataset
from privml.data._dataset import DatasetInfo
from privml.data._schema import load_schema
from privml.exceptions import PrivacyLeakWarning
from privml.io import save_model
from privml.study import ResultStore, collect, recommend
from privml.study._methods import get_method
from privml.study._prepare import prepare
from privml.study._runner import RESULTS_FILE

#: The study's hyper-parameter names -> the ``privml train`` options that set them.
HYPER_OPTIONS = {"l2": "--l2", "clip_norm": "--clip-norm", "learning_rate": "--learning-rate"}
#: ``privml train`` options that --from-study takes from the study instead (their argparse defaults).
_FROM_THE_STUDY = {"method": None, "dataset": None, "schema": None, "bounds": None, "l2": None, "classes": None,
                   "test_path": None, "max_train": None, "neighbouring": None, "clip_norm": None,
                   "learning_rate": None, "epochs": None, "batch_size": None, "threads": None, "device": None,
                   "precision": None, "clip_precision": None, "label_column": "label", "no_bias": False,
                   "architecture": None, "no_progress": False}


def open_results(path: str) -> ResultStore:
    """A study's results, read only: the store at ``path``, or in the folder ``path`` (FileNotFoundError if none)."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    return ResultStore(p, read_only=True)


def check_setting(setting: dict) -> None:
    """The settings ``recommend`` is asked about, each in its range: the nearest point is found in log units, so a
    value outside it would end in a bare "math domain error" (or a meaningless answer)."""
    if "epsilon" in setting:
        check_epsilon(setting["epsilon"], "--epsilon")
    if "delta" in setting:
        check_delta(setting["delta"], "--delta")
    for name in ("budget", "n", "d", "k"):
        if name in setting:
            check_count(setting[name], f"--{name}", minimum=2 if name == "k" else 1)


def _data_options(spec: Any) -> list[str]:
    out = ["--dataset", spec.dataset]
    if spec.schema is not None:
        return [*out, "--schema", spec.schema]
    if spec.bounds is not None:
        out += ["--bounds", spec.bounds]
    if spec.dataset.startswith("csv:") and spec.label_column != "label":
        out += ["--label-column", spec.label_column]
    if spec.classes is not None:
        out += ["--classes", ",".join(spec.classes)]
    return out


def recipe(rec: Any, spec: Any, results: str) -> dict[str, Any]:
    """What ``study recommend --json`` adds: hyper-parameters, relation and the commands that make the model."""
    setting = rec.setting
    privacy = ["--epsilon", f"{setting['epsilon']:g}", "--delta", f"{setting['delta']:g}"]
    hyper = [part for name, value in sorted(rec.chosen.items()) if name in HYPER_OPTIONS
             for part in (HYPER_OPTIONS[name], f"{value:g}")]
    out: dict[str, Any] = {"hyper_parameters": rec.chosen}
    if rec.method == "prediction-sensitivity":
        l2 = ["--l2", f"{rec.chosen['l2']:g}"] if "l2" in rec.chosen else []
        out["serve"] = [
            shlex.join(["privml", "train", "--method", "nonprivate", *_data_options(spec), *l2, "--out", "model.npz"]),
            shlex.join(["privml", "serve", "--model", "model.npz", "--method", "prediction-sensitivity", *privacy,
                        "--budget", str(setting["budget"]), "--ledger", "ledger.sqlite"]),
        ]
        out["note"] = ("private prediction: the model stays secret and every answer is noisy; `privml train` writes "
                       "the non-private model it answers from (keep it private), `privml serve` (or `privml "
                       "predict`) answers under the budget")
        return out
    if rec.method == "subsample-aggregate":
        out["serve"] = [shlex.join(["privml", "serve", "--model", "teachers.npz", *privacy, "--budget",
                                    str(setting["budget"]), "--ledger", "ledger.sqlite"])]
        out["note"] = (f"private prediction: `privml train` writes no subsample-and-aggregate model; fit "
                       f"privml.prediction.SubsampleAndAggregate(n_models={rec.chosen.get('m', 'M')}, ...) in Python, "
                       "save it with privml.io.save_model as teachers.npz (keep it private), then serve it")
        return out
    relation = ["--neighbouring", "replace-one"] if rec.method == "dpsgd" and spec.neighbouring == "replace-one" else []
    out["command"] = shlex.join(["privml", "train", "--from-study", results, *privacy, "--out", "model.npz"])
    out["explicit_command"] = shlex.join(["privml", "train", "--method", rec.method, *_data_options(spec), *privacy,
                                          *hyper, *relation, "--out", "model.npz"])
    return out


def train_from_study(args: argparse.Namespace) -> None:
    """``privml train --from-study RESULTS --epsilon E [--delta D] [--budget B]``: see the module docstring."""
    # long-function: the study's run, rebuilt step by step (results, point, data, settings, fit, file) in order.
    given = sorted(f"--{name.replace('_', '-')}" for name, default in _FROM_THE_STUDY.items()
                   if getattr(args, name) != default)
    if given:
        raise CliError(f"{', '.join(given)} cannot be given with --from-study: the study fixes them")
    if args.epsilon is None:
        raise CliError("--from-study needs --epsilon: the setting whose recommendation to train")
    asked = {k: getattr(args, k) for k in ("epsilon", "delta", "budget") if getattr(args, k) is not None}
    check_setting(asked)
    results = collect(open_results(args.from_study))
    spec = results.spec
    rec, distance = recommend(results, **asked)
    if distance > 0:
        measured = ", ".join(f"{k} = {rec.setting[k]:g}" for k in asked)
        raise CliError(f"the study measured no run at {', '.join(f'{k} = {v:g}' for k, v in asked.items())} (the "
                       f"nearest: {measured}); give a setting it measured")
    method = get_method(rec.method)
    if method.kind == "prediction":
        how = recipe(rec, spec, args.from_study)
        raise CliError(f"the study recommends {rec.method}, a private prediction method that `privml train` does not "
                       f"write; serve it with: {' && '.join(how['serve'])}")
    point = {k: rec.setting.get(k) for k in ("n", "d", "k")}
    if any(v is not None for v in point.values()):
        raise CliError(f"--from-study trains studies of every record, feature and class (own-data); this point sets "
                       f"{', '.join(f'{k} = {v}' for k, v in point.items() if v is not None)}")
    with warnings_as_lines():
        info = load_dataset(spec.dataset, preprocess=False, schema=spec.schema, bounds=spec.bounds,
                            label_column=spec.label_column if spec.dataset.startswith("csv:") else "label",
                            classes=None if spec.classes is None else list(spec.classes)).info
        if spec.selection.mode == "validation" and rec.chosen and not held_out_is_public(spec.dataset):
            warnings.warn(PrivacyLeakWarning(
                f"the hyper-parameters {rec.chosen} were chosen by the study's validation selection on your private "
                "records, which no guarantee covers (a study with --selection private charges its choice)"),
                stacklevel=1)
    data = prepare(spec.dataset, n=None, d=None, k=None, public_size=spec.public_size, seed=spec.seed,
                   label_column=spec.label_column, classes=spec.classes, schema=spec.schema, bounds=spec.bounds,
                   test_fraction=spec.test_fraction)
    params = {"l2": None, "m": None, **rec.setting, **rec.chosen, "neighbouring": spec.neighbouring}
    print(f"training {rec.label} as study {spec.name} ran it on {spec.dataset} ({data.y_train.size} records)...",
          file=sys.stderr)
    # seed None: fresh OS entropy, as the estimators' random_state (never saved in the model file).
    fitted = method.fit(data.X_train, data.y_train, params=params, n_classes=data.n_classes,
                        seed=cast(int, args.seed))
    accuracy, _ = method.evaluate(fitted, data.X_test, data.y_test)
    model, guarantee = fitted.model, fitted.model.privacy_
    result: dict[str, Any] = {
        "method": rec.method, "dataset": spec.dataset, "from_study": args.from_study, "study": spec.name,
        "measured_setting": rec.setting, "hyper_parameters": rec.chosen, "selection": spec.selection.mode,
        "n_train": int(data.y_train.size), "n_test": int(data.y_test.size), "n_features": data.n_features,
        "n_classes": data.n_classes, "epsilon": guarantee.epsilon, "delta": guarantee.delta,
        "neighbouring": guarantee.neighbouring.value, "neighbouring_detail": guarantee.neighbouring.detail,
        "accountant": guarantee.accountant, "preprocessing": list(data.steps),
    }
    if spec.selection.mode == "private":
        result["note"] = ("the hyper-parameters were released by the study's private selection, whose cost (the "
                          "study's epsilon at this point) adds to this model's guarantee by composition")
    exact = {"test_accuracy": float(accuracy), "study_accuracy": rec.accuracy}
    if held_out_is_public(spec.dataset):
        result.update(exact)
    if args.out:
        dataset = DatasetInfo(name=info.name, n_train=int(data.y_train.size), n_test=int(data.y_test.size),
                              n_features=data.n_features, classes=info.classes, source=info.source,
                              preprocessing=data.steps)
        schema = None if spec.schema is None else load_schema(spec.schema)
        extra = {"dataset": dataset.to_dict(), "bias": BIAS, **schema_extra(schema, spec.bounds)}
        result["model"] = str(save_model(model, args.out, extra=extra))
    if not held_out_is_public(spec.dataset):
        result.update(nonprivate_block(args, exact, what="exact accuracies on the study's private test split"))
    emit(result, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    rows = [("method", f"{r['method']} (study {r['study']}, {r['selection']} selection)"),
            ("hyper-parameters", ", ".join(f"{k} = {v:g}" for k, v in r["hyper_parameters"].items()) or "none tuned"),
            ("dataset", f"{r['dataset']} ({r['n_train']} train / {r['n_test']} test, {r['n_features']} features)"),
            ("guarantee", f"({r['epsilon']:.4g}, {r['delta']:.3g})-DP, {r['neighbouring']} [{r['accountant']}]"),
            ("neighbouring", r["neighbouring_detail"])]
    for key in ("test_accuracy", "study_accuracy"):
        if key in r:
            rows.append((key.replace("_", " "), f"{100 * r[key]:.2f}%"))
    if "note" in r:
        rows.append(("note", r["note"]))
    if "model" in r:
        rows.append(("model file", r["model"]))
    rows += [(f"{key} (non-private)", f"{100 * value:.2f}%") for key, value in r.get("nonprivate", {}).items()]
    return table(rows)


__all__ = ["check_setting", "open_results", "recipe", "train_from_study"]
