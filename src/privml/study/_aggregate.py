"""From stored runs to curves: mean and standard deviation per (sweep, method, value)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privml.study._cells import Cell, Curve
from privml.study._methods import get_method
from privml.study._points import point_runs
from privml.study._spec import StudySpec, spec_from_dict
from privml.study._spec_parts import Sweep
from privml.study._store import ResultStore


@dataclass(frozen=True)
class StudyResults:
    """Everything the report needs from one study's runs."""

    spec: StudySpec
    spec_hash: str
    curves: dict[str, list[Curve]]
    notes: list[str]
    failures: list[dict[str, Any]]
    n_runs: int
    data_steps: tuple[str, ...] = field(default=())

    def sweep(self, name: str) -> Sweep:
        return next(s for s in self.spec.sweeps if s.name == name)

    def sweeps_of(self, parameter: str) -> list[Sweep]:
        return [s for s in self.spec.sweeps if s.parameter == parameter]


def collect(store: ResultStore, spec_hash: str | None = None) -> StudyResults:
    """Curves of the study ``spec_hash`` (default: the one stored last).

    Raises
    ------
    ValueError
        If the store holds no study (or not ``spec_hash``).
    """
    specs = store.specs()
    if not specs:
        raise ValueError(f"{store.path} holds no study results")
    if spec_hash is None:
        spec_hash = list(specs)[-1]
    if spec_hash not in specs:
        raise ValueError(f"{store.path} holds no study {spec_hash!r}; it holds {', '.join(specs)}")
    spec = spec_from_dict(specs[spec_hash])
    cells, _ = point_runs(spec)
    by_key = {r["key"]: r for r in store.records(status="ok")}
    failures = [r for r in store.records(spec_hash=spec_hash, status="error")]
    grouped: dict[tuple[str, str, Any], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for cell in cells:
        record = by_key.get(cell.key)
        if record is not None:
            grouped.setdefault((cell.sweep.name, cell.method, _hashable(cell.value)), []).append((cell.setting, record))
    curves: dict[str, list[Curve]] = {}
    steps: tuple[str, ...] = ()
    for sweep in spec.sweeps:
        lines = []
        for name in sweep.methods or spec.methods:
            method = get_method(name)
            out = []
            for value in sweep.values:
                found = grouped.get((sweep.name, name, _hashable(value)))
                if not found:
                    continue
                records = [r for _, r in found]
                steps = steps or tuple(records[0]["info"].get("data_steps", ()))
                out.append(Cell(
                    value=value,
                    setting=found[0][0],
                    accuracies=tuple(r["accuracy"] for r in records),
                    train_seconds=tuple(r["train_seconds"] for r in records),
                    predict_seconds=tuple(r["predict_seconds"] for r in records),
                    epsilons=tuple(r["epsilon"] for r in records),
                    deltas=tuple(r["delta"] for r in records),
                    selection_modes=tuple(r["selection"]["mode"] for r in records),
                    chosen=tuple(r["selection"]["chosen"] for r in records),
                    repeats=tuple(int(r["repeat"]) for r in records),
                    n_test=min((int(r["info"]["n_test"]) for r in records if "n_test" in r["info"]), default=None),
                ))
            if out:
                lines.append(Curve(method=name, label=method.label, kind=method.kind, cells=tuple(out)))
        curves[sweep.name] = lines
    n_runs = len({c.key for c in cells if c.key in by_key})
    return StudyResults(spec=spec, spec_hash=spec_hash, curves=curves, notes=store.notes(spec_hash),
                        failures=failures, n_runs=n_runs, data_steps=steps)


def _hashable(value: Any) -> Any:
    return value if not isinstance(value, list) else tuple(value)
