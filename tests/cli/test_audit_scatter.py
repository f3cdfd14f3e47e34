"""`privml audit --one-run --method scatter-linear|scatter-cnn`: the run privml train makes, and a model file's."""

from __future__ import annotations

import pytest

from tests.cli.test_audit_torch import TINY
from tests.cli_runner import run, run_json

torch = pytest.importorskip("torch")


@pytest.fixture
def spy(monkeypatch):
    """Records the estimator each torch one-run audit is given, then runs it."""
    from privml.audit import _one_run_torch as one_run_torch
    from privml.cli import _audit_torch as audit_torch

    calls: list = []
    real = one_run_torch.torch_classifier_one_run_audit

    def recording(estimator, X, y, **kwargs):
        calls.append(estimator)
        return real(estimator, X, y, **kwargs)

    monkeypatch.setattr(audit_torch, "torch_classifier_one_run_audit", recording)
    return calls


@pytest.mark.parametrize(("head", "white_box"), [("linear", False), ("cnn", True)])
def test_the_audited_run_is_the_one_privml_train_makes(tiny_images, spy, capsys, tmp_path, head, white_box):
    options = ("--dataset", tiny_images, "--epsilon", "4", "--no-progress", "--learning-rate", "2",
               "--epochs", "1", "--batch-size", "20", "--threads", "1", "--device", "cpu", "--seed", "0")
    audit = ("--white-box",) if white_box else ()
    r = run_json(capsys, "audit", "--one-run", "--method", f"scatter-{head}", *audit, *options, "--canaries", "24")
    assert r["method"] == f"scatter-{head}" and r["estimator"] == "ScatterClassifier" and r["architecture"] == head
    assert r["canaries"] == ("dirac" if white_box else "records") and (r["n_real"], r["n_train"]) == (96, 120)
    assert r["steps"] == 6 and 0 < r["claimed_epsilon"] <= 4.0 and not r["exceeds_claim"]
    trained = run_json(capsys, "train", "--method", f"scatter-{head}", *options, "--out", str(tmp_path / "m.npz"))
    from privml.io import load_model

    params = load_model(trained["model"]).get_params()
    audited = spy[0].get_params()
    machine = {"random_state", "device", "progress"}  # the seed is never stored
    assert {k: v for k, v in audited.items() if k not in machine} == {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items() if k not in machine
    }
    assert audited["cache_features"] is False  # the audit writes nothing: no feature cache (npz: train neither)


def test_a_scatter_model_file_is_audited_with_its_settings(tiny_images, spy, capsys, tmp_path):
    options = ("--dataset", tiny_images, "--no-progress", "--threads", "1", "--device", "cpu", "--seed", "0")
    trained = run_json(capsys, "train", "--method", "scatter-linear", "--epsilon", "4", "--epochs", "1",
                       "--batch-size", "20", "--learning-rate", "2", *options, "--out", str(tmp_path / "m.npz"))
    r = run_json(capsys, "audit", "--one-run", "--model", trained["model"], *options, "--canaries", "24")
    assert r["method"] == "scatter-linear" and r["model_file"] == trained["model"] and r["steps"] == 6
    assert spy[0].batch_size == 20 and spy[0].cache_features is False
    assert 0 < r["claimed_epsilon"] <= 4.0 and not r["exceeds_claim"]


def test_the_table_names_the_head(tiny_images, capsys):
    code, out, err = run(capsys, "audit", "--one-run", "--method", "scatter-linear", "--dataset", tiny_images,
                         "--epsilon", "4", *TINY)
    assert code == 0, err
    assert "linear head on ScatterNet features" in out and "linear head on ScatterNet features" in err
