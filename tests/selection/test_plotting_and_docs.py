"""The trace plot, and the doctested examples of the selection package."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from privml.selection._accuracy_first import select_output_perturbation
from privml.selection._plotting import plot_trace

MODULES = [
    "privml.selection._noise_reduction",
    "privml.selection._interactive_above_threshold",
    "privml.selection._doubling",
    "privml.selection._accuracy_first",
    "privml.selection._utility_bound",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(("metric", "threshold"), [("error", 0.9), ("excess_risk", -0.1), ("custom", 0.5)])
def test_plot_trace_writes_a_png(tmp_path, metric: str, threshold: float) -> None:
    result = select_output_perturbation(
        np.ones(3), sensitivity=0.1, query=lambda w: float(np.mean(w)) - 0.2, query_sensitivity=0.01,
        threshold=threshold, epsilons=[0.1, 0.5, 1.0, 5.0], at_epsilon=1.0, metric=metric, target=0.1,
        random_state=0,
    )
    path = plot_trace(result, tmp_path / f"{metric}.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_the_default_plot_shows_only_what_was_published(tmp_path) -> None:
    import warnings

    from privml.exceptions import PrivacyLeakWarning

    result = select_output_perturbation(
        np.ones(3), sensitivity=0.1, query=lambda w: float(np.mean(w)) - 0.2, query_sensitivity=0.01,
        threshold=0.9, epsilons=[0.1, 0.5, 1.0, 5.0], at_epsilon=1.0, metric="error", target=0.1, random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        plot_trace(result, tmp_path / "public.png")  # ex-post costs and verdicts only: no warning
    with pytest.warns(PrivacyLeakWarning, match="exact validation values"):
        plot_trace(result, tmp_path / "owner.png", show_nonprivate=True)
    with pytest.warns(PrivacyLeakWarning):
        rows = result.trace(include_nonprivate=True)
    assert all("nonprivate_value" in row for row in rows)
    assert all("nonprivate_value" not in row for row in result.trace())
