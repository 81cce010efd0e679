"""The axis registry: every axis of the disk-configuration matrix as one entry of data.

An axis is what a plan lists values of (``cache = ["none", "writeback"]``) and what a cell holds one value of.
Each :class:`Axis` entry holds everything the rest of iomatrix needs to know about it:

* its **values**, the value QEMU/libvirt use when it is not given (its **default**: a cell recorded before the
  axis existed reads that value), and what a plan gets when it does not name the axis (**plan_default**);
* the **layers** of the I/O stack it acts on, which decide the tiers it applies to (a tier declares the layers
  it runs; on other tiers the axis collapses to ``-`` instead of multiplying the matrix);
* its **rules**: why a combination cannot run (pruned with the reason);
* its **spellings**: the options it sets on QEMU's disk (image creation, format and protocol nodes, guest
  device, block export) and how libvirt, Proxmox, virt-install and Nova write it;
* its order for the "simpler configuration" tie-break, and its documented risk where it has one.

Plan validation, matrix expansion and pruning, ``plan --explain``, the store, results columns and CSV,
snippets, ``--current`` parsing, the decision tie-break and rank's axis matching all iterate this registry;
nothing else lists axes. Adding an axis is adding one :class:`Axis` to :data:`REGISTRY` (docs/design.md,
"Adding an axis").
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from iomatrix import domain
from iomatrix.domain import NA, SafetyLevel, ceph, clients, rtt
from iomatrix.errors import UserError
from iomatrix.plugins import PluginError, load_entry_points
from iomatrix.protocols import iscsi, nfs


def onoff(flag: bool) -> str:
    return "on" if flag else "off"


class Layer(StrEnum):
    """Where in the I/O stack an axis acts. A tier runs some layers; an axis applies where they meet."""

    SWEEP = "sweep"  # every tier: which tier measures, and on what backing
    PROCESS = "process"  # the host process doing the I/O (fio, qemu-storage-daemon, QEMU): a wrapper around it
    HOST_IO = "host-io"  # how that process opens and issues I/O on the host (O_DIRECT, flushes, aio engine)
    IMAGE = "image"  # QEMU's block graph: the disk image and its nodes
    DEVICE = "device"  # the guest's virtual disk device and its bus
    # What issues requests into QEMU's block graph: a guest device, or a block export (qemu-storage-daemon).
    FRONTEND = "frontend"


@dataclass(frozen=True)
class BackingFacts:
    """What the matrix needs to know of a backing on this host."""

    unavailable: str | None  # reason it cannot run here, or None
    o_direct: bool
    is_device: bool
    # The network protocol the backing serves its disks over (iomatrix.protocols); None for a local backing.
    protocol: str | None = None
    # Why this host's kernel client for `protocol` (open-iscsi with iscsi_tcp; the kernel NFS client) cannot be
    # used, probed by iomatrix.storage_clients; None where it can, or where nobody probed (then no rule prunes).
    kernel_client_missing: str | None = None
    # Whether iomatrix started the network backing's server itself (then it sees the file holding a disk's bytes,
    # where the server-side baseline runs); False for a server the user named; None for a local backing.
    lab_started: bool | None = None
    # How many hosts the backing's clients run on (`[[backing.client_host]]`); 0: the clients run on this host.
    client_hosts: int = 0


@dataclass(frozen=True)
class QemuFacts:
    """What the installed QEMU offers (probed by ``iomatrix.qemu_caps``): the versions of qemu-system-x86_64
    and qemu-storage-daemon, and the properties of the devices rules ask about (``-device NAME,help``)."""

    system_version: tuple[int, ...] | None = None
    daemon_version: tuple[int, ...] | None = None
    device_properties: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def has_property(self, device: str, prop: str) -> bool | None:
        """Whether `device` has `prop`; None when the device was not probed."""
        props = self.device_properties.get(device)
        return None if props is None else prop in props


def version_text(version: tuple[int, ...] | None) -> str:
    return "an unknown version" if version is None else ".".join(map(str, version))


@dataclass(frozen=True)
class RuleContext:
    """What a rule may know beyond the cell's values: the facts of the cell's backing on this host, of the
    installed QEMU, and the host's CPU count (None where the sweep has not probed them, e.g. snippets: a rule
    that needs a fact it does not have does not apply)."""

    backing: BackingFacts | None = None
    backing_label: str = ""
    qemu: QemuFacts | None = None
    host_cpus: int | None = None


@dataclass(frozen=True)
class Rule:
    """Why a combination cannot run. `reads` are the axes the check needs: where one of them does not apply to
    the cell's tier ("-"), the rule does not apply either."""

    reads: tuple[str, ...]
    check: Callable[[Mapping[str, str], RuleContext], str | None]

    def reason(self, values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if any(values.get(a, NA) == NA for a in self.reads):
            return None
        return self.check(values, ctx)


Options = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class QemuOptions:
    """What one axis value sets on QEMU's disk, by where it goes. The builders in ``qemu_block`` (the
    ``-blockdev`` graph and the block export), the same module's guest ``-device`` and
    ``iomatrix.images`` (``qemu-img create -o``) merge these over every axis of a cell."""

    create: Options = ()  # qemu-img create -o KEY=VALUE
    format_node: Options = ()  # options of the format node (driver=qcow2,…)
    file_node: Options = ()  # options of the protocol node below it, whatever the protocol (file, nbd)
    file_protocol: Options = ()  # options only the file/host_device protocol takes (not an NBD client node)
    device: Options = ()  # -device properties of the guest's disk
    export: Options = ()  # qemu-storage-daemon --export properties (the block-layer tier's NBD export)
    # QOM objects the device or export refers to by id, as (qom-type, id) pairs (-object iothread,id=…). The
    # ids are local to one disk: the builders scope them per disk (qemu_block) and rewrite the references.
    objects: Options = ()


@dataclass(frozen=True)
class DiskContext:
    """What an axis's QEMU options may need beyond the cell's values: the disk image's virtual size (None where
    it is not known, e.g. a snippet for the user's own image). See :attr:`Axis.qemu_cell`."""

    image_size_bytes: int | None = None


@dataclass(frozen=True)
class WorkloadShape:
    """What a workload does to the disk, as far as an axis's effect can show in it (``Workload.shape``): zero
    detection shows only with zero-filled writes, a discard policy only with trims. `known` is False where
    iomatrix cannot tell (a custom fio job file, a guest filesystem job that runs mkfs): every axis may show."""

    name: str
    known: bool = True
    writes: bool = False
    zero_writes: bool = False  # writes of zero-filled blocks
    trims: bool = False


@dataclass(frozen=True)
class ToolOption:
    """How one tool (libvirt, proxmox, virt-install, nova) writes one axis value.

    `options` are KEY=VALUE pairs of the tool's disk statement (libvirt: attributes of ``<driver>``, and
    ``bus`` of ``<target>``; Proxmox: the drive property string, ``disk-key`` the drive's key prefix
    (``virtio0``) and ``preallocation`` a property of the storage (``pvesm set``); virt-install: ``--disk``
    keys; Nova: ``nova.conf [libvirt]`` lines, and ``hw_*`` image properties); None in `unavailable` means
    the tool can express the value, a sentence means it cannot (and why). `note` is appended to the snippet's
    note: what the tool does instead, or leaves to the user."""

    options: Options = ()
    unavailable: str | None = None
    note: str = ""


def _no_risk(value: str) -> SafetyLevel | None:
    return None


@dataclass(frozen=True)
class Axis:
    """One axis of the matrix (see the module docstring)."""

    name: str
    summary: str  # one line: what the axis chooses
    values: tuple[str, ...]  # every valid value ("" for an axis whose values come from elsewhere: free_values)
    default: str  # what QEMU/libvirt use when the option is not given; old cells read this value
    plan_default: tuple[str, ...]  # a plan that does not name the axis
    layers: frozenset[Layer]
    # The axes of the first release are always named in a cell's key and label; later ones only when a cell
    # sets them away from their default, so adding an axis changes no stored key and no printed label.
    always_named: bool = False
    # tier and backing: values come from the tier registry and the plan's [[backing]] tables, not from here.
    free_values: bool = False
    rules: tuple[Rule, ...] = ()
    simpler: tuple[str, ...] = ()  # simplest first, for the "simplicity" tie-break (the default is simplest)
    qemu: Callable[[str], QemuOptions] | None = None
    # Options that depend on more than the axis's own value (other axes of the cell, the image's size): the
    # L2 cache that covers the whole image needs the image size, the cluster size and the L2 entry width.
    qemu_cell: Callable[[Mapping[str, str], DiskContext], QemuOptions] | None = None
    tools: Mapping[str, Callable[[str], ToolOption]] = field(default_factory=dict)
    risk: Callable[[str], SafetyLevel | None] = _no_risk  # documented power-loss risk of a value alone
    # A note for the sweep (shown by `plan --explain` and stored) when some cell has a value that needs one.
    cell_note: Callable[[Mapping[str, str]], str | None] | None = None
    # Why a workload cannot show this axis's value in a cell (None: it can), for the image-layer axes whose effect
    # needs a kind of I/O (zero detection: zero-filled writes); the matrix then runs that workload with the axis
    # at one value only. Arguments: the cell's values, the workload's shape, the image's virtual size in bytes.
    shown_by: Callable[[Mapping[str, str], WorkloadShape, int], str | None] | None = None
    short: str = ""  # a shorter column heading ("prealloc")
    # Device options of this axis that belong to the bus's controller where the bus has one per disk or shared
    # (virtio-scsi: its virtqueues and IOThread serve the disks on it), -device key → the controller's name for
    # it. The QEMU disk builder moves them there; libvirt and virt-install write the axis on the <controller>.
    on_controller: Mapping[str, str] = field(default_factory=dict)
    # An axis whose values are free-form (rtt = "0.5ms"): why a value outside `values` is not valid, None where it
    # is; `values` then lists examples (what error messages and --current read-back offer).
    check_value: Callable[[str], str | None] | None = None

    @property
    def heading(self) -> str:
        """The axis's column heading in terminal tables (short where the name is long)."""
        return self.short or self.name

    def invalid(self, value: object) -> str | None:
        """Why `value` is not a value of this axis (one line), or None: a listed value, or for an axis with free-form
        values (rtt) one its `check_value` accepts."""
        if value in self.values:
            return None
        if self.check_value is not None and isinstance(value, str):
            return self.check_value(value)
        return f"'{value}' is not valid; valid values: {self.choices()}{domain.did_you_mean(value, self.values)}"

    def applies_to(self, layers: frozenset[Layer]) -> bool:
        return self.name in ("tier", "backing") or bool(self.layers & layers)

    def choices(self) -> str:
        """'a, b or c': the valid values, for error messages."""
        vals = list(self.values)
        return ", ".join(vals[:-1]) + f" or {vals[-1]}" if len(vals) > 1 else vals[0]


# --------------------------------------------------------------------------- the axes of the 2013 matrix


def _cache_qemu(value: str) -> QemuOptions:
    sem = domain.CACHE[domain.CacheMode(value)]
    direct, no_flush = onoff(sem.direct), onoff(sem.no_flush)
    # cache.direct and cache.no-flush go on both nodes (what -drive cache= does); the write cache belongs to
    # whoever issues requests: the guest device (write-cache=) or the block export (writethrough=).
    return QemuOptions(format_node=(("cache.direct", direct), ("cache.no-flush", no_flush)),
                       file_node=(("cache.direct", direct), ("cache.no-flush", no_flush)),
                       device=(("write-cache", onoff(sem.write_cache)),),
                       export=(("writethrough", onoff(not sem.write_cache)),))


def _same_name(key: str) -> Callable[[str], ToolOption]:
    """Cache-mode and aio names are identical in QEMU, libvirt, virt-install and Proxmox."""
    return lambda value: ToolOption(((key, value),))


def _format_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    on_device = ctx.backing is not None and ctx.backing.is_device
    return domain.preallocation_rule(values["format"], values["preallocation"], on_block_device=on_device)


def _o_direct(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if ctx.backing is None:
        return None
    return domain.o_direct_rule(values["cache"], ctx.backing.o_direct, ctx.backing_label)


def _eatmydata_note(values: Mapping[str, str]) -> str | None:
    if values.get("modifier") == domain.Modifier.EATMYDATA and values.get("aio") == domain.Aio.IO_URING:
        return ("eatmydata does not intercept flushes sent through io_uring: cells with aio=io_uring still flush "
                "under eatmydata")
    return None


def _network_aio_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    """QEMU's aio= is an option of its file/host_device protocol: a disk QEMU opens with its own iSCSI or NFS
    client (driver=iscsi, driver=nfs) has none; through the kernel's client it is a file or device again."""
    protocol = ctx.backing.protocol if ctx.backing is not None else None
    if protocol is None or values["aio"] == domain.Aio.THREADS:
        return None
    client = values.get(NETWORK_CLIENT_AXIS.get(protocol, ""), NA)
    if client in KERNEL_CLIENT_VALUES:
        return None
    return (f"aio={values['aio']} is an option of QEMU's file protocol; QEMU's {protocol} driver on backing "
            f"{ctx.backing_label} issues its own network I/O (aio applies only through the kernel's client)")


def _nova_format(value: str) -> ToolOption:
    images_type = domain.NOVA_IMAGES_TYPE[domain.Format(value)]
    if images_type is None:
        return ToolOption(unavailable=f"Nova's images_type cannot be {value}")
    return ToolOption((("images_type", images_type),))


def _bus_tool(tool: str) -> Callable[[str], ToolOption]:
    def spell(value: str) -> ToolOption:
        bus = domain.Bus(value)
        if tool in ("libvirt", "virt-install"):
            if bus in domain.LIBVIRT_BUS_UNAVAILABLE:
                return ToolOption(unavailable=domain.LIBVIRT_BUS_UNAVAILABLE[bus])
            return ToolOption((("bus", domain.BUS[bus].libvirt),))
        if tool == "proxmox":
            prefix = domain.BUS[bus].proxmox
            if prefix is None:
                return ToolOption(unavailable=f"Proxmox VE has no {value} disk bus (qm.conf offers ide, sata, scsi "
                                              "and virtio); the nearest is virtio (virtio-blk)")
            return ToolOption((("disk-key", prefix),))
        if bus in domain.NOVA_BUS_UNAVAILABLE:
            return ToolOption(unavailable=domain.NOVA_BUS_UNAVAILABLE[bus])
        # Nova's scsi bus is an LSI controller unless the image asks for virtio-scsi.
        scsi_model = (("hw_scsi_model", "virtio-scsi"),) if bus == domain.Bus.VIRTIO_SCSI else ()
        return ToolOption((("hw_disk_bus", domain.NOVA_DISK_BUS[bus]), *scsi_model))
    return spell


TIER = Axis("tier", "which measurement: bare metal, QEMU's block layer, a guest, …", (), "", (),
            frozenset({Layer.SWEEP}), always_named=True, free_values=True)
FORMAT = Axis(
    "format", "disk image format", tuple(domain.Format), domain.Format.RAW, (domain.Format.RAW,),
    frozenset({Layer.IMAGE}), always_named=True,
    simpler=(domain.Format.RAW, domain.Format.QCOW2),
    qemu=lambda v: QemuOptions(),  # the format node's driver itself (qemu_block.blockdev_spec)
    tools={"libvirt": lambda v: ToolOption((("type", v),)),
           "proxmox": lambda v: ToolOption((("format", domain.PROXMOX_FORMAT[domain.Format(v)]),)),
           "virt-install": lambda v: ToolOption((("format", v),)),
           "nova": _nova_format})
PREALLOCATION = Axis(
    "preallocation", "what qemu-img allocates when it creates the image", tuple(domain.Preallocation),
    domain.Preallocation.OFF, (domain.Preallocation.OFF,), frozenset({Layer.IMAGE}), always_named=True,
    short="prealloc",
    rules=(Rule(("format", "preallocation"), _format_rule),),
    simpler=tuple(domain.Preallocation),
    # (qemu-img create -o preallocation= is create_image's own argument: it depends on the format, qed has none)
    # Proxmox: a property of the directory/NFS storage (pvesm set), not of one disk; off is not set at all.
    tools={"nova": lambda v: ToolOption((("preallocate_images", "none" if v == "off" else "space"),)),
           "proxmox": lambda v: ToolOption() if v == "off" else ToolOption((("preallocation", v),))})
CACHE = Axis(
    "cache", "QEMU cache mode: O_DIRECT, the guest-visible write cache, and whether flushes reach the disk",
    tuple(domain.CacheMode), domain.CacheMode.WRITEBACK, (domain.CacheMode.NONE,),
    frozenset({Layer.HOST_IO, Layer.IMAGE}), always_named=True,
    rules=(Rule(("cache",), _o_direct),),
    qemu=_cache_qemu,
    tools={"libvirt": _same_name("cache"), "proxmox": _same_name("cache"), "virt-install": _same_name("cache"),
           "nova": _same_name("disk_cachemodes")},
    risk=lambda v: domain.CACHE[domain.CacheMode(v)].level)
AIO = Axis(
    "aio", "how QEMU issues I/O on the host: a thread pool, Linux AIO or io_uring", tuple(domain.Aio),
    domain.Aio.THREADS, (domain.Aio.THREADS,), frozenset({Layer.HOST_IO, Layer.IMAGE}), always_named=True,
    rules=(Rule(("cache", "aio"), lambda v, ctx: domain.aio_rule(v["cache"], v["aio"])),
           Rule(("aio",), lambda v, ctx: _network_aio_rule(v, ctx))),
    # threads needs nothing from the host, io_uring a recent kernel, native needs O_DIRECT.
    simpler=(domain.Aio.THREADS, domain.Aio.IO_URING, domain.Aio.NATIVE),
    qemu=lambda v: QemuOptions(file_protocol=(("aio", v),)),
    tools={"libvirt": _same_name("io"), "proxmox": _same_name("aio"), "virt-install": _same_name("io"),
           "nova": lambda v: ToolOption(note="Nova has no option for aio (libvirt io=); it chooses it itself")})
BUS = Axis(
    "bus", "the guest's disk bus (virtual device)", tuple(domain.Bus), domain.Bus.VIRTIO_BLK, (domain.Bus.VIRTIO_BLK,),
    frozenset({Layer.DEVICE}), always_named=True,
    rules=(Rule(("bus",), lambda v, ctx: domain.bus_rule(v["bus"])),),
    simpler=(domain.Bus.VIRTIO_BLK, domain.Bus.VIRTIO_SCSI, domain.Bus.VIRTIO_SCSI_SINGLE),
    qemu=lambda v: QemuOptions(),  # the -device driver and its controller (qemu_block.disk_device_args)
    tools={t: _bus_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")})
BACKING = Axis("backing", "what the image lives on: a directory, a filesystem on a loop device, a block device",
               (), "", (), frozenset({Layer.SWEEP}), always_named=True, free_values=True)
MODIFIER = Axis(
    "modifier", "a host-side wrapper around the process doing the I/O", tuple(domain.Modifier),
    domain.Modifier.NONE, (domain.Modifier.NONE,), frozenset({Layer.PROCESS}), always_named=True,
    rules=(Rule(("modifier", "cache"), lambda v, ctx: domain.modifier_rule(v["modifier"], v["cache"])),),
    simpler=(domain.Modifier.NONE,),
    risk=lambda v: SafetyLevel.UNSAFE if v == domain.Modifier.EATMYDATA else None,
    cell_note=_eatmydata_note)


# --------------------------------------------------------------------------- QEMU's image layer (issue 24)
# What QEMU implements below the guest, measured in the block-layer tier (and the same options in every tier
# that runs QEMU's block graph). A value at its default sets nothing: a cell at the default runs the very
# command line it ran before these axes existed. docs/axes.md has what each does and what was measured.

QCOW2 = domain.Format.QCOW2
# qemu-img create -o cluster_size= values, in bytes. QEMU allows powers of two from 512 B to 2 MiB
# (block/qcow2.h MIN_CLUSTER_BITS 9, MAX_CLUSTER_BITS 21); 64 KiB is its default (DEFAULT_CLUSTER_SIZE).
CLUSTER_BYTES: dict[str, int] = {"64k": 64 << 10, "128k": 128 << 10, "1M": 1 << 20, "2M": 2 << 20}
DEFAULT_CLUSTER_BYTES = CLUSTER_BYTES["64k"]
# Extended L2 entries split a cluster into 32 subclusters of at least 512 B: QEMU refuses smaller clusters
# (block/qcow2.c validate_cluster_size: "Extended L2 entries are only supported with cluster sizes of at least
# 16384 bytes"). Every CLUSTER_BYTES value satisfies it (tests/test_axes_image.py checks), so no rule is needed.
EXTENDED_L2_MIN_CLUSTER_BYTES = 16 << 10
# QEMU ≥ 3.1 on Linux: the L2 cache grows up to 32 MiB (block/qcow2.h DEFAULT_L2_CACHE_MAX_SIZE) and never
# beyond what the image's L2 tables need (block/qcow2.c read_cache_sizes), i.e. it already covers the whole image
# up to 32 MiB × cluster_size / 8 bytes (256 GiB at 64 KiB clusters; half that with extended L2 entries).
DEFAULT_L2_CACHE_MAX_BYTES = 32 << 20
# l2_cache=whole-image where the image's size is not known (a snippet): 1 GiB, which QEMU caps at what the image
# needs; it holds the whole mapping of images up to 8 TiB at 64 KiB clusters (4 TiB with extended L2 entries).
L2_CACHE_ANY_IMAGE_BYTES = 1 << 30
# QEMU's refusal of detect-zeroes=unmap without discard=unmap (block.c bdrv_parse_detect_zeroes; the message of
# QEMU 7.2's qemu-storage-daemon and qemu-system, verbatim).
QEMU_DETECT_ZEROES_UNMAP = "setting detect-zeroes to unmap is not allowed without setting discard operation to unmap"


def _qcow2_only(axis: str, default: str) -> Rule:
    """A qcow2 creation/open option: another format with a value other than the default is pruned."""
    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if values["format"] != QCOW2 and values[axis] != default:
            return f"{axis} applies to qcow2 images only"
        return None
    return Rule(("format", axis), check)


def _discard_qemu(value: str) -> QemuOptions:
    if value == "ignore":
        return QemuOptions()
    # The format node's policy decides whether a discard (a guest's, an NBD trim, detect-zeroes=unmap) goes
    # below it. QEMU gives an inline protocol child discard=unmap by default whatever its parent says (block.c
    # bdrv_inherited_options); stating it on both nodes keeps it so should the file node ever be defined apart.
    return QemuOptions(format_node=(("discard", value),), file_node=(("discard", value),))


def _proxmox_discard(value: str) -> ToolOption:
    return ToolOption((("discard", "on" if value == "unmap" else "ignore"),))


def _detect_zeroes_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["detect_zeroes"] == "unmap" and values["discard"] != "unmap":
        return f"detect_zeroes=unmap needs discard=unmap (QEMU: \"{QEMU_DETECT_ZEROES_UNMAP}\")"
    return None


def _proxmox_detect_zeroes(value: str) -> ToolOption:
    # qemu-server (PVE/QemuServer.pm print_drive_commandline): detect_zeroes=0 → off; otherwise (set or not) →
    # unmap when the disk has discard=on, else on. So Proxmox's default is on, and 'unmap' is spelled by
    # detect_zeroes=1 together with discard=on.
    if value == "off":
        return ToolOption((("detect_zeroes", "0"),),
                          note="Proxmox turns zero detection on unless a disk says detect_zeroes=0")
    if value == "on":
        return ToolOption((("detect_zeroes", "1"),),
                          note="Proxmox passes detect-zeroes=on only while discard is ignore: with discard=on the "
                               "same detect_zeroes=1 becomes QEMU's detect-zeroes=unmap")
    return ToolOption((("detect_zeroes", "1"),),
                      note="Proxmox has no detect_zeroes=unmap: detect_zeroes=1 on a disk with discard=on is "
                           "QEMU's detect-zeroes=unmap")


def _nova_detect_zeroes(value: str) -> ToolOption:
    if value == "off":
        return ToolOption(note="Nova has no zero-detection setting; libvirt's default (off) is what it runs")
    return ToolOption(unavailable="Nova has no zero-detection setting (libvirt's detect_zeroes is not exposed)")


def _precreated(axis: str, option: str, default: str) -> Mapping[str, Callable[[str], ToolOption]]:
    """Spellings of a qcow2 creation option: no tool sets it on a disk statement, but libvirt, virt-install and
    Proxmox open an image created beforehand, so their snippets hold with the command that creates it."""

    def create(value: str) -> str:
        return f"qemu-img create -f qcow2 -o {option}={value} IMAGE SIZE"

    def libvirt(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(note=f"{axis}={value} is set when the image is created: {create(value)}, then point "
                               "<source file=…> at it (a storage pool's vol-create cannot set it)")

    def virt_install(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(note=f"{axis}={value} is set when the image is created: {create(value)}, then "
                               "--disk path=IMAGE (a new volume from --disk size= gets QEMU's default)")

    def proxmox(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(note=f"qm allocates volumes (STORAGE:SIZE, qm disk import) with QEMU's default {axis}: "
                               f"{create(value)} as images/VMID/vm-VMID-disk-N.qcow2 on a directory storage, "
                               "then qm rescan --vmid VMID and attach the volume")

    def nova(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(unavailable=f"Nova creates instance disks itself with QEMU's default {axis}; it has no "
                                      f"option for {option}")

    return {"libvirt": libvirt, "virt-install": virt_install, "proxmox": proxmox, "nova": nova}


def _cluster_bytes(values: Mapping[str, str]) -> int:
    return CLUSTER_BYTES.get(values.get("cluster_size", NA), DEFAULT_CLUSTER_BYTES)


def _l2_entry_bytes(values: Mapping[str, str]) -> int:
    return 16 if values.get("extended_l2") == "on" else 8  # docs/qcow2-cache.txt, "Extended L2 Entries"


def whole_image_l2_cache_bytes(image_size_bytes: int, cluster_bytes: int, entry_bytes: int = 8) -> int:
    """The L2 cache holding every L2 table of an image: QEMU's own bound (block/qcow2.c read_cache_sizes:
    one entry per cluster, rounded up to whole clusters, as an L2 table is one cluster on disk)."""
    entries = -(-image_size_bytes // cluster_bytes)
    return -(-entries * entry_bytes // cluster_bytes) * cluster_bytes


def default_l2_cache_covers_bytes(cluster_bytes: int, entry_bytes: int = 8) -> int:
    """How large an image QEMU's default L2 cache (≤ 32 MiB on Linux, QEMU ≥ 3.1) covers whole."""
    return DEFAULT_L2_CACHE_MAX_BYTES // entry_bytes * cluster_bytes


def _l2_cache_qemu(values: Mapping[str, str], ctx: DiskContext) -> QemuOptions:
    if values.get("l2_cache", "default") == "default" or values.get("format") != QCOW2:
        return QemuOptions()
    if ctx.image_size_bytes is None:
        # A snippet for the user's own image, whose size iomatrix does not know: QEMU caps l2-cache-size at the
        # image's whole L2 metadata (block/qcow2.c read_cache_sizes: MIN(max_l2_cache, l2-cache-size)) and
        # allocates no more, so a bound above any image's need means "the whole image" for every image.
        return QemuOptions(format_node=(("l2-cache-size", str(L2_CACHE_ANY_IMAGE_BYTES)),))
    size = whole_image_l2_cache_bytes(ctx.image_size_bytes, _cluster_bytes(values), _l2_entry_bytes(values))
    return QemuOptions(format_node=(("l2-cache-size", str(size)),))


def l2_cache_read_back(cache_bytes: int, option: str) -> tuple[str, str]:
    """(l2_cache value, what it means) of an L2 cache size a user's configuration sets (`option` names it: QEMU's
    l2-cache-size, its combined cache-size, libvirt's <metadata_cache><max_size>), for ``--current``. The image it
    is for is not in the configuration: a bound above QEMU's default (32 MiB) reads as ``whole-image``, which it is
    for every image up to what it covers (QEMU gives the L2 cache MIN(image's need, bound); with only the combined
    cache-size, the rest goes to the refcount cache: block/qcow2.c read_cache_sizes), else as ``default``.
    ``recommend`` checks the bound against the image a workload ran on (:func:`l2_cache_holds`)."""
    covers = default_l2_cache_covers_bytes(DEFAULT_CLUSTER_BYTES) // DEFAULT_L2_CACHE_MAX_BYTES * cache_bytes
    value = "whole-image" if cache_bytes > DEFAULT_L2_CACHE_MAX_BYTES else "default"
    smaller = "; smaller than QEMU's default, which iomatrix does not measure" \
        if cache_bytes < DEFAULT_L2_CACHE_MAX_BYTES else ""
    return value, (f"l2_cache={value} from {option}={size_words(cache_bytes)}: it holds the whole L2 metadata of "
                   f"images up to {size_words(covers)} at 64 KiB clusters (QEMU's default cache: up to "
                   f"{size_words(default_l2_cache_covers_bytes(DEFAULT_CLUSTER_BYTES))}){smaller}")


def l2_cache_holds(cache_bytes: int, image_bytes: int, values: Mapping[str, str]) -> bool:
    """Whether an L2 cache bound of `cache_bytes` holds the whole L2 metadata of an `image_bytes` image with the
    cell's cluster layout (what ``l2_cache=whole-image`` measured)."""
    return cache_bytes >= whole_image_l2_cache_bytes(image_bytes, _cluster_bytes(values), _l2_entry_bytes(values))


def _l2_cache_note(values: Mapping[str, str]) -> str | None:
    if values.get("l2_cache") != "whole-image":
        return None
    return ("l2_cache=whole-image sets l2-cache-size to the image's whole L2 metadata; QEMU ≥ 3.1's default already "
            "covers images up to 256 GiB at 64 KiB clusters (128 GiB with extended_l2=on, 32× more at 2 MiB), so "
            "below that the two values run the same cache (workloads on smaller images run at the default only; "
            "rand-read-4k-sparse-1t reads across a 1 TiB thin image)")


def _l2_cache_tool(tool: str) -> Callable[[str], ToolOption]:
    covered = ("QEMU ≥ 3.1 already caches the whole L2 metadata of images up to 256 GiB at 64 KiB clusters "
               "(default l2-cache-size, up to 32 MiB)")

    def spell(value: str) -> ToolOption:
        if value == "default":
            return ToolOption()
        if tool == "libvirt":
            return ToolOption(note=f"{covered}; for a larger image libvirt ≥ 7.0 sizes it with "
                                   "<driver><metadata_cache><max_size unit='bytes'>N</max_size></metadata_cache>, "
                                   "N = image size × 8 / cluster size (× 16 with extended_l2)")
        return ToolOption(unavailable=f"{tool} has no qcow2 L2 cache option; {covered}")
    return spell


def _zeroes_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    if not shape.known or shape.zero_writes:
        return None
    return "only reads" if not shape.writes else "writes no zero-filled blocks"


def _discard_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    # detect-zeroes=unmap turns zero-filled writes into discards: the policy shows with those too.
    if not shape.known or shape.trims or (shape.zero_writes and values.get("detect_zeroes") == "unmap"):
        return None
    return "sends no discards (trims)"


def _layout_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    # Reads of blocks written before them (read workloads fill their region first, unmeasured) find data clusters
    # of any size alike through an L2 cache that holds the image's whole mapping; beyond what QEMU's default cache
    # covers, the cluster size (and extended L2's wider entries) decide how much of the mapping it holds. Trims
    # show the layout too: qcow2 frees only whole clusters (a 64 KiB trim inside a 1 MiB cluster frees nothing).
    if not shape.known or shape.writes or shape.trims:
        return None
    covers = default_l2_cache_covers_bytes(_cluster_bytes(values), _l2_entry_bytes(values))
    if image_bytes > covers:
        return None
    return "only reads blocks written before it, through an L2 cache that holds the whole image's mapping"


def _l2_cache_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    # QEMU's default L2 cache already holds every L2 table of an image up to what it covers (256 GiB at 64 KiB
    # clusters): below that, `default` and `whole-image` are the same cache, whatever the workload does.
    if not shape.known:
        return None
    covers = default_l2_cache_covers_bytes(_cluster_bytes(values), _l2_entry_bytes(values))
    if image_bytes > covers:
        return None
    return (f"runs on a {size_words(image_bytes)} image, whose whole L2 metadata QEMU's default cache already "
            f"holds (up to {size_words(covers)} at this cluster size)")


def size_words(n: int) -> str:
    """A byte count in the largest binary unit it reaches: whole where it divides ("1 TiB", "64 MiB"), else to one
    decimal ("95.4 MiB": a libvirt size in KB, powers of 1000); below 1 MiB in bytes."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}" if n % (1 << shift) == 0 else f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


DISCARD = Axis(
    "discard", "whether discard requests (guest TRIM, NBD trim) free space in the image and below it",
    ("ignore", "unmap"), "ignore", ("ignore",), frozenset({Layer.IMAGE}),
    simpler=("ignore", "unmap"),
    shown_by=_discard_shown,
    qemu=_discard_qemu,
    tools={"libvirt": lambda v: ToolOption((("discard", v),)),
           "proxmox": _proxmox_discard,
           "virt-install": lambda v: ToolOption((("discard", v),)),
           "nova": lambda v: ToolOption((("hw_disk_discard", v),),
                                        note="Nova's hw_disk_discard ([libvirt] in nova.conf) applies to every "
                                             "instance disk of the compute host")})
DETECT_ZEROES = Axis(
    "detect_zeroes", "QEMU's zero detection: writes of zeroes become zero clusters / holes (unmap) instead of data",
    ("off", "on", "unmap"), "off", ("off",), frozenset({Layer.IMAGE}),
    rules=(Rule(("detect_zeroes", "discard"), _detect_zeroes_rule),),
    simpler=("off", "on", "unmap"),
    shown_by=_zeroes_shown,
    qemu=lambda v: QemuOptions() if v == "off" else QemuOptions(format_node=(("detect-zeroes", v),)),
    tools={"libvirt": lambda v: ToolOption((("detect_zeroes", v),)),
           "proxmox": _proxmox_detect_zeroes,
           "virt-install": lambda v: ToolOption((("detect_zeroes", v),)),
           "nova": _nova_detect_zeroes})
CLUSTER_SIZE = Axis(
    "cluster_size", "qcow2 cluster size: the unit of allocation and of an L2 entry's mapping",
    tuple(CLUSTER_BYTES), "64k", ("64k",), frozenset({Layer.IMAGE}),
    rules=(_qcow2_only("cluster_size", "64k"),),
    simpler=tuple(CLUSTER_BYTES),
    shown_by=_layout_shown,
    qemu=lambda v: QemuOptions() if v == "64k" else QemuOptions(create=(("cluster_size", v),)),
    tools=_precreated("cluster_size", "cluster_size", "64k"))
EXTENDED_L2 = Axis(
    "extended_l2", "qcow2 extended L2 entries: 32 subclusters per cluster, allocated separately",
    ("off", "on"), "off", ("off",), frozenset({Layer.IMAGE}),
    rules=(_qcow2_only("extended_l2", "off"),),
    simpler=("off", "on"),
    shown_by=_layout_shown,
    qemu=lambda v: QemuOptions() if v == "off" else QemuOptions(create=(("extended_l2", v),)),
    tools=_precreated("extended_l2", "extended_l2", "off"))
L2_CACHE = Axis(
    "l2_cache", "qcow2 L2 cache size: QEMU's default, or one that holds the whole image's L2 tables",
    ("default", "whole-image"), "default", ("default",), frozenset({Layer.IMAGE}),
    rules=(_qcow2_only("l2_cache", "default"),),
    simpler=("default", "whole-image"),
    shown_by=_l2_cache_shown,
    qemu_cell=_l2_cache_qemu,
    tools={t: _l2_cache_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")},
    cell_note=_l2_cache_note)
IMAGE_AXES = (DISCARD, DETECT_ZEROES, CLUSTER_SIZE, EXTENDED_L2, L2_CACHE)

# --------------------------------------------------------------------------- device axes (issue 24)
# What only the request issuer shows: a guest device's IOThread and virtqueues (and the block export's
# IOThread where qemu-storage-daemon's NBD export supports one). Facts of the installed QEMU come from
# iomatrix.qemu_caps through RuleContext.qemu; a rule without them does not apply.

VIRTIO_BUSES = (domain.Bus.VIRTIO_BLK, domain.Bus.VIRTIO_SCSI, domain.Bus.VIRTIO_SCSI_SINGLE)
# The PCI device whose properties decide what a virtio bus's IOThread/queue options can be (its MMIO twin on
# microvm has the same properties: they belong to the virtio device, not the transport).
VIRTIO_PROBED_DEVICE = {domain.Bus.VIRTIO_BLK: "virtio-blk-pci", domain.Bus.VIRTIO_SCSI: "virtio-scsi-pci",
                        domain.Bus.VIRTIO_SCSI_SINGLE: "virtio-scsi-pci"}
# Where QEMU gained what (qemu/qemu history): virtio-blk's iothread-vq-mapping in 9.0 (commit "virtio-blk: add
# iothread-vq-mapping parameter", block pull of 2023-12-21), virtio-scsi's in 10.0.
VQ_MAPPING_SINCE = {"virtio-blk-pci": "9.0", "virtio-scsi-pci": "10.0"}
# The NBD export's iothread= exists since 5.2, but before commit f816310d0c32 ("nbd/server: only traverse
# NBDExport->clients from main loop thread", QEMU 9.0, backported to stable 8.2.3) a client's disconnect runs
# its close callback in the IOThread, and qemu-storage-daemon aborts (measured on 7.2.22: "Assertion
# `qemu_in_main_thread() && nbd_server' failed" in nbd_blockdev_client_closed, when fio connects).
NBD_EXPORT_IOTHREAD_SINCE = (8, 2, 3)


class IOThread(StrEnum):
    OFF = "off"  # requests run in QEMU's main loop (QEMU's and libvirt's default)
    ON = "on"  # one IOThread for the disk (virtio-scsi: for its controller)
    VQ_MAPPING = "vq-mapping"  # one IOThread per virtqueue (QEMU ≥ 9.0 iothread-vq-mapping)


def _is_virtio(bus: str) -> bool:
    return bus in VIRTIO_BUSES


def _iothread_bus_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["iothread"] != IOThread.OFF and not _is_virtio(values["bus"]):
        return (f"bus={values['bus']} has no IOThread option in QEMU (its requests run in the main loop): "
                "iothread needs virtio-blk, virtio-scsi or virtio-scsi-single")
    return None


def _vq_mapping_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["iothread"] != IOThread.VQ_MAPPING or not _is_virtio(values["bus"]):
        return None
    if not values.get("queues", NA).isdigit() or int(values["queues"]) < 2:
        return ("iothread=vq-mapping spreads a disk's virtqueues over IOThreads (one each): it needs "
                "queues of 2 or more")
    if ctx.qemu is None:
        return None
    device = VIRTIO_PROBED_DEVICE[domain.Bus(values["bus"])]
    if ctx.qemu.has_property(device, "iothread-vq-mapping") is False:
        return (f"iothread=vq-mapping needs QEMU ≥ {VQ_MAPPING_SINCE[device]} ({device}'s iothread-vq-mapping); "
                f"this host has {version_text(ctx.qemu.system_version)}")
    return None


def _export_iothread_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    """Where no guest device applies (bus "-"), the request issuer is the block-layer tier's NBD export."""
    if values.get("bus", NA) != NA or values["iothread"] == IOThread.OFF:
        return None
    if values["iothread"] == IOThread.VQ_MAPPING:
        return ("iothread=vq-mapping maps a guest device's virtqueues to IOThreads; an NBD export has no "
                "virtqueues: guest tier only")
    if ctx.qemu is not None and ctx.qemu.daemon_version is not None \
            and ctx.qemu.daemon_version < NBD_EXPORT_IOTHREAD_SINCE:
        return (f"qemu-storage-daemon {version_text(ctx.qemu.daemon_version)} aborts when an NBD client of an "
                "export with iothread= disconnects (assertion in nbd_blockdev_client_closed; fixed in QEMU 9.0 "
                "and 8.2.3): on this QEMU the guest tier measures IOThreads")
    return None


def _iothread_qemu(value: str) -> QemuOptions:
    if value == IOThread.OFF:
        return QemuOptions()
    objects = (("iothread", "iothread"),)
    if value == IOThread.VQ_MAPPING:
        # qemu_block gives the device one IOThread per virtqueue (iothread0, iothread1, …) in JSON syntax.
        return QemuOptions(objects=objects, device=(("iothread-vq-mapping", "iothread"),))
    return QemuOptions(objects=objects, device=(("iothread", "iothread"),), export=(("iothread", "iothread"),))


def _iothread_tool(tool: str) -> Callable[[str], ToolOption]:
    def spell(value: str) -> ToolOption:
        if value == IOThread.OFF:
            return ToolOption()
        if value == IOThread.VQ_MAPPING:
            return ToolOption(unavailable={
                "libvirt": "libvirt 9.0 (Debian 12) has no per-virtqueue IOThread mapping; libvirt ≥ 10.0 writes "
                           "it as <driver queues='N'><iothreads><iothread id='1'/>…</iothreads></driver>",
                "proxmox": "Proxmox VE has no per-virtqueue IOThread mapping (iothread=1 is one IOThread per disk)",
                "virt-install": "virt-install has no --disk key for a per-virtqueue IOThread mapping",
                "nova": "Nova has no per-disk IOThread setting",
            }[tool])
        # IOThread 1 of the domain's <iothreads>; snippets.py puts it where each tool wants it (a virtio-scsi
        # controller's, the domain's <iothreads>, virt-install's --iothreads).
        return {
            "libvirt": ToolOption((("iothread", "1"),)),
            "proxmox": ToolOption((("iothread", "1"),)),
            "virt-install": ToolOption((("driver.iothread", "1"),)),
            "nova": ToolOption(unavailable="Nova has no per-disk IOThread setting (no image property or flavor "
                                           "extra spec for <driver iothread=>)"),
        }[tool]
    return spell


IOTHREAD = Axis(
    "iothread", "where QEMU runs the disk's requests: the main loop, an IOThread, or one IOThread per virtqueue",
    tuple(IOThread), IOThread.OFF, (IOThread.OFF,), frozenset({Layer.FRONTEND}),
    rules=(Rule(("iothread", "bus"), _iothread_bus_rule), Rule(("iothread", "bus"), _vq_mapping_rule),
           Rule(("iothread",), _export_iothread_rule)),
    simpler=tuple(IOThread),
    qemu=_iothread_qemu,
    on_controller={"iothread": "iothread", "iothread-vq-mapping": "iothread-vq-mapping"},
    tools={t: _iothread_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")})


QUEUES_AUTO = "auto"


def _queues_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    queues = values["queues"]
    if queues == QUEUES_AUTO:
        return None
    if not _is_virtio(values["bus"]):
        return (f"bus={values['bus']} has no virtqueues to count: queues needs virtio-blk, virtio-scsi or "
                "virtio-scsi-single")
    if ctx.host_cpus is not None and int(queues) > ctx.host_cpus:
        return (f"queues={queues} needs {queues} guest vCPUs (the guest boots one per queue: more queues than "
                f"vCPUs go unused); this host has {ctx.host_cpus} CPUs")
    return None


def _queues_tool(tool: str) -> Callable[[str], ToolOption]:
    def spell(value: str) -> ToolOption:
        if value == QUEUES_AUTO:
            return ToolOption()  # nothing set: QEMU's default
        # Proxmox (qemu-server PVE/QemuServer/Drive.pm): scsiN drives have queues=<integer> (minimum 2), given to
        # the disk's own controller as num_queues with scsihw virtio-scsi-single only; virtioN drives have none.
        # snippets.py says where a bus cannot take it.
        if tool == "proxmox" and int(value) < 2:
            return ToolOption(unavailable=f"Proxmox's queues= starts at 2 (qm.conf); without it QEMU gives one queue "
                                          f"per vCPU, not {value}")
        return {
            "libvirt": ToolOption((("queues", value),)),
            "proxmox": ToolOption((("queues", value),)),
            "virt-install": ToolOption((("driver.queues", value),)),
            "nova": ToolOption(unavailable="Nova has no per-disk virtqueue count (its multiqueue setting, "
                                           "hw_vif_multiqueue_enabled, is for network interfaces)"),
        }[tool]
    return spell


QUEUES = Axis(
    # QEMU's default (num-queues unset, 'auto'): one virtqueue per vCPU on PCI since QEMU 5.2, one on virtio-mmio.
    "queues", "how many virtqueues the guest's virtio disk (or virtio-scsi controller) has; the guest gets a vCPU "
    "per queue", (QUEUES_AUTO, "1", "2", "4", "8"), QUEUES_AUTO, (QUEUES_AUTO,), frozenset({Layer.DEVICE}),
    rules=(Rule(("queues", "bus"), _queues_rule),),
    simpler=(QUEUES_AUTO, "1", "2", "4", "8"),
    # virtio-blk's num-queues; qemu_block moves it onto the controller as num_queues for virtio-scsi.
    qemu=lambda v: QemuOptions() if v == QUEUES_AUTO else QemuOptions(device=(("num-queues", v),)),
    on_controller={"num-queues": "num_queues"},
    tools={t: _queues_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")})


# --------------------------------------------------------------------------- shared storage (issue 34)
# What decides a disk served over the network: the iSCSI target's LUN (what backs it, its write cache), the
# client QEMU reaches the server with, and the network's round-trip time. The LUN's axes are read by the iSCSI
# server (backing/iscsi.py, NetworkServer.new_disk) and set nothing on QEMU; the client axes choose the protocol
# node (qemu_block). A local backing keeps every one at its default, as _qcow2_only does for another format.
# docs/shared-storage.md has what each does and what was measured.

ISCSI, NFS = iscsi.NAME, nfs.NAME
RBD, KRBD = ceph.RBD, ceph.KRBD
KERNEL_CLIENT = "kernel"
# The axis choosing the client of each protocol: its userspace value is QEMU's own driver.
NETWORK_CLIENT_AXIS = {ISCSI: "initiator", NFS: "nfs_client", RBD: "rbd_client"}
KERNEL_CLIENT_VALUES = (KERNEL_CLIENT, KRBD)


class LunType(StrEnum):
    """What backs an iSCSI LUN in the target: the article's IET nullio/fileio/blockio as tgt's backing stores."""

    NULL = "null"  # tgt bs-type null: reads return zeroes, writes are dropped (the protocol's ceiling)
    FILEIO = "fileio"  # tgt bs-type rdwr: a file through the target host's page cache
    BLOCKIO = "blockio"  # tgt bs-type rdwr with bsoflags direct: the file opened O_DIRECT


def _protocol(ctx: RuleContext) -> str | None:
    return ctx.backing.protocol if ctx.backing is not None else None


def _only_on(protocol: str, axis: str, default: str) -> Rule:
    """An axis of one protocol's server or client: any other backing keeps its default (a local backing runs no
    server and no network client)."""
    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if ctx.backing is None or values[axis] == default:
            return None  # no backing facts (a snippet): the user's storage is whatever they say
        mine = _protocol(ctx)
        if mine != protocol:
            on = f"a {mine} backing" if mine else "a local backing"
            return f"{axis} applies to {protocol} backings only; {ctx.backing_label} is {on}"
        return None
    return Rule((axis,), check)


def _null_lun_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["lun_type"] != LunType.NULL:
        return None
    if values.get("format", NA) not in (NA, domain.Format.RAW):
        return (f"a null LUN stores nothing (writes are dropped, reads return zeroes): format={values['format']} "
                "could not read its own metadata back; the null LUN runs raw only")
    if values.get("lun_write_cache", "off") != "off":
        return "a null LUN stores nothing, so it has no write cache to turn on (lun_write_cache=off only)"
    return None


def _kernel_client_rule(axis: str, kernel_value: str = KERNEL_CLIENT) -> Rule:
    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if values[axis] != kernel_value or ctx.backing is None or ctx.backing.kernel_client_missing is None:
            return None
        return f"{axis}={kernel_value} needs the host's kernel client: {ctx.backing.kernel_client_missing}"
    return Rule((axis,), check)


def _target_side(axis: str, default: str, what: Callable[[str], str]) -> Mapping[str, Callable[[str], ToolOption]]:
    """A setting of the iSCSI target, not of the VM's disk: no VM tool sets it; the tgt snippet (targets.conf)
    carries it, and the VM tools' snippets say so."""
    def spell(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        if value == LunType.NULL:
            return ToolOption(unavailable="a null LUN stores nothing (writes are dropped): it measures the "
                                          "protocol's ceiling and is no configuration to deploy")
        return ToolOption(note=f"{axis}={value} is set on the iSCSI target, not on the VM: {what(value)} (see the "
                               "tgt targets.conf snippet)")
    return {t: spell for t in ("libvirt", "proxmox", "virt-install", "nova")}


def _lun_type_words(value: str) -> str:
    return {"fileio": "tgt bs-type rdwr", "blockio": "tgt bs-type rdwr with bsoflags direct",
            "null": "tgt bs-type null"}[value]


def _lun_write_cache_risk(value: str) -> SafetyLevel | None:
    # With the LUN's write cache on, tgt acknowledges a write from the target host's page cache; the initiator's
    # SYNCHRONIZE CACHE and FUA writes still reach its disk (tgt usr/bs_rdwr.c: fdatasync for both), and QEMU's
    # iscsi driver sends SYNCHRONIZE CACHE on every guest flush (block/iscsi.c iscsi_co_flush). So what a target
    # power loss can lose is what the guest has not flushed: a disk's volatile cache, no worse (a target that
    # acknowledges SYNCHRONIZE CACHE without syncing is worse, and is what LUN_WRITE_CACHE_RISK warns of).
    return SafetyLevel.LIKE_A_DISK_CACHE if value == "on" else None


LUN_WRITE_CACHE_RISK = (
    "the LUN's write cache is volatile memory in the target host: a write is acknowledged before it is on the "
    "target's disk, and a target power loss loses what the guest has not flushed yet (tgt honours SYNCHRONIZE "
    "CACHE and FUA; a target whose cache is not battery/flash-protected and that acknowledges a flush without "
    "syncing loses flushed data too)")


def _rtt_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["rtt"] == "0" or ctx.backing is None:
        return None
    protocol = _protocol(ctx)
    if protocol is None:
        return (f"rtt emulates the network between a disk's client and its storage server; {ctx.backing_label} is "
                "a local backing")
    if protocol == RBD:
        return ("rtt is emulated by a relay between client and server; a Ceph client learns the OSDs' addresses "
                "from the monitor's map and connects to them directly, past any relay: iSCSI only")
    if protocol == NFS:
        return ("rtt is emulated by a relay between client and server; QEMU's nfs driver has no port option (libnfs "
                "asks the server's portmapper), so no relay can be put between them: iSCSI only")
    return None


def _rtt_tool(value: str) -> ToolOption:
    if value == "0":
        return ToolOption()
    return ToolOption(note=f"rtt={value} was the network's emulated round-trip time when this was measured, not a "
                           "setting: your own network's round trip decides what you get")


LUN_TYPE = Axis(
    "lun_type", "what backs the iSCSI LUN in the target: nothing (null: the protocol's ceiling), a file through the "
    "target's page cache (fileio: tgt rdwr) or a file opened O_DIRECT (blockio: tgt rdwr, bsoflags direct)",
    tuple(LunType), LunType.FILEIO, (LunType.FILEIO,), frozenset({Layer.IMAGE}), short="lun",
    rules=(_only_on(ISCSI, "lun_type", LunType.FILEIO), Rule(("lun_type",), _null_lun_rule)),
    simpler=(LunType.FILEIO, LunType.BLOCKIO, LunType.NULL),
    # A null LUN keeps nothing: "acknowledged writes survive" is false of it by construction, so no answer that
    # requires it (the safe default) can be a null LUN.
    risk=lambda v: SafetyLevel.UNSAFE if v == LunType.NULL else None,
    tools=_target_side("lun_type", LunType.FILEIO, _lun_type_words))
LUN_WRITE_CACHE = Axis(
    "lun_write_cache", "the iSCSI LUN's write cache in the target (SCSI caching mode page 8, WCE): on, writes are "
    "acknowledged from the target's memory; off, the target syncs each write (tgt's own default is on)",
    ("off", "on"), "off", ("off",), frozenset({Layer.IMAGE}), short="lun_wc",
    rules=(_only_on(ISCSI, "lun_write_cache", "off"),),
    simpler=("off", "on"),
    risk=_lun_write_cache_risk,
    tools=_target_side("lun_write_cache", "off", lambda v: f"targets.conf write-cache {v}"))
INITIATOR = Axis(
    "initiator", "the iSCSI initiator QEMU reaches the LUN with: its own (libiscsi, Proxmox 'iscsidirect') or the "
    "host kernel's (open-iscsi: the LUN is a /dev/sdX block device)",
    ("libiscsi", KERNEL_CLIENT), "libiscsi", ("libiscsi",), frozenset({Layer.IMAGE}),
    rules=(_only_on(ISCSI, "initiator", "libiscsi"), _kernel_client_rule("initiator")),
    simpler=("libiscsi", KERNEL_CLIENT),
    # The disk's type itself (libvirt network vs block, Proxmox iscsidirect vs iscsi): the tool modules of
    # iomatrix.vmconfig.
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")})
NFS_CLIENT = Axis(
    "nfs_client", "the NFS client QEMU reaches an image on NFS with: its own (libnfs, nfs:// URLs) or the host "
    "kernel's mount (the image is a file under the mount point)",
    ("libnfs", KERNEL_CLIENT), "libnfs", ("libnfs",), frozenset({Layer.IMAGE}), short="nfs",
    rules=(_only_on(NFS, "nfs_client", "libnfs"), _kernel_client_rule("nfs_client")),
    simpler=("libnfs", KERNEL_CLIENT),
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")})
RTT = Axis(
    "rtt", "the network round-trip time emulated between the disk's client and its storage server (0: the direct "
    "path; e.g. 0.5ms, 2ms, 500us)",
    ("0", "0.5ms", "1ms", "2ms", "5ms"), "0", ("0",), frozenset({Layer.IMAGE}),
    rules=(Rule(("rtt",), _rtt_rule),),
    simpler=("0",),
    check_value=rtt.rtt_problem,
    tools={t: _rtt_tool for t in ("libvirt", "proxmox", "virt-install", "nova")})

def _clients_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    return clients.prune_reason(values["clients"], ctx.backing is not None, _protocol(ctx), ctx.backing_label,
                                ctx.backing.client_hosts if ctx.backing is not None else 0)


CLIENTS = Axis(
    "clients", "how many clients run the workload at once against one shared backing, each on a disk of its own "
    "with its own export and fio, started together (1: one client alone)",
    clients.VALUES, "1", ("1",), frozenset({Layer.FRONTEND}),
    rules=(Rule(("clients",), _clients_rule),),
    simpler=("1",),
    check_value=clients.value_error,
    tools={t: (lambda v: ToolOption(note=clients.tool_note(v))) for t in ("libvirt", "proxmox", "virt-install",
                                                                          "nova")})


# --------------------------------------------------------------------------- Ceph RBD (issue 35)
# librbd's cache, written into the per-disk ceph.conf's client section by the RBD backing (backing/rbd.py) and
# read by QEMU's rbd driver through conf=; the client (QEMU's librbd or the kernel's krbd); the image's object
# size (rbd create --object-size). Defaults are Ceph 16's (`ceph-conf -c /dev/null --show-config-value`: rbd_cache
# true, rbd_cache_policy writearound, rbd_cache_writethrough_until_flush true, rbd_default_order 22 = 4M).
def _rbd_cache_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    # QEMU and krbd decide librbd's cache over ceph.conf: domain.ceph says when a cell's setting is lost
    return ceph.cache_rule_reason(values, _protocol(ctx))


def _ceph_client_tool(axis: str, default: str) -> Mapping[str, Callable[[str], ToolOption]]:
    """A librbd setting of the client host's ceph.conf ([client] section), not of the VM's disk definition."""
    def spell(value: str) -> ToolOption:
        return ToolOption() if value == default else ToolOption(note=ceph.client_setting_note(axis, value))
    return {t: spell for t in ("libvirt", "proxmox", "virt-install", "nova")}


# The three cache axes are written into the per-disk ceph.conf's [client.NAME] section (backing/rbd.py); a cell
# that leaves one at "-" or at its default writes nothing, so Ceph's own default applies, as on a stock client.
RBD_CACHE = Axis(
    "rbd_cache", "librbd's client-side cache (ceph.conf rbd cache); QEMU sets it from its cache mode (off with "
    "cache=none/directsync, on otherwise), so cells where the two disagree are pruned",
    ("on", "off"), "on", ("on",), frozenset({Layer.IMAGE}),
    rules=(_only_on(RBD, "rbd_cache", "on"),
           Rule(("rbd_cache", "cache", "rbd_client", *ceph.CACHE_AXES[1:]), _rbd_cache_rule)),
    simpler=("on", "off"),
    tools=_ceph_client_tool("rbd_cache", "on"))
RBD_CACHE_POLICY = Axis(
    "rbd_cache_policy", "what librbd's cache does with writes (ceph.conf rbd cache policy): writearound (Ceph's "
    "default: writes are sent to the OSDs at once but acknowledged while in flight, up to rbd cache max dirty; "
    "reads are cached), writeback (writes are held in the client's memory "
    "until a flush or the dirty limit), writethrough (every write waits for the OSDs)",
    ("writearound", "writeback", "writethrough"), "writearound", ("writearound",), frozenset({Layer.IMAGE}),
    short="rbd_policy",
    rules=(_only_on(RBD, "rbd_cache_policy", "writearound"),),
    simpler=("writearound", "writethrough", "writeback"),
    # writeback holds acknowledged writes in the client until the guest flushes, and writearound acknowledges a
    # write while it is still in flight to the OSDs (librbd's WriteAroundObjectDispatch "completes it back to the
    # invoker"): either loses unflushed writes on a client crash, like a disk's volatile cache; flushes are honoured
    risk=lambda v: SafetyLevel.LIKE_A_DISK_CACHE if v in ("writeback", "writearound") else None,
    tools=_ceph_client_tool("rbd_cache_policy", "writearound"))
RBD_WRITETHROUGH_UNTIL_FLUSH = Axis(
    "rbd_cache_writethrough_until_flush", "whether librbd's cache stays writethrough until the guest's first flush "
    "(ceph.conf rbd cache writethrough until flush; Ceph's default on): a workload that never flushes never gets "
    "the writeback cache, whatever QEMU's cache mode says",
    ("on", "off"), "on", ("on",), frozenset({Layer.IMAGE}), short="rbd_wt_until_flush",
    rules=(_only_on(RBD, "rbd_cache_writethrough_until_flush", "on"),),
    simpler=("on", "off"),
    tools=_ceph_client_tool("rbd_cache_writethrough_until_flush", "on"))
# krbd maps the image as a block device on the host: the kernel's page cache and QEMU's aio apply there, not
# librbd's cache; this host has no rbd module (storage_clients.probe_krbd), so its cells are pruned with the reason.
RBD_CLIENT = Axis(
    "rbd_client", "the Ceph client QEMU reaches the image with: its own (librbd, driver=rbd) or the host kernel's "
    "(krbd: the image mapped as /dev/rbdN, Proxmox 'krbd 1')",
    ("librbd", KRBD), "librbd", ("librbd",), frozenset({Layer.IMAGE}),
    rules=(_only_on(RBD, "rbd_client", "librbd"), _kernel_client_rule("rbd_client", KRBD)),
    simpler=("librbd", KRBD),
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")})
# The object size is fixed when the image is created (rbd create --object-size): larger objects mean fewer, larger
# OSD operations for sequential I/O; the default 4M is what almost every cluster runs.
RBD_OBJECT_SIZE = Axis(
    "rbd_object_size", "the RBD image's object size (rbd create --object-size; Ceph's default 4M): the unit the "
    "image is striped over the OSDs in",
    ceph.OBJECT_SIZES, "4M", ("4M",), frozenset({Layer.IMAGE}), short="rbd_obj",
    rules=(_only_on(RBD, "rbd_object_size", "4M"),
           Rule(("format",), lambda values, ctx: ceph.format_reason(values.get("format", NA), _protocol(ctx),
                                                         values.get("preallocation", NA)))),
    simpler=ceph.OBJECT_SIZES,
    check_value=ceph.object_size_problem,
    tools=_ceph_client_tool("rbd_object_size", "4M"))
RBD_AXES = (RBD_CACHE, RBD_CACHE_POLICY, RBD_WRITETHROUGH_UNTIL_FLUSH, RBD_CLIENT, RBD_OBJECT_SIZE)
NETWORK_AXES = (LUN_TYPE, LUN_WRITE_CACHE, INITIATOR, NFS_CLIENT, RTT, CLIENTS, *RBD_AXES)


# --------------------------------------------------------------------------- the registry

# Where a QEMU option goes, as QemuOptions' fields, named as an error message says them. A protocol node's
# options are one node whichever field sets them (file_node, or file_protocol for the file protocol only).
_PROTOCOL_NODE = "the protocol node (-blockdev file.)"
_FORMAT_NODE = "the format node (-blockdev)"
_DEVICE = "the guest device (-device)"
_EXPORT = "the block export (--export)"
_OPTION_PLACES = {"create": "qemu-img create -o", "format_node": _FORMAT_NODE,
                  "file_node": _PROTOCOL_NODE, "file_protocol": _PROTOCOL_NODE,
                  "device": _DEVICE, "export": _EXPORT,
                  "objects": "a QOM object id (-object)"}
# Cells an axis's cell-dependent options (Axis.qemu_cell) are sampled on to learn the keys it may set: a qcow2
# image, of unknown and of known size (the L2 cache bound is one key either way).
_SAMPLE_CONTEXTS = (DiskContext(None), DiskContext(1 << 30))
# Where each tool's spelling (Axis.tools, a ToolOption's keys) goes, as an error message names it. One key of
# one of these is one option of the tool's disk statement: written twice, the tool reads one of them, or both.
TOOL_PLACES = {"libvirt": "libvirt's <disk>", "proxmox": "Proxmox's drive (qm set)",
               "virt-install": "virt-install's --disk", "nova": "Nova's configuration (nova.conf, image properties)"}


@dataclass(frozen=True, order=True)
class SpellingKey:
    """One key of one tool's disk statement: QEMU's -blockdev node, -device, --export or qemu-img create -o (where
    it goes matters: `cache.direct` on the format node and on the protocol node are two options), or the disk
    statement of libvirt, Proxmox, virt-install or Nova."""

    tool: str  # "qemu", or a key of TOOL_PLACES
    where: str  # as an error message says it: "the guest device (-device)", "libvirt's <disk>"
    key: str


@dataclass(frozen=True)
class Writer:
    """Something other than an axis that writes keys of a tool's disk statement: iomatrix's own QEMU and libvirt
    writers (the format node's driver, libvirt's <driver name=>), a network protocol's QEMU protocol node. It
    declares the keys it writes; an axis writing one of them is refused at registration as one writing another
    axis's key is (the statement would hold the key twice, or one of the two would silently win)."""

    name: str  # as a refusal names it: "iomatrix's QEMU disk builder", "the iscsi protocol's QEMU node"
    keys: frozenset[SpellingKey]


def _qemu(where: str, *keys: str) -> frozenset[SpellingKey]:
    return frozenset(SpellingKey("qemu", where, k) for k in keys)


def _tool(tool: str, *keys: str) -> frozenset[SpellingKey]:
    return frozenset(SpellingKey(tool, TOOL_PLACES[tool], k) for k in keys)


# What iomatrix's writers put in a disk statement themselves, whatever the cell (qemu_block's -blockdev, -device
# and --export; vmconfig's libvirt <driver name='qemu'> and <target dev=>, virt-install's path= and address.*),
# and each network protocol's QEMU protocol node (NetworkProtocol.qemu_node, the tiers' NetworkDisk).
# tests/test_axis_collision.py checks the writers write no key they do not declare.
WRITERS: list[Writer] = [
    Writer("iomatrix's QEMU disk builder (qemu_block)",
           _qemu(_FORMAT_NODE, "driver", "node-name", "file", "read-zeroes", "size")
           | _qemu(_PROTOCOL_NODE, "driver", "filename", "server.type", "server.path")
           | _qemu(_DEVICE, "drive", "bus", "unit", "serial", "werror", "rerror", "id")
           | _qemu(_EXPORT, "type", "id", "node-name", "name", "writable")),
    Writer("iomatrix's libvirt disk writer", _tool("libvirt", "name", "dev")),
    Writer("iomatrix's virt-install disk writer",
           _tool("virt-install", "path", *(f"address.{k}" for k in ("type", "controller", "bus", "target", "unit")))),
    Writer("the iscsi protocol's QEMU node", _qemu(_PROTOCOL_NODE, "transport", "portal", "target", "lun")),
    Writer("the nfs protocol's QEMU node", _qemu(_PROTOCOL_NODE, "server.host", "path")),
    Writer("the rbd protocol's QEMU node", _qemu(_PROTOCOL_NODE, "pool", "image", "conf", "user")),
]


def qemu_keys(axis: Axis) -> set[tuple[str, str]]:
    """Every (place, key) an axis's QEMU options may set, over all its values (`_OPTION_PLACES`' places)."""
    found: list[QemuOptions] = []
    for value in axis.values:
        if axis.qemu is not None:
            found.append(axis.qemu(value))
        if axis.qemu_cell is not None:
            cell = {"format": domain.Format.QCOW2.value, axis.name: value}
            found += [axis.qemu_cell(cell, ctx) for ctx in _SAMPLE_CONTEXTS]
    return {(_OPTION_PLACES[place], key) for opts in found for place in _OPTION_PLACES
            for key, _ in getattr(opts, place)}


def spelling_keys(axis: Axis) -> set[SpellingKey]:
    """Every key an axis writes in every tool's spelling, over all its values: its QEMU options (`qemu_keys`) and
    the keys of its ToolOptions for libvirt, Proxmox, virt-install and Nova. Read from the spellings themselves,
    so what is checked is what the snippets and the command lines write."""
    keys = {SpellingKey("qemu", where, key) for where, key in qemu_keys(axis)}
    for tool, spell in axis.tools.items():
        where = TOOL_PLACES.get(tool, f"{tool}'s spelling")
        keys |= {SpellingKey(tool, where, key) for value in axis.values for key, _ in spell(value).options}
    return keys


class AxisRefused(UserError, ValueError):
    """An axis the registry cannot take (its name is taken, or it writes a key another axis or a writer writes):
    one line naming both, which the CLI prints as any mistake the user can fix (an installed package's axis)."""


def _refusal(axis: Axis, key: SpellingKey, owner: str, own_values: str | None) -> str:
    option = "QEMU option" if key.tool == "qemu" else f"{key.tool} option"
    fix = f"extend {own_values!r}'s values instead, or set another option" if own_values else "set another option"
    return (f"axis {axis.name!r} sets {key.key} on {key.where}, which {owner} already sets: one {option} belongs to "
            f"one axis ({fix})")


def collision(axis: Axis, others: Collection[Axis], writers: Collection[Writer] = ()) -> str | None:
    """Why `axis` cannot join `others`: an axis of them, or one of `writers`, already writes one of the keys it
    writes in some tool's spelling (the same key of the same QEMU node, device or export, or of libvirt's, Proxmox's,
    virt-install's or Nova's disk statement), which would be written twice (``write-cache=on,write-cache=off``,
    ``cache=none,cache=writeback``) or silently overwritten, and read back as both; None where it can."""
    mine = spelling_keys(axis)
    for other in others:
        if other.name == axis.name:
            continue
        if both := sorted(mine & spelling_keys(other)):
            return _refusal(axis, both[0], f"axis {other.name!r}", other.name)
    for writer in writers:
        if both := sorted(mine & writer.keys):
            return _refusal(axis, both[0], writer.name, None)
    return None


def _checked_registry(entries: Collection[Axis]) -> dict[str, Axis]:
    registry: dict[str, Axis] = {}
    for axis in entries:
        if axis.name in registry:
            raise AxisRefused(f"axis {axis.name!r} is already registered")
        if why := collision(axis, registry.values(), WRITERS):
            raise AxisRefused(why)
        registry[axis.name] = axis
    return registry


BUILT_IN: tuple[Axis, ...] = (TIER, FORMAT, PREALLOCATION, CACHE, AIO, BUS, BACKING, MODIFIER, *IMAGE_AXES, IOTHREAD,
                              QUEUES, *NETWORK_AXES)
REGISTRY: dict[str, Axis] = _checked_registry(BUILT_IN)
# The entry-point group through which an installed package adds axes (iomatrix.plugins).
ENTRY_POINT_GROUP = "iomatrix.axes"
# Why an installed package's axis was refused (a name taken, a key another axis or a writer writes), one line
# each: shown by `iomatrix plan`; the axis is not registered.
REFUSED: list[str] = []


def _installed_axes(loaded: list[object]) -> list[Axis]:
    out: list[Axis] = []
    for obj in loaded:
        for axis in (obj,) if isinstance(obj, Axis) else tuple(obj):  # type: ignore[call-overload]
            if not isinstance(axis, Axis):
                raise TypeError(f"{ENTRY_POINT_GROUP}: {axis!r} is not an iomatrix.domain.axes.Axis")
            out.append(axis)
    return out


def register_installed() -> list[str]:
    """Register the axes installed packages offer (entry-point group ``iomatrix.axes``), each checked as
    `register` checks one; returns (and keeps in REFUSED) why any was refused, one line each."""
    refused: list[str] = []
    try:
        found = _installed_axes([obj for _, obj in load_entry_points(ENTRY_POINT_GROUP)])
    except (PluginError, TypeError) as e:
        refused.append(str(e))
        found = []
    for axis in found:
        if REGISTRY.get(axis.name) is axis:
            continue
        try:
            register(axis)
        except ValueError as e:
            refused.append(f"{ENTRY_POINT_GROUP}: {e}")
    REFUSED.extend(refused)
    for line in refused:  # (at import: no command has its console yet; one line each, never a traceback)
        print(f"iomatrix: an installed axis was refused: {line}", file=sys.stderr)
    return refused


def axes() -> tuple[Axis, ...]:
    """Every registered axis, in the order cells are keyed and tables show them."""
    return tuple(REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> Axis:
    return REGISTRY[name]


def plan_axes() -> tuple[Axis, ...]:
    """The axes a plan lists values of from this registry (tier and backing have their own validation)."""
    return tuple(a for a in REGISTRY.values() if not a.free_values)


def register(axis: Axis) -> None:
    """Add `axis` to the registry (an axis of an installed package, see `iomatrix.plugins`); an AxisRefused (a
    UserError and a ValueError) where its name is taken or a key it writes in some tool's spelling is another
    axis's or a writer's (`collision`)."""
    if axis.name in REGISTRY:
        raise AxisRefused(f"axis {axis.name!r} is already registered")
    if why := collision(axis, REGISTRY.values(), WRITERS):
        raise AxisRefused(why)
    REGISTRY[axis.name] = axis


def register_writer(writer: Writer) -> None:
    """Add a writer of tool keys that is not an axis (a network protocol's QEMU node, from its module): an
    AxisRefused where a registered axis already writes one of its keys, naming both."""
    for axis in REGISTRY.values():
        if both := sorted(spelling_keys(axis) & writer.keys):
            key = both[0]
            raise AxisRefused(f"{writer.name} sets {key.key} on {key.where}, which axis {axis.name!r} already sets: "
                              f"one {'QEMU' if key.tool == 'qemu' else key.tool} option belongs to one owner")
    WRITERS.append(writer)


@contextlib.contextmanager
def registered(axis: Axis) -> Iterator[Axis]:
    """Add `axis` for the duration of a block (a test's demonstration axis); removed afterwards."""
    register(axis)
    try:
        yield axis
    finally:
        del REGISTRY[axis.name]


def controller_axes() -> tuple[str, ...]:
    """The axes whose device options a virtio-scsi disk's controller takes (Axis.on_controller)."""
    return tuple(a.name for a in REGISTRY.values() if a.on_controller)


def controller_keys() -> dict[str, str]:
    """-device key → the controller's name for it, of every axis (Axis.on_controller)."""
    return {k: v for a in REGISTRY.values() for k, v in a.on_controller.items()}


def simplicity_order() -> dict[str, tuple[str, ...]]:
    """Axis → its values, simplest first (the "simplicity" tie-break; stats/decision.py)."""
    return {a.name: a.simpler for a in REGISTRY.values() if a.simpler}


def prune_reason(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    """The first rule of any axis the cell breaks, in registry order, or None."""
    for axis in REGISTRY.values():
        for rule in axis.rules:
            reason = rule.reason(values, ctx)
            if reason:
                return reason
    return None


def unshown_reason(values: Mapping[str, str], shape: WorkloadShape, kept: Mapping[str, str],
                   image_bytes: int) -> str | None:
    """Why a workload does not run on a cell: the cell sets an axis the workload cannot show (Axis.shown_by) away
    from `kept`, the one value the workload runs that axis at; None where it runs."""
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        if axis.shown_by is None or v in (NA, kept.get(axis.name, axis.default)):
            continue
        # The difference from the kept value shows where either value lets it (an L2 cache covering the image at
        # 1 MiB clusters but not at 64 KiB).
        why = axis.shown_by(values, shape, image_bytes)
        if why and axis.shown_by({**values, axis.name: kept.get(axis.name, axis.default)}, shape, image_bytes):
            return (f"{shape.name} {why}, so {axis.name} cannot change its result: it runs at "
                    f"{axis.name}={kept.get(axis.name, axis.default)} only")
    return None


def risk_level(values: Mapping[str, str]) -> SafetyLevel | None:
    """The worst documented power-loss risk of the cell's values over every axis (Axis.risk: the cache mode's,
    eatmydata's, a null LUN's, the LUN's write cache's); None where no value has one (bare metal)."""
    levels = [level for a in REGISTRY.values() if (v := values.get(a.name, NA)) != NA and (level := a.risk(v))]
    return max(levels, key=domain.SAFETY_ORDER.index) if levels else None


def baseline_values(values: Mapping[str, str], baseline: domain.Baseline) -> dict[str, str]:
    """The values of `values`' twin at a tool's defaults (domain.BASELINES): its cache and aio, and every later
    axis that applies (not "-") at its default, as the tool runs it when nothing is set (QEMU without
    detect-zeroes= runs zero detection off); the first release's other axes (format, bus, backing, …) are the
    user's storage, not a default, and stay."""
    twin = {**values, "cache": baseline.cache.value, "aio": baseline.aio.value}
    for axis in REGISTRY.values():
        if not axis.always_named and not axis.free_values and values.get(axis.name, NA) != NA:
            twin[axis.name] = axis.default
    return twin


def later_at_default(values: Mapping[str, str]) -> dict[str, str]:
    """The later axes `values` sets away from their defaults, at their defaults: the comparison for a question asked
    on one cache × aio cell (zero detection at cache=none, io_uring: its twin with zero detection off), where the
    twin at QEMU's default cache and aio (baseline_values) was not measured."""
    return {a.name: a.default for a in REGISTRY.values() if not a.always_named and not a.free_values
            and values.get(a.name, NA) not in (NA, a.default)}


def notes(cells: list[Mapping[str, str]]) -> list[str]:
    """The sweep notes the cells' values call for, each once."""
    out: list[str] = []
    for axis in REGISTRY.values():
        if axis.cell_note is None:
            continue
        for values in cells:
            note = axis.cell_note(values)
            if note and note not in out:
                out.append(note)
    return out


def named(values: Mapping[str, str]) -> list[tuple[str, str]]:
    """(axis, value) pairs a key or label names: the always-named axes, and later axes set away from their
    default and applying to the cell's tier ("-" means not applying)."""
    out = []
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        if axis.always_named or (v != NA and v != axis.default):
            out.append((axis.name, v))
    return out


def qemu_options(values: Mapping[str, str], ctx: DiskContext | None = None) -> QemuOptions:
    """Every axis's QEMU options for a cell's values, merged in registry order (axes that do not apply, "-",
    contribute nothing). `ctx` is what options depending on the image need (:attr:`Axis.qemu_cell`)."""
    ctx = ctx or DiskContext()
    merged: dict[str, list[tuple[str, str]]] = {k: [] for k in ("create", "format_node", "file_node",
                                                                 "file_protocol", "device", "export", "objects")}
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        if v == NA:
            continue
        for opts in (axis.qemu(v) if axis.qemu else None, axis.qemu_cell(values, ctx) if axis.qemu_cell else None):
            if opts is not None:
                for k, pairs in merged.items():
                    pairs.extend(getattr(opts, k))
    return QemuOptions(**{k: tuple(v) for k, v in merged.items()})


def tool_options(values: Mapping[str, str], tool: str, skip_keys: Collection[str] = ()
                 ) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(options, notes, unavailable reasons) of every axis of a cell's values, for one tool, in registry order.

    A spelling whose options all have keys in `skip_keys` is left out with its note (options the tool has no
    use for here: Proxmox's image format on a block storage); a value the tool cannot express still counts."""
    options: list[tuple[str, str]] = []
    notes_: list[str] = []
    unavailable: list[str] = []
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        spell = axis.tools.get(tool)
        if spell is None or v == NA:
            continue
        t = spell(v)
        if t.options and all(k in skip_keys for k, _ in t.options):
            continue
        options.extend(t.options)
        if t.note:
            notes_.append(t.note)
        if t.unavailable:
            unavailable.append(t.unavailable)
    return options, notes_, unavailable


register_installed()
