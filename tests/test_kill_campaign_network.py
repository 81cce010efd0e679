"""Issue 34's "also when SIGKILLed at random moments and the next `run` follows": a shared-storage
sweep (iSCSI and NFS, lab-started, bare metal and the block layer) has its whole process group
SIGKILLed at seeded random moments, each one chosen among events of the sweep (tgtd serving, a
block-layer run on an iSCSI LUN, ganesha serving, a block-layer run on an NFS file, a server-side
baseline fio) and a random offset after it; each kill is followed by the next `run` of the same
command. The completed runs are never lost, the last `run` finishes, and nothing is left: no tgtd,
ganesha, rpcbind of ours, qemu-storage-daemon or fio, no port they listened on, no disk, no ledger
entry.

Every `run` of the campaign is in one network and mount namespace of the test's own
(tests/own_network.py), as the runs of one host: its lab rpcbind and ganesha beside any other lab
NFS server on the machine (the host's rpcbind holds one at a time), so the module is in no xdist
group. Its rpcbind is always iomatrix's, then, and none may be left in it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from iomatrix.backing.iscsi import IscsiBacking
from iomatrix.backing.nfs import NfsBacking
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only
from tests.kill_campaigns import (
    PLAN_FILE,
    bare_metal_fio,
    kill_campaign,
    left_behind,
    qsd_on,
    resumed,
    run_args,
    sweep_plan,
    sweep_processes,
)
from tests.own_network import own_network

PLAN = sweep_plan(
    '[[backing]]\ntype = "iscsi"\n[[backing]]\ntype = "nfs"\n', tiers=("baremetal", "blocklayer")
)
SEED = 3434  # the campaign's moments; a failure names the kill, and this seed replays it
KILLS = 4
SERVERS = ("tgtd", "ganesha.nfsd", "rpcbind", "qemu-storage-daemon", "fio")


EVENTS: dict[str, Callable[[int], list[psutil.Process]]] = {
    "tgtd serving": lambda pid: descendants_named(pid, "tgtd"),
    "a block-layer run on an iSCSI LUN": qsd_on("iscsi"),
    "ganesha serving": lambda pid: descendants_named(pid, "ganesha.nfsd"),
    "a block-layer run on an NFS file": qsd_on("nfs"),
    "a server-side baseline fio": bare_metal_fio,
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
    (tmp_path / PLAN_FILE).write_text(PLAN)
    work, db = tmp_path / "w", tmp_path / "r.sqlite"
    # leaving the namespace fails naming anything of the campaign's runs still in it (an rpcbind,
    # tgtd, ganesha or QEMU of ours), after a moment for a server still exiting
    with own_network() as ns:
        argv = ns.argv([*iomatrix_argv(), *run_args(db, work)], cwd=tmp_path)
        c = kill_campaign(argv, tmp_path, db, EVENTS, sweep_processes(SERVERS), SEED, KILLS)
        last, problems = resumed(tmp_path, db, work, c.kept, cli=ns.run_cli)  # the same sweep
        assert problems == []
        assert "on iscsi" in last.stdout and "on nfs" in last.stdout  # answered per protocol
        # the ports are the namespace's, where the killed servers listened
        assert left_behind(work, c.killed, c.ports, netns_of=ns.holder.pid) == []
