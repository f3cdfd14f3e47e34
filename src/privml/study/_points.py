"""A study's cells and jobs, from its spec alone: what :mod:`privml.study._runner` runs and the report reads.

A cell is one (sweep, value, method, repeat) of a figure; a job is one
(method, relevant settings, seed): a run that several sweeps share is
planned once.

>>> from privml.study import load_preset
>>> jobs, notes = plan(load_preset("quick-ci"))
>>> len(jobs) > 100, notes[0]
(True, 'DP-SGD needs delta > 0: left out wherever delta = 0')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privml.data._registry import is_user_data
from privml.study._methods import get_method
from privml.study._spec import Job, StudySpec, job_key, seed_of
from privml.study._spec_parts import Sweep

__all__ = ["PointRun", "plan", "point_runs"]


@dataclass(frozen=True)
class PointRun:
    """One cell of a figure: sweep, x value, method, repeat, and the job that computes it."""

    sweep: Sweep
    value: Any
    setting: dict[str, Any]
    method: str
    repeat: int
    key: str


def point_runs(spec: StudySpec) -> tuple[list[PointRun], list[str]]:
    """Every (sweep, value, method, repeat) cell with its job key, and notes on cells left out.

    Cells of unavailable methods, and of methods that need delta > 0 at a
    point with delta = 0, are left out with a note.
    """
    cells: list[PointRun] = []
    notes: list[str] = []
    if spec.classes is None and spec.schema is None and is_user_data(spec.dataset):
        _note(notes, f"the class set of {spec.dataset} was read from its private labels (PrivacyLeakWarning): "
                     "give the public class set as classes = [...] in the spec, or --classes")
    for sweep, setting, name in spec.points():
        method = get_method(name)
        reason = method.unavailable_reason()
        if reason is not None:
            _note(notes, f"{reason}; the study runs the available methods")
            continue
        if setting["delta"] == 0 and not method.supports_pure:
            _note(notes, f"{method.label} needs delta > 0: left out wherever delta = 0")
            continue
        params = method.relevant(setting)
        for repeat in range(spec.repeats):
            seed = seed_of(spec, repeat)
            cells.append(PointRun(sweep, setting[sweep.parameter], setting, name, repeat,
                                  job_key(spec, name, params, seed)))
    return cells, notes


def plan(spec: StudySpec) -> tuple[list[Job], list[str]]:
    """The distinct jobs of ``spec`` (a run shared by several sweeps appears once) and the notes."""
    cells, notes = point_runs(spec)
    jobs: dict[str, Job] = {}
    for cell in cells:
        if cell.key in jobs:
            old = jobs[cell.key]
            if cell.sweep.name not in old.sweeps:
                jobs[cell.key] = Job(old.key, old.spec_hash, old.method, old.params, old.repeat, old.seed,
                                     (*old.sweeps, cell.sweep.name))
            continue
        method = get_method(cell.method)
        jobs[cell.key] = Job(cell.key, spec.spec_hash, cell.method, method.relevant(cell.setting), cell.repeat,
                             seed_of(spec, cell.repeat), (cell.sweep.name,))
    return list(jobs.values()), notes


def _note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)
