"""``privml schema``: the public schema of a CSV (ranges, levels, missing values, classes).

    privml schema suggest DATA.csv [--label-column C] [--out schema.toml] [--json]

``suggest`` writes a *draft* to ``--out`` (default ``DATA.schema.toml`` beside
the data): every value read from the data (a column's minimum and maximum,
the levels and classes seen, whether cells are missing) carries the comment
``FROM THE DATA`` and must be replaced by public knowledge; the file says
``draft = true`` and ``privml train --schema`` refuses it until that line is
deleted. The data-derived values are a release of the private records: they
go into the file only (created readable by its owner only), never to stdout
or ``--json``, which list the columns and their kinds; a
``PrivacyLeakWarning`` on stderr says so.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from privml.cli._common import (
    CliError,
    add_command,
    add_json_flag,
    check_output_path,
    emit,
    leak_warnings_as_lines,
    table,
)
from privml.data._schema_draft import FROM_THE_DATA, suggest_schema


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "schema",
        description="Public schemas of CSV data: the ranges, levels, missing-value rules and classes that "
                    "privml train --schema reads the data through.",
    )
    commands = parser.add_subparsers(dest="schema_command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True
    suggest = add_command(
        commands, "suggest", _suggest,
        summary="write a draft schema of a CSV, marking each value read from the data",
        description="Write a draft schema of DATA: every value read from the data is marked FROM THE DATA and "
                    "must be replaced by public knowledge (it is not public), then `draft = true` deleted.",
    )
    suggest.add_argument("data", help="the CSV file (header row required)")
    suggest.add_argument("--label-column", default="label", help="the label column (default: label)")
    suggest.add_argument("--out", help="the draft's path, .toml or .json (default: DATA.schema.toml beside DATA)")
    add_json_flag(suggest)


def _suggest(args: argparse.Namespace) -> None:
    data = Path(args.data)
    out = Path(args.out) if args.out is not None else data.with_name(data.stem + ".schema.toml")
    check_output_path(str(out), "--out")
    if out.exists():
        raise CliError(f"--out {out} exists; the draft never overwrites a file (remove it or give another path)")
    if not data.is_file():
        raise CliError(f"data file not found: {data}")
    with leak_warnings_as_lines():
        schema, comments = suggest_schema(data, label_column=args.label_column)
    if out.suffix == ".toml":
        text = schema.to_toml(comments=comments)
    else:  # JSON has no comments: the notes go beside the values

        document = schema.to_dict()
        document["from_the_data"] = sorted(f"{column}.{key}" for column, key in comments)
        text = json.dumps(document, indent=2) + "\n"
    # Owner-only: the draft holds values of the private records.
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    result = {
        "schema": str(out),
        "draft": True,
        "label_column": schema.label.column if schema.label is not None else None,
        "columns": [{"name": c.name, "kind": c.kind} for c in schema.columns],
        "next": f"replace every value marked {FROM_THE_DATA} in {out} by public knowledge, delete draft = true, "
                f"then train with --schema {out}",
    }
    emit(result, as_json=args.json, render=_render)


def _render(r: dict) -> str:
    kinds = [c["kind"] for c in r["columns"]]
    rows = [
        ("draft schema", r["schema"]),
        ("columns", f"{kinds.count('numeric')} numeric, {kinds.count('categorical')} categorical "
                    f"(label: {r['label_column']})"),
        ("next", r["next"]),
    ]
    return table(rows)
