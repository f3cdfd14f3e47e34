"""``privml train --bounds private[:FRACTION]``: the DP ranges of a CSV's numeric columns and their part of epsilon.

The ranges are estimated by :mod:`privml.data._private_bounds` from the
training rows (DP quantiles), spending FRACTION of ``--epsilon``; the model
gets the rest, and the guarantee printed and saved is the total (basic
composition under the model's relation), with the split stated beside it.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from privml.cli._common import CliError, bounds_fraction
from privml.data._private_bounds import PrivateRanges, compose_with_model
from privml.data._schema import Label
from privml.data._user import csv_feature_names

__all__ = ["charge_ranges", "private_ranges"]


def private_ranges(args: argparse.Namespace) -> tuple[Any, float | None]:
    """``--bounds private[:FRACTION]``: the unfitted ranges with their part of --epsilon, and the model's part
    (``(None, --epsilon)`` otherwise). Checked before any data is read."""
    fraction = bounds_fraction(args.bounds)
    if fraction is None:
        return None, args.epsilon
    if args.method == "nonprivate":
        raise CliError("--bounds private spends a part of --epsilon, and the non-private baseline has none: give "
                       "--schema (public ranges) or --bounds unit")

    # Its own stream, so that a test seed gives the ranges and the model different noise.
    stream = None if args.seed is None else np.random.SeedSequence([args.seed, 1])
    return PrivateRanges(epsilon=fraction * args.epsilon, random_state=stream), (1.0 - fraction) * args.epsilon


def charge_ranges(args: argparse.Namespace, model: Any, ranges: Any, classes: tuple) -> tuple[dict[str, Any], Any]:
    """Set ``model.privacy_`` to the total of the fitted ranges and the model (basic composition, under the
    model's relation) and keep the parts in ``model.privacy_split_``; returns the fields to print
    (``privacy_split``, also saved, and ``private_bounds``), and the released ranges as the schema the model file
    carries (for ``predict`` and ``serve``)."""
    part = model.privacy_
    model.privacy_ = compose_with_model(ranges.privacy_, part)
    model.privacy_split_ = {"bounds": ranges.privacy_, "model": part}
    split = {
        "bounds": ranges.describe(),
        "model": {"epsilon": part.epsilon, "delta": part.delta, "accountant": part.accountant},
    }
    label = Label(column=args.label_column, classes=tuple(str(c) for c in classes))
    schema = ranges.to_schema(csv_feature_names(args.dataset[4:], args.label_column), label)
    return {"privacy_split": split, "private_bounds": {c.name: [c.lower, c.upper] for c in schema.columns}}, schema
