"""Issue 50's kill campaign over the local lab backings (tmpfs, and a loop filesystem other than the
ext4 of tests/test_kill_campaign.py), with a run racing the sweep through a hard link to its
database.

A sweep of both backings (bare metal and the block layer) has its whole process group SIGKILLed at
seeded moments, each chosen among events of the sweep and a random offset after it
(tests/kill_campaigns.py), each kill followed by the next `run` of the same command: completed runs
never decrease. Then, while a sweep writes the database, a second `run` through a hard link to the
same file is refused (one line naming the holder), and the first is killed too. Its last writes then
wait in the -wal beside the name it used: a `run` or `results` through the hard link is refused in
one line naming that name (store/wal_names.py; before, it said "not an iomatrix results database"),
the next `run` by that name resumes the sweep and finishes it, and after that the link works. After
`clean`, nothing of the workdir is left: no process, mount, loop device or ledger entry."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from iomatrix.backing import leftovers
from iomatrix.locks import identity_held
from iomatrix.mountinfo import parse_mountinfo
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only, run_cli
from tests.kill_campaigns import EVENT_BOUND_S, alive, kill_campaign, ok_runs, sweep_processes

PLAN = """
tier = ["baremetal", "blocklayer"]
format = ["raw"]
preallocation = ["off"]
cache = ["none", "writeback"]
aio = ["threads"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = 1
null_ceiling = false
retry_disturbed = false
[repetitions]
min = 2
max = 2
[[backing]]
type = "tmpfs"
size = "256M"
[[backing]]
type = "loopfs"
fs = "xfs"
size = "384M"
"""
SEED = 5050  # the campaign's moments; a failure names the kill, and this seed replays it
KILLS = 4
OURS = ("qemu-storage-daemon", "fio", "qemu-img")


def _bare_metal_fio(pid: int) -> list[psutil.Process]:
    return [
        p
        for p in descendants_named(pid, "fio")
        if not descendants_named(pid, "qemu-storage-daemon")
    ]


EVENTS = {
    "a block-layer run": lambda pid: descendants_named(pid, "qemu-storage-daemon"),
    "a bare-metal fio": _bare_metal_fio,
    "an image being made": lambda pid: descendants_named(pid, "qemu-img"),
}


def _what_is_left(work: Path) -> list[str]:
    mounts = [
        m["mountpoint"] for m in parse_mountinfo() if Path(m["mountpoint"]).is_relative_to(work)
    ]
    loops = subprocess.run(
        ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return (
        mounts
        + [line for line in loops.splitlines() if str(work) in line]
        + leftovers.pending(work)
    )


def _racing_through_a_hard_link(
    argv: list[str], cwd: Path, db: Path, hard: Path, work: Path
) -> int:
    """Start the sweep on `db`; once it holds the file and runs fio, a `run` through `hard` must be
    refused with the holder named and write nothing; then SIGKILL the sweep. Returns the completed
    runs after the kill."""
    before = ok_runs(db)
    sweep = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + EVENT_BOUND_S
        while not (identity_held(db) and descendants_named(sweep.pid, "fio")):
            assert sweep.poll() is None and time.monotonic() < deadline, (
                "the sweep did not reach fio"
            )
            time.sleep(0.05)
        # holds its locks while the racer is refused, however slow the host
        os.killpg(sweep.pid, signal.SIGSTOP)
        racer = run_cli(
            "run",
            "p.toml",
            "--db",
            str(hard),
            "--workdir",
            str(work.parent / "w-racer"),
            cwd=cwd,
            timeout=300,
        )
        err = racer.stderr.strip()
        assert racer.returncode == 2 and len(err.splitlines()) == 1, racer.stdout[-1000:] + err
        assert f"is in use by process {sweep.pid}" in err and "Traceback" not in err, err
        assert not (work.parent / "w-racer").exists() and not Path(f"{hard}-wal").exists()
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)  # stopped or not: a SIGKILL ends it
        sweep.wait(timeout=60)
    after = ok_runs(db)
    assert after >= before, f"the killed sweep lost completed runs ({before} -> {after})"
    return after


@pytest.mark.slow
@root_only
@needs("fio")
@needs("qemu-storage-daemon")
@needs("mkfs.xfs")
def test_local_lab_backings_killed_at_random_moments_and_raced_through_a_hard_link(
    tmp_path: Path,
) -> None:
    (tmp_path / "p.toml").write_text(PLAN)
    (tmp_path / "links").mkdir()
    work, db, hard = tmp_path / "w", tmp_path / "r.sqlite", tmp_path / "links" / "hard.sqlite"
    argv = [*iomatrix_argv(), "run", "p.toml", "--db", str(db), "--workdir", str(work)]
    try:
        c = kill_campaign(argv, tmp_path, db, EVENTS, sweep_processes(OURS), SEED, KILLS)
        assert db.exists(), "no kill left a database to race on"
        os.link(db, hard)
        kept = _racing_through_a_hard_link(argv, tmp_path, db, hard, work)
        assert kept >= c.kept
        if Path(f"{db}-wal").is_file() and Path(f"{db}-wal").stat().st_size > 0:
            for argv_link in (
                ["run", "p.toml", "--db", str(hard), "--workdir", str(work)],
                ["results", "--db", str(hard)],
            ):
                refused = run_cli(*argv_link, cwd=tmp_path, timeout=300)
                err = refused.stderr.strip()
                assert refused.returncode == 2 and len(err.splitlines()) == 1, (
                    refused.stdout[-1000:] + err
                )
                assert f"same file as {db.resolve()}" in err and f"--db {db.resolve()}" in err, err
                assert not Path(f"{hard}-wal").exists()
        last = run_cli(
            "run", "p.toml", "--db", str(db), "--workdir", str(work), cwd=tmp_path, timeout=900
        )
        assert last.returncode == 0, last.stdout[-2000:] + last.stderr[-2000:]
        assert "sweep 1:" in last.stdout, last.stdout[-2000:]  # the same sweep, resumed
        assert ok_runs(db) >= kept and os.path.samefile(db, hard)
        linked = run_cli("results", "--db", str(hard), cwd=tmp_path, timeout=300)
        files = {p.name: p.stat().st_size for p in tmp_path.glob("r.sqlite*")}
        # closed: the file is whole
        assert linked.returncode == 0, f"{linked.stderr} {files} {last.stdout[-600:]}"
        assert alive(c.killed) == []
        cleaned = run_cli("clean", "--workdir", str(work))
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert _what_is_left(work) == []
    finally:
        run_cli("clean", "--workdir", str(work))
