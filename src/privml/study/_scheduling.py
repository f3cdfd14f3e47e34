"""In which order a study's runs go to the workers, and how long the rest will take.

Runs that share a non-private quantity (a minimiser, a teacher ensemble, a
point's validation search; :mod:`privml.study._cache`) form a *sharing group*.
The first run sent of each group computes what the group shares (its
*leader*); the others reuse it. :func:`dispatch_batches` sends every leader
before any follower, so the workers compute different shared quantities in
parallel instead of waiting on each other's locks; on Dask, whose workers may
not share a folder, a group is one task. :class:`ProgressTracker` counts runs
per sweep and learns an ETA from the finished runs, per method and role.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from privml.study._spec import Job, StudySpec

__all__ = ["ProgressTracker", "dispatch_batches", "leading_keys", "share_group"]

#: Methods whose runs share non-private minimisers (on the same data, split and lambda; the
#: baseline only where it is tuned on their grid).
_SHARE_MINIMISERS = ("output", "prediction-sensitivity", "nonprivate")
#: Methods whose runs share teachers (one ensemble per m and seed).
_SHARE_TEACHERS = ("subsample-aggregate",)


def share_group(job: Job, scope: str = "run") -> tuple[Any, ...] | None:
    """What a job shares with others, or None when it shares nothing.

    ``scope = "run"`` (each run selects on its repeat's split): ``(kind, n,
    d, k, repeat)``. Runs of the methods in one kind at the same data point
    and repeat solve the same non-private objectives (the validation split
    depends on the repeat's seed; the teachers' partitions too), whatever
    their epsilon, delta and B. ``scope = "point"``: the validation split is
    the same for every repeat and the final fits are on all the records, so
    minimisers and selections are shared across repeats: ``(kind, n, d, k)``
    for the minimiser and teacher kinds, and ``("selection", method,
    settings)`` for the other methods (their searches).
    """
    p = job.params
    if job.method in _SHARE_MINIMISERS:
        kind = "minimisers"
    elif job.method in _SHARE_TEACHERS:
        kind = "teachers"
    elif scope == "point":
        return ("selection", job.method, tuple(sorted((name, repr(value)) for name, value in p.items())))
    else:
        return None
    if scope == "point":
        return (kind, p.get("n"), p.get("d"), p.get("k"))
    return (kind, p.get("n"), p.get("d"), p.get("k"), job.repeat)


def dispatch_batches(jobs: list[Job], *, grouped: bool, scope: str = "run") -> list[list[Job]]:
    """The order (and, for Dask, the grouping) in which the pending jobs are sent to workers.

    Local workers share one cache folder and take a per-key lock, so any
    order is correct; this one keeps them from waiting on each other. The
    first run of each sharing group (:func:`share_group`) goes first, the
    most expensive kinds first (the teachers of subsample-and-aggregate,
    then the minimisers, then the searches of ``scope = "point"``), so the
    quantities a group shares are computed in parallel by different workers
    while the runs that share nothing keep the others busy; the rest of each
    group comes after, and reuses. ``grouped`` (Dask, whose workers may not
    share a folder): every sharing group is one batch, run by one worker in
    order, so a shared quantity is computed once, not raced.
    """
    groups: dict[tuple[Any, ...], list[Job]] = {}
    alone: list[Job] = []
    for job in jobs:
        group = share_group(job, scope)
        if group is None:
            alone.append(job)
        else:
            groups.setdefault(group, []).append(job)
    if grouped:
        return sorted(groups.values(), key=len, reverse=True) + [[job] for job in alone]
    # The leader of each group: output before prediction sensitivity (fewer runs wait on it).
    leaders, followers = [], []
    for members in groups.values():
        members = sorted(members, key=lambda j: j.method != "output")
        leaders.append(members[0])
        followers.extend(members[1:])
    leaders.sort(key=lambda j: (j.method not in _SHARE_TEACHERS, j.method not in _SHARE_MINIMISERS))
    return [[job] for job in (*leaders, *alone, *followers)]


def leading_keys(batches: list[list[Job]], scope: str = "run") -> frozenset[str]:
    """Keys of the runs that compute what their sharing group shares: the first of each group sent out."""
    seen: set[tuple[Any, ...]] = set()
    leaders = set()
    for batch in batches:
        for job in batch:
            group = share_group(job, scope)
            if group is not None and group not in seen:
                seen.add(group)
                leaders.add(job.key)
    return frozenset(leaders)


class ProgressTracker:
    """Per-sweep counts and an ETA that learns from the runs finished so far.

    The ETA is the sum, over the runs left, of the mean wall time of the
    finished runs of the same method and role, divided by the workers. The
    role says whether a run computes what its sharing group shares (the
    group's *leader*, :func:`leading_keys`) or reuses it (a follower: with
    the cache, a small fraction of a leader's time). A method whose runs of
    one role have not finished yet takes its other role's mean, scaled by
    the follower-to-leader ratio of the methods where both have finished;
    a method with no finished run takes the mean of its role. It starts
    unknown and sharpens as runs finish.
    """

    def __init__(self, spec: StudySpec, pending: list[Job], *, workers: int,
                 leaders: frozenset[str] = frozenset()) -> None:
        self.workers = max(1, workers)
        self.leaders = leaders
        self.left: Counter[tuple[str, bool]] = Counter((job.method, job.key in leaders) for job in pending)
        self.total_by_sweep = Counter(name for job in pending for name in job.sweeps)
        self.done_by_sweep: Counter[str] = Counter()
        self.seconds: dict[tuple[str, bool], list[float]] = {}
        self.order = [sweep.name for sweep in spec.sweeps if sweep.name in self.total_by_sweep]
        self.sweeps_of = {job.key: job.sweeps for job in pending}

    def finish(self, record: dict[str, Any]) -> list[str]:
        """Count a finished record; lines to print (a sweep that has just completed)."""
        cell = (record["method"], record["key"] in self.leaders)
        self.left[cell] -= 1
        if record.get("wall_seconds") is not None:
            self.seconds.setdefault(cell, []).append(float(record["wall_seconds"]))
        lines = []
        for name in self.sweeps_of.get(record["key"], ()):
            self.done_by_sweep[name] += 1
            if self.done_by_sweep[name] == self.total_by_sweep[name]:
                lines.append(f"sweep {name}: all {self.total_by_sweep[name]} runs done")
        return lines

    def eta_seconds(self) -> float | None:
        """Estimated seconds left (None until a run has finished)."""
        if not self.seconds:
            return None
        means = {cell: sum(seen) / len(seen) for cell, seen in self.seconds.items() if seen}
        # How much cheaper a follower is than its leader, from the methods where both have finished.
        ratios = [means[(m, False)] / means[(m, True)] for m, leads in means if leads and (m, False) in means
                  and means[(m, True)] > 0]
        ratio = sum(ratios) / len(ratios) if ratios else 1.0
        every = sum(s for seen in self.seconds.values() for s in seen) / sum(map(len, self.seconds.values()))
        left = 0.0
        for (method, leads), count in self.left.items():
            if count <= 0:
                continue
            if (method, leads) in means:
                estimate = means[(method, leads)]
            elif (method, not leads) in means and ratio > 0:  # the other role of this method, scaled
                estimate = means[(method, not leads)] * (1.0 / ratio if leads else ratio)
            else:
                same_role = [v for (m, role), v in means.items() if role == leads]
                estimate = sum(same_role) / len(same_role) if same_role else every
            left += count * estimate
        return left / self.workers

    def postfix(self, record: dict[str, Any]) -> str:
        eta = self.eta_seconds()
        sweeps = " ".join(f"{name} {self.done_by_sweep[name]}/{self.total_by_sweep[name]}" for name in self.order)
        left = "" if eta is None else f"; eta {_duration(eta)} (from finished runs)"
        return f"{record['method']} {record['status']}{left}; {sweeps}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
