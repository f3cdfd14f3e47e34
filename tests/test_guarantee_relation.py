"""Every guarantee states its neighbouring relation exactly, DP-SGD's zero-out view included."""

from __future__ import annotations

from privml.accounting import dpsgd_event, make_accountant
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring
from tests.cli_runner import run_json


def test_add_remove_is_stated_with_n_public() -> None:
    guarantee = make_accountant("pld").compose(dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=10)).guarantee(1e-5)
    assert guarantee.neighbouring is Neighbouring.ADD_REMOVE_ONE
    assert "n public" in guarantee.to_dict()["neighbouring_detail"]
    assert "zero-out" in str(guarantee)
    replace = PrivacyGuarantee(1.0, 0.0, Neighbouring.REPLACE_ONE, "single-release")
    assert "zero-out" not in str(replace) and "replace-one" in replace.to_dict()["neighbouring_detail"]
    assert PrivacyGuarantee.from_dict(guarantee.to_dict()) == guarantee


def test_account_dpsgd_json_states_the_relation(capsys) -> None:
    r = run_json(capsys, "account", "dpsgd", "--noise-multiplier", "1.1", "--sample-rate", "0.01", "--steps", "100",
                 "--delta", "1e-5")
    assert r["neighbouring"] == "add/remove-one"
    assert r["neighbouring_detail"].startswith("add/remove-one with n public (zero-out view)")
