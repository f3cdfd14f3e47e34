from __future__ import annotations

import pytest

from privml.study import load_preset, load_spec, plan, preset_names, spec_from_dict
from privml.study._spec import job_key, seed_of

from .conftest import tiny_spec_dict


def test_presets_load_and_plan():
    assert {"quick", "quick-ci", "paper-mnist-linear", "paper-cnn"} <= set(preset_names())
    for name in preset_names():
        spec = load_preset(name)
        jobs, _ = plan(spec)
        assert jobs, name
        assert len({j.key for j in jobs}) == len(jobs)


def test_paper_preset_reproduces_figures_1_to_6_at_10_repeats():
    spec = load_preset("paper-mnist-linear")
    assert spec.repeats == 10
    assert {s.parameter for s in spec.sweeps} == {"epsilon", "budget", "delta", "n", "d", "k", "l2", "m"}
    assert {"prediction-sensitivity", "subsample-aggregate", "output", "objective", "dpsgd"} <= set(spec.methods)


def test_unknown_preset_is_one_line_error():
    with pytest.raises(ValueError, match="unknown study preset 'nope'; presets are"):
        load_preset("nope")


def test_private_training_runs_are_shared_across_budgets():
    # B does not enter private training: one run per (epsilon, repeat) serves every budget.
    spec = spec_from_dict(tiny_spec_dict())
    jobs, _ = plan(spec)
    output_jobs = [j for j in jobs if j.method == "output"]
    assert all("budget" not in j.params for j in output_jobs)
    # epsilon sweep (2 values) + budget sweep (the default epsilon = 1) = 3 settings x 2 repeats
    assert len(output_jobs) == 6
    prediction_jobs = [j for j in jobs if j.method == "prediction-sensitivity"]
    assert len(prediction_jobs) == 8  # 2 epsilons + 2 budgets, all at distinct (epsilon, B)
    shared = [j for j in output_jobs if j.params["epsilon"] == 1.0]
    assert all(set(j.sweeps) == {"budget"} for j in shared)


def test_methods_needing_delta_are_left_out_at_delta_zero_with_a_note():
    # Only the epsilon sweep: neither method takes the budget, so a budget sweep would be refused.
    spec = spec_from_dict(tiny_spec_dict(methods=["output", "dpsgd"], sweeps=tiny_spec_dict()["sweeps"][:1]))
    jobs, notes = plan(spec)
    assert {j.method for j in jobs} == {"output"}
    assert any("DP-SGD needs delta > 0" in n for n in notes)


def test_seeds_are_shared_by_methods_and_differ_by_repeat():
    spec = spec_from_dict(tiny_spec_dict())
    assert seed_of(spec, 0) != seed_of(spec, 1)
    jobs, _ = plan(spec)
    assert {j.seed for j in jobs} == {seed_of(spec, 0), seed_of(spec, 1)}


def test_job_key_changes_with_anything_that_changes_the_result(monkeypatch):
    import privml

    spec = spec_from_dict(tiny_spec_dict())
    base = job_key(spec, "output", {"epsilon": 1.0}, 1)
    assert job_key(spec, "output", {"epsilon": 1.0}, 1) == base
    assert job_key(spec, "output", {"epsilon": 2.0}, 1) != base
    assert job_key(spec, "output", {"epsilon": 1.0}, 2) != base
    assert job_key(spec.with_overrides(selection="validation"), "output", {"epsilon": 1.0}, 1) != base
    assert job_key(spec.with_overrides(dataset="iris"), "output", {"epsilon": 1.0}, 1) != base
    # A new library version re-runs everything rather than resuming on old results.
    monkeypatch.setattr(privml, "__version__", "99.0")
    assert job_key(spec_from_dict(tiny_spec_dict()), "output", {"epsilon": 1.0}, 1) != base


def test_toml_and_yaml_specs_agree(tmp_path):
    import yaml

    toml = tmp_path / "s.toml"
    toml.write_text(
        'name = "t"\ndataset = "digits"\nmethods = ["output"]\n[defaults]\nepsilon = 1.0\ndelta = 0.0\nbudget = 5\n'
        '[[sweeps]]\nname = "e"\nparameter = "epsilon"\nvalues = [0.5, 2.0]\n'
    )
    yml = tmp_path / "s.yaml"
    yml.write_text(yaml.safe_dump({"name": "t", "dataset": "digits", "methods": ["output"],
                                   "defaults": {"epsilon": 1.0, "delta": 0.0, "budget": 5},
                                   "sweeps": [{"name": "e", "parameter": "epsilon", "values": [0.5, 2.0]}]}))
    assert load_spec(toml).spec_hash == load_spec(yml).spec_hash


def test_m_of_subsample_aggregate_may_come_from_a_setting_a_sweep_or_a_selection_that_tunes_it():
    methods = {"methods": ["subsample-aggregate"]}
    spec_from_dict(tiny_spec_dict(**methods, defaults={"epsilon": 1.0, "delta": 0.0, "budget": 10, "m": 8}))
    spec_from_dict(tiny_spec_dict(**methods, selection={"mode": "validation"}))
    spec_from_dict(tiny_spec_dict(**methods, selection={"mode": "public", "grids": {"subsample-aggregate": {"m": [4]}}}))
    swept = [{"name": "m", "parameter": "m", "values": [4, 8]}]
    spec_from_dict(tiny_spec_dict(**methods, sweeps=swept))
    with pytest.raises(ValueError, match="leaves m unset"):  # an override re-validates
        spec_from_dict(tiny_spec_dict(**methods, selection={"mode": "validation"})).with_overrides(selection="public")


def test_yaml_reads_exponents_without_a_dot_as_numbers(tmp_path):
    # PyYAML (YAML 1.1) reads 1e-5 as a string; a study's delta is nearly always written that way.
    yml = tmp_path / "s.yaml"
    yml.write_text("name: t\ndataset: digits\nmethods: [output]\ndefaults: {epsilon: 1e0, delta: 1e-5, budget: 5}\n"
                   "sweeps:\n  - {name: e, parameter: epsilon, values: [5e-1, 2E+0, 3]}\n")
    spec = load_spec(yml)
    assert spec.defaults["delta"] == 1e-5 and spec.defaults["epsilon"] == 1.0
    assert list(spec.sweeps[0].values) == [0.5, 2.0, 3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"methods": ["output", "magic"]}, "unknown method 'magic'"),
        ({"colour": "red"}, "unknown study field 'colour'"),
        ({"device": "tpu"}, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"),
        ({"device": "cuda:x"}, "device must be"),
        ({"repeats": 0}, "repeats must be a positive integer"),
        ({"defaults": {"epsilon": -1.0, "delta": 0.0, "budget": 1}}, "epsilon must be > 0"),
        ({"defaults": {"epsilon": 1.0, "delta": 1.5, "budget": 1}}, r"delta must be in \[0, 1\)"),
        ({"defaults": {"epsilon": 1.0, "delta": 0.0, "budget": 2.5}}, "budget must be a positive integer"),
        ({"sweeps": [{"parameter": "colour", "values": [1]}]}, "parameter must be one of"),
        ({"sweeps": [{"parameter": "epsilon", "values": []}]}, "values must not be empty"),
        ({"selection": {"mode": "magic"}}, "selection.mode must be one of"),
        ({"public_size": 0}, "public_size must be"),
        ({"defaults": {"epsilon": 1.0, "delta": 0.0}}, "sweep 'epsilon' leaves budget unset"),
        # Subsample-and-aggregate needs m: public mode takes no candidates from its default grid.
        ({"methods": ["subsample-aggregate"]}, "leaves m unset for subsample-aggregate"),
        ({"methods": ["subsample-aggregate"], "selection": {"mode": "private"}}, "leaves m unset"),
    ],
)
def test_invalid_specs_are_refused_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message) as info:
        spec_from_dict(tiny_spec_dict(**change))
    assert "\n" not in str(info.value)


def test_bad_toml_file_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ValueError, match="bad.toml: not valid TOML"):
        load_spec(bad)
    with pytest.raises(FileNotFoundError, match="study spec not found"):
        load_spec(tmp_path / "missing.toml")


def test_none_setting_means_unset_in_toml():
    spec = spec_from_dict(tiny_spec_dict(defaults={"epsilon": 1.0, "delta": 0.0, "budget": 1, "n": "none"}))
    assert spec.defaults["n"] is None


def test_a_grid_may_name_only_what_the_method_reads():
    for grids, message in (({"output": {"clip_norm": [0.1]}}, "output names 'clip_norm'.*it takes l2"),
                           ({"dpsgd": {"l2": [0.1]}}, "it takes clip_norm, learning_rate")):
        with pytest.raises(ValueError, match=message):
            spec_from_dict(tiny_spec_dict(methods=["output", "dpsgd"], sweeps=tiny_spec_dict()["sweeps"][:1],
                                          selection={"mode": "validation", "grids": grids}))
    spec = spec_from_dict(tiny_spec_dict(methods=["dpsgd"], sweeps=tiny_spec_dict()["sweeps"][:1], selection={
        "mode": "validation", "grids": {"dpsgd": {"clip_norm": [0.1], "learning_rate": [0.5, 1.0]}}}))
    assert spec.selection.grids["dpsgd"]["learning_rate"] == (0.5, 1.0)


def test_a_public_class_set_is_part_of_a_user_data_spec_only():
    two_classes = {**tiny_spec_dict()["defaults"], "k": 2}  # k may not exceed the public class set
    spec = spec_from_dict(tiny_spec_dict(dataset="csv:mine.csv", classes=["no", "yes"], defaults=two_classes))
    with pytest.raises(ValueError, match="k = 10 classes, but the class set has 2"):
        spec_from_dict(tiny_spec_dict(dataset="csv:mine.csv", classes=["no", "yes"]))
    assert spec.classes == ("no", "yes") and spec.run_context["classes"] == ["no", "yes"]
    assert spec_from_dict(spec.to_dict()).classes == ("no", "yes")
    plain = spec_from_dict(tiny_spec_dict(dataset="csv:mine.csv"))
    # A spec without classes keeps the hash and run context it had before the field existed.
    assert "classes" not in plain.to_dict() and "classes" not in plain.run_context
    with pytest.raises(ValueError, match="csv:/npz: datasets only"):
        spec_from_dict(tiny_spec_dict(classes=["0", "1"]))
    with pytest.raises(ValueError, match="two distinct"):
        spec_from_dict(tiny_spec_dict(dataset="csv:mine.csv", classes=["no", "no"]))
