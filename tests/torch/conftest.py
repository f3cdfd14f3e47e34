"""Shared fixtures: small float64 models so exact comparisons are tight, one torch thread."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machine is shared: one intra-op thread per test process.
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
