"""Which kernel block devices carry the I/O for a path.

    resolve_device_chain(Path("/tmp/iomx/mnt/disk.qcow2"))  ->  ["loop3", "vda"]

The chain is outermost first and ends at the whole physical disk:

  * a file or directory: its filesystem's st_dev major:minor -> /sys/dev/block/M:m
  * a block device path (/dev/loop3, /dev/sda1): its st_rdev
  * a partition -> its parent disk (both are listed: ["sda2", "sda"])
  * a loop device -> the device holding its backing file
    (/sys/block/loopN/loop/backing_file, resolved recursively; if that path no
    longer resolves, e.g. "(deleted)", the LOOP_GET_STATUS64 ioctl's lo_device)
  * device-mapper / md: every entry of sysfs slaves/, depth first
  * btrfs and other filesystems with an anonymous st_dev (major 0): the mount
    source from /proc/self/mountinfo, when it is a block device
  * tmpfs, proc, overlay, network filesystems ...: [] with a reason

`resolve()` returns the chain plus a `reason` when it is empty and `notes`
(e.g. a RAID/LVM device spanning several disks, where "the last device" is only
one of them). Only sysfs and procfs are read; nothing is spawned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from iomatrix import sysfs
from iomatrix.mountinfo import mounts_of_devnum
from iomatrix.protocol_registry import kernel_fs_types

LOOP_GET_STATUS64 = 0x4C05
# struct loop_info64: lo_device, lo_inode, lo_rdevice, lo_offset, lo_sizelimit (u64),
# lo_number, lo_encrypt_type, lo_encrypt_key_size, lo_flags (u32), file_name[64],
# crypt_name[64], encrypt_key[32], lo_init[2] (u64)
_LOOP_INFO64 = struct.Struct("=QQQQQIIII64s64s32s2Q")

MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}
# Besides every network protocol's kernel mounts (an NFS mount's types: protocols.kernel_fs_types).
NETWORK_FS = {"cifs", "smb3", "ceph", "glusterfs", "9p", "virtiofs", "fuse.sshfs"}


@dataclass
class DeviceChain:
    """Result of resolving a path: `devices` outermost first, physical disk last."""

    path: Path
    devices: list[str] = field(default_factory=list)
    reason: str | None = None  # why `devices` is empty
    notes: list[str] = field(default_factory=list)

    @property
    def physical(self) -> str | None:
        return self.devices[-1] if self.devices else None


def resolve_device_chain(path: Path) -> list[str]:
    """Kernel block device names carrying I/O for `path`, outermost first,
    ending at the whole physical disk; [] for memory/virtual/network filesystems
    (use `resolve()` to get the reason)."""
    return resolve(path).devices


def resolve(path: Path | str) -> DeviceChain:
    """Like resolve_device_chain, with the reason for an empty chain and notes."""
    path = Path(path)
    st = os.stat(path)
    chain = DeviceChain(path=path)
    if stat.S_ISBLK(st.st_mode):
        devt = st.st_rdev
    elif stat.S_ISCHR(st.st_mode):
        chain.reason = f"{path} is a character device, not a block device"
        return chain
    else:
        devt = st.st_dev
    _walk_devt(devt, chain, seen=set())
    if len([d for d in chain.devices if _is_leaf(d)]) > 1:
        chain.notes.append(
            "I/O spans several physical devices; disk.* reports only the last one "
            f"({chain.devices[-1]}), the others are under dev.<name>.*"
        )
    return chain


# --------------------------------------------------------------------------- internals


def _is_leaf(name: str) -> bool:
    d = sysfs.block_sysdir_by_name(name)
    if sysfs.is_partition(d) or (d / "loop").exists():
        return False
    return not sysfs.slaves(d)


def _walk_devt(devt: int, chain: DeviceChain, seen: set[str]) -> None:
    sysdir = sysfs.block_sysdir(os.major(devt), os.minor(devt))
    if sysdir is None:
        _explain_non_block(devt, chain, seen)
        return
    _walk_name(sysdir.name, chain, seen)


def _walk_name(name: str, chain: DeviceChain, seen: set[str]) -> None:
    if name in seen:
        return
    seen.add(name)
    chain.devices.append(name)
    d = sysfs.block_sysdir_by_name(name)

    if sysfs.is_partition(d):  # partition -> its parent disk
        _walk_name(sysfs.whole_disk(d).name, chain, seen)
        return

    if sysfs.is_loop(d):
        _walk_loop(name, d, chain, seen)
        return

    for s in sysfs.slaves(d):
        _walk_name(s, chain, seen)


def _walk_loop(name: str, sysdir: Path, chain: DeviceChain, seen: set[str]) -> None:
    backing = sysfs.loop_backing_file(sysdir)
    if backing:
        try:
            st = os.stat(backing)
        except OSError:
            st = None
        if st is not None:
            if stat.S_ISBLK(st.st_mode):
                _walk_devt(st.st_rdev, chain, seen)
            else:
                _walk_devt(st.st_dev, chain, seen)
            return
    devt = _loop_backing_devt(name)
    if devt is not None:
        _walk_devt(devt, chain, seen)
        return
    chain.notes.append(f"could not resolve the backing file of {name} ({backing or 'unknown'})")


def _loop_backing_devt(name: str) -> int | None:
    """st_dev of a loop device's backing file via LOOP_GET_STATUS64 (needs to open /dev/<name>)."""
    try:
        fd = os.open(f"/dev/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        buf = bytearray(_LOOP_INFO64.size)
        fcntl.ioctl(fd, LOOP_GET_STATUS64, buf)
    except OSError:
        return None
    finally:
        os.close(fd)
    lo_device = _LOOP_INFO64.unpack(bytes(buf))[0]
    return lo_device or None


def _explain_non_block(devt: int, chain: DeviceChain, seen: set[str]) -> None:
    """st_dev has no /sys/dev/block entry: find the mount and say why (or follow its source)."""
    mm = f"{os.major(devt)}:{os.minor(devt)}"
    mount = _mount_for(mm)
    if mount is None:
        chain.reason = f"device {mm} is not a block device and no mount uses it"
        return
    fstype, source, target = mount
    if source.startswith("/dev/"):
        with contextlib.suppress(OSError):
            st = os.stat(source)
            if stat.S_ISBLK(st.st_mode):  # btrfs & co: anonymous st_dev, real device as source
                if not chain.devices:
                    chain.notes.append(
                        f"{fstype} at {target} uses an anonymous st_dev ({mm}); "
                        f"followed its mount source {source}"
                    )
                _walk_devt(st.st_rdev, chain, seen)
                return
    if fstype in MEMORY_FS:
        why = "is memory-backed"
    elif (
        fstype in NETWORK_FS
        or fstype in kernel_fs_types()
        or ":" in source
        or source.startswith("//")
    ):
        why = "is a network filesystem"
    elif fstype == "overlay":
        why = "is an overlay (resolve one of its lower/upper directories instead)"
    else:
        why = "is a virtual filesystem with no block device"
    chain.reason = f"{target} ({fstype}, source {source}) {why}"


def _mount_for(majmin: str) -> tuple[str, str, str] | None:
    """(fstype, source, mount point) of the first mount whose st_dev is majmin."""
    try:
        mounts = mounts_of_devnum(majmin)
    except OSError:
        return None
    if not mounts:
        return None
    m = mounts[0]
    return m["fstype"], m["source"], m["mountpoint"]
