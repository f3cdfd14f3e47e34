from __future__ import annotations

import base64
import re
import shutil
import subprocess

import pytest

from privml.study import ResultStore, collect, write_report
from privml.study._report import render_html


def test_report_has_a_figure_per_sweep_and_the_tables(tiny_study, tmp_path):
    spec, outcome, _ = tiny_study
    page = outcome.report.read_text()
    assert page.count('<img alt="') == len(spec.sweeps)
    assert page.count("data:image/png;base64,") == len(spec.sweeps)
    for section in ('id="tradeoffs"', 'id="recommendations"', 'id="sweep-epsilon"', 'id="sweep-budget"'):
        assert section in page
    # Self-contained: no external resources.
    assert not re.search(r'src="(?!data:)', page)
    assert "Selection leaks" not in page  # the tiny study uses public defaults
    # The report is rebuilt identically from the store alone.
    again = write_report(ResultStore(outcome.results), tmp_path)
    assert again.read_text() == page


def test_each_figure_is_also_a_png_file_identical_to_the_inlined_one(tiny_study):
    spec, outcome, _ = tiny_study
    page = outcome.report.read_text()
    files = sorted((outcome.report.parent / "figures").glob("*.png"))
    assert [f.stem for f in files] == sorted(sweep.name for sweep in spec.sweeps)
    for f in files:
        png = f.read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert base64.b64encode(png).decode("ascii") in page


def test_sweep_names_become_safe_file_names():
    from privml.study._report import _file_name

    assert _file_name("budget-pure") == "budget-pure"
    assert _file_name("../etc/passwd") == "_etc_passwd"
    assert _file_name("a b/c") == "a_b_c"


def test_findings_are_computed_from_the_results(tiny_study):
    _, outcome, _ = tiny_study
    results = collect(ResultStore(outcome.results))
    page = render_html(results)
    # Epsilon 0.3 -> 30 lifts every private method on digits, by 30 to 66 points, but two repeats whose gains
    # differ by 15 points support no confident verdict (t with 1 degree of freedom): tested, and said so.
    assert re.search(r"(✔ holds|\? inconclusive)</span>: Every method gets more accurate as epsilon grows", page)
    assert re.search(r"methods with a confident gain from epsilon = 0.3 to 30: .* pts \[[-+]", page)
    assert "With 2 repeats only large, consistent differences are conclusive" in page
    # Both kinds ran in the budget sweep, so the large-B claim has a verdict with its numbers.
    assert re.search(r"(✔ holds|✘ refuted|\? inconclusive)</span>: Private training beats private prediction", page)
    assert "at B = 1000: best private training" in page
    # No subsample-and-aggregate in this study: that claim is marked untested, not asserted.
    assert "– untested</span>: Subsample-and-aggregate is the best method at small B" in page


def test_leaky_selection_is_flagged(tmp_path):
    from privml.study import run_study, spec_from_dict

    from .conftest import tiny_spec_dict

    spec = spec_from_dict(tiny_spec_dict(methods=["output"], repeats=1, selection={"mode": "validation",
                                         "grids": {"output": {"l2": [1e-3, 1e-1]}}},
                                         sweeps=[{"name": "e", "parameter": "epsilon", "values": [1.0, 3.0]}]))
    outcome = run_study(spec, tmp_path, progress=False)
    assert "Selection leaks" in outcome.report.read_text()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(tiny_study, tmp_path):
    spec, outcome, _ = tiny_study
    url = outcome.report.resolve().as_uri()
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--virtual-time-budget=10000", "--dump-dom", url], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    # The page's own probe counts the figures that decoded: all of them.
    n = len(spec.sweeps)
    assert f'data-images-loaded="{n}/{n}"' in dom
    assert dom.count("<table") >= 3
    shot = tmp_path / "report.png"
    subprocess.run([*base, "--window-size=1200,3000", f"--screenshot={shot}", url], capture_output=True,
                   timeout=120, check=True)
    assert shot.stat().st_size > 20_000  # a rendered page with figures, not a blank one
