"""`privml datasets`: lists every dataset with its availability."""

from __future__ import annotations

import json

from privml.cli.main import main


def test_datasets_json_reports_missing_and_bundled(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path))
    assert main(["datasets", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    entries = {d["name"]: d for d in json.loads(out[0])["datasets"]}
    assert {"mnist", "fashion-mnist", "adult", "digits", "breast_cancer"} <= set(entries)
    assert entries["digits"]["available"] is True  # bundled with scikit-learn
    assert entries["mnist"]["available"] is False  # empty cache
    assert "privml.data.fetch mnist" in entries["mnist"]["how_to_get"]


def test_datasets_human_output_says_how_to_get_missing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path))
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "mnist" in out and "missing" in out and "->" in out
