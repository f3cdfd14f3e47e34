"""Repeats and test split chosen from the data's size, so that the report's verdicts can resolve a difference.

A finding "holds" when its paired 95% interval over the repeats lies above 0
(:mod:`privml.study._evidence`). Each repeat's variance is at least the
test-sampling floor ``(d - d^2) / n_test`` of a difference ``d`` on
``n_test`` test rows, so even repeats that agree exactly give the interval
``d +- t_{0.975, r-1} sqrt((d - d^2) / (n_test r))``. It excludes 0 only when

    d > t^2 / (n_test r + t^2),         t = t_{0.975, r-1},

the smallest difference a study can call (:func:`resolvable`). With two
repeats on a 114-row test split (breast_cancer's 80/20 split) that is 41
points: no verdict on small data was possible (issue 32). With 5 repeats on
200 test rows it is 0.8 points.

The ``sizing`` table of a spec (:func:`check_sizing`) states the aim; before
any run :func:`choose` picks, from the number of records ``N`` (public under
the relations privml states: the zero-out view keeps ``n`` public):

- the test split of a ``csv:`` dataset: ``max(min_test_rows,
  test_fraction N)`` rows, at most ``max_test_fraction N`` (other data keep
  their own test split);
- the repeats: the fewest, from the spec's ``repeats`` up to
  ``max_repeats``, whose resolvable difference is at most ``resolve``.

When even ``max_repeats`` cannot get there the study still runs, and its
note (shown in the report) says which differences it cannot resolve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privml.study._evidence import t_quantile

#: The most repeats per point a study may ask for (``repeats``, ``sizing.max_repeats``): each repeat is a
#: full run of every point, so a typo (1e9) would otherwise plan runs for ever after creating the results store.
MAX_REPEATS = 1000
#: The fields of a spec's ``sizing`` table and their defaults.
DEFAULTS: dict[str, float | int] = {
    "min_test_rows": 200,
    "test_fraction": 0.2,
    "max_test_fraction": 0.5,
    "resolve": 0.02,
    "max_repeats": 20,
}


def check_sizing(raw: Any) -> dict[str, Any]:
    """A spec's ``sizing`` table, every field checked and the missing ones filled in with :data:`DEFAULTS`."""
    if not isinstance(raw, dict):
        raise ValueError(f"sizing must be a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"sizing: unknown field {unknown[0]!r}; fields are {', '.join(DEFAULTS)}")
    out = {**DEFAULTS, **raw}
    for name in ("min_test_rows", "max_repeats"):
        value = out[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < (2 if name == "max_repeats" else 1):
            raise ValueError(f"sizing.{name} must be an integer of at least {2 if name == 'max_repeats' else 1}, "
                             f"got {value!r}")
    for name in ("test_fraction", "max_test_fraction", "resolve"):
        value = out[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise ValueError(f"sizing.{name} must be in (0, 1), got {value!r}")
    if out["test_fraction"] > out["max_test_fraction"]:
        raise ValueError("sizing.test_fraction must be at most sizing.max_test_fraction")
    if out["max_repeats"] > MAX_REPEATS:
        raise ValueError(f"sizing.max_repeats must be at most {MAX_REPEATS}, got {out['max_repeats']}")
    return {name: float(v) if name in ("test_fraction", "max_test_fraction", "resolve") else int(v)
            for name, v in out.items()}


def resolvable(n_test: int, repeats: int) -> float:
    """The smallest difference of accuracies a finding over ``repeats`` repeats on ``n_test`` rows can call
    (module docstring); 1.0 (none) with one repeat, which gives no interval."""
    if repeats < 2 or n_test < 1:
        return 1.0
    t = t_quantile(repeats)
    return t * t / (n_test * repeats + t * t)


@dataclass(frozen=True)
class Sizes:
    """What :func:`choose` picked, and the note the report shows."""

    test_fraction: float | None
    n_test: int
    repeats: int
    note: str


def choose(sizing: dict[str, Any], *, n_records: int, n_test: int | None, repeats: int) -> Sizes:
    """The test split and repeats for a dataset of ``n_records`` records (see the module docstring).

    Parameters
    ----------
    sizing : dict
        A checked ``sizing`` table (:func:`check_sizing`).
    n_records : int
        Training and test records together.
    n_test : int or None
        The data's own test split, kept as it is; None: choose one (a ``csv:`` dataset).
    repeats : int
        The spec's repeats, the fewest chosen.
    """
    fraction = None
    if n_test is None:
        rows = max(int(sizing["min_test_rows"]), math.ceil(sizing["test_fraction"] * n_records))
        rows = max(1, min(rows, math.floor(sizing["max_test_fraction"] * n_records)))
        fraction = rows / n_records
        n_test = rows
        split = (f"a test split of {rows} of the {n_records} records (at least {sizing['min_test_rows']} or "
                 f"{100 * sizing['test_fraction']:g}%, at most {100 * sizing['max_test_fraction']:g}%)")
    else:
        split = f"the data's own test split of {n_test} records"
    chosen = repeats
    while chosen < sizing["max_repeats"] and resolvable(n_test, chosen) > sizing["resolve"]:
        chosen += 1
    smallest = resolvable(n_test, chosen)
    aim = 100 * sizing["resolve"]
    if smallest <= sizing["resolve"]:
        verdict = (f"a finding can hold for a difference of {100 * smallest:.1f} points or more (the aim: "
                   f"{aim:g}); smaller ones are inconclusive")
    else:
        verdict = (f"no verdict is possible on a difference below {100 * smallest:.1f} points, more than the aim "
                   f"of {aim:g} even at sizing.max_repeats = {chosen}: such findings will read inconclusive; "
                   "more records would resolve them")
    note = f"sizing: {split} and {chosen} repeats; {verdict} (privml.study._sizing)"
    return Sizes(test_fraction=fraction, n_test=n_test, repeats=chosen, note=note)
