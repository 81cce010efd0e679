"""The shared sysfs steps (iomatrix.sysfs) and mount lookups (iomatrix.mountinfo) on real devices
and mounts."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix import sysfs
from iomatrix.mountinfo import innermost_mount, mounts_of_devnum, parse_mountinfo
from tests.conftest import loop_mounted_ext4, root_only

SCRATCH = Path("/tmp/iomx-sysfs")


@pytest.fixture
def scratch() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="sysfs-", dir=SCRATCH))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_read_text(scratch: Path) -> None:
    f = scratch / "value"
    f.write_text("  [mq-deadline] none\n")
    assert sysfs.read_text(f) == "[mq-deadline] none"
    assert sysfs.read_text(f, strip=False) == "  [mq-deadline] none\n"
    assert sysfs.read_text(scratch / "absent") is None
    assert sysfs.read_text(scratch) is None  # a directory: unreadable is "absent", not an exception
    assert sysfs.read_text("/proc/self/stat", strip=False).startswith(f"{os.getpid()} ")  # type: ignore[union-attr]


def test_innermost_mount_prefers_the_deepest_and_the_last_mounted(scratch: Path) -> None:
    a, ab = scratch / "a", scratch / "ab"
    text = "\n".join(
        [
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw",
            f"2 1 7:0 / {a} rw - ext4 /dev/loop0 rw",
            f"3 1 7:1 / {ab} rw - xfs /dev/loop1 rw",
            f"4 2 0:50 / {a} rw - tmpfs none rw",  # mounted over the first mount on a
        ]
    )
    entries = parse_mountinfo(text)
    assert innermost_mount(a / "x" / "y", entries)["source"] == "none"  # type: ignore[index]
    assert innermost_mount(ab / "x", entries)["source"] == "/dev/loop1"  # type: ignore[index]
    # "<scratch>/abc" starts with "<scratch>/ab" but is not inside it
    assert innermost_mount(scratch / "abc", entries)["mountpoint"] == "/"  # type: ignore[index]
    assert [m["source"] for m in mounts_of_devnum("7:0", entries)] == ["/dev/loop0"]
    assert mounts_of_devnum("9:9", entries) == []


def test_innermost_mount_of_proc() -> None:
    m = innermost_mount("/proc/self/status")
    assert m is not None and m["fstype"] == "proc"
    st = os.stat("/proc")
    assert any(
        e["mountpoint"] == "/proc"
        for e in mounts_of_devnum(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    )


@root_only
def test_loop_device_steps_and_mounts(scratch: Path) -> None:
    if shutil.which("losetup") is None or shutil.which("mkfs.ext4") is None:
        pytest.skip("losetup / mkfs.ext4 not installed")
    with loop_mounted_ext4(scratch, size_mb=32) as (loop, mnt, backing):
        name = Path(loop).name
        devnum = sysfs.devnum_of(loop)
        d = sysfs.block_sysdir(*devnum)
        assert d is not None and d.name == name
        assert sysfs.block_sysdir_by_name(name) == d
        assert sysfs.sysdir_devnum(d) == devnum
        assert sysfs.is_loop(d) and not sysfs.is_partition(d)
        assert sysfs.loop_backing_file(d) == str(backing)
        assert sysfs.whole_disk(d) == d
        assert sysfs.partitions(d) == [] and sysfs.slaves(d) == [] and sysfs.holders(d) == []
        assert sysfs.read_text(d / "size") == str(32 * 1024 * 1024 // 512)
        assert sysfs.block_sysdir(0, 0xFFFFF) is None  # an anonymous device number: no block device

        m = innermost_mount(mnt / "not" / "yet" / "there")
        assert m is not None and m["mountpoint"] == str(mnt) and m["source"] == loop
        st = os.stat(mnt)
        assert [
            e["mountpoint"]
            for e in mounts_of_devnum(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
        ] == [str(mnt)]
        # mount over it: the visible (last-mounted) filesystem wins
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "iomx-sysfs-test", str(mnt)], check=True
        )
        try:
            over = innermost_mount(mnt / "f")
            assert (
                over is not None
                and over["fstype"] == "tmpfs"
                and over["source"] == "iomx-sysfs-test"
            )
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
        assert innermost_mount(mnt)["source"] == loop  # type: ignore[index]
