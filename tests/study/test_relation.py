"""The study names one neighbouring relation (issue 14): runs carry it, the report states it."""

from __future__ import annotations

import json

import pytest

from privml.study import ResultStore
from privml.study._spec import spec_from_dict
from tests.cli_runner import run

SPEC = {
    "name": "relation", "dataset": "digits", "methods": ["output", "dpsgd"], "repeats": 1, "public_size": 200,
    "selection": "public", "defaults": {"epsilon": 1.0, "delta": 1e-5, "budget": 10, "n": 300, "d": 8},
    "sweeps": [{"name": "epsilon", "parameter": "epsilon", "values": [1.0]}],
}


def test_the_default_relation_is_replace_one_and_bad_ones_are_refused() -> None:
    assert spec_from_dict(SPEC).neighbouring == "replace-one" and spec_from_dict(SPEC).like_for_like
    assert not spec_from_dict({**SPEC, "neighbouring": "mixed"}).like_for_like
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        spec_from_dict({**SPEC, "neighbouring": "sideways"})


def _run(capsys, tmp_path, relation: str) -> tuple[dict, list[dict], str]:
    spec = tmp_path / "relation.toml"
    spec.write_text(
        'name = "relation"\ndataset = "digits"\nmethods = ["output", "dpsgd"]\nrepeats = 1\npublic_size = 200\n'
        'selection = "public"\n[defaults]\nepsilon = 1.0\ndelta = 1e-5\nbudget = 10\nn = 300\nd = 8\n'
        '[[sweeps]]\nname = "epsilon"\nparameter = "epsilon"\nvalues = [1.0]\n')
    out = tmp_path / relation.replace("/", "-")
    code, stdout, err = run(capsys, "study", "run", str(spec), "--out", str(out), "--neighbouring", relation,
                            "--no-progress", "--json")
    assert code == 0, err
    result = json.loads(stdout)
    runs = ResultStore(out / "results.sqlite").records()
    return result, runs, (out / "report" / "index.html").read_text()


@pytest.mark.parametrize(("relation", "dpsgd_relation"),
                         [("replace-one", "replace-one"), ("mixed", "add/remove-one")])
def test_every_run_carries_its_relation_and_the_report_says_it(capsys, tmp_path, relation, dpsgd_relation) -> None:
    result, runs, report = _run(capsys, tmp_path, relation)
    assert result["neighbouring"] == relation
    by_method = {r["method"]: r for r in runs}
    assert by_method["dpsgd"]["info"]["neighbouring"] == dpsgd_relation
    assert by_method["output"]["info"]["neighbouring"] == "replace-one"
    if relation == "replace-one":
        assert "Neighbouring relation: replace-one" in report
        assert "Every guarantee holds under replace-one neighbours." in report  # the figure caption
    else:
        assert "Not like for like." in report and "NOT like for like" in report
    # recommend ranks methods at one epsilon: only under one relation (a review: a mixed study recommended
    # DP-SGD at 52.9% where its replace-one accuracy at that epsilon was 26.7%, saying nothing).
    out = tmp_path / relation.replace("/", "-")
    code, stdout, err = run(capsys, "study", "recommend", str(out), "--epsilon", "1", "--json")
    if relation == "replace-one":
        assert code == 0 and json.loads(stdout)["neighbouring"] == "replace-one"
        assert json.loads(stdout)["neighbouring_detail"].startswith("replace-one: same n")
        assert "<th>best method</th>" in report
    else:
        assert code == 2 and "not like for like" in err and len(err.strip().splitlines()) == 1
        assert "No recommendation: the study&#x27;s guarantees are not like for like" in report
        assert "<th>best method</th>" not in report
