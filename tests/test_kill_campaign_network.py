"""Issue 34's "also when SIGKILLed at random moments and the next `run` follows": a shared-storage sweep (iSCSI and
NFS, lab-started, bare metal and the block layer) has its whole process group SIGKILLed at seeded random moments,
each one chosen among events of the sweep (tgtd serving, a block-layer run on an iSCSI LUN, ganesha serving, a
block-layer run on an NFS file, a server-side baseline fio) and a random offset after it; each kill is followed by
the next `run` of the same command. The completed runs are never lost, the last `run` finishes, and nothing is
left: no tgtd, ganesha, rpcbind of ours, qemu-storage-daemon or fio, no port they listened on, no disk, no ledger
entry."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.spec import IscsiBacking, NfsBacking
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only, run_cli

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
type = "iscsi"
[[backing]]
type = "nfs"
"""
SEED = 3434  # the campaign's moments; a failure names the kill, and this seed replays it
KILLS = 4
EVENT_BOUND_S = 300  # a bound on waiting for an event, not a pace: the event ends the wait
SERVERS = ("tgtd", "ganesha.nfsd", "rpcbind", "qemu-storage-daemon", "fio")


def _qsd_on(driver: str) -> Callable[[int], list[psutil.Process]]:
    return lambda pid: descendants_named(pid, "qemu-storage-daemon", f"file.driver={driver}")


def _baseline_fio(pid: int) -> list[psutil.Process]:
    # bare metal's fio on the server's own file of a disk (a block-layer fio talks NBD to a daemon instead)
    return [p for p in descendants_named(pid, "fio") if not descendants_named(pid, "qemu-storage-daemon")]


EVENTS: dict[str, Callable[[int], list[psutil.Process]]] = {
    "tgtd serving": lambda pid: descendants_named(pid, "tgtd"),
    "a block-layer run on an iSCSI LUN": _qsd_on("iscsi"),
    "ganesha serving": lambda pid: descendants_named(pid, "ganesha.nfsd"),
    "a block-layer run on an NFS file": _qsd_on("nfs"),
    "a server-side baseline fio": _baseline_fio,
}


def _ours(pid: int) -> list[psutil.Process]:
    return [p for name in SERVERS for p in descendants_named(pid, name)]


def _listening_ports(procs: list[psutil.Process]) -> set[int]:
    ports = set()
    for p in procs:
        try:
            ports |= {c.laddr.port for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return ports


def _alive(procs: list[psutil.Process]) -> list[str]:
    deadline = time.monotonic() + 30  # a killed group is reaped by init; give it a bounded moment

    def alive() -> list[str]:
        out = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{p.name()} {p.pid}")
            except psutil.NoSuchProcess:
                continue
        return out

    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive()


def _ok_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return con.execute("SELECT count(*) FROM runs WHERE status = 'ok'").fetchone()[0]


def _listening_now() -> set[int]:
    return {c.laddr.port for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


@pytest.mark.slow
@root_only
@needs("fio")
@needs("qemu-storage-daemon")
def test_a_shared_storage_sweep_killed_at_random_moments_resumes_and_leaves_nothing(tmp_path: Path) -> None:
    for backing in (IscsiBacking(), NfsBacking()):
        if (why := backing.availability(set())) is not None:
            pytest.skip(why)
    rpcbind_before = {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "rpcbind"}
    (tmp_path / "p.toml").write_text(PLAN)
    work, db = tmp_path / "w", tmp_path / "r.sqlite"
    argv = [*iomatrix_argv(), "run", "p.toml", "--db", str(db), "--workdir", str(work)]
    rng = random.Random(SEED)
    killed: list[psutil.Process] = []
    ports: set[int] = set()
    kept = 0
    landed = 0
    for kill in range(KILLS):
        event = rng.choice(sorted(EVENTS))
        offset = rng.uniform(0.0, 1.5)  # somewhere in or after the event, never a bet on the host's speed
        sweep = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            deadline = time.monotonic() + EVENT_BOUND_S
            while not EVENTS[event](sweep.pid) and sweep.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            # This run has reclaimed what the previous kill left before serving anything of its own.
            assert _alive(killed) == [], f"kill {kill} ({event}): the previous kill's processes still run"
            time.sleep(offset)
            killed = _ours(sweep.pid)
            ports |= _listening_ports(killed)
            landed += sweep.poll() is None
        finally:
            with_group = sweep.poll() is None
            if with_group:
                os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait(timeout=60)
        now = _ok_runs(db)
        assert now >= kept, f"kill {kill} ({event}): completed runs lost ({kept} -> {now})"
        kept = now
    assert landed >= KILLS - 1, f"only {landed} of {KILLS} kills landed in a running sweep"
    last = run_cli("run", "p.toml", "--db", str(db), "--workdir", str(work), cwd=tmp_path, timeout=900)
    assert last.returncode == 0, last.stdout[-2000:] + last.stderr[-2000:]
    assert _ok_runs(db) >= kept and "sweep 1:" in last.stdout  # the same sweep, resumed
    assert "on iscsi" in last.stdout and "on nfs" in last.stdout  # answered per protocol
    assert _alive(killed) == []
    assert not ports & _listening_now(), f"ports of killed servers still listening: {ports & _listening_now()}"
    assert leftovers.pending(work) == []
    backings = work / "backings"
    assert not backings.exists() or not any(f.is_file() for f in backings.rglob("*"))
    rpcbind_after = {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "rpcbind"}
    assert rpcbind_after <= rpcbind_before, "an rpcbind iomatrix started is still running"
