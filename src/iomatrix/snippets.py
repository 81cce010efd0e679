"""Paste-ready configuration for one disk configuration, in every tool's own spelling.

Everything is generated from the domain model (`iomatrix.domain`): the axis values, each tool's spelling
of them, and the rules between them. The QEMU arguments are the very `-blockdev`/`-device` graph the
guest tier measures (`iomatrix.qemu_block.blockdev_args`, `iomatrix.guest.cmdline.device_args`), so what is
pasted is what was measured. Where a tool cannot express a configuration (Proxmox has no NVMe disk bus, Nova
cannot use qed images) the snippet says so in one line instead of printing something that would not work.
"""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix import domain
from iomatrix.domain import (
    BUS,
    LIBVIRT_BUS_UNAVAILABLE,
    LIBVIRT_CACHE,
    LIBVIRT_DEV,
    LIBVIRT_IO,
    MEASURED_DETECT_ZEROES,
    MEASURED_DISCARD,
    NA,
    NOVA_CACHE,
    NOVA_DISK_BUS,
    NOVA_IMAGES_TYPE,
    PROXMOX_AIO,
    PROXMOX_CACHE,
    PROXMOX_FORMAT,
    Aio,
    BackingKind,
    Bus,
    CacheMode,
    Format,
    Modifier,
    Preallocation,
)
from iomatrix.errors import UserError

# Axis values a snippet uses when the sweep did not vary that axis (bare metal has no format or bus).
ASSUMED_DEFAULTS: dict[str, str] = {"format": Format.RAW, "preallocation": Preallocation.OFF,
                                    "aio": Aio.THREADS, "bus": Bus.VIRTIO_BLK}
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


@dataclass(frozen=True)
class DiskConfig:
    """One VM disk configuration: the axes a snippet needs."""

    format: Format
    preallocation: Preallocation
    cache: CacheMode
    aio: Aio
    bus: Bus
    backing: BackingKind = BackingKind.FILE
    assumed: tuple[str, ...] = ()  # axes the source did not give; filled from ASSUMED_DEFAULTS
    modifier: Modifier = Modifier.NONE  # a host wrapper around QEMU (eatmydata)

    def __post_init__(self) -> None:
        for reason in (domain.aio_rule(self.cache, self.aio), domain.modifier_rule(self.modifier, self.cache),
                       domain.preallocation_rule(self.format, self.preallocation,
                                                 on_block_device=self.backing == BackingKind.BLOCK)):
            if reason:
                raise UserError(reason, hint="pick a combination QEMU accepts (see 'iomatrix plan --explain')")

    @classmethod
    def from_axes(cls, axes: dict[str, str], backing_type: str | None = None) -> DiskConfig:
        """From a cell's axes (as stored); axes shown as "-" take ASSUMED_DEFAULTS and are listed in `assumed`."""
        vals: dict[str, str] = {}
        assumed: list[str] = []
        for axis in ("format", "preallocation", "cache", "aio", "bus"):
            v = axes.get(axis, NA)
            if v in (NA, None, ""):
                if axis == "cache":
                    raise UserError("a configuration needs a cache mode", hint=f"use {domain.choices(CacheMode)}")
                v = ASSUMED_DEFAULTS[axis]
                assumed.append(axis)
            vals[axis] = v
        kind = BackingKind.BLOCK if backing_type in domain.BLOCK_BACKINGS else BackingKind.FILE
        modifier = axes.get("modifier", NA)
        return cls(Format(vals["format"]), Preallocation(vals["preallocation"]), CacheMode(vals["cache"]),
                   Aio(vals["aio"]), Bus(vals["bus"]), kind, tuple(assumed),
                   Modifier.NONE if modifier in (NA, None, "") else Modifier(modifier))

    def label(self) -> str:
        return (f"format={self.format} preallocation={self.preallocation} cache={self.cache} aio={self.aio} "
                f"bus={self.bus}" + (f" modifier={self.modifier}" if self.modifier != Modifier.NONE else ""))

    def default_path(self) -> str:
        if self.backing == BackingKind.BLOCK:
            return "/dev/vg0/vm-disk"
        return f"/var/lib/libvirt/images/vm-disk.{self.format}"


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


def libvirt_disk_element(cfg: DiskConfig, path: str | None = None) -> ET.Element:
    path = path or cfg.default_path()
    disk = ET.Element("disk", type="block" if cfg.backing == BackingKind.BLOCK else "file", device="disk")
    ET.SubElement(disk, "driver", name="qemu", type=cfg.format.value, cache=LIBVIRT_CACHE[cfg.cache],
                  io=LIBVIRT_IO[cfg.aio], discard=MEASURED_DISCARD["libvirt"],
                  detect_zeroes=MEASURED_DETECT_ZEROES["libvirt"])
    ET.SubElement(disk, "source", **({"dev": path} if cfg.backing == BackingKind.BLOCK else {"file": path}))
    ET.SubElement(disk, "target", dev=LIBVIRT_DEV[cfg.bus], bus=BUS[cfg.bus].libvirt)
    return disk


def libvirt_disk_xml(cfg: DiskConfig, path: str | None = None) -> str:
    el = libvirt_disk_element(cfg, path)
    ET.indent(el, space="  ")
    return ET.tostring(el, encoding="unicode")


def libvirt_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    title = "libvirt domain XML (virsh edit VM: replace the <disk> element)"
    if cfg.bus in LIBVIRT_BUS_UNAVAILABLE:
        return Snippet("libvirt", title, None, f"not available: {LIBVIRT_BUS_UNAVAILABLE[cfg.bus]}", "xml")
    xml = libvirt_disk_xml(cfg, path)
    notes = [DISCARD_NOTE]
    if cfg.bus == Bus.VIRTIO_SCSI:
        xml = "<controller type='scsi' model='virtio-scsi'/>\n" + xml
        notes.append("bus scsi needs the virtio-scsi controller shown (libvirt adds an LSI one otherwise)")
    if cfg.modifier == Modifier.EATMYDATA:
        xml = f"<emulator>{EATMYDATA_WRAPPER}</emulator>\n" + xml
        notes.append(EATMYDATA_NOTE)
    return Snippet("libvirt", title, xml, "; ".join(notes), "xml")


# --------------------------------------------------------------------------- QEMU


def qemu_argv(cfg: DiskConfig, path: str | None = None, node: str = "disk0") -> list[str]:
    """The -blockdev/-device arguments the guest tier measured, for `path`."""
    from iomatrix.guest.cmdline import device_args
    from iomatrix.qemu_block import DiskSpec, blockdev_args

    spec = DiskSpec(target=path or cfg.default_path(), format=cfg.format.value, cache=cfg.cache, aio=cfg.aio,
                    bus=cfg.bus)
    blockdev = blockdev_args(spec, node=node)
    if cfg.backing == BackingKind.BLOCK:
        # blockdev_args picks the protocol from the path it sees; a snippet's path need not exist here.
        blockdev = [a.replace("file.driver=file,", "file.driver=host_device,") for a in blockdev]
    # QEMU's default error policy (pause the VM on ENOSPC, e.g. a full thin pool) is kept for the user's
    # VM: iomatrix reports errors only so that a measurement fails with a reason instead of hanging.
    return [*blockdev, *device_args(spec, node=node, serial="disk0", report_errors=False)]


def qemu_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    argv = qemu_argv(cfg, path)
    pairs = [f"{argv[i]} {shlex.quote(argv[i + 1])}" for i in range(0, len(argv), 2)]
    note = "append to your qemu-system-x86_64 command line"
    if cfg.modifier == Modifier.EATMYDATA:
        note += " and start QEMU as 'eatmydata qemu-system-x86_64 …' (an LD_PRELOAD wrapper of the whole process)"
    return Snippet("qemu", "QEMU command line (-blockdev/-device, the graph iomatrix measured)",
                   " \\\n".join(pairs), f"{note}; {DISCARD_NOTE}")


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


def proxmox_drive_value(cfg: DiskConfig, storage: str = "STORAGE", size_gib: int = DEFAULT_SIZE_GIB) -> str:
    """The qm.conf property string: STORAGE:SIZE allocates a new volume of SIZE GiB."""
    opts = [f"{storage}:{size_gib}"]
    if cfg.backing == BackingKind.FILE:  # a block storage (LVM, ZFS) has no image format to choose
        opts.append(f"format={PROXMOX_FORMAT[cfg.format]}")
    opts += [f"cache={PROXMOX_CACHE[cfg.cache]}", f"aio={PROXMOX_AIO[cfg.aio]}",
             f"discard={MEASURED_DISCARD['proxmox']}", f"detect_zeroes={MEASURED_DETECT_ZEROES['proxmox']}"]
    return ",".join(opts)


def proxmox_snippet(cfg: DiskConfig, vmid: str = "VMID", storage: str = "STORAGE",
                    size_gib: int = DEFAULT_SIZE_GIB) -> Snippet:
    title = "Proxmox VE (qm set)"
    prefix = BUS[cfg.bus].proxmox
    if prefix is None:
        return Snippet("proxmox", title, None,
                       f"not available: Proxmox VE has no {cfg.bus} disk bus (qm.conf offers ide, sata, scsi and "
                       "virtio); the nearest is virtio (virtio-blk)")
    cmd = f"qm set {vmid}"
    if cfg.bus == Bus.VIRTIO_SCSI:
        cmd += " --scsihw virtio-scsi-pci"  # the controller measured; Proxmox's default may be LSI
    cmd += f" --{prefix}0 {proxmox_drive_value(cfg, storage, size_gib)}"
    note = ("STORAGE:SIZE allocates a new volume of SIZE GiB; use an existing volume id to reconfigure a disk; "
            "detect_zeroes=0 because Proxmox turns QEMU's zero detection on by default and iomatrix measured it "
            "off; discard=on (guest TRIM frees thin storage) is an option, not measured here")
    if cfg.modifier == Modifier.EATMYDATA:
        note += ("; eatmydata cannot be expressed: Proxmox starts QEMU itself and has no per-VM wrapper "
                 "(only a host-wide replacement of /usr/bin/kvm would do, for every VM)")
    if cfg.preallocation != Preallocation.OFF and cfg.backing == BackingKind.FILE:
        cmd += f"\npvesm set {storage} --preallocation {cfg.preallocation}"
        note += "; preallocation is a property of a directory/NFS storage, not of one disk"
    return Snippet("proxmox", title, cmd, note)


# --------------------------------------------------------------------------- virt-install, Nova, qemu-img


def virt_install_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    title = "virt-install --disk"
    if cfg.bus in LIBVIRT_BUS_UNAVAILABLE:
        return Snippet("virt-install", title, None, f"not available: {LIBVIRT_BUS_UNAVAILABLE[cfg.bus]}")
    keys = [f"path={path or cfg.default_path()}", f"format={cfg.format}", f"bus={BUS[cfg.bus].libvirt}",
            f"cache={LIBVIRT_CACHE[cfg.cache]}", f"io={LIBVIRT_IO[cfg.aio]}",
            f"discard={MEASURED_DISCARD['virt-install']}", f"detect_zeroes={MEASURED_DETECT_ZEROES['virt-install']}"]
    text = "--disk " + shlex.quote(",".join(keys))
    if cfg.bus == Bus.VIRTIO_SCSI:
        text = "--controller type=scsi,model=virtio-scsi " + text
    note = "uses an existing image: create it first with the qemu-img line"
    if cfg.modifier == Modifier.EATMYDATA:
        text += f" --xml ./devices/emulator={EATMYDATA_WRAPPER}"  # virt-install's XPath edit of the domain XML
        note += f"; {EATMYDATA_NOTE}"
    return Snippet("virt-install", title, text, note)


def nova_snippet(cfg: DiskConfig) -> Snippet:
    title = "OpenStack Nova (nova.conf on each compute node, and the image's bus)"
    images_type = NOVA_IMAGES_TYPE[cfg.format]
    if images_type is None:
        return Snippet("nova", title, None, f"not available: Nova's images_type cannot be {cfg.format}", "ini")
    source = "block" if cfg.backing == BackingKind.BLOCK else "file"
    lines = ["[libvirt]", f"disk_cachemodes = {source}={NOVA_CACHE[cfg.cache]}"]
    if cfg.backing == BackingKind.FILE:
        lines.append(f"images_type = {images_type}")
        lines.append(f"preallocate_images = {'none' if cfg.preallocation == Preallocation.OFF else 'space'}")
    lines.append(f"# image property: openstack image set --property hw_disk_bus={NOVA_DISK_BUS[cfg.bus]}"
                 + (" --property hw_scsi_model=virtio-scsi" if cfg.bus == Bus.VIRTIO_SCSI else "") + " IMAGE")
    note = "Nova has no option for aio (libvirt io=); it chooses it itself"
    if cfg.modifier == Modifier.EATMYDATA:
        note += "; eatmydata cannot be expressed: Nova has no setting for the QEMU binary a guest runs"
    return Snippet("nova", title, "\n".join(lines), note, "ini")


def qemu_img_snippet(cfg: DiskConfig, path: str | None = None, size_gib: int = DEFAULT_SIZE_GIB) -> Snippet:
    title = "qemu-img create (the image, with its preallocation)"
    target = path or cfg.default_path()
    if cfg.backing == BackingKind.BLOCK and cfg.format == Format.RAW:
        return Snippet("qemu-img", title, None, "none needed: a raw disk on a block device is the device itself")
    argv = ["qemu-img", "create", "-f", cfg.format.value]
    if cfg.preallocation != Preallocation.OFF:
        argv += ["-o", f"preallocation={cfg.preallocation}"]
    argv += [target, f"{size_gib}G"]
    return Snippet("qemu-img", title, shlex.join(argv))


def snippets_for(cfg: DiskConfig, path: str | None = None) -> SnippetSet:
    return SnippetSet(cfg, [
        libvirt_snippet(cfg, path),
        *([eatmydata_wrapper_snippet()] if cfg.modifier == Modifier.EATMYDATA else []),
        qemu_snippet(cfg, path),
        proxmox_snippet(cfg),
        virt_install_snippet(cfg, path),
        nova_snippet(cfg),
        qemu_img_snippet(cfg, path),
    ])


def minimal_domain_xml(disk_xml: str, name: str = "iomatrix-snippet") -> str:
    """A complete libvirt domain around a <disk> snippet (what virt-xml-validate checks)."""
    body = "\n".join("    " + line for line in disk_xml.splitlines())
    return (f"<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='MiB'>512</memory>\n  <vcpu>1</vcpu>\n"
            f"  <os><type arch='x86_64' machine='pc'>hvm</type></os>\n  <devices>\n{body}\n  </devices>\n"
            "</domain>\n")


def write_domain(disk_xml: str, path: Path) -> Path:
    path.write_text(minimal_domain_xml(disk_xml))
    return path
