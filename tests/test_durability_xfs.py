"""The durability tier's xfs file variant: reading xfs_repair (pure), the host-side check on real
XFS images (loop device, mount, log replay on a copy; needs root), and per-filesystem verdicts."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from iomatrix.backing.leftovers import clean, pending
from iomatrix.durability.fscheck import read_xfs_repair
from iomatrix.durability.records import make_record
from iomatrix.durability.verdict import WORKLOAD_FS, config_verdict
from iomatrix.errors import UserError
from iomatrix.mountinfo import parse_mountinfo
from iomatrix.plan.load import load_plan
from iomatrix.report.durability import MeasuredConfig, MeasuredIndex, measured_statements
from iomatrix.runner import plan_expansion
from iomatrix.tiers.declared.durability import Durability
from iomatrix.tiers.durability import LAYOUTS, inspect_image, layout_for
from tests.conftest import needs, requires_root

CLEAN = """Phase 1 - find and verify superblock...
Cannot get host filesystem geometry.
Repair may fail if there is a sector size mismatch between
the image and the host filesystem.
Phase 2 - using internal log
        - zero log...
        - scan filesystem freespace and inode maps...
        - found root inode chunk
Phase 3 - for each AG...
        - agno = 0
Phase 4 - check for duplicate blocks...
No modify flag set, skipping phase 5
Phase 6 - check inode connectivity...
        - traversing filesystem ...
Phase 7 - verify link counts...
No modify flag set, skipping filesystem flush and exiting.
"""
DIRTY_LOG = """Phase 1 - find and verify superblock...
Phase 2 - using internal log
        - zero log...
ALERT: The filesystem has valuable metadata changes in a log which is being
ignored because the -n option was used.  Expect spurious inconsistencies
which may be resolved by first mounting the filesystem to replay the log.
        - scan filesystem freespace and inode maps...
Phase 7 - verify link counts...
No modify flag set, skipping filesystem flush and exiting.
"""
NO_SUPERBLOCK = """Phase 1 - find and verify superblock...
bad primary superblock - bad magic number !!!

attempting to find secondary superblock...
..........................................................Sorry, could not find valid secondary superblock
Exiting now.
"""  # noqa: E501
CORRUPT = """Phase 1 - find and verify superblock...
Phase 2 - using internal log
        - zero log...
        - scan filesystem freespace and inode maps...
sb_icount 64, counted 128
agi unlinked bucket 5 is 1093 in ag 0 (inode=1093)
Phase 3 - for each AG...
No modify flag set, skipping filesystem flush and exiting.
"""

# --------------------------------------------------------------------------- xfs_repair's answer
# (pure)


def test_xfs_repair_clean_output_is_clean() -> None:
    check = read_xfs_repair(0, CLEAN)
    assert (
        check.clean and not check.dirty_log and check.findings == [] and check.summary() == "clean"
    )


def test_xfs_repair_corruption_is_named() -> None:
    check = read_xfs_repair(1, CORRUPT)
    assert not check.clean
    assert check.findings == [
        "sb_icount 64, counted 128",
        "agi unlinked bucket 5 is 1093 in ag 0 (inode=1093)",
    ]


def test_xfs_repair_on_an_unreplayed_log_is_never_clean() -> None:
    for rc in (0, 1):  # whatever it exits with, findings on an ignored log mean nothing
        check = read_xfs_repair(rc, DIRTY_LOG)
        assert not check.clean and check.dirty_log
        assert check.summary().startswith(
            "dirty log (not replayed): ALERT: The filesystem has valuable"
        )


def test_xfs_repair_without_a_superblock() -> None:
    check = read_xfs_repair(1, NO_SUPERBLOCK)
    assert not check.clean
    assert check.findings[:2] == [
        "bad primary superblock - bad magic number !!!",
        "attempting to find secondary superblock...",
    ]
    # the row of dots is dropped
    assert "Sorry, could not find valid secondary superblock" in check.findings
    assert read_xfs_repair(1, "").summary() == "not clean: exit status 1"


# --------------------------------------------------------------------------- plans, layouts,
# verdicts (pure)


def test_filesystem_is_chosen_by_workload_and_xfs_is_opt_in() -> None:
    assert layout_for("durability").fs == "ext4" and layout_for("durability-xfs").fs == "xfs"
    # One list of durability workloads: the tier's own, its layouts and the report's filesystem
    # names.
    assert {w.name for w in Durability.own_workloads} == set(LAYOUTS)
    assert {n: lay.fs for n, lay in LAYOUTS.items()} == WORKLOAD_FS
    for lay in LAYOUTS.values():  # the raw region lies past the filesystem and inside the image
        assert lay.fs_mb << 20 < lay.raw_offset and lay.raw_offset + (4 << 20) <= lay.image_bytes
    assert LAYOUTS["durability-xfs"].fs_mb >= 300  # mkfs.xfs refuses smaller filesystems
    with pytest.raises(UserError) as err:
        layout_for("durability-btrfs")
    assert "durability, durability-xfs" in err.value.one_line()
    plan, base = load_plan("durability")
    assert plan.workloads == ["durability"]  # xfs would double the 25-minute plan
    plan, base = load_plan("durability-xfs")
    exp = plan_expansion(plan, base, set())
    assert len(exp.units) == 10 and {u.workload.name for u in exp.units} == {
        "durability",
        "durability-xfs",
    }


def test_each_filesystem_keeps_its_own_verdict() -> None:
    v = config_verdict(
        {"power_loss.acked_lost": [0] * 4, "fs.clean": [1, 1, 1, 0]},
        "none",
        fs_clean={"ext4": [1, 1], "xfs": [1, 0]},
    )
    assert v.lines()[-2:] == [
        "guest filesystem (ext4): clean after 2/2 cuts (after journal replay)",
        "guest filesystem (xfs): NOT clean after 1/2 cuts (after journal replay)",
    ]
    one = config_verdict({"fs.clean": [1]}, "none", fs_clean={"xfs": [1]})
    assert one.lines()[-1] == "guest filesystem (xfs): clean after 1/1 cuts (after journal replay)"

    index = MeasuredIndex()
    axes = {
        "tier": "durability",
        "format": "raw",
        "preallocation": "off",
        "cache": "writeback",
        "aio": "threads",
        "bus": "virtio-blk",
        "backing": "dir",
        "modifier": "none",
    }
    for fs, clean_values in (("ext4", [1.0]), ("xfs", [0.0])):
        mc = MeasuredConfig(dict(axes))
        mc.samples["power_loss.acked_lost"] += [0]
        mc.samples["qemu_crash.acked_lost"] += [0]
        mc.samples["fs.clean"] += clean_values
        mc.fs_clean[fs] += clean_values
        mc.sweeps.add(1)
        index.configs[("raw", "writeback", "none", "off", "threads", "virtio-blk", fs)] = mc
    assert sorted(mc.label().split()[-1] for mc in index.configs.values()) == ["fs=ext4", "fs=xfs"]
    power = measured_statements(index, {**axes, "tier": "guest"})["host crash or power loss"]
    assert "kept in 2/2 cuts" in power
    assert "guest filesystem (ext4): clean after 1/1" in power
    assert "guest filesystem (xfs): NOT clean after 1/1" in power


# --------------------------------------------------------------------------- the host check on real
# XFS (root)

LAY = LAYOUTS["durability-xfs"]
NONCE = 0x1234_5678_9ABC


def _ours(tmp_path: Path) -> tuple[list[str], list[str]]:
    """Loop devices over files in tmp_path, and mounts inside it."""
    loops = subprocess.run(
        ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    real = os.path.realpath(tmp_path)
    return (
        [line for line in loops if real in line],
        [m["mountpoint"] for m in parse_mountinfo() if m["mountpoint"].startswith(real)],
    )


def _xfs_image(tmp_path: Path, records: int, *, dirty: bool) -> Path:
    """A trial-shaped image: xfs with `records` fsync'd records in /records (stream 2), the same
    records in the raw region (stream 1). With `dirty`, the filesystem is shut down instead of
    unmounted: its log needs replaying, as after a power loss."""
    image = tmp_path / "evidence.img"
    with open(image, "wb") as f:
        f.truncate(LAY.image_bytes)
    subprocess.run(
        ["mkfs.xfs", "-q", "-f", "-K", "-d", f"size={LAY.fs_mb}m", str(image)], check=True
    )
    with open(image, "r+b") as f:
        f.seek(LAY.raw_offset)
        f.write(b"".join(make_record(NONCE, 1, i) for i in range(records)))
    mnt = tmp_path / "setup-mnt"
    mnt.mkdir()
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        subprocess.run(["mount", "-t", "xfs", "-o", "nouuid", dev, str(mnt)], check=True)
        try:
            fd = os.open(mnt / "records", os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                for i in range(records):
                    os.write(fd, make_record(NONCE, 2, i))
                    os.fsync(fd)
            finally:
                os.close(fd)
            if dirty:
                subprocess.run(["xfs_io", "-x", "-c", "shutdown", str(mnt)], check=True)
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    finally:
        subprocess.run(["losetup", "--detach", dev], check=True)
    return image


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@requires_root
@needs("mkfs.xfs")
@needs("xfs_repair")
def test_xfs_check_replays_the_log_on_a_copy_and_keeps_the_evidence(tmp_path: Path) -> None:
    image = _xfs_image(tmp_path, 12, dirty=True)
    probe = read_xfs_repair(
        *(lambda r: (r.returncode, r.stdout + r.stderr))(
            subprocess.run(["xfs_repair", "-n", "-f", str(image)], capture_output=True, text=True)
        )
    )
    assert probe.dirty_log and not probe.clean  # what a check without the replay would see
    before = _sha(image)
    chk = inspect_image(image, "raw", tmp_path / "scratch", NONCE, (1, 2), 12, 12, LAY, tmp_path)
    assert chk.readable and chk.fs_clean, chk.notes
    assert chk.raw is not None and chk.file is not None
    assert chk.raw.acked_lost == 0 and chk.file.acked_lost == 0 and chk.acked_lost(12) == 0
    assert chk.file.acked == 12 and chk.file.unacked_kept == 0
    assert _sha(image) == before  # the evidence is never modified: the replay happened on a copy
    assert _ours(tmp_path) == ([], []) and pending(tmp_path) == []
    assert list((tmp_path / "scratch").iterdir()) == []

    # More acknowledged than the file holds: the missing ones are lost, the filesystem still clean.
    chk = inspect_image(image, "raw", tmp_path / "scratch", NONCE, (1, 2), 16, 16, LAY, tmp_path)
    assert (
        chk.fs_clean
        and chk.file is not None
        and chk.file.acked_lost == 4
        and chk.file.first_acked_lost == 12
    )


@requires_root
@needs("xfs_repair")
def test_xfs_check_of_a_filesystem_that_never_reached_the_disk(tmp_path: Path) -> None:
    image = tmp_path / "zero.img"
    with open(image, "wb") as f:
        f.truncate(LAY.image_bytes)
    chk = inspect_image(image, "raw", tmp_path / "scratch", NONCE, (1, 2), 8, 12, LAY, tmp_path)
    assert chk.readable and not chk.fs_clean
    assert any(n.startswith("mount (log replay) failed") for n in chk.notes)
    assert any(
        n.startswith("xfs_repair -n: rc 1: not clean: bad primary superblock") for n in chk.notes
    )
    assert chk.acked_lost(8) == 16 and chk.file is not None and chk.file.unacked_lost == 4
    assert _ours(tmp_path) == ([], []) and pending(tmp_path) == []


@requires_root
@needs("mkfs.xfs")
@needs("xfs_repair")
def test_killed_xfs_check_leaves_only_what_clean_removes(tmp_path: Path) -> None:
    """kill -9 while the copy is loop-attached and mounted: the ledger has the copy, the loop device
    and the mount, and `iomatrix clean` undoes all three."""
    image = _xfs_image(tmp_path, 4, dirty=True)
    ready = tmp_path / "mounted"
    script = textwrap.dedent(f"""
        import pathlib, time
        import iomatrix.tiers.durability as d
        real_run = d._run
        def run(argv, timeout=120):
            res = real_run(argv, timeout)
            if argv[0] == "mount":
                pathlib.Path({str(ready)!r}).write_text("x")
                time.sleep(600)
            return res
        d._run = run
        d.inspect_image(pathlib.Path({str(image)!r}), "raw", pathlib.Path({str(tmp_path / "scratch")!r}),
                        {NONCE}, (1, 2), 4, 4, d.LAYOUTS["durability-xfs"], pathlib.Path({str(tmp_path)!r}))
    """)  # noqa: E501
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the check never reached its mount"
    finally:
        child.kill()
        child.wait()
    loops, mounts = _ours(tmp_path)
    assert len(loops) == 1 and len(mounts) == 1
    assert sorted(e.kind for e in pending(tmp_path)) == ["loop", "mount", "path"]
    done = clean(tmp_path)
    assert any(line.startswith("unmounted") for line in done) and any(
        line.startswith("detached") for line in done
    )
    assert _ours(tmp_path) == ([], []) and pending(tmp_path) == []
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_host_that_cannot_mount_the_copy_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from iomatrix.tiers.durability import check_host_reads_xfs

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UserError) as err:
        check_host_reads_xfs()
    assert "needs root" in err.value.one_line() and "drop durability-xfs" in err.value.one_line()
