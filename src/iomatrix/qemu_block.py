"""QEMU's block graph for the disk under test, shared by every tier that runs QEMU's block layer.

The guest tier passes it to ``qemu-system-x86_64 -blockdev``; the block-layer tier passes the very same
string to ``qemu-storage-daemon --blockdev``. One function builds it from the domain model, so a cell means
the same QEMU configuration in both tiers.

A cache mode is three switches (see :mod:`iomatrix.domain`). Two of them, ``cache.direct`` and
``cache.no-flush``, are node options and live here. The third, the write cache, belongs to whoever sits on
top of the graph and issues requests (the BlockBackend): a guest device (``-device …,write-cache=``) or a
block export (``--export …,writethrough=``); both end in QEMU's ``blk_set_enable_write_cache()``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from iomatrix import domain
from iomatrix.domain import CACHE, Aio, Bus, CacheMode
from iomatrix.errors import UserError
from iomatrix.fio.parse import ENOSPC_HINT

# The null-co ceiling is a disk "format" of its own: no image, no backing.
NULL_FORMAT = "null"


@dataclass
class DiskSpec:
    """The disk under test. `target` is an image file or block device; None (format "null") is the
    null-co ceiling: no storage at all, reads return zeroes. `bus` matters to the guest tier only."""

    target: str | None
    format: str = "qcow2"  # a domain.Format value, or NULL_FORMAT
    cache: CacheMode = CacheMode.NONE
    aio: Aio = Aio.THREADS
    bus: Bus = Bus.VIRTIO_BLK
    null_size_bytes: int = 1 << 30  # size of the null-co disk


def is_block_device(path: Path) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def qemu_opt(value: str | Path) -> str:
    """Escape a value for QEMU's key=value option syntax (commas are doubled)."""
    return str(value).replace(",", ",,")


def onoff(flag: bool) -> str:
    return "on" if flag else "off"


def validate_disk(disk: DiskSpec) -> None:
    """Refuse combinations QEMU would reject (or that make no sense) with a one-line fix."""
    for value, enum in ((disk.cache, CacheMode), (disk.aio, Aio), (disk.bus, Bus)):
        if value not in {e.value for e in enum}:
            raise UserError(f"unknown {enum.__name__} '{value}'", hint=f"use {domain.choices(enum)}")
    if disk.format != NULL_FORMAT and disk.format not in {f.value for f in domain.Format}:
        raise UserError(f"unknown disk format '{disk.format}'",
                        hint=f"use {domain.choices(domain.Format)} (or {NULL_FORMAT} for the ceiling)")
    if (disk.format == NULL_FORMAT) != (disk.target is None):
        raise UserError("the null ceiling has no target and every other format needs one",
                        hint="use format='null' with target=None, or give an image path")
    reason = None if disk.format == NULL_FORMAT else domain.aio_rule(disk.cache, disk.aio)
    if reason:
        raise UserError(reason, hint="use cache=none or cache=directsync with aio=native, or aio=threads/io_uring")


def blockdev_spec(disk: DiskSpec, node: str = "d0") -> str:
    """The ``-blockdev`` value: format node over a file/host_device node (inline child).

    cache.direct and cache.no-flush are set on both nodes (what ``-drive cache=`` does); the write-cache
    half of the cache mode is not a node option (see :func:`write_cache`).
    """
    validate_disk(disk)
    sem = CACHE[CacheMode(disk.cache)]
    direct, no_flush = sem.direct, sem.no_flush
    if disk.format == NULL_FORMAT:
        return (f"driver=null-co,node-name={node},read-zeroes=on,size={disk.null_size_bytes},"
                f"cache.no-flush={onoff(no_flush)}")
    assert disk.target is not None
    proto = "host_device" if is_block_device(Path(disk.target)) else "file"
    return (f"driver={disk.format},node-name={node},cache.direct={onoff(direct)},cache.no-flush={onoff(no_flush)},"
            f"file.driver={proto},file.filename={qemu_opt(disk.target)},file.aio={disk.aio},"
            f"file.cache.direct={onoff(direct)},file.cache.no-flush={onoff(no_flush)}")


# Less room than this left on the host filesystem holding an image after a failed run: it ran full.
FULL_BELOW_BYTES = 1 << 20


def out_of_space(target: str | Path | None) -> str | None:
    """Why a run on the image `target` failed, when the host filesystem holding it is full (else None).

    A guest never sees ENOSPC itself: QEMU fails its request with a plain I/O error (the guest tier sets
    werror=report, see `guest.qemu.device_args`; QEMU's default would pause the VM). Call this after a
    failed run and before the image is removed (removing it frees the room again). A block device is never
    "full"; root may fill a filesystem's reserved blocks too, so root is judged by them.
    """
    if target is None or is_block_device(Path(target)):
        return None
    try:
        st = os.statvfs(Path(target).parent)
    except OSError:
        return None
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    if free >= FULL_BELOW_BYTES:
        return None
    return f"{ENOSPC_HINT} (the host filesystem holding {target} has {free} bytes free; QEMU failed the " \
           "guest's writes to it)"


def blockdev_args(disk: DiskSpec, node: str = "d0") -> list[str]:
    """``-blockdev SPEC`` for qemu-system (qemu-storage-daemon spells the option ``--blockdev``)."""
    return ["-blockdev", blockdev_spec(disk, node)]


def write_cache(cache: CacheMode | str) -> bool:
    """Whether the BlockBackend on top of the graph has a volatile write cache (off: QEMU makes every write
    durable before completing it, by a flush after it)."""
    return CACHE[CacheMode(cache)].write_cache


def blockdev_spec_over_nbd(disk: DiskSpec, socket: str | Path, node: str = "d0") -> str:
    """The cell's format node, with its cache switches, over an NBD client node instead of the file node.

    The durability tier serves the image through nbdkit (a simulated volatile disk cache) and puts QEMU's
    graph on top of it, so everything above the protocol node is the cell's: format driver, cache.direct and
    cache.no-flush on both nodes (no-flush drops flushes in QEMU's generic block layer, whatever the
    protocol), and the device's write-cache. What does not carry over: ``aio`` is an option of the file
    protocol only, and O_DIRECT means nothing to a socket (the simulated cache below stands for both the
    host page cache and the disk's own cache).
    """
    validate_disk(disk)
    if disk.format == NULL_FORMAT:
        raise UserError("the null ceiling has no image to serve over NBD", hint="use an image format")
    sem = CACHE[CacheMode(disk.cache)]
    direct, no_flush = onoff(sem.direct), onoff(sem.no_flush)
    return (f"driver={disk.format},node-name={node},cache.direct={direct},cache.no-flush={no_flush},"
            f"file.driver=nbd,file.server.type=unix,file.server.path={qemu_opt(socket)},"
            f"file.cache.direct={direct},file.cache.no-flush={no_flush}")
