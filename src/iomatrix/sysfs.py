"""Reading sysfs and procfs files, and the steps of a walk through the block-device tree in sysfs.

The steps are small on purpose: each walker (the device chain of `monitor.devices`, the
lower-device set of `safety`, the device facts of `backing.provision`) keeps its own order and
result shape, and takes these steps from here:

    block_sysdir(8, 2)            -> /sys/devices/.../sda/sda2   (device number -> sysfs dir)
    block_sysdir_by_name("sda2")  -> the same dir, by kernel name
    whole_disk(sda2 dir)          -> the sda dir (a whole disk is its own whole disk)
    partitions(sda dir)           -> [sda1 dir, sda2 dir]
    loop_backing_file(loop3 dir)  -> "/srv/disk.img" (None if not a loop device or detached)
    slaves(dm-0 dir)              -> ["sda2", "sdb1"];  holders(sda2 dir) -> ["dm-0"]
"""

from __future__ import annotations

import os
from pathlib import Path

SYS_DEV_BLOCK = Path("/sys/dev/block")
SYS_CLASS_BLOCK = Path("/sys/class/block")


def read_text(path: str | Path, *, strip: bool = True) -> str | None:
    """The contents of a sysfs/procfs file (stripped unless `strip=False`), or None if it cannot be
    read.

    Kernel files vanish and refuse reads routinely (a device detached, a knob the kernel lacks),
    so "absent" is an answer, not an error.
    """
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    return text.strip() if strip else text


def devnum_of(node: str | Path) -> tuple[int, int]:
    """(major, minor) of a block device node such as /dev/sda2 (raises OSError if it cannot be
    stat'ed)."""
    st = os.stat(node)
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def block_sysdir(major: int, minor: int) -> Path | None:
    """The resolved /sys/class/block/<name> directory of a device number, or None if no block device
    has it."""
    p = SYS_DEV_BLOCK / f"{major}:{minor}"
    return p.resolve() if p.exists() else None


def block_sysdir_by_name(name: str) -> Path:
    """The resolved sysfs directory of block device `name` (e.g. "sda2", "loop3", "dm-0")."""
    return (SYS_CLASS_BLOCK / name).resolve()


def sysdir_devnum(sysdir: Path) -> tuple[int, int] | None:
    """(major, minor) from a block device's sysfs `dev` file, or None."""
    text = read_text(sysdir / "dev")
    if not text or ":" not in text:
        return None
    ma, mi = text.split(":", 1)
    return int(ma), int(mi)


def is_partition(sysdir: Path) -> bool:
    return (sysdir / "partition").exists()


def whole_disk(sysdir: Path) -> Path:
    """The whole-disk sysfs dir of a partition (itself for a whole disk): a partition's dir sits
    inside its disk's."""
    return sysdir.parent if is_partition(sysdir) else sysdir


def partitions(sysdir: Path) -> list[Path]:
    """sysfs dirs of the partitions of a whole disk, sorted."""
    return sorted(c for c in sysdir.iterdir() if c.is_dir() and is_partition(c))


def is_loop(sysdir: Path) -> bool:
    return (sysdir / "loop").is_dir()


def loop_backing_file(sysdir: Path) -> str | None:
    """The backing file of a loop device as the kernel reports it (may end in " (deleted)"), else
    None."""
    return read_text(sysdir / "loop" / "backing_file")


def slaves(sysdir: Path) -> list[str]:
    """Names of the devices a dm/md device is built on, sorted ([] for anything else)."""
    d = sysdir / "slaves"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def holders(sysdir: Path) -> list[str]:
    """Names of the dm/md devices built on this one, sorted."""
    d = sysdir / "holders"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []
