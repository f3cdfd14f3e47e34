"""The README's Python examples run as written (documentation that cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no Python examples"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own documentation
    # The tour's claims, checked: analytic sigma and the empirical test's verdict.
    assert abs(namespace["gauss"].sigma - 3.7306) < 1e-4
    assert namespace["result"].epsilon <= 1.0
