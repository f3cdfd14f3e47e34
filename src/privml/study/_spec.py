"""A study as data: which methods, on which data, at which settings, how often.

A :class:`StudySpec` is declarative (read from TOML, or YAML when pyyaml is
installed) and expands into independent :class:`Job` objects, one per
(method, setting, repeat). A job's ``key`` hashes everything that changes its
result, so the same run reached from two sweeps (the point epsilon = 1,
B = 100 lies on several figures) is computed once, and a re-run skips every
finished key.

Settings (the ``defaults`` table and every sweep value):

========  ==========================================================
epsilon   target privacy loss of the released model or predictions
delta     privacy failure probability (0: pure DP)
budget    inference budget B, the number of private predictions
n         number of private training records (None: all available)
d         input dimension after PCA (None: the raw features)
k         number of classes: the first k of the dataset (None: all)
l2        regularisation lambda (None: chosen by the selection mode)
m         models of subsample-and-aggregate (None: chosen)
========  ==========================================================
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import privml
from privml.data._registry import is_user_data
from privml.data._schema import load_schema
from privml.study._methods import METHODS
from privml.study._sizing import MAX_REPEATS
from privml.study._spec_checks import (
    check_classes_cover_k,
    check_m_is_known,
    check_public_records,
    check_sweeps_matter,
)
from privml.study._spec_parts import Selection, Sweep
from privml.study._spec_values import (
    content_digest,
    json_shape,
    parse_count,
    parse_device,
    parse_list,
    parse_relation,
    parse_schema,
    parse_sizing,
    parse_str_list,
    parse_test_fraction,
    parse_text,
    schema_digest,
)

#: Every setting a point may fix, with its kind (validated on load).
SETTINGS: dict[str, str] = {
    "epsilon": "positive",
    "delta": "probability",
    "budget": "count",
    "n": "count",
    "d": "count",
    "k": "count",
    "l2": "positive",
    "m": "count",
}
#: Settings that describe the data rather than a method.
DATA_SETTINGS = ("n", "d", "k")
SELECTION_MODES = ("validation", "private", "public")
#: How often ``validation`` selection runs: once per run, or once per point for all its repeats.
SELECTION_SCOPES = ("run", "point")


@dataclass(frozen=True)
class Job:
    """One independent run: a method at one setting with one seed."""

    key: str
    spec_hash: str
    method: str
    params: dict[str, Any]
    repeat: int
    seed: int
    sweeps: tuple[str, ...]


@dataclass(frozen=True)
class StudySpec:
    """A declarative trade-off study (see the module docstring for the settings).

    Attributes
    ----------
    name, description : str
    dataset : str
        Built-in name or ``csv:PATH`` / ``npz:PATH``.
    label_column : str
        Label column of a ``csv:`` dataset (an error with any other dataset,
        whose labels are fixed).
    classes : tuple of str, optional
        The public class set of ``csv:``/``npz:`` data (a built-in set's is
        public already). Without it the class set is read from the private
        labels, which leaks them (a warning and a note in the report say so).
    schema : str, optional
        A ``csv:`` dataset's public schema file (:mod:`privml.data._schema`),
        read as ``privml train --schema`` reads it: numeric columns clipped to
        public ranges and scaled, categorical ones one-hot. Its content (not
        its path) is part of every run's key (:attr:`run_context`), so a
        schema edited in place re-runs the study. A relative path in a spec
        file is read from the file's folder.
    bounds : {"unit"}, optional
        ``csv:``/``npz:`` data without a schema whose features are already on a
        public scale within [-1, 1] (clipped to it), as ``--bounds unit``.
    test_fraction : float, optional
        User data without a separate test file: the share of the records the
        fixed, seeded split (:func:`privml.data._split.fixed_split`) keeps for
        testing (default: the data's own split, 80/20).
    sizing : dict, optional
        Choose ``test_fraction`` and raise ``repeats`` from the number of
        records, so that the report's verdicts can resolve a stated difference
        (:mod:`privml.study._sizing`); resolved before any run
        (:func:`privml.study._runner.size_study`), and the stored spec holds
        the values chosen.
    methods : tuple of str
        Names in :mod:`privml.study._methods`.
    defaults : dict
        Value of every setting not swept.
    sweeps : tuple of Sweep
    repeats : int
        Runs per point, seeds ``seed_of(r)`` for ``r < repeats`` (shared by
        all methods, so comparisons are paired); at most :data:`~privml.study._sizing.MAX_REPEATS`.
    seed : int
        Fixes the data splits (public, training subset, validation) and the
        per-repeat seeds.
    public_size : float
        Records set aside from the training data as **public** data, used
        only to fit PCA and never trained on: an integer count, or a fraction
        below 1. PCA fit on the private training records would itself leak.
    selection : Selection
    notes : tuple of str
        Free text shown in the report.
    neighbouring : {"replace-one", "add/remove-one", "mixed"}
        The one relation every guarantee of the study holds under (default
        replace-one, van der Maaten & Hannun 2020, Eq. 1). DP-SGD is then run
        with replace-one accounting; the other private methods are analysed
        under replace-one already (which implies the zero-out add/remove
        relation with n public, so "add/remove-one" needs no conversion).
        "mixed" is the paper's protocol, each method under its own relation
        (DP-SGD under add/remove-one): kept for reproduction, and flagged in
        the report as not like for like.
    device : {"auto", "cpu", "cuda", "cuda:N"}
        Where the CNN methods (``nonprivate-cnn``, ``dpsgd-cnn``,
        ``subsample-aggregate-cnn``) train and predict; any other value than
        ``"auto"`` is an error for a study without them. :func:`run_study
        <privml.study._runner.run_study>` resolves ``"auto"`` (CUDA when
        available) before any run and stores the device it used. A seeded
        run draws other numbers on a GPU than on the CPU, so a CNN run's key
        holds its device unless it is the CPU (every CNN run before devices
        existed ran there, so their stored results stay valid); the other
        methods' keys never hold it.
    """

    name: str
    dataset: str
    methods: tuple[str, ...]
    defaults: dict[str, Any]
    sweeps: tuple[Sweep, ...]
    description: str = ""
    label_column: str = "label"
    classes: tuple[str, ...] | None = None
    repeats: int = 3
    seed: int = 0
    public_size: float = 0.1
    selection: Selection = field(default_factory=Selection)
    notes: tuple[str, ...] = ()
    neighbouring: str = "replace-one"
    device: str = "auto"
    schema: str | None = None
    bounds: str | None = None
    test_fraction: float | None = None
    sizing: dict[str, Any] | None = None

    @property
    def like_for_like(self) -> bool:
        """Whether every guarantee of the study is stated under one relation ("mixed" is not)."""
        return self.neighbouring != "mixed"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :func:`spec_from_dict` reads it back."""
        out = json_shape(asdict(self))
        if out["device"] == "auto":  # so a study that names no device keeps the hash it always had
            del out["device"]
        for name in ("classes", "schema", "bounds", "test_fraction", "sizing"):
            if out[name] is None:  # likewise for a study that names none of these
                del out[name]
        return out

    @functools.cached_property
    def spec_hash(self) -> str:
        """Short hash of everything in the spec."""
        return _digest(self.to_dict())[:16]

    @functools.cached_property
    def run_context(self) -> dict[str, Any]:
        """What every run's result depends on besides its method, settings and seed.

        The library version is part of it: after an upgrade, a resumed study
        re-runs every job instead of mixing results of two versions.
        """
        return {
            "privml_version": privml.__version__,  # read at each call: an upgrade re-runs every job
            "dataset": self.dataset,
            "label_column": self.label_column,
            **({} if self.classes is None else {"classes": list(self.classes)}),  # results stored before: unchanged
            # The schema's content, not its path: the same file edited in place is another study (cache correctness).
            **({} if self.schema is None else {"schema": schema_digest(self.schema)}),
            **({} if self.bounds is None else {"bounds": self.bounds}),
            **({} if self.test_fraction is None else {"test_fraction": self.test_fraction}),
            "public_size": self.public_size,
            "data_seed": self.seed,
            "selection": _selection_context(self.selection),
        }

    def with_overrides(self, **changes: Any) -> StudySpec:
        """A copy with top-level fields replaced (e.g. ``dataset=...``), validated."""
        if isinstance(changes.get("selection"), str):
            changes["selection"] = replace(self.selection, mode=changes["selection"])
        if isinstance(changes.get("selection"), Selection):
            changes["selection"] = asdict(changes["selection"])
        return spec_from_dict({**self.to_dict(), **json_shape(changes)})

    def points(self) -> list[tuple[Sweep, dict[str, Any], str]]:
        """Every (sweep, full setting, method) the study asks for, in order."""
        out = []
        for sweep in self.sweeps:
            for value in sweep.values:
                # The relation travels with the setting; only methods whose run depends on it
                # (DP-SGD, Method.uses) keep it in their job key.
                setting = {**self.defaults, **sweep.fixed, sweep.parameter: value, "neighbouring": self.neighbouring}
                if self.device not in ("auto", "cpu"):  # the CPU is what a CNN run without a device ran on
                    setting["device"] = self.device
                for method in sweep.methods or self.methods:
                    if method in self.methods:
                        out.append((sweep, setting, method))
        return out


def _classes(raw: Any, dataset: str) -> tuple[str, ...] | None:
    """The spec's public class set: at least two distinct names, for user data only."""
    if raw is None:
        return None
    names = tuple(parse_str_list(raw, "classes"))
    if len(names) < 2 or len(set(names)) != len(names) or not all(names):
        raise ValueError(f"classes must list at least two distinct, non-empty class names, got {list(names)}")
    if not is_user_data(dataset):
        raise ValueError(f"classes applies to csv:/npz: datasets only (the class set of {dataset} is public)")
    return names


def _label_column(raw: Any, dataset: str) -> str:
    """The label column of a ``csv:`` dataset; with any other one it would be dropped without a word, so an error."""
    column = parse_text(raw, "label_column")
    if column != "label" and not dataset.startswith("csv:"):  # "label" is the default every spec carries
        raise ValueError(f"label_column applies to csv: datasets only ({dataset} has its own labels)")
    return column


def seed_of(spec: StudySpec, repeat: int) -> int:
    """The seed of repeat ``repeat`` (the same for every method and point)."""
    return int.from_bytes(hashlib.sha256(f"{spec.seed}:{repeat}".encode()).digest()[:4], "little")


def selection_seed(spec_seed: int) -> int:
    """The seed of ``scope = "point"`` selections: the validation split and the candidates' noise.

    Derived from the study's seed with its own label, so it is none of the
    repeats' seeds (:func:`seed_of`): no repeat's final noise replays a candidate's.
    """
    return int.from_bytes(hashlib.sha256(f"{spec_seed}:selection".encode()).digest()[:4], "little")


def _selection_context(selection: Selection) -> dict[str, Any]:
    """The selection as part of every run's key; the default scope is left out, so keys made before it existed hold."""
    plain = json_shape(asdict(selection))
    if plain.get("scope") == "run":
        del plain["scope"]
    return plain


def job_key(spec: StudySpec, method: str, params: dict[str, Any], seed: int) -> str:
    """Hash of what determines a run: data, method, relevant settings, seed, selection."""
    return _digest({**spec.run_context, "method": method, "params": params, "seed": seed})[:24]


def spec_from_dict(raw: dict[str, Any]) -> StudySpec:
    """Build and validate a :class:`StudySpec` from plain data (a parsed TOML/YAML file).

    Raises
    ------
    ValueError
        Naming the first invalid field.
    """
    # long-function: a docstring and one flat sequence of field checks, each one line; splitting it scatters them.
    known = {"name", "dataset", "methods", "defaults", "sweeps", "description", "label_column", "classes", "repeats",
             "seed", "public_size", "selection", "notes", "neighbouring", "device", "schema", "bounds",
             "test_fraction", "sizing"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown study field {unknown[0]!r}; fields are {', '.join(sorted(known))}")
    for required in ("name", "dataset", "methods"):
        if required not in raw:
            raise ValueError(f"study field {required!r} is required")
    methods = tuple(parse_str_list(raw["methods"], "methods"))
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; methods are {', '.join(METHODS)}")
    if not methods:
        raise ValueError("methods must name at least one method")
    defaults = _settings(raw.get("defaults", {}), "defaults")
    sweeps = tuple(_sweep(s, i, methods) for i, s in enumerate(parse_list(raw.get("sweeps", []), "sweeps")))
    check_sweeps_matter(sweeps, methods)
    names = [s.name for s in sweeps]
    if len(set(names)) != len(names):
        raise ValueError(f"sweep names must be distinct, got {names}")
    for sweep in sweeps:
        missing = sorted({"epsilon", "delta", "budget"} - {*defaults, *sweep.fixed, sweep.parameter})
        if missing:
            raise ValueError(f"sweep {sweep.name!r} leaves {missing[0]} unset: give it in defaults")
    repeats = parse_count(raw.get("repeats", 3), "repeats")
    if repeats > MAX_REPEATS:
        raise ValueError(f"repeats must be at most {MAX_REPEATS}, got {repeats}")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    public = raw.get("public_size", 0.1)
    if isinstance(public, bool) or not isinstance(public, (int, float)) or not public > 0:
        raise ValueError(f"public_size must be a count or a fraction in (0, 1), got {public!r}")
    if isinstance(public, float) and public >= 1 and not public.is_integer():
        raise ValueError(f"public_size must be a count or a fraction in (0, 1), got {public!r}")
    selection = _selection(raw.get("selection", {}), methods)
    check_m_is_known(sweeps, defaults, methods, selection)
    check_public_records(public, defaults, sweeps)
    dataset = parse_text(raw["dataset"], "dataset")
    classes = _classes(raw.get("classes"), dataset)
    check_classes_cover_k(classes, defaults, sweeps)
    schema, bounds = parse_schema(raw.get("schema"), raw.get("bounds"), dataset)
    if schema is not None and classes is None:  # the schema states the public class set
        check_classes_cover_k(tuple(load_schema(schema).require_label(schema).classes), defaults, sweeps)
    test_fraction = parse_test_fraction(raw.get("test_fraction"), dataset)
    sizing = parse_sizing(raw.get("sizing"))
    if sizing is not None and test_fraction is not None:
        raise ValueError("give sizing or test_fraction, not both: sizing chooses the test split from the data's size")
    return StudySpec(
        name=parse_text(raw["name"], "name"),
        dataset=parse_text(raw["dataset"], "dataset"),
        methods=methods,
        defaults=defaults,
        sweeps=sweeps,
        description=parse_text(raw.get("description", ""), "description"),
        label_column=_label_column(raw.get("label_column", "label"), parse_text(raw["dataset"], "dataset")),
        classes=classes,
        repeats=repeats,
        seed=seed,
        public_size=float(public),
        selection=selection,
        notes=tuple(parse_str_list(raw.get("notes", []), "notes")),
        neighbouring=parse_relation(raw.get("neighbouring", "replace-one")),
        device=parse_device(raw.get("device", "auto")),
        schema=schema,
        bounds=bounds,
        test_fraction=test_fraction,
        sizing=sizing,
    )


#: The relations a study can state its guarantees under.
# ----------------------------------------------------------------- validation
def _sweep(raw: Any, index: int, methods: tuple[str, ...]) -> Sweep:
    where = f"sweeps[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"name", "parameter", "values", "fixed", "methods", "title"})
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}")
    parameter = raw.get("parameter")
    if parameter not in SETTINGS:
        raise ValueError(f"{where}: parameter must be one of {', '.join(SETTINGS)}, got {parameter!r}")
    values = parse_list(raw.get("values"), f"{where}.values")
    if not values:
        raise ValueError(f"{where}.values must not be empty")
    values = [_setting(parameter, v, f"{where}.values") for v in values]
    fixed = _settings(raw.get("fixed", {}), f"{where}.fixed")
    sweep_methods = raw.get("methods")
    if sweep_methods is not None:
        sweep_methods = tuple(parse_str_list(sweep_methods, f"{where}.methods"))
        for m in sweep_methods:
            if m not in methods:
                raise ValueError(f"{where}.methods names {m!r}, which is not among the study's methods")
    name = parse_text(raw.get("name", f"{parameter}-{index}"), f"{where}.name")
    return Sweep(name=name, parameter=parameter, values=tuple(values), fixed=fixed, methods=sweep_methods,
                 title=parse_text(raw.get("title", ""), f"{where}.title"))


def _selection(raw: Any, methods: tuple[str, ...]) -> Selection:
    if isinstance(raw, str):
        raw = {"mode": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"selection must be a table or a mode name, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"mode", "validation_fraction", "stop_probability", "grids", "scope"})
    if unknown:
        raise ValueError(f"selection: unknown field {unknown[0]!r}")
    mode = raw.get("mode", "validation")
    if mode not in SELECTION_MODES:
        raise ValueError(f"selection.mode must be one of {', '.join(SELECTION_MODES)}, got {mode!r}")
    fraction = raw.get("validation_fraction", 0.2)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise ValueError(f"selection.validation_fraction must be in (0, 1), got {fraction!r}")
    gamma = raw.get("stop_probability", 0.2)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma <= 1:
        raise ValueError(f"selection.stop_probability must be in (0, 1], got {gamma!r}")
    scope = raw.get("scope", "run")
    if scope not in SELECTION_SCOPES:
        raise ValueError(f"selection.scope must be one of {', '.join(SELECTION_SCOPES)}, got {scope!r}")
    grids: dict[str, dict[str, tuple[Any, ...]]] = {}
    for method, grid in dict(raw.get("grids", {})).items():
        if method not in methods:
            raise ValueError(f"selection.grids names {method!r}, which is not among the study's methods")
        if not isinstance(grid, dict):
            raise ValueError(f"selection.grids.{method} must be a table of hyper-parameter lists")
        _check_grid_names(method, grid)
        grids[method] = {p: tuple(_grid_values(p, v, f"selection.grids.{method}.{p}")) for p, v in grid.items()}
    return Selection(mode=mode, validation_fraction=float(fraction), stop_probability=float(gamma), grids=grids,
                     scope=scope)


def _check_grid_names(method: str, grid: dict[str, Any]) -> None:
    """A grid may name only hyper-parameters the method's adapter reads: any other would be dropped silently."""
    allowed = METHODS[method].grid_names
    for name in grid:
        if name not in allowed:
            takes = ", ".join(allowed) if allowed else "no hyper-parameter"
            raise ValueError(f"selection.grids.{method} names {name!r}, which {method} does not take; it takes {takes}")


#: Grid hyper-parameters that count something (the rest are positive reals: l2, clip_norm, learning_rate).
_GRID_COUNTS = ("m", "epochs")


def _grid_values(name: str, raw: Any, where: str) -> list[Any]:
    """A grid's candidates, each one a method can use: every run would otherwise fail on it (l2 = -1).

    Checked only, not converted: the values as written are part of the spec's hash.
    """
    values = parse_list(raw, where)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}: {name} must be a finite number, got {value!r}")
        if name in _GRID_COUNTS and (float(value) != int(value) or value < 1):
            raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")
        if not value > 0:
            raise ValueError(f"{where}: {name} must be > 0, got {value!r}")
    return values


def _settings(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a table of settings, got {type(raw).__name__}")
    out = {}
    for name, value in raw.items():
        if name not in SETTINGS:
            raise ValueError(f"{where}: unknown setting {name!r}; settings are {', '.join(SETTINGS)}")
        out[name] = _setting(name, value, where)
    return out


def _setting(name: str, value: Any, where: str) -> Any:
    # TOML has no null: the string "none" (any case) means "not fixed".
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        if name in ("epsilon", "delta", "budget"):
            raise ValueError(f"{where}: {name} must be given, got none")
        return None
    kind = SETTINGS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {name} must be a finite number, got {value!r}")
    if kind == "count":
        if float(value) != int(value) or value < 1:
            raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")
        if name == "k" and value < 2:  # a classifier of one class: every run would fail
            raise ValueError(f"{where}: k must be at least 2 classes, got {value!r}")
        return int(value)
    if kind == "probability":
        if not 0 <= value < 1:
            raise ValueError(f"{where}: {name} must be in [0, 1), got {value!r}")
        return float(value)
    if not value > 0:
        raise ValueError(f"{where}: {name} must be > 0, got {value!r}")
    return float(value)


_digest = content_digest
