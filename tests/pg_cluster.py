"""A throw-away PostgreSQL cluster for the central-store tests and bench/publish.py: Debian's postgresql
package (scripts/setup.sh --fleet installs it), initdb'd in a temporary directory and started on a free port of
127.0.0.1, as the unprivileged `postgres` user (the server refuses to run as root); stopped and removed after."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"


def available() -> bool:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return False
    return (BIN / "initdb").is_file() and (BIN / "pg_ctl").is_file() and os.geteuid() == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(argv: list[str], timeout: float) -> None:
    subprocess.run(["runuser", "-u", USER, "--", *argv], check=True, capture_output=True, timeout=timeout)


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """postgresql://postgres@127.0.0.1:PORT/postgres of a new cluster (trust authentication on 127.0.0.1)."""
    root = Path(tempfile.mkdtemp(prefix="iomatrix-pg-", dir="/tmp"))
    entry = pwd.getpwnam(USER)
    os.chmod(root, 0o755)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    data = root / "data"
    port = free_port()
    started = False
    try:
        _as_postgres([str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", USER, "--no-sync"], timeout=120)
        # fsync off: a test cluster, thrown away after; a port of its own and its socket in its own directory.
        _as_postgres([str(BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(root / "log"),
                      "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                            "-c max_connections=40", "start"], timeout=90)
        started = True
        yield f"postgresql://{USER}@127.0.0.1:{port}/postgres"
    finally:
        if started:
            with contextlib.suppress(subprocess.SubprocessError):
                _as_postgres([str(BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-m", "immediate", "stop"],
                             timeout=90)
        shutil.rmtree(root, ignore_errors=True)


def create_database(url: str, name: str) -> str:
    """A new empty database in the cluster at `url`; its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name
