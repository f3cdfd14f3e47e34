"""train, select and audit refuse bad options before any data is read (from a review): each error is one line,
exit 2, and no loader runs; settings a method cannot use are refused, never dropped."""

from __future__ import annotations

import pytest

import privml.cli._audit_model
import privml.cli._select
import privml.cli._train
from tests.cli_runner import run


@pytest.fixture
def no_data(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("data read before the options were checked")

    for module in (privml.cli._train, privml.cli._select, privml.cli._audit_model):  # audit_model loads the audit's data
        monkeypatch.setattr(module, "load_dataset", refuse)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # --delta defaulted to 1e-5, so a given one could not be told apart and was ignored for the baseline.
        (["train", "--method", "nonprivate", "--dataset", "iris", "--delta", "1e-6"], "do not apply"),
        (["train", "--method", "dpsgd", "--dataset", "iris", "--epsilon", "1", "--delta", "0"], "--delta must be > 0"),
        (["train", "--method", "dpcd", "--dataset", "iris", "--epsilon", "1", "--delta", "0"], "--delta must be > 0"),
        (["audit", "--method", "dpsgd", "--dataset", "iris", "--epsilon", "1", "--delta", "0", "--trials", "4"],
         "--delta must be > 0"),
        (["train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--seed", "-1"], "--seed"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--seed", "-1"], "--seed"),
        (["audit", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "4", "--seed", "-1"],
         "--seed"),
        (["select", "--dataset", "iris", "--target-error", "0.5", "--max-train", "1"], "--max-train must be >= 3"),
        (["audit", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--trials", "4", "--jobs", "-100"],
         "--jobs"),
        (["train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--out", ""], "--out is empty"),
        (["train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", "--epochs", "1e300"],
         "--epochs"),
    ],
)
def test_bad_options_are_refused_before_any_data_is_read(capsys, no_data, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_private_methods_still_default_delta(capsys):
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", "iris", "--epsilon", "1", "--seed", "0",
                         "--json")
    assert code == 0, err
    assert '"delta": 1e-05' in out


@pytest.mark.parametrize("command", ["train", "select"])
def test_a_leak_warning_is_printed_when_loading_then_fails(capsys, tmp_path, command):
    # The class set read from the labels warned, but the warning was dropped when loading failed, and the
    # error printed the inferred (private) class.
    data = tmp_path / "one.csv"
    data.write_text("x,label\n" + "".join(f"{i / 10},secretlabel\n" for i in range(10)))
    argv = ["--dataset", f"csv:{data}"]
    argv += ["--bounds", "unit"]
    argv += (["--method", "output", "--epsilon", "1"] if command == "train" else ["--target-error", "0.5"])
    code, out, err = run(capsys, command, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert lines[0].startswith("warning: PrivacyLeakWarning: ")
    assert "at least 2 classes, got 1" in lines[-1] and "secretlabel" not in lines[-1]


def test_an_npz_dataset_with_a_csv_test_file_says_what_is_wrong(capsys, tmp_path):
    import numpy as np

    np.savez(tmp_path / "d.npz", X=np.zeros((20, 2)), y=np.arange(20) % 2)
    (tmp_path / "t.csv").write_text("x0,x1,label\n0,0,1\n")
    code, out, err = run(capsys, "train", "--method", "output", "--dataset", f"npz:{tmp_path / 'd.npz'}",
                         "--test", str(tmp_path / "t.csv"), "--epsilon", "1", "--classes", "0,1")
    assert code == 2 and out == ""
    assert "t.csv is not an .npz file" in err and "pickle" not in err and len(err.strip().splitlines()) == 1
