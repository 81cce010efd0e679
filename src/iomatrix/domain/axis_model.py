"""The axis registry's vocabulary: what an axis is (:class:`Axis`, its rules, its QEMU and tool
spellings), the layers it acts on and the facts its rules read of a backing and of QEMU. Data types
only; the axes are in :mod:`iomatrix.domain.local_axes`, :mod:`iomatrix.domain.network_axes` and
each network protocol's module (:mod:`iomatrix.protocols`), the registry in
:mod:`iomatrix.domain.axes`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from iomatrix import domain
from iomatrix.domain import NA, SafetyLevel


def onoff(flag: bool) -> str:
    return "on" if flag else "off"


class Layer(StrEnum):
    """Where in the I/O stack an axis acts. A tier runs some layers; an axis applies where they
    meet."""

    SWEEP = "sweep"  # every tier: which tier measures, and on what backing
    # the host process doing the I/O (fio, qemu-storage-daemon, QEMU): a wrapper around it
    PROCESS = "process"
    # how that process opens and issues I/O on the host (O_DIRECT, flushes, aio engine)
    HOST_IO = "host-io"
    IMAGE = "image"  # QEMU's block graph: the disk image and its nodes
    DEVICE = "device"  # the guest's virtual disk device and its bus
    # What issues requests into QEMU's block graph: a guest device, or a block export
    # (qemu-storage-daemon).
    FRONTEND = "frontend"


@dataclass(frozen=True)
class BackingFacts:
    """What the matrix needs to know of a backing on this host."""

    unavailable: str | None  # reason it cannot run here, or None
    o_direct: bool
    is_device: bool
    # The network protocol the backing serves its disks over (iomatrix.protocols); None for a local
    # backing.
    protocol: str | None = None
    # Why this host's kernel client for `protocol` (open-iscsi with iscsi_tcp; the kernel NFS
    # client) cannot be used, probed by iomatrix.storage_clients; None where it can, or where nobody
    # probed (then no rule prunes).
    kernel_client_missing: str | None = None
    # Whether iomatrix started the network backing's server itself (then it sees the file holding a
    # disk's bytes, where the server-side baseline runs); False for a server the user named; None
    # for a local backing.
    lab_started: bool | None = None
    # How many hosts the backing's clients run on (`[[backing.client_host]]`); 0: the clients run on
    # this host.
    client_hosts: int = 0


@dataclass(frozen=True)
class QemuFacts:
    """What the installed QEMU offers (probed by ``iomatrix.qemu_caps``): the versions of
    qemu-system-x86_64 and qemu-storage-daemon, and the properties of the devices rules ask about
    (``-device NAME,help``)."""

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
    """What a rule may know beyond the cell's values: the facts of the cell's backing on this host,
    of the installed QEMU, and the host's CPU count (None where the sweep has not probed them, e.g.
    snippets: a rule that needs a fact it does not have does not apply)."""

    backing: BackingFacts | None = None
    backing_label: str = ""
    qemu: QemuFacts | None = None
    host_cpus: int | None = None


@dataclass(frozen=True)
class Rule:
    """Why a combination cannot run. `reads` are the axes the check needs: where one of them does
    not apply to the cell's tier ("-"), the rule does not apply either."""

    reads: tuple[str, ...]
    check: Callable[[Mapping[str, str], RuleContext], str | None]

    def reason(self, values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if any(values.get(a, NA) == NA for a in self.reads):
            return None
        return self.check(values, ctx)


Options = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class QemuOptions:
    """What one axis value sets on QEMU's disk, by where it goes. The builders in ``qemu_block``
    (the ``-blockdev`` graph and the block export), the same module's guest ``-device`` and
    ``iomatrix.images`` (``qemu-img create -o``) merge these over every axis of a cell."""

    create: Options = ()  # qemu-img create -o KEY=VALUE
    format_node: Options = ()  # options of the format node (driver=qcow2,…)
    # options of the protocol node below it, whatever the protocol (file, nbd)
    file_node: Options = ()
    # options only the file/host_device protocol takes (not an NBD client node)
    file_protocol: Options = ()
    device: Options = ()  # -device properties of the guest's disk
    # qemu-storage-daemon --export properties (the block-layer tier's NBD export)
    export: Options = ()
    # QOM objects the device or export refers to by id, as (qom-type, id) pairs (-object
    # iothread,id=…). The ids are local to one disk: the builders scope them per disk (qemu_block)
    # and rewrite the references.
    objects: Options = ()


@dataclass(frozen=True)
class DiskContext:
    """What an axis's QEMU options may need beyond the cell's values: the disk image's virtual size
    (None where it is not known, e.g. a snippet for the user's own image). See
    :attr:`Axis.qemu_cell`."""

    image_size_bytes: int | None = None


@dataclass(frozen=True)
class WorkloadShape:
    """What a workload does to the disk, as far as an axis's effect can show in it
    (``Workload.shape``): zero detection shows only with zero-filled writes, a discard policy only
    with trims. `known` is False where iomatrix cannot tell (a custom fio job file, a guest
    filesystem job that runs mkfs): every axis may show."""

    name: str
    known: bool = True
    writes: bool = False
    zero_writes: bool = False  # writes of zero-filled blocks
    trims: bool = False


@dataclass(frozen=True)
class ToolOption:
    """How one tool (libvirt, proxmox, virt-install, nova) writes one axis value.

    `options` are KEY=VALUE pairs of the tool's disk statement (libvirt: attributes of ``<driver>``,
    and ``bus`` of ``<target>``; Proxmox: the drive property string, ``disk-key`` the drive's key
    prefix (``virtio0``) and ``preallocation`` a property of the storage (``pvesm set``);
    virt-install: ``--disk`` keys; Nova: ``nova.conf [libvirt]`` lines, and ``hw_*`` image
    properties); None in `unavailable` means the tool can express the value, a sentence means it
    cannot (and why). `note` is appended to the snippet's note: what the tool does instead, or
    leaves to the user."""

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
    values: tuple[
        str, ...
    ]  # every valid value ("" for an axis whose values come from elsewhere: free_values)
    default: str  # what QEMU/libvirt use when the option is not given; old cells read this value
    plan_default: tuple[str, ...]  # a plan that does not name the axis
    layers: frozenset[Layer]
    # The axes of the first release are always named in a cell's key and label; later ones only when
    # a cell sets them away from their default, so adding an axis changes no stored key and no
    # printed label.
    always_named: bool = False
    # tier and backing: values come from the tier registry and the plan's [[backing]] tables, not
    # from here.
    free_values: bool = False
    rules: tuple[Rule, ...] = ()
    simpler: tuple[
        str, ...
    ] = ()  # simplest first, for the "simplicity" tie-break (the default is simplest)
    qemu: Callable[[str], QemuOptions] | None = None
    # Options that depend on more than the axis's own value (other axes of the cell, the image's
    # size): the L2 cache that covers the whole image needs the image size, the cluster size and the
    # L2 entry width.
    qemu_cell: Callable[[Mapping[str, str], DiskContext], QemuOptions] | None = None
    tools: Mapping[str, Callable[[str], ToolOption]] = field(default_factory=dict)
    risk: Callable[[str], SafetyLevel | None] = (
        _no_risk  # documented power-loss risk of a value alone
    )
    # A note for the sweep (shown by `plan --explain` and stored) when some cell has a value that
    # needs one.
    cell_note: Callable[[Mapping[str, str]], str | None] | None = None
    # Why a workload cannot show this axis's value in a cell (None: it can), for the image-layer
    # axes whose effect needs a kind of I/O (zero detection: zero-filled writes); the matrix then
    # runs that workload with the axis at one value only. Arguments: the cell's values, the
    # workload's shape, the image's virtual size in bytes.
    shown_by: Callable[[Mapping[str, str], WorkloadShape, int], str | None] | None = None
    short: str = ""  # a shorter column heading ("prealloc")
    # Device options of this axis that belong to the bus's controller where the bus has one per disk
    # or shared (virtio-scsi: its virtqueues and IOThread serve the disks on it), -device key → the
    # controller's name for it. The QEMU disk builder moves them there; libvirt and virt-install
    # write the axis on the <controller>.
    on_controller: Mapping[str, str] = field(default_factory=dict)
    # An axis whose values are free-form (rtt = "0.5ms"): why a value outside `values` is not valid,
    # None where it is; `values` then lists examples (what error messages and --current read-back
    # offer).
    check_value: Callable[[str], str | None] | None = None

    @property
    def heading(self) -> str:
        """The axis's column heading in terminal tables (short where the name is long)."""
        return self.short or self.name

    def invalid(self, value: object) -> str | None:
        """Why `value` is not a value of this axis (one line), or None: a listed value, or for an
        axis with free-form values (rtt) one its `check_value` accepts."""
        if value in self.values:
            return None
        if self.check_value is not None and isinstance(value, str):
            return self.check_value(value)
        hint = domain.did_you_mean(value, self.values)
        return f"'{value}' is not valid; valid values: {self.choices()}{hint}"

    def applies_to(self, layers: frozenset[Layer]) -> bool:
        return self.name in ("tier", "backing") or bool(self.layers & layers)

    def choices(self) -> str:
        """'a, b or c': the valid values, for error messages."""
        vals = list(self.values)
        return ", ".join(vals[:-1]) + f" or {vals[-1]}" if len(vals) > 1 else vals[0]


# A client axis's value for the host kernel's client of a network protocol (the initiator's, the
# NFS client's: NetworkProtocol.kernel_client).
KERNEL_CLIENT = "kernel"
