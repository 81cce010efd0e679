"""A throw-away PostgreSQL cluster for the central-store tests and bench/publish.py: Debian's
postgresql package (scripts/setup.sh --fleet installs it), initdb'd in a temporary directory and
started on a free port of 127.0.0.1, as the unprivileged `postgres` user (the server refuses to run
as root); stopped and removed after."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    subprocess.run(
        ["runuser", "-u", USER, "--", *argv], check=True, capture_output=True, timeout=timeout
    )


def start(root: Path) -> str:
    """Make `root` (it must not exist) and a new cluster in it, started;
    postgresql://postgres@127.0.0.1:PORT/postgres (trust authentication on 127.0.0.1). `stop(root)`
    stops it; removing `root` is the caller's."""
    root.mkdir(mode=0o755)
    entry = pwd.getpwnam(USER)
    os.chmod(root, 0o755)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    data = root / "data"
    port = free_port()
    _as_postgres(
        [str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", USER, "--no-sync"], timeout=120
    )
    # fsync off: a test cluster, thrown away after; a port of its own and its socket in its own
    # directory.
    _as_postgres(
        [
            str(BIN / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-t",
            "60",
            "-l",
            str(root / "log"),
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40",
            "start",
        ],
        timeout=90,
    )
    return f"postgresql://{USER}@127.0.0.1:{port}/postgres"


def stop(root: Path) -> None:
    """Stop the cluster `start(root)` started (nothing when none runs there)."""
    data = root / "data"
    if (data / "postmaster.pid").exists():
        with contextlib.suppress(subprocess.SubprocessError):
            _as_postgres(
                [str(BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-m", "immediate", "stop"],
                timeout=90,
            )


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """postgresql://postgres@127.0.0.1:PORT/postgres of a new cluster in a temporary directory,
    removed after."""
    parent = Path(tempfile.mkdtemp(prefix="iomatrix-pg-", dir="/tmp"))
    root = parent / "cluster"
    try:
        os.chmod(parent, 0o755)
        yield start(root)
    finally:
        stop(root)
        shutil.rmtree(parent, ignore_errors=True)


def create_database(url: str, name: str) -> str:
    """A new empty database in the cluster at `url`; its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name


def without_sweep_ids(answer: Any) -> Any:
    """A command's JSON answer with its sweep ids left out (the "sweep" keys, and "sweep N" in its
    sentences), to compare the answer of a central store with that of the merged file: a sweep's id
    is a surrogate key, numbered in the order the sweeps arrived (hosts publishing at once take
    turns, merge takes its inputs' order); the rows that carry one also carry the host and start
    time that identify the sweep."""
    if isinstance(answer, dict):
        return {k: without_sweep_ids(v) for k, v in answer.items() if k != "sweep"}
    if isinstance(answer, list):
        return [without_sweep_ids(v) for v in answer]
    if isinstance(answer, str):
        return re.sub(r"\bsweep (\d+)\b", "sweep N", answer)
    return answer


def same_answers(on_store: str, on_file: str) -> str | None:
    """None when two JSON answers (texts) are the same but for sweep ids; else the first difference,
    in a line."""
    a, b = (without_sweep_ids(json.loads(t)) for t in (on_store, on_file))
    if a == b:
        return None
    for line_a, line_b in zip(
        json.dumps(a, indent=1, sort_keys=True).splitlines(),
        json.dumps(b, indent=1, sort_keys=True).splitlines(),
        strict=False,
    ):
        if line_a != line_b:
            return f"store: {line_a.strip()} · merged file: {line_b.strip()}"
    return "one answer is longer than the other"


def main(argv: list[str]) -> int:
    """For scripts/fleet-demo --store postgresql: `python -m tests.pg_cluster start DIR` prints the
    URL of a new cluster in DIR (made; it must not exist), `... stop DIR` stops it (the caller
    removes DIR); `create-database` and `same-answers` as the functions of those names."""
    # ... same-answers STORE.json FILE.json: exit 1 if not
    if len(argv) == 3 and argv[0] == "same-answers":
        differs = same_answers(Path(argv[1]).read_text(), Path(argv[2]).read_text())
        print(differs or "same")
        return 1 if differs else 0
    # ... create-database URL NAME: prints its URL
    if len(argv) == 3 and argv[0] == "create-database":
        print(create_database(argv[1], argv[2]))
        return 0
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(
            "usage: python -m tests.pg_cluster start|stop DIR | create-database URL NAME "
            "| same-answers A B",
            file=sys.stderr,
        )
        return 2
    if argv[0] == "start":
        if not available():
            print(
                "Debian's postgresql 15 and root are needed (scripts/setup.sh --fleet)",
                file=sys.stderr,
            )
            return 2
        print(start(Path(argv[1])))
    else:
        stop(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
