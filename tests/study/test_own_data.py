"""The study on the user's own CSV: read through its public schema, sized from n so a verdict is possible (issue 32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privml.study import load_preset, spec_from_dict
from privml.study._points import plan
from privml.study._runner import size_study
from privml.study._sizing import check_sizing, choose, resolvable
from privml.study._spec_file import load_spec
from tests.cli_runner import run, run_json
from tests.data.raw_tables import breast_cancer_schema, generous_breast_cancer_schema, write_raw_breast_cancer


@pytest.fixture(scope="module")
def patients(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("patients")
    return write_raw_breast_cancer(folder / "patients.csv"), breast_cancer_schema().save(folder / "schema.toml")


def _spec(csv: Path, schema: Path | None, **changes) -> dict:
    raw = {"name": "mine", "dataset": f"csv:{csv}", "methods": ["nonprivate", "objective"], "repeats": 2,
           "public_size": 1, "defaults": {"epsilon": 1.0, "delta": 0.0, "budget": 1},
           "selection": {"mode": "public"},
           "sweeps": [{"name": "epsilon", "parameter": "epsilon", "values": [1.0, 10.0]}]}
    if schema is not None:
        raw["schema"] = str(schema)
    return {**raw, **changes}


def test_the_schemas_content_is_part_of_every_runs_key(patients, tmp_path):
    csv, schema = patients
    spec = spec_from_dict(_spec(csv, schema))
    keys = {job.key for job in plan(spec)[0]}
    # The same path with other content (a range corrected in place) is another study: no stale cache hit.
    edited = tmp_path / "schema.toml"
    edited.write_text(schema.read_text().replace("2501.0", "2600.0"))
    moved = tmp_path / "same.toml"
    moved.write_text(schema.read_text())
    assert {job.key for job in plan(spec_from_dict(_spec(csv, edited)))[0]}.isdisjoint(keys)
    assert {job.key for job in plan(spec_from_dict(_spec(csv, moved)))[0]} == keys  # the content, not the path
    assert {job.key for job in plan(spec_from_dict(_spec(csv, None, bounds="unit")))[0]}.isdisjoint(keys)
    # A schema names the class set: no "read from the private labels" note.
    assert not any("private labels" in note for note in plan(spec)[1])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dataset": "digits"}, "schema applies to csv: datasets only"),
        ({"bounds": "unit"}, "give schema or bounds, not both"),
        ({"bounds": "wide"}, "bounds must be 'unit'"),
        ({"test_fraction": 1.5}, "test_fraction must be in (0, 1)"),
        ({"sizing": {"min_test_rows": 0}}, "sizing.min_test_rows must be an integer"),
        ({"sizing": {"resolve": 2}}, "sizing.resolve must be in (0, 1)"),
        ({"sizing": {"rows": 2}}, "sizing: unknown field 'rows'"),
    ],
)
def test_bad_schema_and_sizing_fields_are_refused(patients, changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_from_dict(_spec(*patients, **changes))


def test_a_draft_schema_is_refused(patients, tmp_path):
    csv, schema = patients
    draft = tmp_path / "draft.toml"
    draft.write_text("draft = true\n" + schema.read_text())
    with pytest.raises(ValueError, match="draft"):
        spec_from_dict(_spec(csv, draft))


def test_a_spec_files_schema_is_read_beside_it(patients, tmp_path):
    csv, schema = patients
    (tmp_path / "schema.toml").write_text(schema.read_text())
    spec_file = tmp_path / "mine.toml"
    spec_file.write_text(f'name = "mine"\ndataset = "csv:{csv}"\nmethods = ["nonprivate"]\nschema = "schema.toml"\n'
                         'public_size = 1\n[defaults]\nepsilon = 1.0\ndelta = 0.0\nbudget = 1\n')
    assert load_spec(spec_file).schema == str(tmp_path / "schema.toml")


def test_resolvable_difference_matches_the_evidence_intervals():
    from privml.study._cells import Cell
    from privml.study._evidence import difference

    # Issue 32's report: 2 repeats on 114 test rows could call no difference below 41 points.
    assert resolvable(114, 2) == pytest.approx(0.414, abs=1e-3)
    assert resolvable(200, 5) < 0.01 and resolvable(200, 1) == 1.0
    # At the bound the evidence module's own interval, for repeats that agree exactly, just touches 0.
    d = resolvable(200, 5)
    for scale, verdict in ((1.05, "holds"), (0.95, "inconclusive")):
        gap = round(200 * d * scale) / 200  # a difference of whole test rows
        hi, lo = (Cell(value=1, setting={}, accuracies=(accuracy,) * 5, train_seconds=(), predict_seconds=(),
                       epsilons=(), deltas=(), selection_modes=(), chosen=(), repeats=tuple(range(5)), n_test=200)
                  for accuracy in (0.9, 0.9 - gap))
        assert difference(hi, lo).verdict == verdict, (scale, gap)


def test_sizing_picks_the_test_split_and_repeats_from_n():
    sizing = check_sizing({})
    # breast_cancer's 569 records: 200 test rows (not 114) and the spec's 5 repeats already resolve 2 points.
    sizes = choose(sizing, n_records=569, n_test=None, repeats=5)
    assert (round(sizes.test_fraction * 569), sizes.repeats) == (200, 5)
    assert "0.8 points" in sizes.note
    # From 2 repeats the repeats rise until 2 points can be called.
    sizes = choose(sizing, n_records=569, n_test=None, repeats=2)
    assert sizes.repeats == 4 and resolvable(200, 3) > 0.02 >= resolvable(200, 4)
    # Large data: 20% of the records.
    assert choose(sizing, n_records=10_000, n_test=None, repeats=5).test_fraction == pytest.approx(0.2)
    # Tiny data: half the records and the most repeats, and the note says no verdict below some difference.
    sizes = choose({**sizing, "max_repeats": 6}, n_records=60, n_test=None, repeats=5)
    assert round(sizes.test_fraction * 60) == 30 and sizes.repeats == 6
    assert "no verdict is possible on a difference below" in sizes.note
    # A dataset with its own test split keeps it.
    assert choose(sizing, n_records=569, n_test=114, repeats=2).test_fraction is None


def test_the_own_data_preset_is_sized_and_tunes_its_baseline(patients):
    csv, schema = patients
    preset = load_preset("own-data")
    assert preset.repeats >= 5 and preset.sizing is not None
    assert "l2" in preset.selection.grids["nonprivate"]  # chosen by the same selection as the private methods
    spec = size_study(preset.with_overrides(dataset=f"csv:{csv}", schema=str(schema)))
    assert spec.sizing is None and spec.repeats == 5 and round(spec.test_fraction * 569) == 200
    assert spec.notes[-1].startswith("sizing: a test split of 200 of the 569 records")
    assert size_study(spec) is spec  # resolved once: a resumed study keeps its hash


def test_study_run_on_a_csv_needs_a_schema_and_uses_it(capsys, patients, tmp_path):
    csv, schema = patients
    common = ["study", "run", "own-data", "--dataset", f"csv:{csv}", "--sweeps", "epsilon", "--no-progress",
              "--no-report", "--out"]
    code, out, err = run(capsys, *common, str(tmp_path / "none"), "--label-column", "outcome", "--classes", "no,yes")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--schema FILE" in err and "privml schema suggest" in err and not (tmp_path / "none").exists()
    code, _, err = run(capsys, *common, str(tmp_path / "both"), "--schema", str(schema), "--bounds", "unit")
    assert code == 2 and "not both" in err


@pytest.mark.slow
def test_the_own_data_baseline_matches_scikit_learns_standardised_logistic_regression(capsys, tmp_path):
    """Issue 32's acceptance: breast_cancer as a raw-unit CSV with a schema of generous published ranges."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from privml.study import ResultStore

    csv = write_raw_breast_cancer(tmp_path / "patients.csv")
    schema = generous_breast_cancer_schema().save(tmp_path / "schema.toml")
    r = run_json(capsys, "study", "run", "own-data", "--dataset", f"csv:{csv}", "--schema", str(schema), "--sweeps",
                 "epsilon", "--no-progress", "--no-report", "--out", str(tmp_path / "o"))
    assert r["failed"] == 0
    runs = ResultStore(tmp_path / "o" / "results.sqlite", read_only=True).records(spec_hash=r["spec_hash"])
    baseline = [run["accuracy"] for run in runs if run["method"] == "nonprivate"]
    X, y = load_breast_cancer(return_X_y=True)
    reference = cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)), X, y, cv=5)
    assert len(baseline) == 5
    assert abs(np.mean(baseline) - reference.mean()) <= 0.02
