"""benchmarks/feature_mean_audit.py renders its results file as a BENCHMARKS.md section (issue 31)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import feature_mean_audit as bench  # noqa: E402


def test_render_has_one_row_per_audit_and_counts_the_verdicts():
    data = json.loads((BENCHMARKS / "results" / "feature_mean_audit.json").read_text())
    text = bench.render(data)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(data["audits"]) == len(bench.CONFIGS)
    broken = [r for r in data["audits"] if r["broken"]]
    assert f"Planted bugs caught: {sum(r['violated'] for r in broken)} of {len(broken)}" in text
    # a bound above the claim reads as caught for a control and as a false alarm for the real mechanism
    flipped = dict(data, audits=[dict(r, violated=True) for r in data["audits"]])
    verdicts = [line.rsplit("|", 2)[1].strip() for line in bench.render(flipped).splitlines()
                if line.startswith("| ") and "---" not in line][1:]
    assert verdicts == ["**caught**" if r["broken"] else "**false alarm**" for r in data["audits"]]
