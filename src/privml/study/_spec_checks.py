"""Checks of a whole study spec that need more than one field (:func:`privml.study.spec_from_dict` calls them).

Each refuses, before anything runs or is written, a study whose runs would all fail or whose values
would be ignored without a word.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from privml.study._methods import METHODS
from privml.study._spec_parts import Selection, Sweep


def _points(defaults: dict[str, Any], sweeps: tuple[Sweep, ...]) -> Iterator[tuple[Sweep, dict[str, Any]]]:
    """Each sweep value's settings (defaults, then the sweep's fixed ones, then the swept value)."""
    for sweep in sweeps:
        for value in sweep.values:
            yield sweep, {**defaults, **sweep.fixed, sweep.parameter: value}


def check_m_is_known(
    sweeps: tuple[Sweep, ...], defaults: dict[str, Any], methods: tuple[str, ...], selection: Selection
) -> None:
    """Refuse a study whose subsample-and-aggregate runs would not know their number of teachers m.

    m is a setting (defaults, a sweep) or chosen by the selection: a one-value
    grid sets it in every mode, a longer grid only in ``validation`` mode
    (``public`` takes no candidates, and ``private`` mode has no candidate
    model to select for a private-prediction method). Otherwise every such
    run would fail when it starts.
    """
    for sweep in sweeps:
        if {**defaults, **sweep.fixed}.get("m") is not None or sweep.parameter == "m":
            continue
        for method in sweep.methods or methods:
            hyper = METHODS[method].hyper if method in methods else {}
            if "m" not in hyper:
                continue
            grid = selection.grids.get(method, hyper).get("m", ())
            if len(grid) == 1 or (len(grid) > 1 and selection.mode == "validation"):
                continue
            raise ValueError(
                f"sweep {sweep.name!r} leaves m unset for {method}: give m in defaults or the sweep, or a "
                f"one-value selection grid (selection mode {selection.mode!r} does not tune it)"
            )


def check_sweeps_matter(sweeps: tuple[Sweep, ...], methods: tuple[str, ...]) -> None:
    """Refuse a sweep whose values would be ignored: no method of it reads its parameter, or ``fixed`` sets it too.

    Either way every value gives the same runs (dropped from their keys, or overridden), so the
    figure would show one point repeated and say nothing of the values asked for.
    """
    for sweep in sweeps:
        if sweep.parameter in sweep.fixed:
            raise ValueError(f"sweep {sweep.name!r} fixes {sweep.parameter}, the parameter it sweeps; "
                             "remove it from fixed")
        names = [m for m in sweep.methods or methods if m in methods]
        if not any(sweep.parameter in METHODS[m].relevant({sweep.parameter: None}) for m in names):
            raise ValueError(f"sweep {sweep.name!r} sweeps {sweep.parameter}, which none of its methods "
                             f"({', '.join(names)}) takes")


def check_public_records(public: Any, defaults: dict[str, Any], sweeps: tuple[Sweep, ...]) -> None:
    """A count of public records below d can never work: PCA to d dimensions needs at least d of them.

    Knowable from the spec alone (a fraction depends on the data's size: checked by check_dataset for
    a built-in set, and left to the runs for user data, whose size is private).
    """
    if public < 1:
        return
    for sweep, setting in _points(defaults, sweeps):
        d = setting.get("d")
        if d is not None and d > int(public):
            raise ValueError(f"sweep {sweep.name!r}: d = {d} needs at least {d} public records for PCA, "
                             f"public_size = {public:g} sets aside {int(public)}")


def check_classes_cover_k(classes: Any, defaults: dict[str, Any], sweeps: tuple[Sweep, ...]) -> None:
    """A point keeping more classes (k) than the public class set holds can never run.

    The class set is public (given), so this is known before any run. It is what ``privml study run quick
    --dataset csv:... --classes no,yes`` ran into: quick's k = 10 is MNIST's; the ``own-data`` preset sets no k.
    """
    if classes is None:
        return
    points = [("defaults", defaults.get("k"))] + [
        (f"sweep {sweep.name!r}", setting.get("k")) for sweep, setting in _points(defaults, sweeps)
    ]
    for where, k in points:
        if k is not None and k > len(classes):
            raise ValueError(f"{where}: k = {k} classes, but the class set has {len(classes)}; leave k out (every "
                             "class), or use the own-data preset, which sets no n, d or k")
