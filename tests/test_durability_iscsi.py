"""The durability tier on an iSCSI backing (issue 34): a target power loss with the LUN's write
cache on and off.

Fast: the prune rules (which network backings a cut can be made on), the documented expectation of a
    target power
loss, and measured verdicts that never cross from a local disk to a LUN or between LUN settings.
Slow: real trials through tgtd, qemu-storage-daemon's FUSE export and nbdkit's cache under a TCG
guest, and a SIGKILLed sweep whose FUSE mount `iomatrix clean` removes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from iomatrix.backing.leftover_kinds import mounts_at
from iomatrix.domain.axes import BackingFacts
from iomatrix.durability.verdict import (
    POWER_LOSS,
    TARGET_POWER_LOSS,
    config_verdict,
    documented_keeps_acked,
)
from iomatrix.matrix import Cell
from iomatrix.report.durability import MeasuredIndex
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend import DOCUMENTED, risk_statements
from iomatrix.store import Store
from iomatrix.tiers.declared.durability import Durability
from iomatrix.tiers.durability_target import fuse_export_argv
from tests.conftest import iomatrix_argv, needs, ok_samples, run_cli, speed_cell

LAB_ISCSI = BackingFacts(None, o_direct=True, is_device=False, protocol="iscsi", lab_started=True)


def _cell(**more: str) -> Cell:
    values = {
        "tier": "durability",
        "format": "raw",
        "preallocation": "off",
        "cache": "none",
        "aio": "threads",
        "bus": "virtio-blk",
        "backing": "iscsi",
        "modifier": "none",
        "lun_type": "fileio",
        "lun_write_cache": "off",
        "rtt": "0",
    }
    return Cell({**values, **more})


# --------------------------------------------------------------------------- rules (fast)


def test_a_lab_started_iscsi_lun_is_cut_and_the_other_network_backings_say_why_not() -> None:
    assert Durability.prune_reason(_cell(), LAB_ISCSI) is None
    assert (
        Durability.prune_reason(_cell(lun_write_cache="on", lun_type="blockio"), LAB_ISCSI) is None
    )
    existing = BackingFacts(
        None, o_direct=True, is_device=False, protocol="iscsi", lab_started=False
    )
    assert "an existing target cannot be cut" in (Durability.prune_reason(_cell(), existing) or "")
    nfs = BackingFacts(None, o_direct=True, is_device=False, protocol="nfs", lab_started=True)
    assert "a cut of a nfs server is not built" in (Durability.prune_reason(_cell(), nfs) or "")
    assert "a null LUN stores nothing" in (
        Durability.prune_reason(_cell(lun_type="null"), LAB_ISCSI) or ""
    )
    assert "runs at rtt=0" in (Durability.prune_reason(_cell(rtt="2ms"), LAB_ISCSI) or "")


def test_plan_lists_the_builtin_iscsi_durability_plan_without_pruning_it(tmp_path: Path) -> None:
    proc = run_cli("plan", "iscsi-durability", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 cells" in proc.stdout and "0 pruned" in proc.stdout


@pytest.mark.parametrize(
    ("cache", "wc", "keeps"),
    [
        # QEMU drops the guest's flushes and the target acknowledges from memory
        ("unsafe", "on", False),
        ("unsafe", "off", True),  # the target syncs every write itself
        ("writeback", "on", True),
        ("none", "on", True),
        ("directsync", "off", True),
    ],
)
def test_a_target_power_loss_is_documented_to_lose_only_without_flushes_into_a_write_cache(
    cache: str, wc: str, keeps: bool
) -> None:
    assert documented_keeps_acked(POWER_LOSS, cache, "none", lun_write_cache=wc) is keeps
    # eatmydata wraps QEMU's fsync calls; an iSCSI flush is a SCSI command it cannot drop
    assert documented_keeps_acked(POWER_LOSS, cache, "eatmydata", lun_write_cache=wc) is keeps


def test_a_target_verdict_is_named_the_targets_and_never_called_modelled() -> None:
    lost = config_verdict(
        {"power_loss.acked_lost": [12.0], "qemu_crash.acked_lost": [0.0], "fs.clean": [0.0]},
        "unsafe",
        lun_write_cache="on",
    )
    sv = lost.situations[POWER_LOSS]
    assert sv.text == "target power loss: LOST acknowledged writes in 1/1 cut (up to 12 records)"
    assert sv.disagreement is None
    kept = config_verdict(
        {"power_loss.acked_lost": [0.0], "qemu_crash.acked_lost": [0.0], "fs.clean": [1.0]},
        "unsafe",
        lun_write_cache="off",
    )
    # documented to keep: the target syncs each write
    assert kept.situations[POWER_LOSS].disagreement is None
    local = config_verdict({"power_loss.acked_lost": [0.0]}, "unsafe")
    assert "DISAGREE" not in (local.situations[POWER_LOSS].disagreement or "")
    assert "no loss was caught" in (local.situations[POWER_LOSS].disagreement or "")


def test_fuse_export_argv_escapes_commas_in_paths() -> None:
    argv = fuse_export_argv("qsd", Path("/w/a,b/nbd.sock"), Path("/w/a,b/lun.img"), Path("/w/pid"))
    assert "server.path=/w/a,,b/nbd.sock" in argv[2] and "mountpoint=/w/a,,b/lun.img" in argv[4]


# --------------------------------------------------------------------------- real trials (slow)

SWEEP = """
tier = ["durability"]
format = ["raw"]
cache = ["none", "unsafe"]
lun_write_cache = ["off", "on"]
workloads = ["durability"]
cuts = 1
run_timeout = 180

[[backing]]
type = "iscsi"
"""


def _ours(tmp_path: Path) -> list[str]:
    """Processes (tgtd, nbdkit, qemu-storage-daemon, QEMU) whose command line names this test's
    directory."""
    return subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()


def _fuse_mounts_under(path: Path) -> list[str]:
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(str(path))
    ]


def _speed_cell(wc: str, cache: str, backing_type: str = "iscsi") -> CellWorkload:
    """A block-layer cell a shared-storage sweep would rank, on `backing_type`."""
    return speed_cell(backing_type, cache=cache, lun_write_cache=wc)


@pytest.mark.slow
@needs("tgtd")
@needs("nbdkit")
@needs("qemu-storage-daemon")
@needs("qemu-system-x86_64")
def test_a_target_power_loss_loses_acknowledged_writes_only_with_the_write_cache_on_and_flushes_dropped(  # noqa: E501
    tmp_path: Path,
) -> None:
    (tmp_path / "p.toml").write_text(SWEEP)
    proc = run_cli(
        "run", "p.toml", "--db", "r.sqlite", "--workdir", str(tmp_path / "wd"), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = ok_samples(tmp_path / "r.sqlite")
    m = {
        ("on" if "lun_write_cache=on" in key else "off", key.split("/")[3], metric): v
        for key, metric, v in rows
    }
    # Physics, not a rate: nbdkit's writeback cache writes to the image only on a flush, and with
    # cache=unsafe QEMU sends none, so with the LUN's cache on nothing the guest wrote after mkfs
    # reaches the image.
    assert m[("on", "unsafe", "power_loss.acked_lost")] > 0
    assert m[("on", "unsafe", "power_loss.fs_clean")] == 0
    for wc, cache in (("off", "unsafe"), ("off", "none"), ("on", "none")):
        assert m[(wc, cache, "power_loss.acked_lost")] == 0, (wc, cache)
        assert m[(wc, cache, "power_loss.fs_clean")] == 1, (wc, cache)
    for wc in ("off", "on"):
        for cache in ("none", "unsafe"):
            # QEMU's iscsi driver keeps nothing back
            assert m[(wc, cache, "qemu_crash.acked_lost")] == 0
            # the cut came after ≥ 2 groups of 4
            assert m[(wc, cache, "durability.acked_records")] >= 8
    meta = json.loads(db.execute("SELECT meta_json FROM runs LIMIT 1").fetchone()[0])
    lun = meta["target_cut"]["power_loss_lun"]
    assert lun["lun_backing_file"].endswith("lun-over-fuse.img") and lun[
        "lun_write_cache_read_back"
    ] in ("on", "off")
    assert meta["network_disk"]["protocol"] == "iscsi" and meta["nbd_drops_flushes"] is False
    out = " ".join(proc.stdout.split())
    assert "target power loss: LOST acknowledged writes in 1/1 cut" in out
    assert "target power loss: acknowledged writes kept in 1/1 cut" in out
    assert "DISAGREES" not in out and "lun_write_cache=on" in out

    # What recommend says of shared-storage speed cells with the same settings: the measured target
    # verdict, and nothing measured for a local disk (a target's power loss is not this host's).
    index = MeasuredIndex.from_store(Store(tmp_path / "r.sqlite", read_only=True))
    risks = {
        r.situation: r
        for r in risk_statements("unsafe", "none", _speed_cell("on", "unsafe"), index)
    }
    assert risks[TARGET_POWER_LOSS].basis == "measured"
    assert risks[TARGET_POWER_LOSS].text.startswith(
        "target power loss: LOST acknowledged writes in 1/1 cut"
    )
    assert risks["QEMU crash"].basis == "measured"
    risks = {
        r.situation: r
        for r in risk_statements("unsafe", "none", _speed_cell("off", "unsafe"), index)
    }
    assert risks[TARGET_POWER_LOSS].text.startswith(
        "target power loss: acknowledged writes kept in 1/1 cut"
    )
    local = {
        r.situation: r
        for r in risk_statements("unsafe", "none", _speed_cell("off", "unsafe", "dir"), index)
    }
    assert TARGET_POWER_LOSS not in local and local["host crash or power loss"].basis == DOCUMENTED

    assert _ours(tmp_path) == [] and _fuse_mounts_under(tmp_path) == []
    left = [p for p in (tmp_path / "wd").rglob("*") if p.is_file() and ".iomatrix" not in p.parts]
    assert left == []


@pytest.mark.slow
@needs("tgtd")
@needs("nbdkit")
@needs("qemu-storage-daemon")
@needs("qemu-system-x86_64")
def test_a_sweep_killed_while_a_lun_sits_on_its_fuse_export_is_cleaned_up(tmp_path: Path) -> None:
    """SIGKILL at the moment the FUSE export is mounted (an event, not a delay): the kernel's
    parent-death signal stops the daemons, and `iomatrix clean` unmounts the disconnected FUSE file
    from the ledger's entry."""
    (tmp_path / "p.toml").write_text(SWEEP.replace("cuts = 1", "cuts = 3"))
    wd = tmp_path / "wd"
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite", "--workdir", str(wd)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not _fuse_mounts_under(wd):
            time.sleep(0.01)
        assert _fuse_mounts_under(wd), "no FUSE export was mounted"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    clean = run_cli("clean", "--workdir", str(wd), cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _fuse_mounts_under(tmp_path) == []
    deadline = time.monotonic() + 30  # the parent-death signal is delivered, not waited for
    while _ours(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _ours(tmp_path) == []
    assert not any(mounts_at(str(p)) for p in wd.rglob("lun-over-fuse.img"))
    # a deep working directory puts nbdkit's socket in a short directory under /tmp: gone too
    assert list(Path(tempfile.gettempdir()).glob(f"iomx-nbd-{proc.pid}-*")) == []
