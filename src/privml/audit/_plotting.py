"""ROC plots for audits (matplotlib is optional and imported only here, only when plotting)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

#: Formats assumed when matplotlib is not installed (any matplotlib writes these).
BASIC_FORMATS = ("eps", "pdf", "png", "ps", "svg")


def plot_formats() -> tuple[str, ...]:
    """The file suffixes :func:`plot_roc` can write: matplotlib's own list, or :data:`BASIC_FORMATS` without it."""
    if importlib.util.find_spec("matplotlib") is None:
        return BASIC_FORMATS
    from matplotlib.backend_bases import FigureCanvasBase  # lazy(extra): matplotlib

    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))


def check_plot_path(path: str | os.PathLike[str]) -> None:
    """Refuse a plot path whose suffix names a format matplotlib cannot write (check before long work).

    Raises
    ------
    ValueError
        Naming the format and the supported ones.
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    formats = plot_formats()
    if suffix and suffix not in formats:
        raise ValueError(f"format {suffix!r} of {path} is not supported; use one of {', '.join(formats)}")


def require_matplotlib() -> None:
    """Raise an ImportError with an install hint if matplotlib is missing (check before long work)."""
    _pyplot()


def _pyplot():
    try:
        import matplotlib  # lazy(extra): matplotlib
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib, which is not installed: pip install 'privml[plot]' (or matplotlib)"
        ) from None
    matplotlib.use("Agg")  # files only: never open a window from a library call
    import matplotlib.pyplot as plt  # lazy(extra): matplotlib

    return plt


def plot_roc(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | os.PathLike[str],
    *,
    title: str = "Membership / canary ROC",
) -> str:
    """Write a ROC plot (linear and log-log panels) of ``{label: (fpr, tpr)}`` to ``path`` (PNG).

    The log-log panel shows the low-FPR region that matters for membership
    inference (Carlini et al. 2022). Returns the path written.

    Raises
    ------
    ImportError
        With an install hint, if matplotlib is missing.
    """
    if not curves:
        raise ValueError("need at least one ROC curve to plot")
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for label, (fpr, tpr) in curves.items():
        fpr, tpr = np.asarray(fpr, dtype=float), np.asarray(tpr, dtype=float)
        axes[0].plot(fpr, tpr, label=label)
        keep = (fpr > 0) & (tpr > 0)  # log axes cannot show zeros
        axes[1].plot(fpr[keep], tpr[keep], label=label)
    for ax, scale in zip(axes, ("linear", "log"), strict=True):
        ax.plot([1e-4, 1], [1e-4, 1], color="grey", linestyle=":", linewidth=1)
        ax.set_xscale(scale)
        ax.set_yscale(scale)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(f"{title} ({scale})")
        ax.legend(loc="lower right", fontsize="small")
    axes[0].set_xlim(0, 1)
    axes[0].set_ylim(0, 1)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # as save_model does: the audit's trials are not lost
    # A name without a suffix is written as PNG under that very name (matplotlib would append ".png", and the
    # path reported back would name no file: a review).
    fig.savefig(path, dpi=120, format=None if Path(path).suffix else "png")
    plt.close(fig)
    return str(path)


def plot_one_run(
    scores: np.ndarray,
    included: np.ndarray,
    path: str | os.PathLike[str],
    *,
    guesses_in: int,
    guesses_out: int,
    title: str = "One-run audit",
) -> str:
    """Histograms of the canaries' scores, included against excluded, with the guess thresholds.

    The scores right of the "in" line are the k+ guessed in, those left of the "out" line the k- guessed
    out. The plot reads the coins (which canaries were trained on): an audit's picture, not a release.
    """
    plt = _pyplot()
    s = np.asarray(scores, dtype=float)
    inc = np.asarray(included, dtype=bool)
    order = np.sort(s)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bins = np.linspace(order[0], order[-1], 41) if order[-1] > order[0] else 10
    ax.hist(s[inc], bins=bins, alpha=0.6, label=f"included ({int(inc.sum())})")
    ax.hist(s[~inc], bins=bins, alpha=0.6, label=f"excluded ({int((~inc).sum())})")
    if guesses_in:
        ax.axvline(order[-guesses_in], color="black", linestyle="--", linewidth=1, label=f"guess in: top {guesses_in}")
    if guesses_out:
        ax.axvline(order[guesses_out - 1], color="grey", linestyle=":", linewidth=1,
                   label=f"guess out: bottom {guesses_out}")
    ax.set_xlabel("canary score")
    ax.set_ylabel("canaries")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, format=None if Path(path).suffix else "png")
    plt.close(fig)
    return str(path)
