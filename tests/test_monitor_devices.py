from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix.monitor.devices import resolve, resolve_device_chain
from tests.conftest import loop_mounted_ext4

SCRATCH = Path("/tmp/iomx-mon")


def _diskstats_names() -> set[str]:
    return {
        line.split()[2] for line in Path("/proc/diskstats").read_text().splitlines() if line.strip()
    }


def _needs_loop() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (losetup, mkfs, mount)")
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not available")


def test_root_directory_resolves_to_a_whole_disk():
    chain = resolve_device_chain(Path("/"))
    assert chain, resolve("/").reason
    assert set(chain) <= _diskstats_names()
    last = Path("/sys/class/block") / chain[-1]
    assert not (last / "partition").exists()
    assert not (last / "loop").exists()


def test_partition_is_followed_to_parent_disk():
    # use any partition present on this host; skip when there is none (e.g. root on /dev/vda)
    parts = [p for p in Path("/sys/class/block").iterdir() if (p / "partition").exists()]
    if not parts:
        pytest.skip("no partitions on this host")
    p = parts[0]
    major, minor = (p / "dev").read_text().strip().split(":")
    node = Path(f"/dev/{p.name}")
    if not node.exists():
        pytest.skip(f"{node} missing")
    chain = resolve_device_chain(node)
    assert chain[0] == p.name
    assert chain[1] == p.resolve().parent.name
    assert (int(major), int(minor)) == (
        os.major(node.stat().st_rdev),
        os.minor(node.stat().st_rdev),
    )


def test_virtual_filesystems_resolve_to_empty_with_reason():
    proc = resolve(Path("/proc/self"))
    assert proc.devices == []
    assert "proc" in (proc.reason or "")
    if Path("/dev/shm").is_dir() and os.path.ismount("/dev/shm"):
        shm = resolve(Path("/dev/shm"))
        if shm.devices == []:
            assert "memory-backed" in (shm.reason or "")
    null = resolve(Path("/dev/null"))
    assert null.devices == [] and "character device" in (null.reason or "")


@pytest.mark.root
def test_loop_mounted_ext4_chain():
    _needs_loop()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    outer = resolve_device_chain(SCRATCH)
    if not outer:
        pytest.skip(f"/tmp/iomx-mon is not on a block device: {resolve(SCRATCH).reason}")
    with loop_mounted_ext4(SCRATCH) as (loop, mnt, _backing):
        name = Path(loop).name
        f = mnt / "disk.img"
        f.write_bytes(b"x" * 4096)
        expected = [name, *outer]  # e.g. ["loop3", "vda"]
        assert resolve_device_chain(f) == expected
        assert resolve_device_chain(mnt) == expected
        assert resolve_device_chain(Path(loop)) == expected
        # a loop device over a file on that filesystem nests one level deeper
        inner_file = mnt / "inner.img"
        with open(inner_file, "wb") as fh:
            fh.truncate(16 * 1024 * 1024)
        inner = subprocess.run(
            ["losetup", "--find", "--show", str(inner_file)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        try:
            assert resolve_device_chain(Path(inner)) == [Path(inner).name, *expected]
            # backing file deleted: sysfs path says "(deleted)"; the ioctl fallback still finds it
            inner_file.unlink()
            assert resolve_device_chain(Path(inner)) == [Path(inner).name, *expected]
        finally:
            subprocess.run(["losetup", "-d", inner], check=False, capture_output=True)
