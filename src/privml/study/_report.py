"""The study report: one self-contained HTML page (figures inlined as base64 PNG),
and each figure also as its own PNG file (``figures/<sweep>.png``) for slides and papers.

For every sweep: the figure (mean accuracy per method with a band of one
standard deviation over repeats, the non-private baseline dashed), and the
findings that figure supports or refutes, computed from the results. Then
the trade-off table (the paper's table, measured here), the recommendation
table (best private method per setting), and how the runs were made: data
preparation, hyper-parameter selection mode (and whether it leaks), notes
on methods left out. Failed runs come first, before any figure: how many,
each distinct error once with its count and methods, and every failed run
(a figure with missing points must never look complete).
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections import Counter
from pathlib import Path
from typing import Any

from scipy import stats

from privml import __version__
from privml.data._registry import is_user_data
from privml.study._aggregate import StudyResults, collect
from privml.study._cells import Curve
from privml.study._findings import Finding, findings
from privml.study._points import point_runs
from privml.study._recommend import not_like_for_like, recommendations
from privml.study._spec import StudySpec
from privml.study._store import ResultStore
from privml.study._summary import COLUMNS, tradeoff_table

_LABELS = {"epsilon": "privacy loss ε", "delta": "privacy failure probability δ", "budget": "inference budget B",
           "n": "training examples n", "d": "dimension d (PCA)", "k": "number of classes k",
           "l2": "regularisation λ", "m": "number of models m"}
_STATUS = {"holds": ("✔ holds", "ok"), "refuted": ("✘ refuted", "bad"), "inconclusive": ("? inconclusive", "na"),
           "untested": ("– untested", "na")}
# Marks the page once every figure decoded: a headless browser (the tests) reads the flag from the DOM.
_LOADED_PROBE = (
    "<script>window.addEventListener('load', function () { var imgs = Array.prototype.slice.call(document.images);"
    " document.body.setAttribute('data-images-loaded', String(imgs.filter(function (i) {"
    " return i.complete && i.naturalWidth > 0; }).length) + '/' + imgs.length); });</script>"
)
_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: left; }
th { background: #f0f0f0; }
figure { margin: 1.5em 0; }
img { max-width: 100%; }
.ok { color: #11772f; } .bad { color: #b3261e; } .na { color: #777; }
.leak { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.5em 1em; }
.failed { background: #fdecea; border-left: 4px solid #b3261e; padding: 0.5em 1em; }
ul.findings li { margin: 0.3em 0; }
"""


def write_report(store: ResultStore | str | Path, out: str | Path, *, spec_hash: str | None = None) -> Path:
    """Write ``out/index.html`` and ``out/figures/<sweep>.png`` for the study ``spec_hash`` in ``store``.

    ``spec_hash`` defaults to the last study stored. The page is self-contained
    (its figures are inlined); the PNG files are the same figures, one per sweep
    with finished runs.

    Returns
    -------
    Path
        The HTML file.

    Raises
    ------
    ValueError
        If the store holds no such study.
    """
    if not isinstance(store, ResultStore):
        # A report reads the store: it must not write to it (and a missing file is a FileNotFoundError).
        store = ResultStore(Path(store), read_only=True)
    results = collect(store, spec_hash)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(results)
    if figures:
        (out / "figures").mkdir(exist_ok=True)
    for name, png in figures.items():
        (out / "figures" / f"{_file_name(name)}.png").write_bytes(png)
    target = out / "index.html"
    target.write_text(render_html(results, figures=figures), encoding="utf-8")
    return target


def _file_name(sweep: str) -> str:
    """A safe file name for a sweep name (letters, digits, '-', '_', '.'; anything else becomes '_')."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in sweep).lstrip(".") or "sweep"


def _private_data(spec: Any) -> str:
    """The release rule's stated exception, on the page itself: a study of the user's data is not for publication."""
    if not is_user_data(spec.dataset):
        return ""
    return ('<p class="bad"><b>Private data: do not publish this report.</b> Its accuracies are exact on the '
            f"held-out rows of {_e(spec.dataset)} and its timings depend on the records: neither is covered by "
            "any privacy guarantee (docs/releases.md, the study's stated exception).</p>")


def render_html(results: StudyResults, *, figures: dict[str, bytes] | None = None) -> str:
    """The report page for ``results`` as one HTML string (``figures``: :func:`draw_figures`, drawn if absent)."""
    spec = results.spec
    figures = draw_figures(results) if figures is None else figures
    found = findings(results)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>privml study: {_e(spec.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Trade-off study: {_e(spec.name)}</h1>",
        _private_data(spec),
        _relation(spec),
        _failures(results),
        f"<p>{_e(spec.description)}</p>",
        _overview(results),
        _verdict_rule(spec.repeats) if found else "",
    ]
    failed_by_sweep = _failed_by_sweep(results)
    for sweep in spec.sweeps:
        curves = results.curves.get(sweep.name, [])
        parts.append(f'<section id="sweep-{_e(sweep.name)}"><h2>{_e(sweep.title or sweep.name)}</h2>')
        if curves:
            parts.append(f'<figure><img alt="{_e(sweep.title or sweep.name)}" src="data:image/png;base64,'
                         f'{base64.b64encode(figures[sweep.name]).decode("ascii")}"><figcaption>'
                         "Mean test accuracy over repeats, band: ±1 standard deviation; dashed: non-private. "
                         f"{_e(_relation_caption(spec))}</figcaption></figure>")
            parts.append(_curve_table(results, sweep.name))
        elif failed_by_sweep[sweep.name]:
            parts.append(f'<p class="bad">No finished runs for this sweep: {failed_by_sweep[sweep.name]} runs '
                         'failed (see <a href="#failures">failed runs</a> above).</p>')
        else:
            parts.append("<p class=\"na\">No finished runs for this sweep.</p>")
        mine = [f for f in found if sweep.name in f.sweeps]
        if mine:
            if not spec.like_for_like:  # the paper's claims, checked under the paper's own mixed relations
                parts.append(f'<p class="relation leak">{_e(_relation_caption(spec))} The checks below compare '
                             "methods across the two relations, as the paper did.</p>")
            parts.append("<ul class=\"findings\">" + "".join(_finding(f) for f in mine) + "</ul>")
        parts.append("</section>")
    parts += [_tradeoffs(results), _recommendations(results), _method_notes(results),
              f"<hr><p>privml {__version__}; spec hash {results.spec_hash}.</p>", _LOADED_PROBE, "</body></html>"]
    return "\n".join(parts)


# ------------------------------------------------------------------ sections
def _failures(results: StudyResults) -> str:
    """The failed runs, first on the page: each distinct error once with its count, then every run."""
    failures = results.failures
    if not failures:
        return ""
    by_error: dict[str, list[dict[str, Any]]] = {}
    for f in failures:
        by_error.setdefault(f["error"] or "unknown error", []).append(f)
    errors = sorted(by_error.items(), key=lambda item: -len(item[1]))
    total = len(failures) + results.n_runs
    # Methods in the study's order (the order runs finished in depends on the workers).
    order = {m: i for i, m in enumerate(results.spec.methods)}

    def methods(runs: list[dict[str, Any]]) -> str:
        return ", ".join(sorted(dict.fromkeys(r["method"] for r in runs), key=lambda m: order.get(m, len(order))))

    rows = "".join(
        f"<tr><td>{len(runs)}</td><td>{_e(methods(runs))}</td>"
        f"<td><code>{_e(error)}</code></td></tr>"
        for error, runs in errors
    )
    shown = failures[:200]
    listing = "".join(f"<li>{_e(f['method'])} {_e(_params(f['params']))} (repeat {_e(f['repeat'])}): "
                      f"{_e(f['error'] or '')}</li>" for f in shown)
    more = f"<li>… and {len(failures) - len(shown)} more</li>" if len(failures) > len(shown) else ""
    return (f'<section id="failures" class="failed"><h2>{len(failures)} of {total} runs failed</h2>'
            "<p>These runs are missing from every figure and table below. Each distinct error, once "
            "(<code>privml study run</code> with the same <code>--out</code> retries failed runs):</p>"
            f'<table class="errors"><tr><th>runs</th><th>methods</th><th>error</th></tr>{rows}</table>'
            f"<details><summary>every failed run</summary><ul>{listing}{more}</ul></details></section>")


def _failed_by_sweep(results: StudyResults) -> Counter[str]:
    """How many failed runs each sweep lost (a run shared by several sweeps counts in each)."""
    if not results.failures:
        return Counter()
    cells, _ = point_runs(results.spec)
    sweeps: dict[str, set[str]] = {}
    for cell in cells:
        sweeps.setdefault(cell.key, set()).add(cell.sweep.name)
    return Counter(name for f in results.failures for name in sweeps.get(f["key"], ()))


def _params(params: Any) -> str:
    if not isinstance(params, dict):
        return str(params)
    return ", ".join(f"{k} = {_value(v)}" for k, v in params.items() if v is not None)


def _relation_caption(spec: StudySpec) -> str:
    if spec.like_for_like:
        return f"Every guarantee holds under {spec.neighbouring} neighbours."
    return "NOT like for like: DP-SGD under add/remove-one, the other methods under replace-one (the paper's protocol)."


def _relation(spec: StudySpec) -> str:
    """The relation every guarantee of the study holds under, said first (issue: like for like)."""
    if spec.neighbouring == "replace-one":
        return ('<p class="relation"><b>Neighbouring relation: replace-one</b> for every method (van der Maaten &amp; '
                "Hannun 2020, Eq. 1): datasets of the same size that differ in one record. DP-SGD is accounted "
                "under replace-one too (Poisson sampling, tight dominating pair), so equal epsilons are equal "
                "promises.</p>")
    if spec.neighbouring == "add/remove-one":
        return ('<p class="relation"><b>Neighbouring relation: add/remove-one with n public</b> (zero-out) for every '
                "method: DP-SGD is accounted under it, and the replace-one guarantees of the other methods imply "
                "it (a null record contributes nothing, so each method's sensitivity to one record set to null "
                "is at most its replace-one bound).</p>")
    return ('<p class="relation leak"><b>Not like for like.</b> As in the paper, DP-SGD is accounted under '
            "add/remove-one and every other method under replace-one: at the same epsilon DP-SGD makes the weaker "
            "promise (by group privacy an add/remove (eps, delta) method is only (2 eps, (1 + e^eps) delta) under "
            "replace-one). Rerun with <code>neighbouring = \"replace-one\"</code> (the default) to compare equal "
            "promises.</p>")


def _overview(results: StudyResults) -> str:
    spec = results.spec
    modes = sorted({m for curves in results.curves.values() for c in curves for cell in c.cells
                    for m in cell.selection_modes})
    rows = [("dataset", spec.dataset), ("methods", ", ".join(spec.methods)), ("repeats", str(spec.repeats)),
            ("defaults", ", ".join(f"{k} = {v}" for k, v in spec.defaults.items())),
            ("finished runs", str(results.n_runs)), ("failed runs", str(len(results.failures))),
            ("hyper-parameter selection", f"{spec.selection.mode} (modes used: {', '.join(modes) or 'none'})"),
            ("neighbouring relation", spec.neighbouring + ("" if spec.like_for_like else " (not like for like)"))]
    out = ["<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"]
    if "validation" in modes:
        out.append('<p class="leak"><b>Selection leaks.</b> Hyper-parameters were chosen on a validation split of '
                   "the private training data without charging privacy (the paper's protocol). The epsilon of "
                   "those points covers the final training run only; rerun with <code>selection = \"private\""
                   "</code> for guarantees that include the choice.</p>")
    if "private" in modes:
        out.append("<p>Private selection (Liu &amp; Talwar 2019 random stopping): the epsilon and delta reported "
                   "include the cost of choosing the hyper-parameters. Methods with nothing to tune, and private "
                   "prediction methods (which release no candidate model to select), use public defaults.</p>")
    return "\n".join(out)


def _verdict_rule(repeats: int) -> str:
    """How a finding's verdict is reached, said once before the figures (privml.study._evidence)."""
    few = (" With one repeat no finding can hold: run more repeats." if repeats < 2 else
           f" With {repeats} repeats only large, consistent differences are conclusive (the interval's t factor is "
           f"{stats.t.ppf(0.975, repeats - 1):.1f}); more repeats narrow it." if repeats < 5 else "")
    return ('<p class="verdicts">' "Each finding compares accuracies repeat by repeat (every setting of a repeat "
            "shares its seed) with a 95% confidence interval in brackets (Student t over the repeats; each "
            "repeat's variance at least the test split's own sampling variance). A claim <b>holds</b> only when "
            "its intervals lie above zero, is <b>refuted</b> when one lies at or below it, and is "
            f"<b>inconclusive</b> otherwise.{few}</p>")


def _finding(f: Finding) -> str:
    text, css = _STATUS[f.status]
    return (f'<li class="finding"><span class="{css}">{text}</span>: {_e(f.claim)} <i>({_e(f.source)})</i><br>'
            f"{_e(f.evidence)}</li>")


def _curve_table(results: StudyResults, name: str) -> str:
    sweep = results.sweep(name)
    curves = results.curves[name]
    head = "".join(f"<th>{_e(c.label)}</th>" for c in curves)
    rows = []
    for value in sweep.values:
        cells = []
        for curve in curves:
            cell = curve.at(value)
            cells.append("<td>–</td>" if cell is None else f"<td>{100 * cell.mean:.1f} ± {100 * cell.std:.1f}</td>")
        rows.append(f"<tr><th>{_e(_value(value))}</th>{''.join(cells)}</tr>")
    rows.append("<tr><th>chosen</th>" + "".join(f"<td>{_e(_chosen(c))}</td>" for c in curves) + "</tr>")
    return (f'<table class="curve"><tr><th>{_e(sweep.parameter)}</th>{head}</tr>{"".join(rows)}</table>')


def _chosen(curve: Curve) -> str:
    """The hyper-parameters selected for a curve's runs, most frequent first, with counts."""
    counts = Counter(", ".join(f"{k} = {_value(v)}" for k, v in sorted(c.items())) or "defaults"
                     for cell in curve.cells for c in cell.chosen)
    return "; ".join(f"{text} ({n}x)" for text, n in counts.most_common(3))


def _tradeoffs(results: StudyResults) -> str:
    head = "".join(f"<th>{_e(label)}</th>" for _, label in COLUMNS)
    body = "".join(f"<tr><th>{_e(row)}</th>{''.join(f'<td>{_e(c)}</td>' for c in cells)}</tr>"
                   for row, cells in tradeoff_table(results))
    return ('<section id="tradeoffs"><h2>How each hyper-parameter moves privacy, accuracy and compute</h2>'
            "<p>The paper's summary table (Section 4.3), measured on these results: the direction each row takes "
            "as the column's hyper-parameter grows (↑ up, ↓ down, ↑↓ up then down, = unchanged), with the "
            "number of private method curves that agree (B: private prediction methods only, since private "
            "training does not depend on B). Privacy is held at the target by calibrating the noise, so its "
            f"rows read \"held fixed\".</p><table class=\"tradeoffs\"><tr><th></th>{head}</tr>{body}</table></section>")


def _recommendations(results: StudyResults) -> str:
    if not results.spec.like_for_like:
        return ('<section id="recommendations"><h2>Which method should I use?</h2>'
                f'<p class="relation leak">No recommendation: {_e(not_like_for_like(results.spec.neighbouring))}.</p>'
                "</section>")
    rows = []
    for rec in recommendations(results):
        s = rec.setting
        runner = "–" if rec.runner_up is None else f"{rec.runner_up[0]} ({100 * rec.runner_up[1]:.1f}%)"
        base = "–" if rec.nonprivate is None else f"{100 * rec.nonprivate:.1f}%"
        rows.append("<tr>" + "".join(f"<td>{_e(_value(s[k]))}</td>" for k in ("epsilon", "delta", "budget", "n",
                                                                              "d", "k"))
                    + f"<td><b>{_e(rec.label)}</b></td><td>{100 * rec.accuracy:.1f} ± {100 * rec.std:.1f}%</td>"
                    + f"<td>{_e(runner)}</td><td>{base}</td></tr>")
    return ('<section id="recommendations"><h2>Which method should I use?</h2>'
            "<p>For every measured setting, the private method with the highest mean test accuracy "
            "(<code>privml study recommend</code> looks up the nearest setting to yours).</p>"
            '<table class="recommendations"><tr><th>ε</th><th>δ</th><th>B</th><th>n</th><th>d</th><th>k</th>'
            "<th>best method</th><th>accuracy</th><th>runner-up</th><th>non-private</th></tr>"
            + "".join(rows) + "</table></section>")


def _method_notes(results: StudyResults) -> str:
    out = ['<section id="method"><h2>How these results were made</h2>']
    if results.data_steps:
        out.append("<p>Data preparation, shown for one point (every cut is by index with the study's fixed seed, "
                   "so data-independent):</p><ul>"
                   + "".join(f"<li>{_e(s)}</li>" for s in results.data_steps) + "</ul>")
    out.append("<p>Private prediction methods are scored by per-query accuracy: each test query is answered "
               "with noise calibrated for the budget B, in blocks of B queries per fresh budget; the test set may "
               "be larger than B because each query is evaluated independently. Private training methods do not "
               "depend on B (their lines are flat in B).</p>")
    notes = list(results.spec.notes) + results.notes
    if notes:
        out.append("<p>Notes:</p><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    if results.failures:
        out.append(f'<p>{len(results.failures)} runs failed: see <a href="#failures">failed runs</a> at the top.</p>')
    out.append("</section>")
    return "\n".join(out)


# ------------------------------------------------------------------- figures
def draw_figures(results: StudyResults) -> dict[str, bytes]:
    """PNG bytes of the figure of every sweep with finished runs, by sweep name."""
    return {sweep.name: figure_png(results, sweep.name) for sweep in results.spec.sweeps
            if results.curves.get(sweep.name)}


def figure_png(results: StudyResults, name: str) -> bytes:
    """The figure of sweep ``name`` as PNG bytes: mean accuracy per method, ±1 std band, non-private dashed."""
    try:
        import matplotlib  # lazy(extra): matplotlib
    except ImportError:
        raise ValueError("the study report draws its figures with matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy(extra): matplotlib

    sweep = results.sweep(name)
    curves = results.curves[name]
    positions, scale = _axis(sweep.values)
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=90)
    try:
        for curve in curves:
            xs = [positions[_index(sweep.values, c.value)] for c in curve.cells]
            means = [c.mean for c in curve.cells]
            stds = [c.std for c in curve.cells]
            style = _style(curve)
            if len(xs) == 1 and curve.kind == "baseline":
                ax.axhline(means[0], **style)
                continue
            ax.plot(xs, means, marker="o", **style)
            ax.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                            alpha=0.15, color=ax.lines[-1].get_color())
        if scale == "log":
            ax.set_xscale("log")
        if scale == "category":
            ax.set_xticks(list(positions), [_value(v) for v in sweep.values])
        ax.set_xlabel(_LABELS.get(sweep.parameter, sweep.parameter))
        ax.set_ylabel("test accuracy")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    return buffer.getvalue()


def _style(curve: Curve) -> dict[str, Any]:
    if curve.kind == "baseline":
        return {"label": curve.label, "linestyle": "--", "color": "black"}
    return {"label": curve.label, "linestyle": "-" if curve.kind == "training" else ":"}


def _axis(values: tuple[Any, ...]) -> tuple[list[float], str]:
    """x positions and scale: log for positive values spanning a decade or more, categories when 0 is among them."""
    numbers = [float(v) for v in values]
    if any(v <= 0 for v in numbers):
        return list(range(len(numbers))), "category"
    if max(numbers) / min(numbers) >= 10:
        return numbers, "log"
    return numbers, "linear"


def _index(values: tuple[Any, ...], value: Any) -> int:
    return list(values).index(value)


def _value(v: Any) -> str:
    if v is None:
        return "all"
    if isinstance(v, float):
        return f"{v:g}" if not math.isinf(v) else "∞"
    return str(v)


def _e(text: Any) -> str:
    return html.escape(str(text))
