"""The one-run benchmark scripts render their BENCHMARKS.md sections from their results files (`make bench`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import write_benchmarks_md as writer  # noqa: E402

SCRIPTS = ["one_run_audit", "one_run_torch"]


def _section(heading: str) -> str:
    text = (writer.ROOT / "BENCHMARKS.md").read_text()
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


@pytest.mark.parametrize("name", SCRIPTS)
def test_render_of_the_results_file_is_the_section(name):
    assert name in writer.SCRIPT_RENDERED  # the writer renders it, so `make bench` keeps the section
    data = json.loads((writer.RESULTS / f"{name}.json").read_text())
    rendered = writer._script_renderer(name)(data)
    section = _section(rendered.splitlines()[0])
    rows = [line for line in rendered.splitlines() if line.startswith("| ")]
    assert len(rows) >= 8 and all(row in section.splitlines() for row in rows)
    assert section.strip() == rendered.strip()


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_rerun_without_notes_still_renders_its_tables(name):
    # rerunning a part drops its hand-written notes: the tables and a statement of the setting remain
    data = json.loads((writer.RESULTS / f"{name}.json").read_text())
    rows = [line for line in writer._script_renderer(name)(data).splitlines() if line.startswith("| ")]
    data.pop("notes", None)
    data.get("controls", {}).pop("notes", None)
    bare = writer._script_renderer(name)(data)
    assert [line for line in bare.splitlines() if line.startswith("| ")] == rows
