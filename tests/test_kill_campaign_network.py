"""Issue 34's "also when SIGKILLed at random moments and the next `run` follows": a shared-storage
sweep (iSCSI and NFS, lab-started, bare metal and the block layer) has its whole process group
SIGKILLed at seeded random moments, each one chosen among events of the sweep (tgtd serving, a
block-layer run on an iSCSI LUN, ganesha serving, a block-layer run on an NFS file, a server-side
baseline fio) and a random offset after it; each kill is followed by the next `run` of the same
command. The completed runs are never lost, the last `run` finishes, and nothing is left: no tgtd,
ganesha, rpcbind of ours, qemu-storage-daemon or fio, no port they listened on, no disk, no ledger
entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.iscsi import IscsiBacking
from iomatrix.backing.nfs import NfsBacking
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only, run_cli
from tests.kill_campaigns import alive, kill_campaign, listening_now, ok_runs, sweep_processes

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
SERVERS = ("tgtd", "ganesha.nfsd", "rpcbind", "qemu-storage-daemon", "fio")


def _qsd_on(driver: str) -> Callable[[int], list[psutil.Process]]:
    return lambda pid: descendants_named(pid, "qemu-storage-daemon", f"file.driver={driver}")


def _baseline_fio(pid: int) -> list[psutil.Process]:
    # bare metal's fio on the server's own file of a disk (a block-layer fio talks NBD to a daemon
    # instead)
    return [
        p
        for p in descendants_named(pid, "fio")
        if not descendants_named(pid, "qemu-storage-daemon")
    ]


EVENTS: dict[str, Callable[[int], list[psutil.Process]]] = {
    "tgtd serving": lambda pid: descendants_named(pid, "tgtd"),
    "a block-layer run on an iSCSI LUN": _qsd_on("iscsi"),
    "ganesha serving": lambda pid: descendants_named(pid, "ganesha.nfsd"),
    "a block-layer run on an NFS file": _qsd_on("nfs"),
    "a server-side baseline fio": _baseline_fio,
}


@pytest.mark.slow
@root_only
@needs("fio")
@needs("qemu-storage-daemon")
def test_a_shared_storage_sweep_killed_at_random_moments_resumes_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    for backing in (IscsiBacking(), NfsBacking()):
        if (why := backing.availability(set())) is not None:
            pytest.skip(why)
    rpcbind_before = {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "rpcbind"}
    (tmp_path / "p.toml").write_text(PLAN)
    work, db = tmp_path / "w", tmp_path / "r.sqlite"
    argv = [*iomatrix_argv(), "run", "p.toml", "--db", str(db), "--workdir", str(work)]
    c = kill_campaign(argv, tmp_path, db, EVENTS, sweep_processes(SERVERS), SEED, KILLS)
    last = run_cli(
        "run", "p.toml", "--db", str(db), "--workdir", str(work), cwd=tmp_path, timeout=900
    )
    assert last.returncode == 0, last.stdout[-2000:] + last.stderr[-2000:]
    assert ok_runs(db) >= c.kept and "sweep 1:" in last.stdout  # the same sweep, resumed
    assert "on iscsi" in last.stdout and "on nfs" in last.stdout  # answered per protocol
    assert alive(c.killed) == []
    assert not c.ports & listening_now(), (
        f"ports of killed servers still listening: {c.ports & listening_now()}"
    )
    assert leftovers.pending(work) == []
    backings = work / "backings"
    assert not backings.exists() or not any(f.is_file() for f in backings.rglob("*"))
    rpcbind_after = {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "rpcbind"}
    assert rpcbind_after <= rpcbind_before, "an rpcbind iomatrix started is still running"
