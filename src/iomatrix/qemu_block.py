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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from iomatrix import domain
from iomatrix.domain import CACHE, NA, NULL_BACKING, Aio, Bus, CacheMode, axes
from iomatrix.errors import UserError
from iomatrix.fio.parse import ENOSPC_HINT

# The null-co ceiling is a disk "format" of its own: no image, no backing.
NULL_FORMAT = "null"


@dataclass
class DiskSpec:
    """The disk under test. `target` is an image file or block device; None (format "null") is the
    null-co ceiling: no storage at all, reads return zeroes. `bus` matters to the guest tier only.

    Every QEMU tier builds it from its cell with :meth:`for_cell`; the builders below (and the guest's
    ``-device``, the block export, the image creation) take each axis's QEMU options from the axis registry."""

    target: str | None
    format: str = "qcow2"  # a domain.Format value, or NULL_FORMAT
    cache: CacheMode = CacheMode.NONE
    aio: Aio = Aio.THREADS
    bus: Bus = Bus.VIRTIO_BLK
    null_size_bytes: int = 1 << 30  # size of the null-co disk
    # The cell's values of the registry's later axes (those not named above), axis → value.
    more: Mapping[str, str] = field(default_factory=dict)
    # The image's virtual size, for options sized by it (l2_cache=whole-image); None where not known.
    image_size_bytes: int | None = None

    @classmethod
    def for_cell(cls, cell: Mapping[str, str], target: str | Path | None, size_bytes: int | None = None) -> DiskSpec:
        """The disk of a cell on `target` (None for the null ceiling, which keeps only the bus: no format, host
        cache or backing, what is left is QEMU's block layer and the device or export). `size_bytes` is the
        disk's virtual size: the image's (created by the tier at that size), or the null-co disk's."""
        bus = Bus(cell["bus"]) if cell.get("bus", NA) != NA else Bus.VIRTIO_BLK
        if cell.get("backing") == NULL_BACKING:
            return cls(target=None, format=NULL_FORMAT, cache=CacheMode.WRITEBACK, aio=Aio.THREADS, bus=bus,
                       null_size_bytes=size_bytes or 1 << 30)
        more = {a: v for a, v in cell.items() if not axes.get(a).always_named and v != NA}
        return cls(target=None if target is None else str(target), format=cell["format"],
                   cache=CacheMode(cell["cache"]), aio=Aio(cell["aio"]), bus=bus, more=more,
                   image_size_bytes=size_bytes)

    def axis_values(self) -> dict[str, str]:
        """The disk's values of every axis that sets something on QEMU's disk."""
        if self.format == NULL_FORMAT:
            return {}
        return {"format": self.format, "cache": str(self.cache), "aio": str(self.aio), "bus": str(self.bus),
                **self.more}

    def qemu_options(self) -> axes.QemuOptions:
        return axes.qemu_options(self.axis_values(), axes.DiskContext(self.image_size_bytes))


def _opts(pairs: axes.Options, prefix: str = "") -> str:
    return "".join(f",{prefix}{k}={qemu_opt(v)}" for k, v in pairs)


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
    """The ``-blockdev`` value: format node over a file/host_device node (inline child), each with the options
    the cell's axes set there (iomatrix.domain.axes: cache.direct and cache.no-flush on both nodes, as
    ``-drive cache=`` does, aio on the file node, …); the write-cache half of the cache mode is not a node
    option (see :func:`write_cache`).
    """
    validate_disk(disk)
    if disk.format == NULL_FORMAT:
        no_flush = CACHE[CacheMode(disk.cache)].no_flush
        return (f"driver=null-co,node-name={node},read-zeroes=on,size={disk.null_size_bytes},"
                f"cache.no-flush={onoff(no_flush)}")
    assert disk.target is not None
    proto = "host_device" if is_block_device(Path(disk.target)) else "file"
    o = disk.qemu_options()
    return (f"driver={disk.format},node-name={node}{_opts(o.format_node)},file.driver={proto},"
            f"file.filename={qemu_opt(disk.target)}{_opts(o.file_protocol + o.file_node, 'file.')}")


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
    o = disk.qemu_options()
    return (f"driver={disk.format},node-name={node}{_opts(o.format_node)},"
            f"file.driver=nbd,file.server.type=unix,file.server.path={qemu_opt(socket)}{_opts(o.file_node, 'file.')}")


def device_option_pairs(disk: DiskSpec) -> axes.Options:
    """(key, value) pairs the cell's axes set on the guest's ``-device`` (write-cache from the cache mode, …);
    object references (iothread=) still carry the disk-local ids of ``QemuOptions.objects``."""
    if disk.format == NULL_FORMAT:  # the ceiling keeps QEMU's default device write cache of writeback
        return (("write-cache", onoff(write_cache(disk.cache))),)
    return disk.qemu_options().device


def device_options(disk: DiskSpec) -> str:
    """',key=value…' the cell's axes set on the guest's ``-device`` (write-cache from the cache mode, …)."""
    return _opts(device_option_pairs(disk))


def object_specs(disk: DiskSpec, suffix: str = "") -> list[str]:
    """``-object`` values of the QOM objects the cell's axes refer to (an IOThread: ``iothread,id=iothread``);
    `suffix` scopes their ids to one disk of several (the references must use the same suffix)."""
    if disk.format == NULL_FORMAT:
        return []
    return [f"{qom_type},id={oid}{suffix}" for qom_type, oid in disk.qemu_options().objects]


def export_options(disk: DiskSpec) -> str:
    """',key=value…' the cell's axes set on the block-layer tier's ``--export`` (writethrough from the cache
    mode, …)."""
    if disk.format == NULL_FORMAT:
        return f",writethrough={onoff(not write_cache(disk.cache))}"
    return _opts(disk.qemu_options().export)
