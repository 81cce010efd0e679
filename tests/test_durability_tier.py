"""The durability tier: plan and matrix rules (fast), and real trials with QEMU and nbdkit
(slow)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.domain import Modifier
from iomatrix.durability.verdict import config_verdict
from iomatrix.errors import UserError
from iomatrix.fio.jobs import JobShape
from iomatrix.matrix import Cell
from iomatrix.plan.load import load_plan
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec
from iomatrix.report.durability import MeasuredConfig, MeasuredIndex, measured_statements
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend import DOCUMENTED, risk_statements
from iomatrix.runner import plan_expansion
from iomatrix.store import Store
from iomatrix.tiers.base import RunOptions, RunRequest, Target
from iomatrix.tiers.durability import (
    DurabilityTier,
    _two_disk_args,
    drops_flushes_below_qemu,
    nbdkit_argv,
)
from iomatrix.workloads import resolve
from tests.conftest import iomatrix_argv, needs, run_cli

# --------------------------------------------------------------------------- plan and matrix (fast)


def test_builtin_plan_is_five_cache_modes_by_two_formats_with_twenty_cuts() -> None:
    plan, base = load_plan("durability")
    exp = plan_expansion(plan, base, set())
    assert len(exp.units) == 10 and {u.cell.tier for u in exp.units} == {"durability"}
    assert plan.setting("cuts") == 20 and (plan.repetitions.min, plan.repetitions.max) == (20, 20)
    quick, base = load_plan("durability-quick")
    exp = plan_expansion(quick, base, set())
    # 5 modes × {none, eatmydata}, minus unsafe+eatmydata (changes nothing)
    assert len(exp.units) == 9
    assert quick.repetitions.max == quick.setting("cuts") == 3


def test_cuts_not_repetitions_and_a_plan_of_its_own() -> None:
    with pytest.raises(ValueError, match="plan of its own"):
        Plan(name="x", tier=["durability", "guest"], workloads=["durability"])
    with pytest.raises(ValueError, match="counts trials with `cuts`"):
        Plan.model_validate(
            {
                "name": "x",
                "tier": ["durability"],
                "workloads": ["durability"],
                "repetitions": {"min": 2, "max": 5},
            }
        )
    p = Plan(name="x", tier=["durability"], workloads=["durability"], cuts=7)
    assert (p.repetitions.min, p.repetitions.max) == (7, 7)
    again = Plan.model_validate_json(p.canonical_json())  # a resumed sweep re-reads its stored plan
    assert again.fingerprint() == p.fingerprint()


def test_workloads_stay_on_their_tier() -> None:
    p = Plan(
        name="x", tier=["guest"], workloads=["durability", "rand-write-4k"], null_ceiling=False
    )
    exp = plan_expansion(p, None, set())
    assert [u.workload.name for u in exp.units] == ["rand-write-4k"]
    assert any("durability tier only" in x.reason for x in exp.pruned)
    d = Plan(name="y", tier=["durability"], workloads=["durability", "rand-write-4k"])
    exp = plan_expansion(d, None, set())
    assert [u.workload.name for u in exp.units] == ["durability"]


def test_flushes_dropped_below_qemu_only_where_a_real_host_drops_them() -> None:
    assert drops_flushes_below_qemu("unsafe", Modifier.NONE)
    assert drops_flushes_below_qemu("writeback", Modifier.EATMYDATA)
    for cache in ("none", "writeback", "writethrough", "directsync"):
        assert not drops_flushes_below_qemu(cache, Modifier.NONE)
    argv = nbdkit_argv("nbdkit", Path("/i"), Path("/s"), Path("/p"), drop_flushes=True)
    assert argv.index("--filter=fua") < argv.index("--filter=cache") and "fuamode=discard" in argv
    argv = nbdkit_argv("nbdkit", Path("/i"), Path("/s"), Path("/p"), drop_flushes=False)
    assert "--filter=fua" not in argv and "cache=writeback" in argv


def test_two_disks_share_one_controller() -> None:
    d = DiskSpec(target="/x.qcow2", format="qcow2", cache="none", bus="virtio-scsi")
    args = _two_disk_args(d, Path("/s.sock"), d)
    assert sum(1 for a in args if a.startswith("virtio-scsi-pci,id=scsi0")) == 1
    assert any("file.driver=nbd" in a and "cache.direct=on" in a for a in args)
    assert any("file.driver=file" in a and "file.filename=/x.qcow2" in a for a in args)
    assert any("serial=iomx-test" in a for a in args) and any(
        "serial=iomx-crash" in a for a in args
    )


def test_missing_nbdkit_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    tier = DurabilityTier(
        Plan(name="x", tier=["durability"], workloads=["durability"]), RunOptions(workdir=tmp_path)
    )
    with pytest.raises(UserError) as err:
        tier.open()
    assert "'nbdkit'" in err.value.one_line() and "apt-get install nbdkit" in err.value.one_line()


def test_measured_statements_pool_and_say_where_they_differ() -> None:
    index = MeasuredIndex()
    for aio, lost in (("threads", [0, 0]), ("io_uring", [0, 3])):
        axes = {
            "tier": "durability",
            "format": "raw",
            "preallocation": "off",
            "cache": "none",
            "aio": aio,
            "bus": "virtio-blk",
            "backing": "dir",
            "modifier": "none",
        }
        mc = MeasuredConfig(axes)
        mc.samples["power_loss.acked_lost"] += lost
        mc.samples["qemu_crash.acked_lost"] += [0, 0]
        mc.samples["fs.clean"] += [1, 1]
        mc.sweeps.add(4)
        index.configs[(aio,)] = mc
    guest = {
        "tier": "guest",
        "format": "raw",
        "preallocation": "off",
        "cache": "none",
        "aio": "native",
        "bus": "virtio-blk",
        "backing": "dir",
        "modifier": "none",
    }
    st = measured_statements(index, guest)
    power = st["host crash or power loss"]
    assert (
        "LOST acknowledged writes in 1/4 cuts (up to 3 records)" in power and "DISAGREES" in power
    )
    assert "measured with other aio" in power
    assert st["QEMU crash"].startswith("QEMU crash: acknowledged writes kept in 4/4 cuts")
    assert measured_statements(index, {**guest, "cache": "unsafe"}) == {}


def test_no_false_safe_over_many_random_trial_sets() -> None:
    import random

    rng = random.Random(5)
    for _ in range(2000):
        lost = [rng.choice([0, 0, 0, 1, 5]) for _ in range(rng.randint(1, 25))]
        for cache in ("none", "writeback", "writethrough", "directsync", "unsafe"):
            v = config_verdict({"power_loss.acked_lost": lost}, cache).situations["power_loss"]
            assert v.safe == (not any(lost) and cache != "unsafe")


# --------------------------------------------------------------------------- real trials (slow)

SWEEP = """
tier = ["durability"]
format = ["raw"]
cache = ["none", "writeback", "unsafe"]
workloads = ["durability"]
cuts = 1
run_timeout = 180
"""


def _ours(tmp_path: Path) -> list[str]:
    """Processes (nbdkit, QEMU) whose command line names this test's directory."""
    return subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()


def _left_files(tmp_path: Path) -> list[Path]:
    return [
        p
        for p in (tmp_path / "iomatrix-work").rglob("*")
        if p.name.startswith("iomatrix-dur-") or p.name.endswith(".sock")
    ]


@pytest.mark.slow
@needs("nbdkit")
@needs("qemu-system-x86_64")
def test_power_loss_and_qemu_crash_verdicts(tmp_path: Path) -> None:
    """unsafe loses acknowledged writes on power loss; none and writeback keep them; on a QEMU crash
    writeback (and every other mode) keeps what reached the host page cache."""
    (tmp_path / "p.toml").write_text(SWEEP)
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = db.execute(
        "SELECT c.cache, s.metric, s.value FROM samples s JOIN runs r ON r.id = s.run_id "
        "JOIN cells c ON c.id = r.cell_id WHERE r.status = 'ok'"
    ).fetchall()
    m = {(cache, metric): value for cache, metric, value in rows}
    assert m[("unsafe", "power_loss.acked_lost")] > 0
    assert (
        m[("none", "power_loss.acked_lost")] == 0 and m[("writeback", "power_loss.acked_lost")] == 0
    )
    assert m[("none", "power_loss.fs_clean")] == 1 and m[("writeback", "power_loss.fs_clean")] == 1
    for cache in ("none", "writeback", "unsafe"):
        assert m[(cache, "qemu_crash.acked_lost")] == 0
        # the cut came after ≥ 2 acknowledged groups of 4
        assert m[(cache, "durability.acked_records")] >= 8
    meta = json.loads(
        db.execute(
            "SELECT meta_json FROM runs r JOIN cells c ON c.id = r.cell_id WHERE c.cache = 'unsafe'"
        ).fetchone()[0]
    )
    assert meta["cut"]["acked_groups"] >= 2 and meta["power_loss"]["raw"]["lost_seqs"]
    out = " ".join(proc.stdout.split())
    assert "power loss: LOST acknowledged writes in 1/1 cut" in out
    assert "power loss: acknowledged writes kept in 1/1 cut" in out
    # `cuts` trials are the answer, not a limit
    assert "DISAGREES" not in out and "not converged" not in out
    assert _ours(tmp_path) == [] and _left_files(tmp_path) == []

    # What recommend/report say of a performance cell with the same configuration: the measured
    # verdict.
    store = Store(tmp_path / "r.sqlite", read_only=True)
    index = MeasuredIndex.from_store(store)
    cell = CellWorkload(
        0,
        "",
        {
            "tier": "guest",
            "format": "raw",
            "preallocation": "off",
            "cache": "unsafe",
            "aio": "threads",
            "bus": "virtio-blk",
            "backing": "dir",
            "modifier": "none",
        },
        {},
        "rand-write-4k",
        ["tcg"],
    )
    risks = {r.situation: r for r in risk_statements("unsafe", "none", cell, index)}
    power = risks["host crash or power loss"]
    assert power.basis == "measured" and power.text.startswith(
        "power loss: LOST acknowledged writes in 1/1 cut"
    )
    assert risks["live migration"].basis == DOCUMENTED


@pytest.mark.slow
@needs("nbdkit")
@needs("qemu-system-x86_64")
def test_trial_that_never_reaches_its_cut_fails_and_leaves_nothing(tmp_path: Path) -> None:
    plan = Plan(name="x", tier=["durability"], workloads=["durability"], cuts=1)
    tier = DurabilityTier(plan, RunOptions(workdir=tmp_path))
    tier.open()
    cell = Cell.of(
        tier="durability",
        format="qcow2",
        preallocation="off",
        cache="none",
        aio="threads",
        bus="virtio-blk",
        backing="dir",
        modifier="none",
    )
    req = RunRequest(
        cell=cell,
        workload=resolve("durability"),
        target=Target("dir", tmp_path / "img"),
        shape=JobShape(1, 1, 0),
        run_dir=tmp_path / "run",
        timeout_s=1.0,
    )
    try:
        out = tier.run(req)
    finally:
        tier.close()
    assert not out.ok and "no cut point reached within 1 s" in (out.error or "")
    assert out.metrics == {}  # a failed trial is not a verdict
    assert _ours(tmp_path) == []
    assert [p for p in tmp_path.rglob("*") if p.name.startswith("iomatrix-dur-")] == []


@pytest.mark.slow
@needs("nbdkit")
@needs("qemu-system-x86_64")
def test_sigterm_mid_trial_leaves_no_nbdkit_qemu_image_or_socket(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(SWEEP.replace("cuts = 1", "cuts = 3"))
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if subprocess.run(
            ["pgrep", "-f", f"nbdkit.*{tmp_path}"], capture_output=True
        ).stdout.split():
            break
        time.sleep(0.05)
    time.sleep(0.5)  # inside the trial: QEMU booting or writing
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    assert _ours(tmp_path) == [] and _left_files(tmp_path) == []


XFS_SWEEP = """
tier = ["durability"]
format = ["raw"]
cache = ["none", "unsafe"]
workloads = ["durability", "durability-xfs"]
cuts = 1
run_timeout = 180
"""


@pytest.mark.slow
@needs("nbdkit")
@needs("qemu-system-x86_64")
@needs("xfs_repair")
def test_xfs_file_variant_verdicts(tmp_path: Path) -> None:
    """On the guest's xfs as on ext4: cache=unsafe (flushes dropped below QEMU) loses acknowledged
    records on a power loss and the xfs does not survive it (the host's check says so); cache=none
    keeps every record and its xfs checks clean after the log replay. The verdicts come per
    filesystem; no loop device or mount of the host-side check outlives the sweep."""
    (tmp_path / "p.toml").write_text(XFS_SWEEP)
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = db.execute(
        "SELECT c.cache, r.workload, s.metric, s.value FROM samples s JOIN runs r ON "
        "r.id = s.run_id "
        "JOIN cells c ON c.id = r.cell_id WHERE r.status = 'ok'"
    ).fetchall()
    m = {(cache, wl, metric): value for cache, wl, metric, value in rows}
    xfs = "durability-xfs"
    assert m[("unsafe", xfs, "power_loss.acked_lost")] > 0
    assert m[("unsafe", xfs, "power_loss.fs_clean")] == 0 and m[("unsafe", xfs, "fs.clean")] == 0
    assert (
        m[("none", xfs, "power_loss.acked_lost")] == 0
        and m[("none", xfs, "qemu_crash.acked_lost")] == 0
    )
    assert (
        m[("none", xfs, "power_loss.fs_clean")] == 1
        and m[("none", xfs, "qemu_crash.fs_clean")] == 1
    )
    assert (
        m[("unsafe", xfs, "qemu_crash.acked_lost")] == 0
        and m[("unsafe", xfs, "qemu_crash.fs_clean")] == 1
    )
    meta = json.loads(
        db.execute(
            "SELECT meta_json FROM runs r JOIN cells c ON c.id = r.cell_id "
            "WHERE c.cache = 'unsafe' AND r.workload = ?",
            (xfs,),
        ).fetchone()[0]
    )
    assert meta["guest_fs"] == "xfs" and meta["power_loss"]["file"]["acked_lost"] > 0
    assert any("xfs_repair -n" in n for n in meta["power_loss"]["notes"])
    out = " ".join(proc.stdout.split())
    for fs in ("ext4", "xfs"):
        assert f"cache=unsafe preallocation=off aio=threads bus=virtio-blk fs={fs}" in out
    assert "guest filesystem (xfs): NOT clean after 1/1 cuts" in out
    assert "guest filesystem (xfs): clean after 1/1 cuts" in out
    assert "DISAGREES" not in out
    assert _ours(tmp_path) == [] and _left_files(tmp_path) == []
    # each workload's own section
    rec = run_cli("recommend", "--db", "r.sqlite", "--detail", cwd=tmp_path)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    xfs_section = " ".join(rec.stdout.split()).split("durability-xfs ·")[1]
    # each workload: its own filesystem
    assert "fs=xfs" in xfs_section and "fs=ext4" not in xfs_section
    real = os.path.realpath(tmp_path)
    loops = subprocess.run(
        ["losetup", "--list", "--noheadings", "--output", "BACK-FILE"],
        capture_output=True,
        text=True,
    ).stdout
    assert real not in loops
    assert real not in Path("/proc/self/mountinfo").read_text()
