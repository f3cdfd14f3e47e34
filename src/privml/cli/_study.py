"""``privml study``: the trade-off study (which private method, what accuracy).

Usage::

    privml study list [--json]
    privml study run PRESET|SPEC_FILE --out DIR [--jobs N] [--executor local|dask://HOST:PORT]
                     [--dataset NAME|csv:PATH [--label-column COL] [--schema FILE | --bounds unit]]
                     [--selection MODE] [--neighbouring R]
                     [--repeats R] [--sweeps NAME ...] [--device D] [--no-cache | --clear-cache]
                     [--no-progress] [--json]
    privml study status DIR [--spec-hash H] [--json]
    privml study report RESULTS --out DIR [--json]
    privml study recommend RESULTS [--epsilon E] [--delta D] [--budget B] [--n N] [--d D] [--k K] [--json]

``run`` prints where the results store and the HTML report went; re-running
it with the same ``--out`` resumes (finished runs are skipped and failed ones
retried), and prints per method how often the shared cache (``DIR/cache``:
non-private minimisers, private data, see :mod:`privml.study._cache`) was hit
and the time that saved. ``status`` says what is done, running, failed and
left, per sweep and method, while a study runs or after.

Exit status of ``run``: 0 when every run finished; 1 when some
failed (stderr says how many and each distinct error once, one line each;
``--json`` carries ``failed`` and ``errors``; the report lists them at the
top); 2 for bad input (an unknown preset, dataset or option), before any run.

A ``csv:`` dataset is read through its public schema (``--schema FILE``, or
``schema = "FILE"`` in a spec file), exactly as ``privml train --schema``
reads it; without a schema or ``--bounds unit`` it is refused, in one line,
before any run. The schema's content is part of every run's key.

``--device`` (``auto``, the default: CUDA when available; ``cpu``, ``cuda``
or ``cuda:N``) is where the CNN methods run, in every worker; it is part of
their runs' keys (:class:`privml.study.StudySpec`) and an error for a study
without CNN methods.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from privml.cli._common import (
    add_command,
    add_json_flag,
    add_schema_options,
    check_out_folder,
    check_schema_options,
    emit,
    finite_float,
    held_out_is_public,
    integer,
    leak_warnings_as_lines,
    parse_classes,
    report_failures,
    table,
)
from privml.exceptions import PrivacyLeakWarning
from privml.neighbouring import Neighbouring

if TYPE_CHECKING:  # the study package (matplotlib, joblib) loads only when a study command runs
    pass


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "study",
        description=(
            "Reproduce and extend 'The Trade-Offs of Private Prediction' (van der Maaten & Hannun 2020): "
            "private training against private prediction as epsilon, delta, the inference budget, n, d and k vary."
        ),
    )
    sub = parser.add_subparsers(dest="study_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    listing = add_command(sub, "list", _list, summary="list the built-in studies (presets)")
    add_json_flag(listing)

    run = add_command(sub, "run", _run, summary="run a preset or a spec file (TOML, or YAML with pyyaml)")
    run.add_argument("study", metavar="PRESET|SPEC_FILE", help="a preset name (see `privml study list`) or a file")
    run.add_argument("--out", required=True,
                     help="output folder (results.sqlite, report/index.html, report/figures/*.png, cache/)")
    run.add_argument("--jobs", type=integer, default=1, help="local worker processes (default 1)")
    run.add_argument("--executor", default="local", help="local (default) or dask://HOST:PORT")
    run.add_argument("--dataset", help="run the study on this dataset instead: a built-in name, csv:PATH or npz:PATH")
    run.add_argument("--label-column", help="label column of a --dataset csv:PATH (default: label)")
    run.add_argument("--classes", help="the public class set of csv:/npz: data, comma-separated (e.g. no,yes); "
                     "without it the class set is read from the private labels, with a PrivacyLeakWarning")
    add_schema_options(run)
    run.add_argument("--selection", choices=("validation", "private", "public"),
                     help="hyper-parameter selection mode (default: the study's)")
    run.add_argument("--neighbouring", choices=("replace-one", "add/remove-one", "mixed"),
                     help="the one relation every guarantee holds under (default: the study's, replace-one); "
                          "mixed is the paper's protocol, DP-SGD under add/remove-one, flagged as not like for like")
    run.add_argument("--repeats", type=integer,
                     help="repeats per point (default: the study's; at most 1000, privml.study._sizing.MAX_REPEATS)")
    run.add_argument("--sweeps", nargs="+", metavar="NAME",
                     help="run only these sweeps of the study (e.g. budget-pure budget); finished runs are "
                          "reused by a later full run of the same --out")
    run.add_argument("--device",
                     help="auto (default: the study's), cpu, cuda or cuda:N: where the CNN methods (nonprivate-cnn, "
                          "dpsgd-cnn, subsample-aggregate-cnn) run; part of their runs' keys")
    cached = run.add_mutually_exclusive_group()
    cached.add_argument("--no-cache", action="store_true",
                        help="compute everything in every run (no shared cache; the same results, but under private "
                             "selection, whose secret key lives in the cache: each run then draws fresh randomness)")
    cached.add_argument("--clear-cache", action="store_true",
                        help="delete DIR/cache (the non-private minimisers the runs share: private data) first")
    run.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json_flag(run)

    status = add_command(sub, "status", _status,
                         summary="what a study has done, is running, failed and has left, per sweep")
    status.add_argument("folder", metavar="DIR", help="the study's --out folder (or its results.sqlite)")
    status.add_argument("--spec-hash", help="which study of the store (default: the last one run)")
    add_json_flag(status)

    report = add_command(sub, "report", _report, summary="write the HTML report of a results store")
    report.add_argument("results", metavar="RESULTS", help="results.sqlite (or the folder holding it)")
    report.add_argument("--out", required=True, help="folder for index.html and figures/*.png")
    report.add_argument("--spec-hash", help="which study of the store (default: the last one run)")
    add_json_flag(report)

    rec = add_command(sub, "recommend", _recommend, summary="the best measured method for the setting nearest to yours")
    rec.add_argument("results", metavar="RESULTS", help="results.sqlite (or the folder holding it)")
    rec.add_argument("--epsilon", type=finite_float)
    rec.add_argument("--delta", type=finite_float)
    rec.add_argument("--budget", type=integer)
    rec.add_argument("--n", type=integer)
    rec.add_argument("--d", type=integer)
    rec.add_argument("--k", type=integer)
    add_json_flag(rec)


def _list(args: argparse.Namespace) -> None:
    from privml.study import load_preset, plan, preset_names  # lazy(startup): the study package, for this command

    presets = []
    for name in preset_names():
        spec = load_preset(name)
        jobs, notes = plan(spec)
        presets.append({"name": name, "description": spec.description, "dataset": spec.dataset,
                        "methods": list(spec.methods), "runs": len(jobs), "notes": notes})
    emit({"presets": presets}, as_json=args.json,
         render=lambda r: table([(p["name"], f"{p['description']} [{p['runs']} runs]") for p in r["presets"]]))


def _run(args: argparse.Namespace) -> int:
    from privml.study import load_preset, load_spec, make_executor, preset_names, run_study  # lazy(startup): study
    from privml.study._executors import DaskExecutor  # lazy(startup): the study package
    from privml.study._points import plan  # lazy(startup): the study package
    from privml.study._runner import check_dataset, place_study, size_study  # lazy(startup): the study package

    if args.label_column and not (args.dataset or "").startswith("csv:"):
        raise ValueError("--label-column applies to --dataset csv:PATH only")
    check_out_folder(args.out, "--out")  # a file there would end the study in a traceback, after its work
    path = Path(args.study)
    if args.study in preset_names():
        spec = load_preset(args.study)
    elif path.is_dir():
        raise ValueError(f"{args.study} is a directory; give a preset name or a spec file")
    elif path.suffix.lower() in (".toml", ".yaml", ".yml") or path.exists():
        spec = load_spec(path)
    else:
        raise ValueError(f"{args.study!r} is neither a preset ({', '.join(preset_names())}) nor a spec file")
    changes = {}
    if args.dataset:
        changes["dataset"] = args.dataset
    if args.label_column:
        changes["label_column"] = args.label_column
    if args.classes is not None:
        changes["classes"] = parse_classes(args.classes)  # the spec refuses it for a built-in dataset
    if args.selection:
        changes["selection"] = args.selection
    if args.neighbouring:
        changes["neighbouring"] = args.neighbouring
    if args.repeats is not None:
        changes["repeats"] = args.repeats
    if args.sweeps:
        names = [sweep.name for sweep in spec.sweeps]
        unknown = sorted(set(args.sweeps) - set(names))
        if unknown:
            raise ValueError(f"--sweeps: {', '.join(unknown)} not in study {spec.name} "
                             f"(its sweeps: {', '.join(names)})")
        changes["sweeps"] = [sweep for sweep in spec.to_dict()["sweeps"] if sweep["name"] in args.sweeps]
    if args.device is not None:
        changes["device"] = args.device
    if args.schema is not None:
        changes["schema"] = args.schema
    if args.bounds is not None:
        changes["bounds"] = args.bounds
    if changes:
        spec = spec.with_overrides(**changes)
    # A CSV without public bounds: refused as `privml train` refuses it (the same check, the same line).
    check_schema_options(argparse.Namespace(dataset=spec.dataset, schema=spec.schema, bounds=spec.bounds))
    spec = place_study(spec)  # a bad or missing device is refused before any output
    executor = make_executor(args.executor, jobs=args.jobs)  # bad --executor/--jobs: refused before any output
    if isinstance(executor, DaskExecutor):  # before the "results in" line: an unreachable one is one line, alone
        executor.check_reachable()
    # A bad or unobtainable dataset is refused before any output too (a missing built-in set is fetched now).
    # The library's PrivacyLeakWarnings, one line each as they come: the class set read from private labels
    # (check_dataset), and the stated exception that a study of the user's own rows is not for publication
    # (run_study, before any run).
    with leak_warnings_as_lines():
        check_dataset(spec, local=not isinstance(executor, DaskExecutor))
        sized = size_study(spec)  # the repeats and test split a verdict needs, from the data's size
        for note in sized.notes[len(spec.notes):]:
            print(f"note: {note}", file=sys.stderr)
        spec = sized
        print(f"study {spec.name} on {spec.dataset}: results in {args.out}", file=sys.stderr)
        # Methods this install cannot run (the CNN methods without the torch extra) are left out: said now,
        # before any run, not only in the report.
        for note in plan(spec)[1]:
            if " is unavailable: " in note:
                print(f"note: {note}", file=sys.stderr)
        outcome = run_study(spec, args.out, executor=executor, progress=not args.no_progress,
                            report=not args.no_report, check_data=False, cache=not args.no_cache,
                            clear_cache=args.clear_cache)
    emit({"study": spec.name, "dataset": spec.dataset, "selection": spec.selection.mode,
          "neighbouring": spec.neighbouring, **outcome.to_dict()},
         as_json=args.json, render=_render_run)
    return report_failures(args.prog, outcome.failed, outcome.planned - outcome.skipped, outcome.errors)


def _render_run(r: dict) -> str:
    rows = [("study", f"{r['study']} on {r['dataset']} (selection: {r['selection']})"),
            ("runs", f"{r['planned']} planned, {r['skipped']} already done, {r['finished']} finished, "
                     f"{r['failed']} failed"),
            ("wall time", f"{r['seconds']:.1f} s ({r['executor']})"),
            ("results", r["results"])]
    if r["report"]:
        rows.append(("report", r["report"] + (" (failed runs listed at the top)" if r["failed"] else "")))
    for c in r.get("cache") or []:
        searches = c.get("selection_hits", 0) + c.get("selection_misses", 0)
        if c["hits"] or c["misses"] or searches:
            rate = "" if c["hit_rate"] is None else f" ({100 * c['hit_rate']:.0f}% hits)"
            reused = f"; searches {c['selection_hits']} reused, {c['selection_misses']} made" if searches else ""
            rows.append((f"cache {c['method']}", f"{c['hits']} hits, {c['misses']} misses{rate}{reused}; "
                                                 f"{_seconds(c['seconds_saved'])} saved, "
                                                 f"{_seconds(c['seconds_computed'])} computing"))
    rows += [("note", n) for n in r["notes"]]
    return table(rows)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def _status(args: argparse.Namespace) -> None:
    from privml.study._status import study_status  # lazy(startup): the study package, for this command

    emit(study_status(args.folder, spec_hash=args.spec_hash), as_json=args.json, render=_render_status)


def _render_status(r: dict) -> str:
    def counts(c: dict) -> str:
        return f"{c['done']} done, {c['running']} running, {c['failed']} failed, {c['left']} left"

    rows = [("study", f"{r['study']} ({r['spec_hash']}){' - running now' if r['active'] else ''}"),
            ("runs", counts(r["total"]))]
    for sweep in r["sweeps"]:
        rows.append((f"sweep {sweep['sweep']}", counts(sweep["total"])))
        rows += [(f"  {m}", counts(c)) for m, c in sweep["methods"].items()]
    if r["run_seconds_left"] is not None and (r["total"]["left"] or r["total"]["running"] or r["total"]["failed"]):
        rows.append(("time left", f"about {_seconds(r['run_seconds_left'])} of run time (divide by the workers; "
                                  "from the mean time of the finished runs of each method)"))
    rows += [("error", f"{e['error']} ({e['count']} runs)") for e in r["errors"]]
    return table(rows)


def _report(args: argparse.Namespace) -> None:
    from privml.cli._from_study import open_results  # lazy(startup): the study package, only for this command
    from privml.study import write_report  # lazy(startup): the study package, only for this command

    check_out_folder(args.out, "--out")
    target = write_report(open_results(args.results), args.out, spec_hash=args.spec_hash)
    emit({"report": str(target)}, as_json=args.json, render=lambda r: table([("report", r["report"])]))


def _recommend(args: argparse.Namespace) -> None:
    from privml.cli._from_study import check_setting, open_results, recipe  # lazy(startup): the study package
    from privml.study import collect, recommend  # lazy(startup): the study package, only for this command

    names = ("epsilon", "delta", "budget", "n", "d", "k")
    setting = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    check_setting(setting)
    results = collect(open_results(args.results))
    rec, distance = recommend(results, **setting)
    private = not held_out_is_public(results.spec.dataset)
    if private:  # the study's stated exception (docs/releases.md): exact accuracies on the user's held-out rows
        print(f"warning: {PrivacyLeakWarning.__name__}: this accuracy is exact on your private held-out rows "
              "and not covered by any privacy guarantee; do not publish it", file=sys.stderr)
    # The relation every compared guarantee holds under (recommend refuses a study that is not like for like).
    relation = Neighbouring.parse(results.spec.neighbouring)
    result = {"private_data": private, "asked": setting, "measured_setting": rec.setting, "distance": distance,
              "neighbouring": relation.value, "neighbouring_detail": relation.detail, "method": rec.method,
              "label": rec.label, "accuracy": rec.accuracy, "std": rec.std, "nonprivate": rec.nonprivate,
              "runner_up": None if rec.runner_up is None else {"label": rec.runner_up[0], "accuracy": rec.runner_up[1]},
              "selection_leaky": rec.leaky}
    # How to get this model: its hyper-parameters, and the exact `privml train` command (or what serves it).
    result.update(recipe(rec, results.spec, args.results))
    emit(result, as_json=args.json, render=lambda r: table([
        ("best method", f"{r['label']} ({r['method']})"),
        ("hyper-parameters", ", ".join(f"{k} = {v:g}" for k, v in r["hyper_parameters"].items()) or "none tuned"),
        ("accuracy", f"{100 * r['accuracy']:.1f}% ± {100 * r['std']:.1f}"),
        ("measured at", ", ".join(f"{k} = {v}" for k, v in r["measured_setting"].items() if v is not None)),
        ("neighbours", r["neighbouring_detail"]),
        ("distance", f"{r['distance']:.2f} (0: exactly your setting; log10 units)"),
        *[("train it", r[key]) for key in ("command",) if key in r],
        *[("or, standalone", r[key]) for key in ("explicit_command",) if key in r],
        *[("serve it", line) for line in r.get("serve", [])],
        *[("note", r[key]) for key in ("note",) if key in r],
    ]))
