"""libvirt: the disk's snippet writer (``<disk>``, its ``<controller>`` and ``<iothreads>``;
    virt-install, which
writes the same domain) and the ``--current`` reader of a domain XML (``virsh dumpxml VM >
vm.xml``): the first ``<disk device='disk'>``, or the one whose ``<target dev=...>`` is given.

Writer and reader round-trip in tests/test_snippet_round_trips.py.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from iomatrix.domain import (
    BUS,
    LIBVIRT_DEV,
    SCSI_CONTROLLER_BUSES,
    BackingKind,
    Bus,
    Modifier,
    axes,
)
from iomatrix.domain.axes import (
    IOThread,
)
from iomatrix.errors import UserError
from iomatrix.protocol_registry import network_protocol
from iomatrix.protocols.place import NetworkPlace
from iomatrix.vmconfig.config import (
    CONTINUATION,
    EATMYDATA_NOTE,
    EATMYDATA_WRAPPER,
    INDENTED_SNIPPET_WIDTH,
    DiskConfig,
    Snippet,
    _not_available,
    _partition,
    _uses_iothread,
    controller_options,
    controller_options_of,
    measured_defaults,
    measured_note,
    shell_command,
    shell_word,
)
from iomatrix.vmconfig.network import (
    NETWORK_SKIPPED_KEYS,
    NetworkDiskRead,
    note_client_cache,
    read_by_path,
    read_libvirt_source,
)
from iomatrix.vmconfig.reading import (
    CurrentConfig,
    ExistingDisk,
    _bad,
    _read_back,
    _set_l2_cache,
    _value,
)

# libvirt: the option keys that go on <target> (the rest are attributes of <driver>).
LIBVIRT_TARGET_KEYS = ("bus",)
# virt-install: the image and the device first, then the driver's options, as virt-install(1) writes
# them.
VIRT_INSTALL_LEADING_KEYS = ("format", "bus")

# The libvirt <controller> the shared virtio-scsi bus has always been written with (pinned
# snippets).
LIBVIRT_SHARED_SCSI_CONTROLLER = "<controller type='scsi' model='virtio-scsi'/>"
# virtio-scsi-single: the disk's own controller, which the disk's drive address names. One index for
# the snippet's one disk; further disks each take the next index (the note says so).
SINGLE_CONTROLLER_INDEX = "0"
# libvirt's IOThread ids count from 1 up to <iothreads>N</iothreads>; every snippet uses IOThread 1.
LIBVIRT_IOTHREAD_ID = "1"
LIBVIRT_DOMAIN_LEVEL = "<!-- in <domain>, beside <vcpu> -->"
LIBVIRT_DEVICES_LEVEL = "<!-- in <devices> -->"


def libvirt_disk_element(
    cfg: DiskConfig,
    path: str | None = None,
    dev: str | None = None,
    keep_children: Sequence[ET.Element] = (),
) -> ET.Element:
    """`keep_children`: elements of the user's own <disk> that no bus changes (<boot order>,
    <serial>), kept."""
    path = path or cfg.default_path()
    target, driver = _partition(
        controller_options(cfg, "libvirt")[0], LIBVIRT_TARGET_KEYS.__contains__
    )
    if cfg.userspace_client:
        driver = [kv for kv in driver if kv[0] not in NETWORK_SKIPPED_KEYS["libvirt"]]
    network = network_protocol(cfg.protocol)
    if network is not None:
        kind, source, host = network.libvirt_source(cfg.values, cfg.format.value, NetworkPlace())
    else:
        kind = "block" if cfg.backing == BackingKind.BLOCK else "file"
        source, host = ({"dev": path} if cfg.backing == BackingKind.BLOCK else {"file": path}), None
    disk = ET.Element("disk", type=kind, device="disk")
    ET.SubElement(
        disk,
        "driver",
        dict([("name", "qemu"), *driver, *measured_defaults("libvirt", dict(driver))]),
    )
    src = ET.SubElement(disk, "source", source)
    if host is not None:
        ET.SubElement(src, "host", host)
    if kind == "network" and network is not None and (identity := network.libvirt_identity()):
        # libvirt's schema (9.0) requires the user and group libnfs accesses the export as.
        ET.SubElement(src, "identity", identity)
    if kind == "network" and network is not None and (auth := network.libvirt_auth(NetworkPlace())):
        # <auth> beside <source>, where Ceph's libvirt guide and every libvirt since 0.9.7 put it.
        ET.SubElement(ET.SubElement(disk, "auth", auth[0]), "secret", auth[1])
    ET.SubElement(disk, "target", dict([("dev", dev or LIBVIRT_DEV[cfg.bus]), *target]))
    disk.extend(keep_children)
    if cfg.bus == Bus.VIRTIO_SCSI_SINGLE:  # the disk's own controller
        ET.SubElement(
            disk,
            "address",
            type="drive",
            controller=SINGLE_CONTROLLER_INDEX,
            bus="0",
            target="0",
            unit="0",
        )
    return disk


# The children of a user's <disk> a bus change keeps (its <address> and <target> are the bus's own).
LIBVIRT_BUS_FREE_CHILDREN = ("serial", "wwn", "boot")


def libvirt_kept_children(settings: str | None) -> list[ET.Element]:
    """The elements of the user's <disk> (`settings`) that stay when its bus changes: its serial and
    boot order."""
    if not settings:
        return []
    disk = ET.fromstring(settings)
    return [c for tag in LIBVIRT_BUS_FREE_CHILDREN for c in disk.findall(tag)]


def libvirt_disk_xml(
    cfg: DiskConfig,
    path: str | None = None,
    dev: str | None = None,
    keep_children: Sequence[ET.Element] = (),
) -> str:
    el = libvirt_disk_element(cfg, path, dev, keep_children)
    ET.indent(el, space="  ")
    return ET.tostring(el, encoding="unicode")


def libvirt_controller_xml(cfg: DiskConfig) -> str | None:
    """The virtio-scsi <controller> a scsi disk needs (libvirt adds an LSI one otherwise), with the
    IOThread and virtqueues its disks share; None on other buses."""
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
        notes.append(
            "bus scsi needs the virtio-scsi controller shown (libvirt adds an LSI one otherwise)"
            + ("; its IOThread and queues serve every disk on it" if driver_on_controller else "")
        )
    elif cfg.bus == Bus.VIRTIO_SCSI_SINGLE:
        notes.append(
            f"virtio-scsi-single: a virtio-scsi controller per disk, which the disk's <address "
            f"controller='{SINGLE_CONTROLLER_INDEX}'> names; give each further disk its "
            "own controller "
            "(index 1, 2, …)" + (" and IOThread" if _uses_iothread(cfg) else "")
        )
    if _uses_iothread(cfg):
        notes.append(
            f"<iothreads>{LIBVIRT_IOTHREAD_ID}</iothreads> goes in <domain> (raise it if "
            "other disks "
            "have IOThreads of their own)"
        )
    return notes


def libvirt_snippet(
    cfg: DiskConfig,
    path: str | None = None,
    dev: str | None = None,
    keep_children: Sequence[ET.Element] = (),
) -> Snippet:
    title = "libvirt domain XML (virsh edit VM: replace the <disk> element)"
    opts, axis_notes, unavailable = axes.tool_options(cfg.axis_values(), "libvirt")
    if unavailable:
        return Snippet("libvirt", title, None, _not_available(unavailable), "xml")
    devices = [libvirt_disk_xml(cfg, path, dev, keep_children)]
    notes = [measured_note(measured_defaults("libvirt", dict(opts)))]
    if (controller := libvirt_controller_xml(cfg)) is not None:
        devices.insert(0, controller)
    notes += _libvirt_device_notes(cfg, bool(controller_options(cfg, "libvirt")[1]))
    notes += axis_notes
    if cfg.modifier == Modifier.EATMYDATA:
        devices.insert(0, f"<emulator>{EATMYDATA_WRAPPER}</emulator>")
        notes.append(EATMYDATA_NOTE)
    xml = "\n".join(devices)
    # a domain-level element: where each part goes is said in the XML itself
    if _uses_iothread(cfg):
        xml = "\n".join(
            (
                LIBVIRT_DOMAIN_LEVEL,
                f"<iothreads>{LIBVIRT_IOTHREAD_ID}</iothreads>",
                LIBVIRT_DEVICES_LEVEL,
                xml,
            )
        )
    return Snippet("libvirt", title, xml, "; ".join(filter(None, notes)), "xml")


def virt_install_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    title = "virt-install --disk"
    opts, axis_notes, unavailable = axes.tool_options(cfg.axis_values(), "virt-install")
    if unavailable:
        return Snippet("virt-install", title, None, _not_available(unavailable))
    lead = VIRT_INSTALL_LEADING_KEYS
    # stable: else as given
    ordered = sorted(opts, key=lambda kv: lead.index(kv[0]) if kv[0] in lead else len(lead))
    ordered, on_controller = controller_options_of(cfg, ordered, "virt-install")
    keys = [
        ("path", path or cfg.default_path()),
        *ordered,
        *measured_defaults("virt-install", dict(opts)),
    ]
    # the disk's own controller (virt-install's address.* keys)
    if cfg.bus == Bus.VIRTIO_SCSI_SINGLE:
        keys += [
            ("address.type", "drive"),
            ("address.controller", SINGLE_CONTROLLER_INDEX),
            ("address.bus", "0"),
            ("address.target", "0"),
            ("address.unit", "0"),
        ]
    lines = [shell_word("--disk ", ",".join(f"{k}={v}" for k, v in keys))]
    if cfg.bus in SCSI_CONTROLLER_BUSES:
        index = [("index", SINGLE_CONTROLLER_INDEX)] if cfg.bus == Bus.VIRTIO_SCSI_SINGLE else []
        controller = [("type", "scsi"), *index, ("model", "virtio-scsi"), *on_controller]
        lines.insert(0, shell_word("--controller ", ",".join(f"{k}={v}" for k, v in controller)))
    if _uses_iothread(cfg):
        lines.insert(0, f"--iothreads {LIBVIRT_IOTHREAD_ID}")
    notes = ["uses an existing image: create it first with the qemu-img line", *axis_notes]
    if cfg.bus == Bus.VIRTIO_SCSI_SINGLE:
        notes.append(
            "virtio-scsi-single: give each further disk its own --controller (index=1, "
            "2, …) and its "
            "address.controller"
        )
    if cfg.modifier == Modifier.EATMYDATA:
        # virt-install's XPath edit of the domain XML
        lines.append(f"--xml ./devices/emulator={EATMYDATA_WRAPPER}")
        notes.append(EATMYDATA_NOTE)
    return Snippet("virt-install", title, CONTINUATION.join(lines), "; ".join(notes))


_LIBVIRT_IOTHREADS = re.compile(r"^\s*<iothreads>(\d+)</iothreads>\s*$")


def minimal_domain_xml(disk_xml: str, name: str = "iomatrix-snippet") -> str:
    """A complete libvirt domain around libvirt snippets (what virt-xml-validate checks): their
    <iothreads> lines go in <domain> (the largest, once), the rest in <devices>; the placement
    comments are left out."""
    lines = [
        line
        for line in disk_xml.splitlines()
        if line not in (LIBVIRT_DOMAIN_LEVEL, LIBVIRT_DEVICES_LEVEL)
    ]
    iothreads = [int(m.group(1)) for line in lines if (m := _LIBVIRT_IOTHREADS.match(line))]
    body = "\n".join("    " + line for line in lines if not _LIBVIRT_IOTHREADS.match(line))
    domain_level = f"  <iothreads>{max(iothreads)}</iothreads>\n" if iothreads else ""
    return (
        f"<domain type='kvm'>\n  <name>{name}</name>\n  <memory "
        "unit='MiB'>512</memory>\n  <vcpu>1</vcpu>\n"
        f"{domain_level}  <os><type arch='x86_64' machine='pc'>hvm</type></os>\n  "
        f"<devices>\n{body}\n"
        "  </devices>\n</domain>\n"
    )


def write_domain(disk_xml: str, path: Path) -> Path:
    path.write_text(minimal_domain_xml(disk_xml))
    return path


# libvirt's virtio-scsi controller models (the transitional ones are the same device on another PCI
# id).
LIBVIRT_VIRTIO_SCSI_MODELS = ("virtio-scsi", "virtio-transitional", "virtio-non-transitional")
# libvirt without <driver type=> probes the image (or assumes raw): its format is unknown, not
# QEMU's default. Every other axis libvirt spells takes the hypervisor's default, i.e. QEMU's, when
# its attribute is absent.
LIBVIRT_UNKNOWN_WHEN_ABSENT = ("format",)
LIBVIRT_BUS = {s.libvirt: b for b, s in BUS.items()}


def from_libvirt_xml(path: Path, disk: str | None = None) -> CurrentConfig:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise UserError(
            f"--current: {path} is not XML ({e})", hint="give 'virsh dumpxml VM > vm.xml' output"
        ) from e
    every = [
        (d, t.get("dev") if (t := d.find("target")) is not None else None)
        for d in root.iter("disk")
    ]
    disks = [d for d, _ in every if d.get("device", "disk") == "disk"]
    # Only disks are listed: a CD-ROM or floppy drive (<disk device='cdrom'>) has no disk
    # configuration to measure.
    listed = (
        ", ".join(dev for d, dev in every if dev and d.get("device", "disk") == "disk") or "none"
    )
    if disk is not None:
        other = next(
            (
                d.get("device")
                for d, dev in every
                if dev == disk and d.get("device", "disk") != "disk"
            ),
            None,
        )
        if other is not None:
            raise UserError(
                f"--current-disk: {disk} in {path.name} is a {other} drive, not a disk",
                hint=f"disks in it: {listed} (--current-disk DEV)",
            )
        disks = [d for d in disks if (t := d.find("target")) is not None and t.get("dev") == disk]
    if not disks:
        raise UserError(
            f"--current: {path.name} has no disk{f' {disk}' if disk else ''}",
            hint=f"disks in it: {listed} (--current-disk DEV)",
        )
    d = disks[0]
    drv = d.find("driver")
    tgt = d.find("target")
    values, defaulted = _libvirt_driver_axes(dict(drv.attrib) if drv is not None else {})
    bus = tgt.get("bus") if tgt is not None else None
    if bus is not None:
        if bus not in LIBVIRT_BUS:
            raise _bad("target bus", bus, ", ".join(LIBVIRT_BUS))
        values["bus"] = LIBVIRT_BUS[bus].value
    values.update(_libvirt_device_axes(root, d, Bus(values["bus"]) if "bus" in values else None))
    dev = tgt.get("dev") if tgt is not None else "?"
    src = d.find("source")
    existing, network = _existing_disk(d, src, dev)
    existing = _with_domain(existing, root, d)
    values.update(network.axes if network else {})
    cfg = CurrentConfig(values, f"libvirt {path.name}, disk {dev}", defaulted, disk=existing)
    cfg.notes += [network.note] if network else []
    max_size = drv.find("metadata_cache/max_size") if drv is not None else None
    if max_size is not None:
        _set_l2_cache(
            cfg,
            _libvirt_scaled(max_size, "driver metadata_cache max_size"),
            "metadata_cache max_size",
        )
    return cfg


def _with_domain(existing: ExistingDisk, root: ET.Element, disk: ET.Element) -> ExistingDisk:
    """`existing` with the domain's name (what virsh and virt-xml take) and the <disk> as the user
    has it, which the snippets edit rather than rewrite."""
    name = (root.findtext("name") or "").strip()
    return replace(
        existing, vmid=name or None, settings=ET.tostring(disk, encoding="unicode").strip()
    )


def _existing_disk(
    disk: ET.Element, src: ET.Element | None, dev: str
) -> tuple[ExistingDisk, NetworkDiskRead | None]:
    """The user's disk as the snippets change it, and what it is on the network (None: a local file
    or device)."""
    network = _network_disk(disk, src, dev)
    if network is not None:
        return ExistingDisk(
            "libvirt",
            network.url,
            dev,
            block=disk.get("type") == "block",
            protocol=network.protocol,
        ), network
    image = None if src is None else (src.get("file") or src.get("dev"))
    return ExistingDisk("libvirt", image, dev, block=disk.get("type") == "block"), None


def _network_disk(disk: ET.Element, src: ET.Element | None, dev: str) -> NetworkDiskRead | None:
    """The network disk a <disk> is: type='network' (QEMU's own client), or a block device on udev's
    iSCSI by-path link (the kernel's initiator); None for a local file or device."""
    if disk.get("type") == "network":
        if src is None:
            raise _bad(
                f"disk {dev} source",
                "(none)",
                "<source protocol='iscsi|nfs' name=…><host …/></source>",
            )
        # <auth> beside <source>, or inside it (libvirt ≥ 3.9 accepts both)
        auth = disk.find("auth") if disk.find("auth") is not None else src.find("auth")
        network = read_libvirt_source(
            src.attrib,
            [h.attrib for h in src.iter("host")],
            dev,
            auth.get("username") if auth is not None else None,
        )
        drv = disk.find("driver")
        note_client_cache(network, drv.get("cache") if drv is not None else None)
        return network
    if disk.get("type") == "block" and src is not None and (name := src.get("dev")):
        return read_by_path(name)
    return None


# libvirt's scaled integers (virScaleInteger): 'b'/'bytes', KB = 1000, k/KiB = 1024, and so on up to
# E.
_LIBVIRT_UNIT = re.compile(r"^(?:(b|bytes?)|([kmgtpe])(ib|b)?)$", re.IGNORECASE)


def _libvirt_scaled(elem: ET.Element, field_name: str) -> int:
    """A libvirt scaled integer element (<max_size unit='MiB'>64</max_size>; no unit: bytes) in
    bytes."""
    text, unit = (elem.text or "").strip(), elem.get("unit", "bytes")
    m = _LIBVIRT_UNIT.match(unit)
    if not text.isdigit() or m is None:
        raise _bad(
            field_name,
            f"{text} {unit}".strip(),
            "a whole number with a libvirt unit (bytes, KiB, MiB, "
            "GiB; KB, MB, GB are powers of 1000)",
        )
    if m.group(1):
        return int(text)
    base = 1000 if (m.group(3) or "").lower() == "b" else 1024
    return int(text) * base ** ("kmgtpe".index(m.group(2).lower()) + 1)


def _scsi_controller_of(disk: ET.Element) -> str:
    """The index of the scsi controller a disk is on: its <address type='drive' controller=K>, else
    0 (where libvirt puts every scsi disk that names none)."""
    addr = disk.find("address")
    if addr is not None and addr.get("type") == "drive":
        return addr.get("controller", "0")
    return "0"


def _libvirt_device_axes(root: ET.Element, disk: ET.Element, bus: Bus | None) -> dict[str, str]:
    """The bus's controller and the device axes (the registry's Axis.on_controller: IOThread,
    queues), which libvirt writes on the disk's <driver> for virtio-blk and on the virtio-scsi
    <controller>'s <driver> for scsi disks.

    A scsi disk whose <address> names a controller no other disk is on has a controller of its own
    (virtio-scsi-single); a controller several disks share, or a disk that names none (libvirt puts
    every such disk on controller 0), is virtio-scsi. Axes left at QEMU's default are left out (as
    in a cell's key)."""
    values: dict[str, str] = {}
    driver = disk.find("driver")
    if bus in SCSI_CONTROLLER_BUSES:
        index = _scsi_controller_of(disk)
        ctrl = next(
            (
                c
                for c in root.iter("controller")
                if c.get("type") == "scsi" and c.get("index", "0") == index
            ),
            None,
        )
        if ctrl is not None and ctrl.get("model") not in LIBVIRT_VIRTIO_SCSI_MODELS:
            raise _bad(
                f"scsi controller {index} model",
                ctrl.get("model") or "(none: libvirt's LSI default)",
                "virtio-scsi (iomatrix measures no other scsi controller)",
            )
        on_it = [
            x
            for x in root.iter("disk")
            if (t := x.find("target")) is not None
            and t.get("bus") == "scsi"
            and _scsi_controller_of(x) == index
        ]
        has_address = disk.find("address") is not None
        values["bus"] = (
            Bus.VIRTIO_SCSI_SINGLE if has_address and len(on_it) == 1 else Bus.VIRTIO_SCSI
        ).value
        driver = ctrl.find("driver") if ctrl is not None else None
    if driver is None:
        return values
    iothread = driver.get("iothread")
    # libvirt ≥ 10.0: IOThreads mapped to the disk's virtqueues
    if driver.find("iothreads") is not None:
        values["iothread"] = IOThread.VQ_MAPPING.value
    elif iothread is not None:
        _check_iothread_id(root, iothread)
        values["iothread"] = IOThread.ON.value
    if (queues := driver.get("queues")) is not None:
        values["queues"] = _value("queues", "driver queues", queues)
    return values


def _check_iothread_id(root: ET.Element, iothread: str) -> None:
    """libvirt numbers IOThreads 1..<iothreads>N</iothreads> (or lists their ids in
    <iothreadids>)."""
    ids = {t.get("id") for t in root.iterfind("iothreadids/iothread")}
    count = (root.findtext("iothreads") or "0").strip()
    known = ids or ({str(i) for i in range(1, int(count) + 1)} if count.isdigit() else set())
    if iothread not in known:
        raise UserError(
            f"--current: driver iothread='{iothread}' names no IOThread of the domain "
            f"(<iothreads>{count}</iothreads>)",
            hint="libvirt refuses this XML: give 'virsh dumpxml' output",
        )


def _libvirt_driver_axes(attrs: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Every axis libvirt spells on <driver>, read back through its spelling; an axis none of whose
    attributes is there takes the hypervisor's default (QEMU's)."""
    values: dict[str, str] = {}
    defaulted: list[str] = []
    if attrs.get("cache") == "default":  # libvirt's explicit "the hypervisor's"
        attrs = {k: v for k, v in attrs.items() if k != "cache"}
    for axis in axes.axes():
        spell = axis.tools.get("libvirt")
        # The bus is <target bus=>, the device axes are where the bus puts them: both read by the
        # caller.
        if spell is None or axis.name == "bus" or axis.on_controller:
            continue
        spelled = {v: t.options for v in axis.values if (t := spell(v)).unavailable is None}
        value = _read_back(spelled, attrs.get, lambda key: f"driver {key}")
        if value is not None:
            values[axis.name] = value
        elif axis.always_named and axis.name not in LIBVIRT_UNKNOWN_WHEN_ABSENT:
            # (a later axis left out is at its default implicitly, as in a cell's key: nothing to
            # say)
            values[axis.name] = str(axis.default)
            defaulted.append(
                f"{axis.name} (libvirt default: the hypervisor's, QEMU {axis.name}={axis.default})"
            )
    return values, defaulted


# --------------------------------------------------------------------------- changing the <disk>
# the user has The user's own <disk> edited in place (issue 49): only the <driver> attributes of the
# axes the answer changes, and the <source> where the image was converted; <target>, <address>,
# <boot order>, <serial>, the IOThread and the rest of the element stay as they are. virt-xml
# (virtinst) makes the same edit on a defined domain. virt-xml's --disk names each <driver>
# attribute 'driver.ATTR' (its plain 'format=' is for new storage only: on an existing disk virt-xml
# 4.1 leaves the type as it was); 'driver.ATTR=' removes the attribute.
VIRT_XML_DRIVER = "driver."


def _driver_keys(name: str, tool: str) -> set[str]:
    """Every option axis `name` spells in `tool`, at any of its values."""
    spell = axes.get(name).tools.get(tool)
    return (
        set() if spell is None else {k for v in axes.get(name).values for k, _ in spell(v).options}
    )


def _disk_level(changed: dict[str, str], bus: Bus) -> tuple[dict[str, str], list[str]]:
    """(the changed axes set on the disk itself, notes for those that are not: a scsi disk's
    IOThread and queues belong to its virtio-scsi controller)."""
    on_disk: dict[str, str] = {}
    notes: list[str] = []
    for name, value in changed.items():
        axis = axes.get(name)
        if name == "bus" or "libvirt" not in axis.tools:
            continue
        if axis.on_controller and bus in SCSI_CONTROLLER_BUSES:
            notes.append(
                f"{name}={value} goes on the <driver> of the disk's virtio-scsi "
                "<controller>, not the disk"
            )
            continue
        on_disk[name] = value
    return on_disk, notes


def libvirt_edited_disk(
    settings: str, changed: dict[str, str], bus: Bus, path: str | None = None, block: bool = False
) -> tuple[str, list[str]]:
    """(the user's <disk> element `settings` with the <driver> attributes of the `changed` axes set
    and their other values removed, its <source> pointed at `path` when given; notes on what is not
    set on the disk)."""
    disk = ET.fromstring(settings)
    driver = disk.find("driver")
    if driver is None:
        driver = ET.Element("driver", name="qemu")
        disk.insert(0, driver)
    on_disk, notes = _disk_level(changed, bus)
    for name, value in on_disk.items():
        new = {k: str(v) for k, v in axes.get(name).tools["libvirt"](value).options}
        for k in _driver_keys(name, "libvirt") - new.keys():
            driver.attrib.pop(k, None)
        driver.attrib.update(new)  # an attribute the user has keeps its place
    if path is not None and (src := disk.find("source")) is not None:
        for k in ("file", "dev"):
            src.attrib.pop(k, None)
        src.set("dev" if block else "file", path)
    if on_disk.get("iothread") == IOThread.ON:
        notes.append(
            f"iothread='{LIBVIRT_IOTHREAD_ID}' needs "
            f"<iothreads>{LIBVIRT_IOTHREAD_ID}</iothreads> (or more) "
            "in <domain>"
        )
    disk.tail = None
    ET.indent(disk, space="  ")
    return ET.tostring(disk, encoding="unicode"), notes


def virt_xml_command(
    domain: str, dev: str, changed: dict[str, str], bus: Bus, path: str | None = None
) -> tuple[str | None, list[str]]:
    """(`virt-xml DOMAIN --edit target=DEV --disk …` making the edit `libvirt_edited_disk` makes,
    None when a changed axis has no virt-xml option; notes)."""
    on_disk, notes = _disk_level(changed, bus)
    opts: list[tuple[str, str]] = []
    for name, value in on_disk.items():
        t = axes.get(name).tools["libvirt"](value)
        if t.unavailable:
            return None, [f"virt-xml cannot set {name}={value}: {t.unavailable}"]
        # A value spelled by no attribute (QEMU's default) is unset: 'driver.ATTR=' removes the
        # user's attribute.
        new = [(str(k), str(v)) for k, v in t.options] or [
            (k, "") for k in sorted(_driver_keys(name, "libvirt"))
        ]
        opts += [(VIRT_XML_DRIVER + k, v) for k, v in new]
    if path is not None:
        opts.append(("path", path))
    if not opts:
        return None, ["nothing to change"]
    words = [
        "virt-xml",
        domain,
        "--edit",
        f"target={dev}",
        "--disk",
        ",".join(f"{k}={v}" for k, v in opts),
    ]
    return shell_command(words, INDENTED_SNIPPET_WIDTH), notes


def edited_domain(domain_xml: str, dev: str, disk_xml: str) -> str:
    """The whole domain `domain_xml` with its <disk> on target `dev` replaced by `disk_xml` (what
    virsh edit saves), everything else as it is."""
    root = ET.fromstring(domain_xml)
    devices = root.find("devices")
    assert devices is not None
    for i, d in enumerate(list(devices)):
        if d.tag == "disk" and (t := d.find("target")) is not None and t.get("dev") == dev:
            new = ET.fromstring(disk_xml)
            new.tail = d.tail
            devices.remove(d)
            devices.insert(i, new)
            break
    else:
        raise UserError(
            f"the domain has no disk {dev}", hint="give the domain the snippet was written for"
        )
    return ET.tostring(root, encoding="unicode")
