from __future__ import annotations

import json

import numpy as np
import pytest

from privml.serve import load_api_keys


def test_a_key_file(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"alpha-key": 10, "beta-key": 2.0}))
    assert load_api_keys(path) == {"alpha-key": 10, "beta-key": 2}


@pytest.mark.parametrize(
    ("content", "error", "match"),
    [
        ("{not json", ValueError, "is not a JSON object of API keys"),
        ("[]", ValueError, "must be a non-empty JSON object"),
        ("{}", ValueError, "must be a non-empty JSON object"),
        ('{"": 1}', ValueError, "non-empty visible ASCII"),
        ('{"has space": 1}', ValueError, "non-empty visible ASCII"),
        ('{"caf\\u00e9": 1}', ValueError, "non-empty visible ASCII"),
        ('{"k": 0}', ValueError, "quota of a key must be >= 1"),
        ('{"k": "ten"}', ValueError, "quota of a key must be an integer"),
    ],
)
def test_bad_key_files(tmp_path, content, error, match):
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(error, match=match):
        load_api_keys(path)


def test_errors_never_echo_a_key(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text('{"secret key": 1}')
    with pytest.raises(ValueError) as info:
        load_api_keys(path)
    assert "secret" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="API key file not found"):
        load_api_keys(tmp_path / "nope.json")


def test_a_ledger_with_quotas_is_not_served_anonymously(tmp_path) -> None:
    from privml.ledger import MemoryLedger
    from privml.serve._service import PredictionService

    class Answers:
        classes_ = np.array([0, 1])
        n_features_in_ = 2
        ledger_ = MemoryLedger(10)

    Answers.ledger_.set_quota("alice", 5)
    with pytest.raises(ValueError, match="holds quotas for 1 API key"):
        PredictionService(Answers())
    PredictionService(Answers(), api_keys={"alice": 5})  # with the keys it serves


def test_quotas_beyond_the_budget_are_refused() -> None:
    from privml.ledger import MemoryLedger
    from privml.serve._service import PredictionService

    class Answers:
        classes_ = np.array([0, 1])
        n_features_in_ = 2
        ledger_ = MemoryLedger(10)

    with pytest.raises(ValueError, match="sum to 12 answers, more than the budget of 10"):
        PredictionService(Answers(), api_keys={"a": 6, "b": 6})
    assert Answers.ledger_.keys() == {}  # nothing was set


def test_a_directory_is_named_as_such(tmp_path):
    # It was reported as "API key file not found", which sent the user looking for a file that is there.
    with pytest.raises(ValueError, match="is a directory, not a JSON file"):
        load_api_keys(tmp_path)


def test_a_binary_key_file_is_named_without_its_bytes(tmp_path):
    path = tmp_path / "keys.json"
    path.write_bytes(b"\xff\xfe secret")
    with pytest.raises(ValueError, match="keys.json: not a text file") as info:
        load_api_keys(path)
    assert "secret" not in str(info.value) and "0xff" not in str(info.value)
