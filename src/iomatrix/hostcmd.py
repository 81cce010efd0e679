"""Small helpers for running host programs with clear errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

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
    "xorriso": "xorriso",
    "iscsi-inq": "libiscsi-bin",
    "iscsi-ls": "libiscsi-bin",
    "iscsi-readcapacity16": "libiscsi-bin",
}


# Programs a fleet host may have beside iomatrix's own interpreter (its .venv/bin) instead of on
# PATH: the fleet role's measuring install copies fio built on the controller there
# (fio/host_build.py, setup.sh --fio-binary), and it is the fio that install chose, so it comes
# before any fio on PATH.
BESIDE_INTERPRETER = ("fio",)


def program_path(program: str) -> str | None:
    """Where `program` runs from: beside the interpreter for BESIDE_INTERPRETER, else on PATH; None
    if absent."""
    if program in BESIDE_INTERPRETER:
        beside = Path(sys.executable).parent / program
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    return shutil.which(program)


def require(program: str) -> str:
    """Return the path of `program`, or raise MissingTool naming its package."""
    path = program_path(program)
    if path is None:
        raise MissingTool(program, PACKAGE_OF.get(program, program))
    return path


def version_of(argv: Sequence[str]) -> str | None:
    """First line of a program's --version output, or None when it is absent."""
    path = program_path(argv[0])
    if path is None:
        return None
    try:
        out = subprocess.run([path, *argv[1:]], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None
