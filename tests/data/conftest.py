from __future__ import annotations

from pathlib import Path

import pytest

from privml.data import _fashion_mnist as fashion_mnist


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache in $PRIVML_DATA and no system dataset directories.

    Every test in this package is isolated from ~/.cache/privml and from a
    dataset-fashion-mnist package that may or may not be installed here.
    """
    root = tmp_path / "privml-cache"
    monkeypatch.setenv("PRIVML_DATA", str(root))
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", ())
    return root
