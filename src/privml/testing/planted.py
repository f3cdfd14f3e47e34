"""What every planted bug of :mod:`privml.testing` has: a name and a one-line account of what is wrong.

:class:`PlantedBug` is the base of the controls of
:mod:`privml.testing.negative_controls`, :mod:`privml.testing.prediction_controls`
and :mod:`privml.testing.torch_controls`; :func:`by_name` builds each module's
table of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["PlantedBug", "by_name"]


@dataclass(frozen=True)
class PlantedBug:
    """A deliberately broken implementation: its ``name`` (what tests, benchmarks and reports call it) and
    its ``bug`` (what is wrong, in one line); each kind of control adds the setting where it is caught."""

    name: str
    bug: str


Bug = TypeVar("Bug", bound=PlantedBug)


def by_name(bugs: Iterable[Bug]) -> dict[str, Bug]:
    """The bugs keyed by their names, in the order given; two with one name are an error."""
    table: dict[str, Bug] = {}
    for bug in bugs:
        if bug.name in table:
            raise ValueError(f"two planted bugs are named {bug.name!r}")
        table[bug.name] = bug
    return table
