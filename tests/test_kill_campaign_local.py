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

import pytest

from iomatrix.backing import leftovers
from iomatrix.locks import identity_held
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only, run_cli
from tests.kill_campaigns import (
    EVENT_BOUND_S,
    PLAN_FILE,
    alive,
    bare_metal_fio,
    kill_campaign,
    loops_and_mounts,
    ok_runs,
    resumed,
    run_args,
    sweep_plan,
    sweep_processes,
)

PLAN = sweep_plan(
    '[[backing]]\ntype = "tmpfs"\nsize = "256M"\n'
    '[[backing]]\ntype = "loopfs"\nfs = "xfs"\nsize = "384M"\n',
    tiers=("baremetal", "blocklayer"),
)
SEED = 5050  # the campaign's moments; a failure names the kill, and this seed replays it
KILLS = 4
OURS = ("qemu-storage-daemon", "fio", "qemu-img")


EVENTS = {
    "a block-layer run": lambda pid: descendants_named(pid, "qemu-storage-daemon"),
    "a bare-metal fio": bare_metal_fio,
    "an image being made": lambda pid: descendants_named(pid, "qemu-img"),
}


def _what_is_left(work: Path) -> list[str]:
    return loops_and_mounts(work) + leftovers.pending(work)


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
        racer = run_cli(*run_args(hard, work.parent / "w-racer"), cwd=cwd, timeout=300)
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
    (tmp_path / PLAN_FILE).write_text(PLAN)
    (tmp_path / "links").mkdir()
    work, db, hard = tmp_path / "w", tmp_path / "r.sqlite", tmp_path / "links" / "hard.sqlite"
    argv = [*iomatrix_argv(), *run_args(db, work)]
    try:
        c = kill_campaign(argv, tmp_path, db, EVENTS, sweep_processes(OURS), SEED, KILLS)
        assert db.exists(), "no kill left a database to race on"
        os.link(db, hard)
        kept = _racing_through_a_hard_link(argv, tmp_path, db, hard, work)
        assert kept >= c.kept
        if Path(f"{db}-wal").is_file() and Path(f"{db}-wal").stat().st_size > 0:
            for argv_link in (run_args(hard, work), ["results", "--db", str(hard)]):
                refused = run_cli(*argv_link, cwd=tmp_path, timeout=300)
                err = refused.stderr.strip()
                assert refused.returncode == 2 and len(err.splitlines()) == 1, (
                    refused.stdout[-1000:] + err
                )
                assert f"same file as {db.resolve()}" in err and f"--db {db.resolve()}" in err, err
                assert not Path(f"{hard}-wal").exists()
        last, problems = resumed(tmp_path, db, work, kept)  # the same sweep, resumed
        assert problems == []
        assert os.path.samefile(db, hard)
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
