"""ROC plots: a PNG when matplotlib is there, a clear error when it is not."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from privml.audit._plotting import plot_roc, require_matplotlib
from privml.cli.main import main


def test_plot_roc_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_roc({"attack": (np.array([0, 0.01, 1.0]), np.array([0, 0.5, 1.0]))}, tmp_path / "roc.png")
    assert open(path, "rb").read(4) == b"\x89PNG"
    with pytest.raises(ValueError, match="at least one"):
        plot_roc({}, tmp_path / "empty.png")
    # No suffix: a PNG under that very name, which is the path reported (matplotlib appended ".png").
    path = plot_roc({"attack": (np.array([0, 1.0]), np.array([0, 1.0]))}, tmp_path / "noext")
    assert path == str(tmp_path / "noext") and open(path, "rb").read(4) == b"\x89PNG"


def test_missing_matplotlib_gives_an_install_hint(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(ImportError, match="pip install"):
        require_matplotlib()
    code = main(["audit", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "4",
                 "--plot", "roc.png", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "matplotlib" in err and len(err.strip().splitlines()) == 1
