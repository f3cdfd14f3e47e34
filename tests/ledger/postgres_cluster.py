"""A PostgreSQL server for the ledger tests: PRIVML_TEST_POSTGRES_URL, or a
throwaway cluster started from the local ``initdb``/``pg_ctl`` in a temp dir."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def _binaries() -> str | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "initdb")) and os.path.exists(os.path.join(candidate, "pg_ctl")):
            return candidate
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(initdb))
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def postgres_url() -> Iterator[tuple[str | None, str]]:
    """Yield ``(url, "")``, or ``(None, reason)`` with nothing reachable (the caller skips)."""
    url = os.environ.get("PRIVML_TEST_POSTGRES_URL")
    if url:
        yield url, ""
        return
    bindir = _binaries()
    if bindir is None:
        yield None, "no PostgreSQL: set PRIVML_TEST_POSTGRES_URL or install initdb/pg_ctl (apt-get install postgresql)"
        return
    # initdb refuses to run as root; run the cluster as the packaged postgres user.
    prefix: list[str] = []
    user = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            yield None, "running as root and there is no 'postgres' user to run a throwaway cluster"
            return
        prefix = ["runuser", "-u", "postgres", "--"]
    root = tempfile.mkdtemp(prefix="privml-pg-")
    data = os.path.join(root, "data")
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    port = _free_port()
    run = dict(check=True, capture_output=True, timeout=120)
    started = False
    try:
        subprocess.run([*prefix, f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "privml", "--no-sync"], **run)
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-o", options, "-w", "-t", "60",
                        "-l", os.path.join(root, "log"), "start"], **run)
        started = True
        yield f"postgresql://privml@127.0.0.1:{port}/postgres", ""
    except (subprocess.SubprocessError, OSError) as exc:
        if started:
            raise
        detail = getattr(exc, "stderr", b"") or b""
        yield None, f"could not start a throwaway PostgreSQL cluster: {exc} {detail.decode(errors='replace')[-300:]}"
    finally:
        if started:
            subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)
