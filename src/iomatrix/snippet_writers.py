"""Each tool's snippet writer for a new disk of one configuration (iomatrix.snippets puts them together and changes a
disk the user already has).

Everything is generated from the axis registry (`iomatrix.domain.axes`): a configuration holds a value of
every axis, each tool's options are the axes' spellings for that tool (`axes.tool_options`), and the rules
between them are the registry's; an axis added to the registry reaches every snippet with no change here.
What stays here is each tool's own structure: where an option goes (libvirt's <driver> or <target>, Proxmox's
drive or storage, Nova's nova.conf or image properties), the virtio-scsi controller, the eatmydata wrapper
and the measured discard/detect-zeroes defaults. The QEMU arguments are the very `-blockdev`/`-device` graph the
guest tier measures (`iomatrix.qemu_block.blockdev_args` and `device_args`, the one QEMU disk builder), so what is
pasted is what was measured. Where a tool cannot express a configuration (Proxmox has no NVMe disk bus, Nova
cannot use qed images) the snippet says so in one line instead of printing something that would not work.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.domain import (
    BLOCK_BACKINGS,
    LIBVIRT_DEV,
    MEASURED_DETECT_ZEROES,
    MEASURED_DISCARD,
    NA,
    NETWORK_BACKINGS,
    SCSI_CONTROLLER_BUSES,
    Aio,
    BackingKind,
    Bus,
    CacheMode,
    Format,
    Modifier,
    Preallocation,
    axes,
)
from iomatrix.domain.axes import (
    QUEUES_AUTO,
    VIRTIO_PROBED_DEVICE,
    VQ_MAPPING_SINCE,
    BackingFacts,
    IOThread,
    RuleContext,
)
from iomatrix.errors import UserError
from iomatrix.qemu_block import DiskSpec, blockdev_args, device_args
from iomatrix.snippet_network import (
    NETWORK_SKIPPED_KEYS,
    NFS_IDENTITY,
    NetworkPlace,
    client_is_kernel,
    libvirt_auth,
    libvirt_source,
    network_url,
    qemu_img_rbd_target,
    qemu_protocol_node,
)

DEFAULT_SIZE_GIB = 32

# eatmydata is an LD_PRELOAD library around the whole QEMU process: no tool has a per-disk setting for it,
# so the snippets run QEMU through this wrapper script (libvirt: <emulator>).
EATMYDATA_WRAPPER = "/usr/local/bin/qemu-system-x86_64-eatmydata"
QEMU_BINARY = "/usr/bin/qemu-system-x86_64"
EATMYDATA_NOTE = ("eatmydata applies to the whole VM (every disk): libvirt cannot preload a library into QEMU, "
                  f"so <emulator> runs QEMU through the wrapper script {EATMYDATA_WRAPPER} (see the wrapper "
                  "snippet)")
DISCARD_NOTE = ("discard and detect-zeroes as measured (QEMU's defaults: discard ignored, zero detection off); "
                "on thin storage discard=unmap lets the guest's TRIM free space: an option, not measured here")
# What a snippet says of the measured defaults it writes, when an axis spells the other one itself.
MEASURED_NOTES = {"discard": "discard as measured (QEMU's default: discard ignored); on thin storage discard=unmap "
                             "lets the guest's TRIM free space: an option, not measured here",
                  "detect_zeroes": "detect-zeroes as measured (QEMU's default: zero detection off)"}

# libvirt: the option keys that go on <target> (the rest are attributes of <driver>).
LIBVIRT_TARGET_KEYS = ("bus",)
# virt-install: the image and the device first, then the driver's options, as virt-install(1) writes them.
VIRT_INSTALL_LEADING_KEYS = ("format", "bus")
# Proxmox: the key prefix of the drive (virtio0, scsi0), and the keys set on the storage (pvesm set), not the
# drive; a block storage (LVM, ZFS) has no image file, so no format on the drive and no preallocation.
PROXMOX_DISK_KEY = "disk-key"
PROXMOX_STORAGE_KEYS = ("preallocation",)
PROXMOX_IMAGE_FILE_KEYS = ("format", "preallocation")
# Nova: image properties (openstack image set --property) are hw_*; the rest are nova.conf [libvirt] lines, of
# which images_type and preallocate_images concern instance disks that are image files.
NOVA_IMAGE_PROPERTY_PREFIX = "hw_"
NOVA_IMAGE_FILE_KEYS = ("images_type", "preallocate_images")
NOVA_CACHE_KEY = "disk_cachemodes"  # a list of SOURCE=MODE: the source (file, block) is the snippet's backing

# The libvirt <controller> the shared virtio-scsi bus has always been written with (pinned snippets).
LIBVIRT_SHARED_SCSI_CONTROLLER = "<controller type='scsi' model='virtio-scsi'/>"
# virtio-scsi-single: the disk's own controller, which the disk's drive address names. One index for the snippet's
# one disk; further disks each take the next index (the note says so).
SINGLE_CONTROLLER_INDEX = "0"
# libvirt's IOThread ids count from 1 up to <iothreads>N</iothreads>; every snippet uses IOThread 1.
LIBVIRT_IOTHREAD_ID = "1"
LIBVIRT_DOMAIN_LEVEL = "<!-- in <domain>, beside <vcpu> -->"
LIBVIRT_DEVICES_LEVEL = "<!-- in <devices> -->"


def measured_defaults(tool: str, spelled: Mapping[str, str]) -> list[tuple[str, str]]:
    """discard and detect-zeroes are not axes: every tier measures QEMU's defaults, written out per tool (a
    tool's own default may differ) unless an axis spells the option itself."""
    return [(k, table[tool]) for k, table in (("discard", MEASURED_DISCARD), ("detect_zeroes", MEASURED_DETECT_ZEROES))
            if k not in spelled]


def measured_note(written: list[tuple[str, str]]) -> str:
    keys = [k for k, _ in written]
    return DISCARD_NOTE if len(keys) == len(MEASURED_NOTES) else "; ".join(MEASURED_NOTES[k] for k in keys)


# The axes a DiskConfig's positional form names (the first release's, in this order); the view holds every axis
# in one mapping all the same.
_POSITIONAL_AXES = ("format", "preallocation", "cache", "aio", "bus")


class DiskConfig:
    """One VM disk configuration: a view over one axis → value mapping (`values`: a value of every axis of the
    registry but tier and backing), and what the image lives on (`backing`: a file or a block device).

    Its typed attributes (``format``, ``cache``, …) read the mapping; `more` is the later axes' part of it. The
    positional form ``DiskConfig(format, preallocation, cache, aio, bus, backing, assumed, modifier, more)`` fills
    the same mapping. Immutable and hashable."""

    __slots__ = ("_values", "assumed", "backing")

    def __init__(self, format: str | None = None, preallocation: str | None = None,
                 cache: str | None = None, aio: str | None = None, bus: str | None = None,
                 backing: BackingKind = BackingKind.FILE, assumed: tuple[str, ...] = (),
                 modifier: str = Modifier.NONE, more: Mapping[str, str] | None = None, *,
                 values: Mapping[str, str] | None = None) -> None:
        if values is None:
            positional = dict(zip(_POSITIONAL_AXES, (format, preallocation, cache, aio, bus), strict=True))
            if None in positional.values():
                raise TypeError(f"DiskConfig needs {', '.join(_POSITIONAL_AXES)} (or values=)")
            for name in more or {}:
                if name not in axes.REGISTRY or axes.get(name).always_named:
                    raise UserError(f"no axis {name!r} beyond {', '.join(_TYPED_AXES)}",
                                    hint=f"axes: {', '.join(a.name for a in axes.plan_axes())}")
            values = {**{k: str(v) for k, v in positional.items()}, "modifier": str(modifier), **(more or {})}
        for name, value in values.items():
            if name not in axes.REGISTRY or axes.get(name).free_values:
                raise UserError(f"no axis {name!r} in a disk configuration",
                                hint=f"axes: {', '.join(a.name for a in axes.plan_axes())}")
            if axes.get(name).invalid(value):
                raise UserError(f"{name}={value} is not a value of {name}", hint=f"use {axes.get(name).choices()}")
        object.__setattr__(self, "_values", {a.name: values[a.name] for a in axes.plan_axes() if a.name in values})
        object.__setattr__(self, "backing", BackingKind(backing))
        object.__setattr__(self, "assumed", tuple(assumed))  # axes the source did not give: the axis's default
        reason = refusal(self.axis_values(), self.backing)
        if reason:
            raise UserError(reason, hint="pick a combination QEMU accepts (see 'iomatrix plan --explain')")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a DiskConfig is immutable")

    def _key(self) -> tuple[object, ...]:
        return tuple(sorted(self._values.items())), self.backing, self.assumed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiskConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"DiskConfig(values={self._values!r}, backing={self.backing!s})"

    @property
    def values(self) -> dict[str, str]:
        return dict(self._values)

    @property
    def format(self) -> Format:
        return Format(self._values["format"])

    @property
    def preallocation(self) -> Preallocation:
        return Preallocation(self._values["preallocation"])

    @property
    def cache(self) -> CacheMode:
        return CacheMode(self._values["cache"])

    @property
    def aio(self) -> Aio:
        return Aio(self._values["aio"])

    @property
    def bus(self) -> Bus:
        return Bus(self._values["bus"])

    @property
    def modifier(self) -> Modifier:
        return Modifier(self._values.get("modifier", Modifier.NONE))

    @property
    def more(self) -> dict[str, str]:
        """The registry's later axes set away from their default (what reaches the snippets beyond the first
        release's axes)."""
        return {a: v for a, v in self._values.items()
                if not axes.get(a).always_named and v != axes.get(a).default}

    @classmethod
    def from_axes(cls, cell: Mapping[str, str], backing_type: str | None = None) -> DiskConfig:
        """From a cell's axes (as stored): every axis of the registry; one shown as "-" (it does not apply to
        the cell's tier) or absent takes the axis's default, and is listed in `assumed` where a tool spells it (the
        first release's axes: a later axis a cell does not name is at QEMU's default, as measured)."""
        vals: dict[str, str] = {}
        assumed: list[str] = []
        for axis in axes.plan_axes():
            v = cell.get(axis.name, NA)
            if v in (NA, None, ""):
                if axis.name == "cache":  # the one axis every snippet is about: never assumed
                    raise UserError("a configuration needs a cache mode", hint=f"use {axis.choices()}")
                v = str(axis.default)
                # A later axis left out is at QEMU's default, which is what was measured: nothing to assume.
                if axis.tools and axis.always_named:
                    assumed.append(axis.name)
            vals[axis.name] = v
        kind = BackingKind.BLOCK if backing_type in BLOCK_BACKINGS else BackingKind.FILE
        if backing_type in NETWORK_BACKINGS:
            kind = BackingKind(backing_type)
        return cls(values=vals, backing=kind, assumed=tuple(assumed))

    @property
    def protocol(self) -> str | None:
        """The network protocol the disk is reached by ("iscsi", "nfs", "rbd"); None for a local file or device."""
        return self.backing.value if self.backing.value in NETWORK_BACKINGS else None

    @property
    def userspace_client(self) -> bool:
        """A network disk QEMU reaches with its own client (libiscsi, libnfs, librbd): no host file, so no aio=."""
        return self.protocol is not None and not client_is_kernel(self.protocol, self._values)

    def axis_values(self) -> dict[str, str]:
        """The configuration's value of every axis of the registry (tier and backing aside), later axes only where
        they are set away from their default (as in a cell's key: the snippet is the one it was before them)."""
        return {a: v for a, v in self._values.items() if axes.get(a).always_named or a in self.more}

    def label(self) -> str:
        """The axes every tool spells are always named; the others (a host wrapper, later axes) only away
        from their default."""
        values = self.axis_values()
        return " ".join(f"{a.name}={values[a.name]}" for a in axes.plan_axes() if a.name in values
                        and ((a.always_named and a.tools) or values[a.name] != a.default))

    def default_path(self) -> str:
        if self.protocol is not None:  # a network disk's own name: snippet_network.NetworkPlace
            return network_url(self.protocol, NetworkPlace(), self.format.value)
        if self.backing == BackingKind.BLOCK:
            return "/dev/vg0/vm-disk"
        return f"/var/lib/libvirt/images/vm-disk.{self.format}"



def snippet_backing(meta: Mapping[str, Any]) -> str | None:
    """What a stored backing's metadata says the snippets' disk is on (DiskConfig.from_axes): its backing type where
    it is served over the network (iscsi, nfs), else its kind."""
    kind = meta.get("backing_type")
    return kind if kind in NETWORK_BACKINGS else meta.get("kind")


# The axes every configuration names (the first release's); later axes are named only away from their default.
_TYPED_AXES = tuple(a.name for a in axes.plan_axes() if a.always_named)


def refusal(values: Mapping[str, str], backing: BackingKind) -> str | None:
    """Why QEMU would not run a configuration: the registry's rules, for a backing that takes O_DIRECT (the
    user's storage is not probed). The bus's rule is left out: it is about the guest kernel iomatrix boots
    (no ahci driver), not the user's VM."""
    protocol = backing.value if backing.value in NETWORK_BACKINGS else None
    # An RBD image is a fixed-size volume, as a LUN is: a raw disk on it is the volume itself.
    ctx = RuleContext(BackingFacts(unavailable=None, o_direct=True, protocol=protocol,
                                   is_device=backing in (BackingKind.BLOCK, BackingKind.ISCSI, BackingKind.RBD)),
                      "your storage")
    for axis in axes.axes():
        if axis.name == "bus":
            continue
        for rule in axis.rules:
            if reason := rule.reason(values, ctx):
                return reason
    return None


def _not_available(unavailable: list[str]) -> str:
    return "not available: " + "; ".join(unavailable)


Pairs = list[tuple[str, str]]


def _partition(opts: Pairs, keys: Callable[[str], bool]) -> tuple[Pairs, Pairs]:
    """(the options whose key `keys` accepts, the others), each in order."""
    return [kv for kv in opts if keys(kv[0])], [kv for kv in opts if not keys(kv[0])]


@dataclass(frozen=True)
class Snippet:
    tool: str  # "libvirt", "qemu", "proxmox", "virt-install", "nova", "qemu-img"
    title: str
    text: str | None  # None when the tool cannot express the configuration
    note: str = ""  # what the snippet leaves to the user, or why it is not available
    language: str = "sh"

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "title": self.title, "text": self.text, "note": self.note,
                "language": self.language}


@dataclass
class SnippetSet:
    config: DiskConfig
    snippets: list[Snippet] = field(default_factory=list)

    def by_tool(self, tool: str) -> Snippet:
        return next(s for s in self.snippets if s.tool == tool)

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config.label(), "assumed": list(self.config.assumed),
                "snippets": [s.as_dict() for s in self.snippets]}


# --------------------------------------------------------------------------- libvirt


def controller_options(cfg: DiskConfig, tool: str) -> tuple[Pairs, Pairs]:
    """(the tool's options for the disk, those for its virtio-scsi controller): on a scsi bus the device axes'
    options (the registry's Axis.on_controller) are the controller's; on any other bus everything is the disk's."""
    opts = axes.tool_options(cfg.axis_values(), tool)[0]
    if cfg.bus not in SCSI_CONTROLLER_BUSES:
        return opts, []
    values = cfg.axis_values()
    controller_keys = {k for a in axes.controller_axes() if a in values
                       for k, _ in axes.tool_options({a: values[a]}, tool)[0]}
    on_controller, on_disk = _partition(opts, controller_keys.__contains__)
    return on_disk, on_controller


def controller_options_of(cfg: DiskConfig, opts: Pairs, tool: str) -> tuple[Pairs, Pairs]:
    """`opts` (the tool's options, in the caller's order) split as `controller_options` splits them."""
    on_controller = controller_options(cfg, tool)[1]
    return [kv for kv in opts if kv not in on_controller], on_controller


def _uses_iothread(cfg: DiskConfig) -> bool:
    return cfg.more.get("iothread", axes.get("iothread").default) != axes.get("iothread").default


def libvirt_disk_element(cfg: DiskConfig, path: str | None = None, dev: str | None = None) -> ET.Element:
    path = path or cfg.default_path()
    target, driver = _partition(controller_options(cfg, "libvirt")[0], LIBVIRT_TARGET_KEYS.__contains__)
    if cfg.userspace_client:
        driver = [kv for kv in driver if kv[0] not in NETWORK_SKIPPED_KEYS["libvirt"]]
    if cfg.protocol is not None:
        kind, source, host = libvirt_source(cfg.protocol, cfg.values, cfg.format.value, NetworkPlace())
    else:
        kind = "block" if cfg.backing == BackingKind.BLOCK else "file"
        source, host = ({"dev": path} if cfg.backing == BackingKind.BLOCK else {"file": path}), None
    disk = ET.Element("disk", type=kind, device="disk")
    ET.SubElement(disk, "driver", dict([("name", "qemu"), *driver, *measured_defaults("libvirt", dict(driver))]))
    src = ET.SubElement(disk, "source", source)
    if host is not None:
        ET.SubElement(src, "host", host)
    if source.get("protocol") == "nfs":
        # libvirt's schema (9.0) requires the user and group libnfs accesses the export as: NFS_IDENTITY.
        ET.SubElement(src, "identity", NFS_IDENTITY)
    if kind == "network" and cfg.protocol is not None and (auth := libvirt_auth(cfg.protocol, NetworkPlace())):
        # <auth> beside <source>, where Ceph's libvirt guide and every libvirt since 0.9.7 put it.
        ET.SubElement(ET.SubElement(disk, "auth", auth[0]), "secret", auth[1])
    ET.SubElement(disk, "target", dict([("dev", dev or LIBVIRT_DEV[cfg.bus]), *target]))
    if cfg.bus == Bus.VIRTIO_SCSI_SINGLE:  # the disk's own controller
        ET.SubElement(disk, "address", type="drive", controller=SINGLE_CONTROLLER_INDEX, bus="0", target="0",
                      unit="0")
    return disk


def libvirt_disk_xml(cfg: DiskConfig, path: str | None = None, dev: str | None = None) -> str:
    el = libvirt_disk_element(cfg, path, dev)
    ET.indent(el, space="  ")
    return ET.tostring(el, encoding="unicode")


def libvirt_controller_xml(cfg: DiskConfig) -> str | None:
    """The virtio-scsi <controller> a scsi disk needs (libvirt adds an LSI one otherwise), with the IOThread and
    virtqueues its disks share; None on other buses."""
    if cfg.bus not in SCSI_CONTROLLER_BUSES:
        return None
    driver = controller_options(cfg, "libvirt")[1]
    if cfg.bus == Bus.VIRTIO_SCSI and not driver:
        return LIBVIRT_SHARED_SCSI_CONTROLLER
    index = [("index", SINGLE_CONTROLLER_INDEX)] if cfg.bus == Bus.VIRTIO_SCSI_SINGLE else []
    ctrl = ET.Element("controller", dict([("type", "scsi"), *index, ("model", "virtio-scsi")]))
    if driver:
        ET.SubElement(ctrl, "driver", dict(driver))
    ET.indent(ctrl, space="  ")
    return ET.tostring(ctrl, encoding="unicode")


def _libvirt_device_notes(cfg: DiskConfig, driver_on_controller: bool) -> list[str]:
    notes = []
    if cfg.bus == Bus.VIRTIO_SCSI:
        notes.append("bus scsi needs the virtio-scsi controller shown (libvirt adds an LSI one otherwise)"
                     + ("; its IOThread and queues serve every disk on it" if driver_on_controller else ""))
    elif cfg.bus == Bus.VIRTIO_SCSI_SINGLE:
        notes.append(f"virtio-scsi-single: a virtio-scsi controller per disk, which the disk's <address "
                     f"controller='{SINGLE_CONTROLLER_INDEX}'> names; give each further disk its own controller "
                     "(index 1, 2, …)" + (" and IOThread" if _uses_iothread(cfg) else ""))
    if _uses_iothread(cfg):
        notes.append(f"<iothreads>{LIBVIRT_IOTHREAD_ID}</iothreads> goes in <domain> (raise it if other disks "
                     "have IOThreads of their own)")
    return notes


def libvirt_snippet(cfg: DiskConfig, path: str | None = None, dev: str | None = None) -> Snippet:
    title = "libvirt domain XML (virsh edit VM: replace the <disk> element)"
    opts, axis_notes, unavailable = axes.tool_options(cfg.axis_values(), "libvirt")
    if unavailable:
        return Snippet("libvirt", title, None, _not_available(unavailable), "xml")
    devices = [libvirt_disk_xml(cfg, path, dev)]
    notes = [measured_note(measured_defaults("libvirt", dict(opts)))]
    if (controller := libvirt_controller_xml(cfg)) is not None:
        devices.insert(0, controller)
    notes += _libvirt_device_notes(cfg, bool(controller_options(cfg, "libvirt")[1]))
    notes += axis_notes
    if cfg.modifier == Modifier.EATMYDATA:
        devices.insert(0, f"<emulator>{EATMYDATA_WRAPPER}</emulator>")
        notes.append(EATMYDATA_NOTE)
    xml = "\n".join(devices)
    if _uses_iothread(cfg):  # a domain-level element: where each part goes is said in the XML itself
        xml = "\n".join((LIBVIRT_DOMAIN_LEVEL, f"<iothreads>{LIBVIRT_IOTHREAD_ID}</iothreads>",
                         LIBVIRT_DEVICES_LEVEL, xml))
    return Snippet("libvirt", title, xml, "; ".join(filter(None, notes)), "xml")


# --------------------------------------------------------------------------- QEMU


def _disk_spec(cfg: DiskConfig, path: str | None) -> DiskSpec:
    return DiskSpec.for_cell(cfg.axis_values(), path or cfg.default_path())


def qemu_argv(cfg: DiskConfig, path: str | None = None, node: str = "disk0") -> list[str]:
    """The -blockdev/-device arguments the guest tier measured, for `path`."""
    spec = _disk_spec(cfg, path)
    blockdev = blockdev_args(spec, node=node)
    if cfg.protocol is not None:
        blockdev = [_network_blockdev(cfg, a) if a.startswith("driver=") else a for a in blockdev]
    if cfg.backing == BackingKind.BLOCK:
        # blockdev_args picks the protocol from the path it sees; a snippet's path need not exist here.
        blockdev = [a.replace("file.driver=file,", "file.driver=host_device,") for a in blockdev]
    # QEMU's default error policy (pause the VM on ENOSPC, e.g. a full thin pool) is kept for the user's
    # VM: iomatrix reports errors only so that a measurement fails with a reason instead of hanging.
    return [*blockdev, *device_args(spec, node=node, serial="disk0", report_errors=False)]


def _network_blockdev(cfg: DiskConfig, arg: str) -> str:
    """A -blockdev value with its protocol node (file.driver=file,file.filename=…) replaced by the network disk's:
    QEMU's iscsi/nfs driver, or the device/file the kernel's client gives (snippet_network.qemu_protocol_node)."""
    assert cfg.protocol is not None
    proto = qemu_protocol_node(cfg.protocol, cfg.values, cfg.format.value, NetworkPlace())
    dropped = ("file.driver=", "file.filename=", *(("file.aio=",) if cfg.userspace_client else ()))
    parts = arg.split(",")
    at = next(i for i, p in enumerate(parts) if p.startswith("file.driver="))
    kept = [p for p in parts if not p.startswith(dropped)]
    return ",".join([*kept[:at], *(f"file.{k}={v}" for k, v in proto), *kept[at:]])


# The widest line of a shell snippet (a terminal of 100 columns, a page's code block).
SNIPPET_WIDTH = 100
CONTINUATION = " \\\n"  # ' \' and a newline: the command goes on on the next line


def shell_word(lead: str, value: str, width: int = SNIPPET_WIDTH) -> str:
    """`lead` then `value` as one shell word, continued at its commas over lines of at most `width` columns (a
    backslash at each line's end; the word resumes at the next line's start, so it stays one word in sh and bash,
    each part quoted where it needs quoting). Room is kept for a trailing ' \\' on the last line."""
    one = lead + shlex.quote(value)
    if len(one) <= width - 2:
        return one
    pieces = re.findall(r"[^,]*,|[^,]+$", value)
    chunks: list[str] = []
    cur, room = "", width - 2 - len(lead)
    for piece in pieces:
        if cur and len(shlex.quote(cur + piece)) > room:
            chunks.append(cur)
            cur, room = piece, width - 2
        else:
            cur += piece
    chunks.append(cur)
    return lead + "\\\n".join(shlex.quote(c) for c in chunks)


def shell_command(words: list[str], width: int = SNIPPET_WIDTH) -> str:
    """`words` as one shell command (each quoted where it needs it): on one line where it fits in `width`, else
    continued before the word that would not fit (a long word itself continued at its commas, `shell_word`)."""
    one = shlex.join(words)
    if len(one) <= width:
        return one
    done, line = "", ""
    for word in words:
        if line and len(line) + 1 + len(shlex.quote(word)) > width - 2:
            done += line + CONTINUATION
            line = ""
        text = shell_word(line + " " if line else "", word, width)
        head, sep, line = text.rpartition("\n")  # a word continued over lines goes on on its last one
        done += head + sep
    return done + line


def qemu_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    argv = qemu_argv(cfg, path)
    pairs = [shell_word(f"{argv[i]} ", argv[i + 1]) for i in range(0, len(argv), 2)]
    note = "append to your qemu-system-x86_64 command line"
    if cfg.more.get("queues", QUEUES_AUTO) != QUEUES_AUTO:
        note += f" (with -smp {cfg.more['queues']} or more: the guest uses a queue per vCPU)"
    if cfg.more.get("iothread") == IOThread.VQ_MAPPING:
        device = VIRTIO_PROBED_DEVICE.get(cfg.bus, "")
        note += (f"; iothread-vq-mapping needs QEMU ≥ {VQ_MAPPING_SINCE.get(device, '9.0')} and QEMU's JSON -device "
                 "syntax (its value is a list)")
    if cfg.modifier == Modifier.EATMYDATA:
        note += " and start QEMU as 'eatmydata qemu-system-x86_64 …' (an LD_PRELOAD wrapper of the whole process)"
    # An axis that sets discard or detect-zeroes on the graph takes that default's place.
    qopts = _disk_spec(cfg, path).qemu_options()
    spelled = {k.replace("-", "_"): v for k, v in (*qopts.format_node, *qopts.file_node, *qopts.file_protocol)}
    return Snippet("qemu", "QEMU command line (-blockdev/-device, the graph iomatrix measured)",
                   CONTINUATION.join(pairs), "; ".join(filter(None, (note, measured_note(measured_defaults("qemu",
                                                                                                       spelled))))))


def eatmydata_wrapper_snippet() -> Snippet:
    """The script libvirt's <emulator> (or any tool that takes an emulator path) runs instead of QEMU."""
    script = (f"cat > {EATMYDATA_WRAPPER} <<'EOF'\n#!/bin/sh\n"
              "# QEMU under eatmydata: its fsync/fdatasync return at once, so nothing is durable until the host\n"
              "# writes it back on its own (power loss or a host crash loses acknowledged guest writes)\n"
              f'exec eatmydata {QEMU_BINARY} "$@"\nEOF\nchmod 755 {EATMYDATA_WRAPPER}')
    return Snippet("qemu-wrapper", "QEMU wrapper for eatmydata (what libvirt's <emulator> points at)", script,
                   "needs the eatmydata package; under AppArmor or SELinux the VM's confinement must allow libvirt "
                   "to execute the wrapper")


# --------------------------------------------------------------------------- Proxmox


def _proxmox_options(cfg: DiskConfig) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    skip = PROXMOX_IMAGE_FILE_KEYS if cfg.backing == BackingKind.BLOCK else ()
    return axes.tool_options(cfg.axis_values(), "proxmox", skip_keys=skip)


def _proxmox_drive_options(opts: Pairs) -> Pairs:
    """The axes' options that are properties of the drive (not its key, not the storage's)."""
    return _partition(opts, lambda k: k != PROXMOX_DISK_KEY and k not in PROXMOX_STORAGE_KEYS)[0]


# Proxmox's format names (qm disk move --format).
PROXMOX_FORMAT_NAMES = {Format.RAW: "raw", Format.QCOW2: "qcow2", Format.QED: "qed"}
# qm.conf scsihw per bus: virtio-scsi-pci is one controller for every scsi disk, virtio-scsi-single one per disk.
PROXMOX_SCSIHW = {Bus.VIRTIO_SCSI: "virtio-scsi-pci", Bus.VIRTIO_SCSI_SINGLE: "virtio-scsi-single"}


def _proxmox_device_unavailable(cfg: DiskConfig) -> list[str]:
    """What Proxmox cannot set on this bus (qemu-server PVE/QemuServer.pm config_to_command: a scsi drive's
    iothread and queues go on its controller only with scsihw virtio-scsi-single, and are ignored otherwise;
    PVE/QemuServer/Drive.pm: virtio drives have iothread but no queues)."""
    iothread, queues = cfg.more.get("iothread", IOThread.OFF), cfg.more.get("queues", QUEUES_AUTO)
    out = []
    if cfg.bus == Bus.VIRTIO_SCSI and iothread != IOThread.OFF:
        out.append("Proxmox gives a scsi disk an IOThread only with scsihw virtio-scsi-single (with virtio-scsi-pci "
                   "it ignores iothread=1): use bus virtio-scsi-single")
    if cfg.bus == Bus.VIRTIO_SCSI and queues != QUEUES_AUTO:
        out.append("Proxmox sets a scsi disk's queues only with scsihw virtio-scsi-single (a controller per disk)")
    if cfg.bus == Bus.VIRTIO_BLK and queues != QUEUES_AUTO:
        out.append("Proxmox's virtio drives have no queues option: QEMU gives them one queue per vCPU")
    return out


def proxmox_drive_value(cfg: DiskConfig, storage: str = "STORAGE", size_gib: int = DEFAULT_SIZE_GIB) -> str:
    """The qm.conf property string: STORAGE:SIZE allocates a new volume of SIZE GiB."""
    drive = _proxmox_drive_options(_proxmox_options(cfg)[0])
    drive += measured_defaults("proxmox", dict(drive))
    return ",".join([f"{storage}:{size_gib}", *(f"{k}={v}" for k, v in drive)])


def proxmox_snippet(cfg: DiskConfig, vmid: str = "VMID", storage: str = "STORAGE",
                    size_gib: int = DEFAULT_SIZE_GIB) -> Snippet:
    title = "Proxmox VE (qm set)"
    opts, axis_notes, unavailable = _proxmox_options(cfg)
    unavailable += _proxmox_device_unavailable(cfg)
    if unavailable:
        return Snippet("proxmox", title, None, _not_available(unavailable))
    cmd = f"qm set {vmid}"
    if cfg.bus in PROXMOX_SCSIHW:
        cmd += f" --scsihw {PROXMOX_SCSIHW[cfg.bus]}"  # the controller measured; Proxmox's default may be LSI
    cmd = shell_command([*cmd.split(), f"--{dict(opts)[PROXMOX_DISK_KEY]}0", proxmox_drive_value(cfg, storage,
                                                                                                 size_gib)])
    measured = dict(measured_defaults("proxmox", dict(_proxmox_drive_options(opts))))
    notes = ["STORAGE:SIZE allocates a new volume of SIZE GiB; use an existing volume id to reconfigure a disk"]
    if "detect_zeroes" in measured:
        notes.append("detect_zeroes=0 because Proxmox turns QEMU's zero detection on by default and iomatrix "
                     "measured it off")
    if "discard" in measured:
        notes.append("discard=on (guest TRIM frees thin storage) is an option, not measured here")
    notes += axis_notes
    if cfg.modifier == Modifier.EATMYDATA:
        notes.append("eatmydata cannot be expressed: Proxmox starts QEMU itself and has no per-VM wrapper "
                     "(only a host-wide replacement of /usr/bin/kvm would do, for every VM)")
    if on_storage := _partition(opts, PROXMOX_STORAGE_KEYS.__contains__)[0]:
        cmd += f"\npvesm set {storage}" + "".join(f" --{k} {v}" for k, v in on_storage)
        notes.append(f"{', '.join(k for k, _ in on_storage)} is a property of a directory/NFS storage, not of "
                     "one disk")
    return Snippet("proxmox", title, cmd, "; ".join(notes))


# --------------------------------------------------------------------------- virt-install, Nova, qemu-img


def virt_install_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    title = "virt-install --disk"
    opts, axis_notes, unavailable = axes.tool_options(cfg.axis_values(), "virt-install")
    if unavailable:
        return Snippet("virt-install", title, None, _not_available(unavailable))
    lead = VIRT_INSTALL_LEADING_KEYS
    ordered = sorted(opts, key=lambda kv: lead.index(kv[0]) if kv[0] in lead else len(lead))  # stable: else as given
    ordered, on_controller = controller_options_of(cfg, ordered, "virt-install")
    keys = [("path", path or cfg.default_path()), *ordered, *measured_defaults("virt-install", dict(opts))]
    if cfg.bus == Bus.VIRTIO_SCSI_SINGLE:  # the disk's own controller (virt-install's address.* keys)
        keys += [("address.type", "drive"), ("address.controller", SINGLE_CONTROLLER_INDEX), ("address.bus", "0"),
                 ("address.target", "0"), ("address.unit", "0")]
    lines = [shell_word("--disk ", ",".join(f"{k}={v}" for k, v in keys))]
    if cfg.bus in SCSI_CONTROLLER_BUSES:
        index = [("index", SINGLE_CONTROLLER_INDEX)] if cfg.bus == Bus.VIRTIO_SCSI_SINGLE else []
        controller = [("type", "scsi"), *index, ("model", "virtio-scsi"), *on_controller]
        lines.insert(0, shell_word("--controller ", ",".join(f"{k}={v}" for k, v in controller)))
    if _uses_iothread(cfg):
        lines.insert(0, f"--iothreads {LIBVIRT_IOTHREAD_ID}")
    notes = ["uses an existing image: create it first with the qemu-img line", *axis_notes]
    if cfg.bus == Bus.VIRTIO_SCSI_SINGLE:
        notes.append("virtio-scsi-single: give each further disk its own --controller (index=1, 2, …) and its "
                     "address.controller")
    if cfg.modifier == Modifier.EATMYDATA:
        lines.append(f"--xml ./devices/emulator={EATMYDATA_WRAPPER}")  # virt-install's XPath edit of the domain XML
        notes.append(EATMYDATA_NOTE)
    return Snippet("virt-install", title, CONTINUATION.join(lines), "; ".join(notes))


def nova_snippet(cfg: DiskConfig) -> Snippet:
    title = "OpenStack Nova (nova.conf on each compute node, and the image's bus)"
    skip = NOVA_IMAGE_FILE_KEYS if cfg.backing == BackingKind.BLOCK else ()
    opts, notes, unavailable = axes.tool_options(cfg.axis_values(), "nova", skip_keys=skip)
    if unavailable:
        return Snippet("nova", title, None, _not_available(unavailable), "ini")
    source = "block" if cfg.backing == BackingKind.BLOCK else "file"
    props, conf = _partition(opts, lambda k: k.startswith(NOVA_IMAGE_PROPERTY_PREFIX))
    conf.sort(key=lambda kv: kv[0] != NOVA_CACHE_KEY)  # the cache mode, what was measured above all, first
    lines = ["[libvirt]", *(f"{k} = {source}={v}" if k == NOVA_CACHE_KEY else f"{k} = {v}" for k, v in conf)]
    if props:
        lines.append("# image property: openstack image set " + "".join(f"--property {k}={v} " for k, v in props)
                     + "IMAGE")
    if cfg.modifier == Modifier.EATMYDATA:
        notes.append("eatmydata cannot be expressed: Nova has no setting for the QEMU binary a guest runs")
    return Snippet("nova", title, "\n".join(lines), "; ".join(notes), "ini")


def qemu_img_snippet(cfg: DiskConfig, path: str | None = None, size_gib: int = DEFAULT_SIZE_GIB) -> Snippet:
    title = "qemu-img create (the image, with its preallocation)"
    target = path or cfg.default_path()
    if cfg.backing in (BackingKind.BLOCK, BackingKind.ISCSI) and cfg.format == Format.RAW:
        return Snippet("qemu-img", title, None, "none needed: a raw disk on a block device is the device itself")
    if cfg.backing == BackingKind.RBD and cfg.format == Format.RAW:
        return Snippet("qemu-img", title, None, "none needed: a raw disk on Ceph is the RBD image itself, which the "
                                                "rbd create snippet makes with its object size")
    if cfg.protocol is not None and client_is_kernel(cfg.protocol, cfg.values):
        # The kernel's client gives a device (by-path) or a file under the mount: qemu-img writes it as any other.
        target = path or qemu_protocol_node(cfg.protocol, cfg.values, cfg.format.value, NetworkPlace())[1][1]
    elif cfg.backing == BackingKind.RBD:  # QEMU's rbd driver creates the RBD image, with the cell's object size
        target = path or qemu_img_rbd_target(cfg.values, NetworkPlace())
    argv = ["qemu-img", "create", "-f", cfg.format.value]
    opts = [f"preallocation={cfg.preallocation}"] if cfg.preallocation != Preallocation.OFF else []
    opts += [f"{k}={v}" for k, v in axes.qemu_options(cfg.axis_values()).create]
    if opts:
        argv += ["-o", ",".join(opts)]
    argv += [target, f"{size_gib}G"]
    return Snippet("qemu-img", title, shell_command(argv))


_LIBVIRT_IOTHREADS = re.compile(r"^\s*<iothreads>(\d+)</iothreads>\s*$")


def minimal_domain_xml(disk_xml: str, name: str = "iomatrix-snippet") -> str:
    """A complete libvirt domain around libvirt snippets (what virt-xml-validate checks): their <iothreads> lines
    go in <domain> (the largest, once), the rest in <devices>; the placement comments are left out."""
    lines = [line for line in disk_xml.splitlines() if line not in (LIBVIRT_DOMAIN_LEVEL, LIBVIRT_DEVICES_LEVEL)]
    iothreads = [int(m.group(1)) for line in lines if (m := _LIBVIRT_IOTHREADS.match(line))]
    body = "\n".join("    " + line for line in lines if not _LIBVIRT_IOTHREADS.match(line))
    domain_level = f"  <iothreads>{max(iothreads)}</iothreads>\n" if iothreads else ""
    return (f"<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='MiB'>512</memory>\n  <vcpu>1</vcpu>\n"
            f"{domain_level}  <os><type arch='x86_64' machine='pc'>hvm</type></os>\n  <devices>\n{body}\n"
            "  </devices>\n</domain>\n")


def write_domain(disk_xml: str, path: Path) -> Path:
    path.write_text(minimal_domain_xml(disk_xml))
    return path

