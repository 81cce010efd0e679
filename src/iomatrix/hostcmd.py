"""Small helpers for running host programs with clear errors."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from iomatrix.errors import MissingTool

# Which Debian package provides each host program we call.
PACKAGE_OF = {
    "fio": "fio",
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "nbdkit": "nbdkit",
    "e2fsck": "e2fsprogs",
    "debugfs": "e2fsprogs",
    "qemu-storage-daemon": "qemu-system-common",
    "mkfs.ext4": "e2fsprogs",
    "mkfs.xfs": "xfsprogs",
    "xfs_repair": "xfsprogs",
    "mkfs.btrfs": "btrfs-progs",
    "losetup": "mount",
    "mount": "mount",
    "umount": "mount",
    "wipefs": "util-linux",
    "blkid": "util-linux",
    "lsblk": "util-linux",
    "eatmydata": "eatmydata",
    "busybox": "busybox-static",
    "depmod": "kmod",
    "cpio": "cpio",
    "lvcreate": "lvm2",
    "zfs": "zfsutils-linux",
    "tgtd": "tgt",
    "tgtadm": "tgt",
    "iscsi-inq": "libiscsi-bin",
    "iscsi-ls": "libiscsi-bin",
    "iscsi-readcapacity16": "libiscsi-bin",
}


def require(program: str) -> str:
    """Return the path of `program`, or raise MissingTool naming its package."""
    path = shutil.which(program)
    if path is None:
        raise MissingTool(program, PACKAGE_OF.get(program, program))
    return path


def version_of(argv: Sequence[str]) -> str | None:
    """First line of a program's --version output, or None when it is absent."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None
