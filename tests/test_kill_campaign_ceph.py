"""Issue 35's "leaves no ceph process, port or file, also after SIGKILLs followed by the next
`run`": a sweep on a lab-started Ceph cluster (one ceph-mon, one ceph-osd on 127.0.0.1, QEMU's block
layer opening RBD images through librbd) has its whole process group SIGKILLed at seeded random
moments, each chosen among events of the sweep (the monitor serving, the OSD serving, a block-layer
run on an RBD image) and a random offset after it; each kill is followed by the next `run` of the
same command. The completed runs are never lost, the next run reclaims the killed cluster before it
starts its own, the last `run` finishes, and nothing is left: no ceph-mon, ceph-osd,
qemu-storage-daemon or fio, no port they listened on, no file under the backing, no ledger entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from iomatrix.backing.rbd import RbdBacking
from tests.conftest import descendants_named, iomatrix_argv, needs, root_only
from tests.kill_campaigns import (
    PLAN_FILE,
    kill_campaign,
    left_behind,
    qsd_on,
    resumed,
    run_args,
    sweep_plan,
    sweep_processes,
)

PLAN = sweep_plan('[[backing]]\ntype = "rbd"\n')
SEED = 3535  # the campaign's moments; a failure names the kill, and this seed replays it
KILLS = 3
OURS = ("ceph-mon", "ceph-osd", "qemu-storage-daemon", "fio")

EVENTS: dict[str, Callable[[int], list[psutil.Process]]] = {
    "the monitor serving": lambda pid: descendants_named(pid, "ceph-mon"),
    "the OSD serving": lambda pid: descendants_named(pid, "ceph-osd"),
    "a block-layer run on an RBD image": qsd_on("rbd"),
}


def _ceph_under(root: Path) -> list[str]:
    out = []
    for p in psutil.process_iter(["name", "cmdline", "pid"]):
        if p.info["name"] in ("ceph-mon", "ceph-osd") and str(root) in " ".join(
            p.info["cmdline"] or []
        ):
            out.append(f"{p.info['name']} {p.info['pid']}")
    return out


@pytest.mark.slow
@root_only
@needs("ceph-mon")
@needs("qemu-storage-daemon")
@needs("fio")
def test_a_ceph_sweep_killed_at_random_moments_resumes_and_leaves_nothing(tmp_path: Path) -> None:
    if (why := RbdBacking().availability(set())) is not None:
        pytest.skip(why)
    (tmp_path / PLAN_FILE).write_text(PLAN)
    work, db = tmp_path / "w", tmp_path / "r.sqlite"
    argv = [*iomatrix_argv(), *run_args(db, work)]
    c = kill_campaign(argv, tmp_path, db, EVENTS, sweep_processes(OURS), SEED, KILLS)
    # A kill that stopped a running monitor left a cluster for the next run to reclaim.
    assert any("ceph-mon" in names for names in c.names_killed), c.names_killed
    # the same sweep, resumed, complete (2 cells x 2 runs)
    _, problems = resumed(tmp_path, db, work, max(c.kept, 4))
    assert problems == []
    assert _ceph_under(tmp_path) == []
    assert left_behind(work, c.killed, c.ports) == []
