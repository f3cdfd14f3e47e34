"""The parts of a study spec (:mod:`privml.study._spec`): a sweep, one figure, and how hyper-parameters are selected.

Plain data, checked where a spec is read (:func:`privml.study.spec_from_dict`, :mod:`privml.study._spec_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Selection", "Sweep"]


@dataclass(frozen=True)
class Sweep:
    """One figure: ``parameter`` takes ``values`` while the rest stays at the defaults.

    Attributes
    ----------
    name : str
        Identifier (also the figure's file name).
    parameter : str
        The swept setting (a key of :data:`SETTINGS`).
    values : tuple
        Its values, in plotting order.
    fixed : dict
        Settings overriding the study defaults for this sweep only
        (e.g. ``{"delta": 0.0}`` for the paper's Figure 1a).
    methods : tuple of str, optional
        Restrict the sweep to these methods (e.g. lambda only for objective
        perturbation); default all of the study's methods.
    title : str
        Figure caption, e.g. the paper figure it reproduces.
    """

    name: str
    parameter: str
    values: tuple[Any, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    methods: tuple[str, ...] | None = None
    title: str = ""


@dataclass(frozen=True)
class Selection:
    """How hyper-parameters not fixed by a point are chosen.

    Attributes
    ----------
    mode : {"validation", "private", "public"}
        ``validation``: grid search on a validation split carved from the
        training records, then refit on all of them (the paper's protocol;
        the choice itself is **not** privatised, so the reported epsilon
        understates the true loss). ``private``: Liu & Talwar (2019) random
        stopping, whose privacy cost is charged, so the reported epsilon is
        the whole loss. ``public``: each method's defaults, computed from
        public quantities only (no tuning, no leak).
    validation_fraction : float
        Share of the training records held out for selection.
    stop_probability : float
        gamma of random stopping (expected 1/gamma candidate runs).
    grids : dict
        ``{method: {hyper-parameter: values}}`` overriding the methods' own grids.
    scope : {"run", "point"}
        ``validation`` mode only. ``run``: every run selects on its own
        validation split (its repeat's seed). ``point``: the selection is made
        once per point (method and settings) on one validation split with the
        study's selection seed (:func:`selection_seed`), and every repeat
        refits the chosen candidate with its own seed, as the paper's code
        does (facebookresearch/private_prediction cross-validates once, then
        repeats the experiment): the repeats then measure the spread of the
        noise, not of the selection, and a study makes each selection once
        instead of once per repeat.
    """

    mode: str = "validation"
    validation_fraction: float = 0.2
    stop_probability: float = 0.2
    grids: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict)
    scope: str = "run"
