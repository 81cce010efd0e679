"""The QEMU disk builder: the disk under test as QEMU options, shared by every tier that runs QEMU
and by the snippets a user pastes.

One module builds all of it from the axis registry's QEMU options
(`iomatrix.domain.axes.qemu_options`): the format and protocol nodes (``-blockdev``, also over an
NBD client node for the durability tier), the block export's options (qemu-storage-daemon
``--export``), the guest's ``-device`` on its bus with the bus's controller, and the IOThreads they
refer to (``-object``). The guest tier passes the graph to ``qemu-system-x86_64 -blockdev``; the
block-layer tier passes the very same string to ``qemu-storage-daemon --blockdev``; the snippets
print the guest's arguments as the user's VM would take them. So a cell means the same QEMU
configuration everywhere.

A cache mode is three switches (see :mod:`iomatrix.domain`). Two of them, ``cache.direct`` and
``cache.no-flush``, are node options and live here. The third, the write cache, belongs to whoever
sits on top of the graph and issues requests (the BlockBackend): a guest device (``-device
…,write-cache=``) or a block export (``--export …,writethrough=``); both end in QEMU's
``blk_set_enable_write_cache()``."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from iomatrix import domain
from iomatrix.domain import (
    BUS,
    CACHE,
    NA,
    NULL_BACKING,
    SCSI_CONTROLLER_BUSES,
    Aio,
    Bus,
    CacheMode,
    axes,
)
from iomatrix.errors import UserError
from iomatrix.fio.parse import ENOSPC_HINT

if TYPE_CHECKING:
    # Not imported to run: the backing package's import pulls in the guest code, which imports this
    # module. A target is a local path (a str) or a network disk (anything else that is not None).
    from iomatrix.backing.network import NetworkDisk

# The serial of the guest's disk under test, which the guest's init finds it by (guest/init.sh
# IOMX_DISK_SERIAL).
DISK_SERIAL = "iomx-test"
# The null-co ceiling is a disk "format" of its own: no image, no backing.
NULL_FORMAT = "null"


class DiskSpec:
    """The disk under test: a view over one axis → value mapping (`values`, the cell's values of the
    axes that set something on QEMU's disk), with what the cell does not hold: the `target` (an
    image file or block device; None with format "null", the null-co ceiling: no storage at all,
    reads return zeroes) and sizes.

    Every QEMU tier builds it from its cell with :meth:`for_cell`; the builders below take each
    axis's QEMU options from the axis registry. The keyword form (``format=``, ``cache=``, ``aio=``,
    ``bus=``, ``more=``) fills the same mapping."""

    def __init__(
        self,
        target: str | NetworkDisk | None,
        format: str = "qcow2",
        cache: str = CacheMode.NONE,
        aio: str = Aio.THREADS,
        bus: str = Bus.VIRTIO_BLK,
        null_size_bytes: int = 1 << 30,
        more: Mapping[str, str] | None = None,
        image_size_bytes: int | None = None,
        *,
        values: Mapping[str, str] | None = None,
    ) -> None:
        self.target = target
        if values is None:
            values = {
                "format": str(format),
                "cache": str(cache),
                "aio": str(aio),
                "bus": str(bus),
                **(more or {}),
            }
        self.values: dict[str, str] = dict(values)
        self.null_size_bytes = null_size_bytes  # size of the null-co disk
        # The image's virtual size, for options sized by it (l2_cache=whole-image); None where not
        # known.
        self.image_size_bytes = image_size_bytes

    def __repr__(self) -> str:
        return f"DiskSpec({self.target!r}, values={self.values!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiskSpec) and (
            self.target,
            self.values,
            self.null_size_bytes,
            self.image_size_bytes,
        ) == (other.target, other.values, other.null_size_bytes, other.image_size_bytes)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaces

    @property
    def format(self) -> str:
        """A domain.Format value, or NULL_FORMAT."""
        return self.values["format"]

    @property
    def cache(self) -> str:
        return self.values["cache"]

    @property
    def aio(self) -> str:
        return self.values["aio"]

    @property
    def bus(self) -> str:
        return self.values.get("bus", Bus.VIRTIO_BLK.value)

    @property
    def more(self) -> dict[str, str]:
        """The values of the registry's later axes (those a cell names only away from their
        default)."""
        return {a: v for a, v in self.values.items() if not axes.get(a).always_named}

    @classmethod
    def for_cell(
        cls,
        cell: Mapping[str, str],
        target: str | Path | NetworkDisk | None,
        size_bytes: int | None = None,
    ) -> DiskSpec:
        """The disk of a cell on `target` (None for the null ceiling, which keeps only the bus: no
        format, host cache or backing, what is left is QEMU's block layer and the device or export).
        `size_bytes` is the disk's virtual size: the image's (created by the tier at that size), or
        the null-co disk's."""
        bus = cell["bus"] if cell.get("bus", NA) != NA else Bus.VIRTIO_BLK.value
        if cell.get("backing") == NULL_BACKING:
            return cls(
                target=None,
                format=NULL_FORMAT,
                cache=CacheMode.WRITEBACK,
                aio=Aio.THREADS,
                bus=bus,
                null_size_bytes=size_bytes or 1 << 30,
            )
        values = {
            "format": cell["format"],
            "cache": cell["cache"],
            "aio": cell["aio"],
            "bus": bus,
            **{a: v for a, v in cell.items() if not axes.get(a).always_named and v != NA},
        }
        where = str(target) if isinstance(target, (str, Path)) else target
        return cls(target=where, values=values, image_size_bytes=size_bytes)

    def axis_values(self) -> dict[str, str]:
        """The disk's values of every axis that sets something on QEMU's disk."""
        if self.format == NULL_FORMAT:
            return {}
        return dict(self.values)

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
            raise UserError(
                f"unknown {enum.__name__} '{value}'", hint=f"use {domain.choices(enum)}"
            )
    if disk.format != NULL_FORMAT and disk.format not in {f.value for f in domain.Format}:
        raise UserError(
            f"unknown disk format '{disk.format}'",
            hint=f"use {domain.choices(domain.Format)} (or {NULL_FORMAT} for the ceiling)",
        )
    if (disk.format == NULL_FORMAT) != (disk.target is None):
        raise UserError(
            "the null ceiling has no target and every other format needs one",
            hint="use format='null' with target=None, or give an image path",
        )
    reason = None if disk.format == NULL_FORMAT else domain.aio_rule(disk.cache, disk.aio)
    if reason:
        raise UserError(
            reason,
            hint="use cache=none or cache=directsync with aio=native, or aio=threads/io_uring",
        )


def blockdev_spec(disk: DiskSpec, node: str = "d0") -> str:
    """The ``-blockdev`` value: format node over a file/host_device node (inline child), each with
    the options the cell's axes set there (iomatrix.domain.axes: cache.direct and cache.no-flush on
    both nodes, as ``-drive cache=`` does, aio on the file node, …); the write-cache half of the
    cache mode is not a node option (see :func:`write_cache`)."""
    validate_disk(disk)
    if disk.format == NULL_FORMAT:
        no_flush = CACHE[CacheMode(disk.cache)].no_flush
        return (
            f"driver=null-co,node-name={node},read-zeroes=on,size={disk.null_size_bytes},"
            f"cache.no-flush={onoff(no_flush)}"
        )
    assert disk.target is not None
    if not isinstance(disk.target, str):
        return network_blockdev_spec(disk, disk.target, node)
    proto = "host_device" if is_block_device(Path(disk.target)) else "file"
    o = disk.qemu_options()
    return (
        f"driver={disk.format},node-name={node}{_opts(o.format_node)},file.driver={proto},"
        f"file.filename={qemu_opt(disk.target)}{_opts(o.file_protocol + o.file_node, 'file.')}"
    )


def network_blockdev_spec(disk: DiskSpec, target: NetworkDisk, node: str = "d0") -> str:
    """The cell's format node over QEMU's protocol node for a disk served over the network
    (``file.driver=iscsi`` or ``nfs``, from :attr:`NetworkDisk.protocol_options`), with the cell's
    cache switches on both nodes, as over a file. What does not carry over, as over NBD: the options
    only the file protocol takes (``aio``: libiscsi and libnfs do their own asynchronous I/O on
    QEMU's event loop; the axes prune aio ≠ default on a network backing with that reason).
    ``cache.direct`` asks the initiator not to cache (both drivers honour it by sending every
    request to the server); the server's own cache is the LUN's write cache axis."""
    o = disk.qemu_options()
    return (
        f"driver={disk.format},node-name={node}{_opts(o.format_node)}"
        f"{_opts(target.protocol_options, 'file.')}{_opts(o.file_node, 'file.')}"
    )


# Less room than this left on the host filesystem holding an image after a failed run: it ran full.
FULL_BELOW_BYTES = 1 << 20


def out_of_space(target: str | Path | NetworkDisk | None) -> str | None:
    """Why a run on the image `target` failed, when the host filesystem holding it is full (else
    None).

    A guest never sees ENOSPC itself: QEMU fails its request with a plain I/O error (the guest tier
    sets werror=report, see `guest.qemu.device_args`; QEMU's default would pause the VM). Call this
    after a failed run and before the image is removed (removing it frees the room again). A block
    device is never "full"; root may fill a filesystem's reserved blocks too, so root is judged by
    them."""
    if not isinstance(target, (str, Path)) or is_block_device(Path(target)):
        return None  # a network disk fills the server's filesystem, which the server's error names
    try:
        st = os.statvfs(Path(target).parent)
    except OSError:
        return None
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    if free >= FULL_BELOW_BYTES:
        return None
    return (
        f"{ENOSPC_HINT} (the host filesystem holding {target} has {free} bytes free; "
        "QEMU failed the "
        "guest's writes to it)"
    )


def blockdev_args(disk: DiskSpec, node: str = "d0") -> list[str]:
    """``-blockdev SPEC`` for qemu-system (qemu-storage-daemon spells the option ``--blockdev``)."""
    return ["-blockdev", blockdev_spec(disk, node)]


def write_cache(cache: CacheMode | str) -> bool:
    """Whether the BlockBackend on top of the graph has a volatile write cache (off: QEMU makes
    every write durable before completing it, by a flush after it)."""
    return CACHE[CacheMode(cache)].write_cache


def blockdev_spec_over_nbd(disk: DiskSpec, socket: str | Path, node: str = "d0") -> str:
    """The cell's format node, with its cache switches, over an NBD client node instead of the file
    node.

    The durability tier serves the image through nbdkit (a simulated volatile disk cache) and puts
    QEMU's graph on top of it, so everything above the protocol node is the cell's: format driver,
    cache.direct and cache.no-flush on both nodes (no-flush drops flushes in QEMU's generic block
    layer, whatever the protocol), and the device's write-cache. What does not carry over: ``aio``
    is an option of the file protocol only, and O_DIRECT means nothing to a socket (the simulated
    cache below stands for both the host page cache and the disk's own cache)."""
    validate_disk(disk)
    if disk.format == NULL_FORMAT:
        raise UserError(
            "the null ceiling has no image to serve over NBD", hint="use an image format"
        )
    o = disk.qemu_options()
    return (
        f"driver={disk.format},node-name={node}{_opts(o.format_node)},"
        f"file.driver=nbd,file.server.type=unix,file.server.path={qemu_opt(socket)}"
        f"{_opts(o.file_node, 'file.')}"
    )


def device_option_pairs(disk: DiskSpec) -> axes.Options:
    """(key, value) pairs the cell's axes set on the guest's ``-device`` (write-cache from the cache
    mode, …); object references (iothread=) still carry the disk-local ids of
    ``QemuOptions.objects``."""
    # the ceiling keeps QEMU's default device write cache of writeback
    if disk.format == NULL_FORMAT:
        return (("write-cache", onoff(write_cache(disk.cache))),)
    return disk.qemu_options().device


def device_options(disk: DiskSpec) -> str:
    """',key=value…' the cell's axes set on the guest's ``-device`` (write-cache from the cache
    mode, …)."""
    return _opts(device_option_pairs(disk))


def object_specs(disk: DiskSpec, suffix: str = "") -> list[str]:
    """``-object`` values of the QOM objects the cell's axes refer to (an IOThread:
    ``iothread,id=iothread``); `suffix` scopes their ids to one disk of several (the references must
    use the same suffix)."""
    if disk.format == NULL_FORMAT:
        return []
    return [f"{qom_type},id={oid}{suffix}" for qom_type, oid in disk.qemu_options().objects]


def export_options(disk: DiskSpec) -> str:
    """',key=value…' the cell's axes set on the block-layer tier's ``--export`` (writethrough from
    the cache mode, …)."""
    if disk.format == NULL_FORMAT:
        return f",writethrough={onoff(not write_cache(disk.cache))}"
    return _opts(disk.qemu_options().export)


def guest_cpus(disks: Iterable[DiskSpec]) -> int:
    """The guest's vCPUs: one per virtqueue of the disk with the most (the `queues` axis: blk-mq
    maps a queue to a CPU, so queues beyond the vCPUs go unused), else one."""
    queues = [int(q) for d in disks if (q := d.values.get("queues", "")).isdigit()]
    return max([1, *queues])


# --------------------------------------------------------------------------- disk devices


def _device_name(bus: Bus, machine: str) -> str:
    name = BUS[bus].qemu_device
    if machine == "microvm" and name.endswith("-pci"):
        # virtio-blk-device, virtio-scsi-device: the MMIO transport
        return name[: -len("-pci")] + "-device"
    return name


# Integer properties, for the JSON syntax of -device (its values are typed; key=value's are
# strings).
_JSON_INTS = frozenset({"num-queues", "num_queues", "unit"})

Props = list[tuple[str, object]]


def _scsi_controller_name(machine: str) -> str:
    return "virtio-scsi-device" if machine == "microvm" else "virtio-scsi-pci"


def _device_arg(driver: str, props: Props) -> str:
    """One -device value: key=value syntax, or JSON where a value is a list (iothread-vq-mapping),
    which only QEMU's JSON syntax can express."""
    if any(not isinstance(v, str) for _, v in props):
        return json.dumps(
            {
                "driver": driver,
                **{k: int(v) if k in _JSON_INTS and isinstance(v, str) else v for k, v in props},
            },
            separators=(",", ":"),
        )
    return driver + "".join(f",{k}={qemu_opt(str(v))}" for k, v in props)


def _frontend(disk: DiskSpec, scope: str, on_controller: bool) -> tuple[list[str], Props, Props]:
    """(-object args, -device options, controller options) the disk's axes set, their object ids
    scoped by `scope` (a disk's node, or its shared controller's id). `on_controller`: the bus is
    virtio-scsi, whose IOThread and virtqueues are the controller's. An iothread-vq-mapping gets one
    IOThread per virtqueue."""
    pairs = list(device_option_pairs(disk))
    objects = () if disk.format == NULL_FORMAT else disk.qemu_options().objects
    mapped = {v for k, v in pairs if k == "iothread-vq-mapping"}
    per_queue = guest_cpus([disk])
    args: list[str] = []
    scoped: dict[str, object] = {}
    for qom_type, oid in objects:
        ids = (
            [f"{oid}{i}-{scope}" for i in range(per_queue)] if oid in mapped else [f"{oid}-{scope}"]
        )
        for one in ids:
            args += ["-object", f"{qom_type},id={one}"]
        scoped[oid] = [{"iothread": one} for one in ids] if oid in mapped else ids[0]
    device: Props = []
    controller: Props = []
    # An option whose value is one of the disk's object ids refers to that object
    # (iothread=iothread).
    refs = {k for k, v in pairs if v in scoped}
    to_controller = axes.controller_keys() if on_controller else {}
    for k, v in pairs:
        value = scoped[v] if k in refs else v
        if k in to_controller:
            controller.append((to_controller[k], value))
        else:
            device.append((k, value))
    return args, device, controller


def controller_args(bus: Bus | str, machine: str = "pc", disk: DiskSpec | None = None) -> list[str]:
    """The controller the bus's disks share (none for virtio-blk, NVMe, the pc's built-in IDE and
    virtio-scsi-single, whose controllers are per disk: `disk_device_args`), with the IOThread and
    virtqueues `disk`'s axes give it (the disks of one boot share a cell)."""
    bus = Bus(bus)
    if bus == Bus.VIRTIO_SCSI:
        objects, ctrl = [], []
        if disk is not None:
            objects, _, ctrl = _frontend(disk, "scsi0", on_controller=True)
        return [
            *objects,
            "-device",
            _device_arg(_scsi_controller_name(machine), [("id", "scsi0"), *ctrl]),
        ]
    if bus == Bus.SATA:
        return ["-device", "ahci,id=ahci0"]
    return []


def disk_device_args(
    disk: DiskSpec,
    node: str,
    serial: str,
    index: int = 0,
    machine: str = "pc",
    report_errors: bool = True,
) -> list[str]:
    """`-device` for the `index`-th (0-based) disk on the disk's bus, after `controller_args` (with,
    for virtio-scsi-single, the disk's own controller, and the IOThreads the disk's device refers
    to)."""
    bus = Bus(disk.bus)
    objects, device, ctrl = _frontend(disk, node, on_controller=bus in SCSI_CONTROLLER_BUSES)
    own: list[str] = []
    on_bus: Props = {
        Bus.VIRTIO_SCSI: [("bus", "scsi0.0")],
        Bus.VIRTIO_SCSI_SINGLE: [("bus", f"scsi-{node}.0")],
        Bus.IDE: [("bus", f"ide.{index // 2}"), ("unit", str(index % 2))],
        Bus.SATA: [("bus", f"ahci0.{index}")],
    }.get(bus, [])
    if bus == Bus.VIRTIO_SCSI:
        objects = []  # the shared controller's IOThreads come with it (controller_args)
    elif bus == Bus.VIRTIO_SCSI_SINGLE:
        own = [
            "-device",
            _device_arg(_scsi_controller_name(machine), [("id", f"scsi-{node}"), *ctrl]),
        ]
    policy: Props = (
        [("werror", "report"), ("rerror", "report")]
        if report_errors and BUS[bus].error_policy
        else []
    )
    props: Props = [("drive", node), *on_bus, ("serial", serial), *device, *policy]
    return [*objects, *own, "-device", _device_arg(_device_name(bus, machine), props)]


def device_args(
    disk: DiskSpec,
    node: str = "d0",
    serial: str = DISK_SERIAL,
    report_errors: bool = True,
    machine: str = "pc",
) -> list[str]:
    """`-device` options attaching `node` on the disk's bus, with write-cache from the cache mode.

    `report_errors`: werror=report,rerror=report, so an I/O error (ENOSPC on the host) fails the
    guest's request instead of pausing the VM (QEMU's default werror=enospc), which would leave the
    run to time out with no reason given."""
    return [
        *controller_args(disk.bus, machine, disk),
        *disk_device_args(disk, node, serial, 0, machine, report_errors),
    ]


def disk_args(
    disk: DiskSpec,
    node: str = "d0",
    serial: str = DISK_SERIAL,
    index: int = 0,
    machine: str = "pc",
    controller: bool = True,
) -> list[str]:
    """One disk under test on the command line: its `-blockdev` graph, then its `-device` on the
    bus.

    `controller`: the bus's controller goes between the two (a one-disk boot). A multi-disk boot
    puts the controller up front once (`controller_args`) and passes each disk's 0-based `index` on
    the bus instead."""
    device = (
        device_args(disk, node, serial, machine=machine)
        if controller
        else disk_device_args(disk, node, serial, index, machine)
    )
    return [*blockdev_args(disk, node), *device]
