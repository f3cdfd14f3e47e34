"""A picture of an Accuracy First search: levels tried, what each cost, where it stopped.

matplotlib is optional (``pip install privml[plot]``); it is imported only
when a plot is asked for. By default the figure shows what the search
published (each level's ex-post cost and the private check's verdict), so it
may be shared. ``show_nonprivate=True`` plots the check's exact validation
values instead, which the guarantee does not cover: it warns
(:func:`privml.release.reveal_nonprivate`) and the figure is for whoever
owns the data only.
"""

from __future__ import annotations

import os
from pathlib import Path

from privml.release import reveal_nonprivate
from privml.selection._accuracy_first_result import SelectionResult

__all__ = ["plot_trace"]


def _figure_class():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy(extra): matplotlib
        from matplotlib.figure import Figure  # lazy(extra): matplotlib
    except ImportError:
        raise ImportError(
            "plotting needs the matplotlib package, which is not installed: pip install matplotlib "
            "(or privml[plot])"
        ) from None
    return Figure, FigureCanvasAgg


def plot_trace(
    result: SelectionResult, path: str | os.PathLike[str], *, title: str | None = None, show_nonprivate: bool = False
) -> Path:
    """Write a PNG of ``result``'s trace: cost (or the exact check value) against epsilon, and the stop.

    Parameters
    ----------
    result : SelectionResult
    path : path
        Output file (PNG).
    title : str, optional
        Defaults to the search, the ex-post guarantee and the stop.
    show_nonprivate : bool, default False
        Plot each step's exact validation value and the target (not private; warns)
        instead of its ex-post epsilon.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ImportError
        Naming matplotlib, if it is not installed.
    """
    Figure, FigureCanvasAgg = _figure_class()
    steps = result.steps
    epsilons = [s.epsilon for s in steps]
    goal: float | None = None
    if not show_nonprivate:
        values = [s.ex_post_epsilon for s in steps]
        label = "ex-post epsilon had the search stopped here"
    else:
        values = reveal_nonprivate({"nonprivate_value": [s.nonprivate_value for s in steps]},
                                   what="the exact validation values in the plot")["nonprivate_value"]
        if result.metric == "error":
            values = [1.0 - v for v in values]
            goal, label = result.target, "validation error (non-private)"
        elif result.metric == "excess_risk":
            values = [-v for v in values]
            goal, label = result.target, "excess empirical risk (non-private)"
        else:
            goal, label = result.threshold, "check value (non-private)"

    fig = Figure(figsize=(6.4, 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(epsilons, values, marker="o", color="tab:blue", label=label)
    failed = [(e, v) for s, e, v in zip(steps, epsilons, values) if not s.passed]
    if failed:
        ax.scatter(*zip(*failed), marker="x", color="tab:red", zorder=3, label="check failed")
    passed = [(e, v) for s, e, v in zip(steps, epsilons, values) if s.passed]
    if passed:
        ax.scatter(*zip(*passed), marker="o", s=60, color="tab:green", zorder=3, label="check passed")
    if goal is not None:
        ax.axhline(goal, color="gray", linestyle="--", label=f"target {goal:g}")
    if result.stopped_at is not None:
        stop = steps[result.stopped_at]
        ax.axvline(stop.epsilon, color="tab:green", linestyle=":", label=f"stopped at eps = {stop.epsilon:.3g}")
    untried = [e for e in result.grid if e > epsilons[-1]]
    if untried:
        level = goal if goal is not None else values[-1]
        ax.plot(untried, [level] * len(untried), linestyle="none", marker="|", color="lightgray", label="not tried")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon of the published model")
    ax.set_ylabel(label)
    guarantee = result.guarantee
    ax.set_title(
        title
        or f"{result.search}: ex-post ({guarantee.epsilon:.3g}, {guarantee.delta:.2g}), "
        f"{'stopped at step ' + str(result.stopped_at) if result.met_target else 'target not met'}",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)  # as save_model does: the search (and its privacy) is not lost
    fig.savefig(out, format="png", dpi=100)
    return out
