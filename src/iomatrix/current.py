"""The configuration a user runs today (`--current`), read from what they already have.

Accepted forms:
  * a libvirt domain XML file (``virsh dumpxml VM > vm.xml``): the first ``<disk device='disk'>``, or the
    one whose ``<target dev=...>`` is given as ``disk``;
  * a QEMU ``-drive`` or ``-blockdev`` option string (with or without the option name, with the matching
    ``-device`` when there is one): ``-drive file=vm.qcow2,format=qcow2,cache=none,aio=native,if=virtio``;
  * Proxmox VE's ``qm config VMID`` output (or the VM's ``/etc/pve/qemu-server/VMID.conf``): the boot disk, or
    the drive given as ``disk`` (``scsi0``);
  * plain axes: ``cache=none,aio=threads,format=qcow2,bus=virtio-blk``.

Unset values take the tool's documented default (QEMU ``-drive``: cache=writeback, aio=threads; libvirt: no
cache/io attribute = the hypervisor default, i.e. QEMU's; Proxmox: qemu-server's, see below), and the result
says which were defaulted.

The device axes (IOThread, queues) and the bus's controller are read where each tool puts them: libvirt's disk
``<driver>`` for virtio-blk, the virtio-scsi ``<controller>`` the disk's ``<address>`` names for scsi disks
(alone on it: virtio-scsi-single), QEMU's ``-device`` or its controller, Proxmox's drive options with its
``scsihw``.

Every axis of the registry (`iomatrix.domain.axes`) is read: the plain form takes any axis and checks its
values; libvirt's ``<driver>`` attributes are read back through each axis's libvirt spelling, and QEMU's
options through each later axis's QEMU options. The first release's axes keep their own QEMU parsing (cache
from its three switches, the bus from ``if=`` or the ``-device`` driver), and the bus comes from libvirt's
``<target bus=>``.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix import domain
from iomatrix.backing.spec import parse_size
from iomatrix.domain import BUS, CACHE, SCSI_CONTROLLER_BUSES, Bus, CacheMode, Format, axes
from iomatrix.domain.axes import IOThread
from iomatrix.errors import UserError

# libvirt's virtio-scsi controller models (the transitional ones are the same device on another PCI id).
LIBVIRT_VIRTIO_SCSI_MODELS = ("virtio-scsi", "virtio-transitional", "virtio-non-transitional")

FORMS = ("a libvirt domain XML file, a Proxmox 'qm config VMID' output file, a QEMU -drive/-blockdev string (e.g. "
         "'-drive file=vm.qcow2,cache=none,aio=native,if=virtio') or axes 'cache=none,aio=threads,format=qcow2,"
         "bus=virtio-blk'")
QEMU_DEFAULT_CACHE = str(axes.get("cache").default)  # qemu-system-x86_64(1): "The default mode is cache=writeback"
QEMU_DEFAULT_AIO = str(axes.get("aio").default)
# libvirt without <driver type=> probes the image (or assumes raw): its format is unknown, not QEMU's default.
# Every other axis libvirt spells takes the hypervisor's default, i.e. QEMU's, when its attribute is absent.
LIBVIRT_UNKNOWN_WHEN_ABSENT = ("format",)
# -drive if= → bus (if=scsi attaches an LSI controller, not virtio-scsi: iomatrix has no such bus).
DRIVE_IF = {"virtio": Bus.VIRTIO_BLK, "ide": Bus.IDE}
LIBVIRT_BUS = {s.libvirt: b for b, s in BUS.items()}
QEMU_DEVICE = {"virtio-blk-pci": Bus.VIRTIO_BLK, "virtio-blk": Bus.VIRTIO_BLK, "scsi-hd": Bus.VIRTIO_SCSI,
               "ide-hd": Bus.IDE, "nvme": Bus.NVME}


@dataclass(frozen=True)
class ExistingDisk:
    """The disk a user's configuration names, as far as it says: what the snippets change in place instead of
    creating a new, empty one. `tool` is the form it was read from (libvirt, qemu, proxmox); `path` the image
    file or block device; `device` libvirt's target dev or Proxmox's drive key (scsi0); `volume` Proxmox's
    volume id (local:100/vm-100-disk-0.qcow2) and `vmid` the VM's id where the file's name gives it."""

    tool: str
    path: str | None = None
    device: str | None = None
    volume: str | None = None
    vmid: str | None = None
    block: bool = False  # a block device (libvirt type='block', QEMU host_device, a Proxmox volume with no file)

    def as_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items() if v not in (None, False)}

    @classmethod
    def from_dict(cls, raw: dict[str, str]) -> ExistingDisk:
        return cls(raw["tool"], raw.get("path"), raw.get("device"), raw.get("volume"), raw.get("vmid"),
                   raw.get("block") == "True")


@dataclass
class CurrentConfig:
    """Axes of today's configuration (only those known), where they came from, and what was defaulted."""

    axes: dict[str, str]
    source: str
    defaulted: list[str] = field(default_factory=list)
    # The qcow2 L2 cache bound the configuration sets (bytes), when it sets one: the image it is for is not in the
    # configuration, so `recommend` checks it against the image each workload ran on (axes.l2_cache_holds).
    l2_cache_bytes: int | None = None
    notes: list[str] = field(default_factory=list)  # how a value was read (an L2 cache size as l2_cache=…)
    # The user's existing disk (None for plain axes): snippets then change it rather than create a new one.
    disk: ExistingDisk | None = None

    def label(self) -> str:
        return " ".join(f"{a.name}={self.axes[a.name]}" for a in axes.axes() if a.name in self.axes)


def _bad(field_name: str, value: str, accepted: str) -> UserError:
    return UserError(f"--current: cannot read {field_name} '{value}'", hint=f"accepted: {accepted}")


def _value(axis: str, field_name: str, value: str) -> str:
    """`value` if it is one of the axis's values, else a one-line error listing them."""
    if value not in axes.get(axis).values:
        raise _bad(field_name, value, axes.get(axis).choices())
    return value


def _choices(values: list[str]) -> str:
    """'a, b or c'."""
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else "".join(values)


def _split_opts(text: str) -> list[tuple[str, str]]:
    """QEMU key=value,key=value (',,' is a literal comma)."""
    parts, cur, i = [], "", 0
    while i < len(text):
        if text[i] == "," and text[i + 1:i + 2] == ",":
            cur += ","
            i += 2
            continue
        if text[i] == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += text[i]
        i += 1
    parts.append(cur)
    out = []
    for p in parts:
        if not p:
            continue
        k, sep, v = p.partition("=")
        if not sep:
            raise _bad("option", p, "key=value pairs separated by commas; " + FORMS)
        out.append((k.strip(), v.strip()))
    return out


def _onoff(key: str, value: str) -> bool:
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise _bad(key, value, "on or off")


def cache_from_switches(direct: bool, write_cache: bool, no_flush: bool) -> CacheMode:
    for mode, sem in CACHE.items():
        if (sem.direct, sem.write_cache, sem.no_flush) == (direct, write_cache, no_flush):
            return mode
    raise UserError("--current: no QEMU cache mode has cache.direct/write-cache/cache.no-flush = "
                    f"{direct}/{write_cache}/{no_flush}", hint="see the cache table in 'iomatrix' docs/design.md")


# --------------------------------------------------------------------------- libvirt


def from_libvirt_xml(path: Path, disk: str | None = None) -> CurrentConfig:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise UserError(f"--current: {path} is not XML ({e})", hint="give 'virsh dumpxml VM > vm.xml' output") from e
    every = [(d, t.get("dev") if (t := d.find("target")) is not None else None) for d in root.iter("disk")]
    disks = [d for d, _ in every if d.get("device", "disk") == "disk"]
    # Only disks are listed: a CD-ROM or floppy drive (<disk device='cdrom'>) has no disk configuration to measure.
    listed = ", ".join(dev for d, dev in every if dev and d.get("device", "disk") == "disk") or "none"
    if disk is not None:
        other = next((d.get("device") for d, dev in every if dev == disk and d.get("device", "disk") != "disk"), None)
        if other is not None:
            raise UserError(f"--current-disk: {disk} in {path.name} is a {other} drive, not a disk",
                            hint=f"disks in it: {listed} (--current-disk DEV)")
        disks = [d for d in disks if (t := d.find("target")) is not None and t.get("dev") == disk]
    if not disks:
        raise UserError(f"--current: {path.name} has no disk{f' {disk}' if disk else ''}",
                        hint=f"disks in it: {listed} (--current-disk DEV)")
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
    image = None if src is None else (src.get("file") or src.get("dev"))
    existing = ExistingDisk("libvirt", image, dev, block=d.get("type") == "block")
    cfg = CurrentConfig(values, f"libvirt {path.name}, disk {dev}", defaulted, disk=existing)
    max_size = drv.find("metadata_cache/max_size") if drv is not None else None
    if max_size is not None:
        _set_l2_cache(cfg, _libvirt_scaled(max_size, "driver metadata_cache max_size"), "metadata_cache max_size")
    return cfg


# libvirt's scaled integers (virScaleInteger): 'b'/'bytes', KB = 1000, k/KiB = 1024, and so on up to E.
_LIBVIRT_UNIT = re.compile(r"^(?:(b|bytes?)|([kmgtpe])(ib|b)?)$", re.IGNORECASE)


def _libvirt_scaled(elem: ET.Element, field_name: str) -> int:
    """A libvirt scaled integer element (<max_size unit='MiB'>64</max_size>; no unit: bytes) in bytes."""
    text, unit = (elem.text or "").strip(), elem.get("unit", "bytes")
    m = _LIBVIRT_UNIT.match(unit)
    if not text.isdigit() or m is None:
        raise _bad(field_name, f"{text} {unit}".strip(), "a whole number with a libvirt unit (bytes, KiB, MiB, "
                                                         "GiB; KB, MB, GB are powers of 1000)")
    if m.group(1):
        return int(text)
    base = 1000 if (m.group(3) or "").lower() == "b" else 1024
    return int(text) * base ** ("kmgtpe".index(m.group(2).lower()) + 1)


def _set_l2_cache(cfg: CurrentConfig, cache_bytes: int, option: str) -> None:
    """Record an L2 cache bound the configuration sets, and the l2_cache value it reads as (only for qcow2, the
    only format with an L2 cache; a format the configuration does not name may be qcow2)."""
    if cfg.axes.get("format", Format.QCOW2.value) != Format.QCOW2.value:
        return
    value, note = axes.l2_cache_read_back(cache_bytes, option)
    cfg.l2_cache_bytes = cache_bytes
    if value != axes.get("l2_cache").default:
        cfg.axes["l2_cache"] = value
    cfg.notes.append(note)


def _scsi_controller_of(disk: ET.Element) -> str:
    """The index of the scsi controller a disk is on: its <address type='drive' controller=K>, else 0 (where
    libvirt puts every scsi disk that names none)."""
    addr = disk.find("address")
    if addr is not None and addr.get("type") == "drive":
        return addr.get("controller", "0")
    return "0"


def _libvirt_device_axes(root: ET.Element, disk: ET.Element, bus: Bus | None) -> dict[str, str]:
    """The bus's controller and the device axes (the registry's Axis.on_controller: IOThread, queues), which
    libvirt writes on the disk's <driver> for virtio-blk and on the virtio-scsi <controller>'s <driver> for scsi disks.

    A scsi disk whose <address> names a controller no other disk is on has a controller of its own
    (virtio-scsi-single); a controller several disks share, or a disk that names none (libvirt puts every such
    disk on controller 0), is virtio-scsi. Axes left at QEMU's default are left out (as in a cell's key)."""
    values: dict[str, str] = {}
    driver = disk.find("driver")
    if bus in SCSI_CONTROLLER_BUSES:
        index = _scsi_controller_of(disk)
        ctrl = next((c for c in root.iter("controller") if c.get("type") == "scsi" and c.get("index", "0") == index),
                    None)
        if ctrl is not None and ctrl.get("model") not in LIBVIRT_VIRTIO_SCSI_MODELS:
            raise _bad(f"scsi controller {index} model", ctrl.get("model") or "(none: libvirt's LSI default)",
                       "virtio-scsi (iomatrix measures no other scsi controller)")
        on_it = [x for x in root.iter("disk") if (t := x.find("target")) is not None and t.get("bus") == "scsi"
                 and _scsi_controller_of(x) == index]
        has_address = disk.find("address") is not None
        values["bus"] = (Bus.VIRTIO_SCSI_SINGLE if has_address and len(on_it) == 1 else Bus.VIRTIO_SCSI).value
        driver = ctrl.find("driver") if ctrl is not None else None
    if driver is None:
        return values
    iothread = driver.get("iothread")
    if driver.find("iothreads") is not None:  # libvirt ≥ 10.0: IOThreads mapped to the disk's virtqueues
        values["iothread"] = IOThread.VQ_MAPPING.value
    elif iothread is not None:
        _check_iothread_id(root, iothread)
        values["iothread"] = IOThread.ON.value
    if (queues := driver.get("queues")) is not None:
        values["queues"] = _value("queues", "driver queues", queues)
    return values


def _check_iothread_id(root: ET.Element, iothread: str) -> None:
    """libvirt numbers IOThreads 1..<iothreads>N</iothreads> (or lists their ids in <iothreadids>)."""
    ids = {t.get("id") for t in root.iterfind("iothreadids/iothread")}
    count = (root.findtext("iothreads") or "0").strip()
    known = ids or ({str(i) for i in range(1, int(count) + 1)} if count.isdigit() else set())
    if iothread not in known:
        raise UserError(f"--current: driver iothread='{iothread}' names no IOThread of the domain "
                        f"(<iothreads>{count}</iothreads>)",
                        hint="libvirt refuses this XML: give 'virsh dumpxml' output")


def _libvirt_driver_axes(attrs: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Every axis libvirt spells on <driver>, read back through its spelling; an axis none of whose
    attributes is there takes the hypervisor's default (QEMU's)."""
    values: dict[str, str] = {}
    defaulted: list[str] = []
    if attrs.get("cache") == "default":  # libvirt's explicit "the hypervisor's"
        attrs = {k: v for k, v in attrs.items() if k != "cache"}
    for axis in axes.axes():
        spell = axis.tools.get("libvirt")
        # The bus is <target bus=>, the device axes are where the bus puts them: both read by the caller.
        if spell is None or axis.name == "bus" or axis.on_controller:
            continue
        spelled = {v: t.options for v in axis.values if (t := spell(v)).unavailable is None}
        value = _read_back(spelled, attrs.get, lambda key: f"driver {key}")
        if value is not None:
            values[axis.name] = value
        elif axis.always_named and axis.name not in LIBVIRT_UNKNOWN_WHEN_ABSENT:
            # (a later axis left out is at its default implicitly, as in a cell's key: nothing to say)
            values[axis.name] = str(axis.default)
            defaulted.append(f"{axis.name} (libvirt default: the hypervisor's, QEMU {axis.name}={axis.default})")
    return values, defaulted


def _read_back(spelled: dict[str, axes.Options], given: Callable[[str], str | None],
               field_name: Callable[[str], str]) -> str | None:
    """The value whose options (`spelled`: value → KEY=VALUE pairs) all match what is `given`, the most
    specific one where several do; None when none of the keys is given; a one-line error when some are given
    but no value matches."""
    keys = list(dict.fromkeys(k for options in spelled.values() for k, _ in options))
    present = [k for k in keys if given(k)]
    if not present:
        return None
    matching = [v for v, options in spelled.items() if options and all(given(k) == val for k, val in options)]
    if not matching:
        key = present[0]
        accepted = list(dict.fromkeys(val for options in spelled.values() for k, val in options if k == key))
        raise _bad(field_name(key), given(key) or "", _choices(accepted))
    return max(matching, key=lambda v: len(spelled[v]))


# --------------------------------------------------------------------------- QEMU


Device = dict[str, Any]  # one -device's properties, "driver" its name (a JSON -device's lists kept as lists)


def _device_props(arg: str) -> Device:
    """-device DRIVER,key=value,… or QEMU's JSON syntax {"driver": …} (which iothread-vq-mapping needs)."""
    if arg.lstrip().startswith("{"):
        try:
            props = json.loads(arg)
        except json.JSONDecodeError as e:
            raise _bad("-device", arg, f"QEMU's JSON -device syntax ({e})") from e
        if not isinstance(props, dict) or "driver" not in props:
            raise _bad("-device", arg, 'a JSON object with a "driver"')
        return {k: v if isinstance(v, list | dict) else str(v) for k, v in props.items()}
    name, _, rest = arg.partition(",")
    return {"driver": name, **dict(_split_opts(rest))}


def _qemu_options(tokens: list[str]) -> tuple[dict[str, str] | None, dict[str, str] | None, list[Device]]:
    """(the -drive, the first -blockdev (the format node), every -device) of a command line."""
    drive: dict[str, str] | None = None
    blockdev: dict[str, str] | None = None
    devices: list[Device] = []
    for tok, arg in itertools.pairwise(tokens):
        if tok == "-drive":
            drive = dict(_split_opts(arg))
        elif tok == "-blockdev" and blockdev is None:
            blockdev = dict(_split_opts(arg))
        elif tok == "-device":
            devices.append(_device_props(arg))
    return drive, blockdev, devices


def _qemu_device_axes(device: Device, devices: list[Device]) -> dict[str, str]:
    """The bus's controller and the device axes of the disk's -device: IOThread and queues on a virtio-blk device,
    on its virtio-scsi-pci controller (the -device whose id the disk's bus= names) for scsi-hd. A scsi disk alone
    on its controller among several scsi disks has a controller of its own (virtio-scsi-single); a lone scsi
    disk reads as virtio-scsi: its command line is the same either way. QEMU's defaults are left out."""
    values: dict[str, str] = {}
    props = device
    if device["driver"] == "scsi-hd":
        controller_id = str(device.get("bus", "")).partition(".")[0]
        scsi = [d for d in devices if d["driver"] == "scsi-hd"]
        alone = [d for d in scsi if str(d.get("bus", "")).partition(".")[0] == controller_id] == [device]
        values["bus"] = (Bus.VIRTIO_SCSI_SINGLE if alone and len(scsi) > 1 else Bus.VIRTIO_SCSI).value
        props = next((d for d in devices if d.get("id") == controller_id and controller_id), {})
    if "iothread-vq-mapping" in props:
        values["iothread"] = IOThread.VQ_MAPPING.value
    elif "iothread" in props:
        values["iothread"] = IOThread.ON.value
    queues = props.get("num-queues", props.get("num_queues"))
    if queues is not None:
        values["queues"] = _value("queues", "num-queues", str(queues))
    return values


def from_qemu(text: str) -> CurrentConfig:
    try:  # (a command pasted over several lines: a backslash at a line's end continues it, as in a shell)
        tokens = shlex.split(text.replace("\\\n", ""))
    except ValueError as e:  # shlex: "No closing quotation", "No escaped character"
        raise UserError(f"--current: cannot split the QEMU options as a shell would ({str(e).lower()})",
                        hint="close the quote, or quote the whole value once: --current '-drive file=…,cache=none'"
                        ) from None
    drive, blockdev, devices = _qemu_options(tokens)
    # The disk's -device (a controller has no drive=).
    device = next((d for d in devices if "drive" in d), {})
    if drive is not None:
        values, defaulted = _from_drive(drive)
    elif blockdev is not None:
        values, defaulted = _from_blockdev(blockdev, device)
    else:
        raise _bad("QEMU option", text, FORMS)
    if device:
        drv = device["driver"]
        if drv not in QEMU_DEVICE:
            raise _bad("-device", drv, ", ".join(QEMU_DEVICE))
        values["bus"] = QEMU_DEVICE[drv].value
        values.update(_qemu_device_axes(device, devices))
    node = drive if drive is not None else blockdev or {}
    later, later_defaulted = _later_axes_from_qemu(node, device)
    image = node.get("file.filename", node.get("file"))
    existing = ExistingDisk("qemu", image, block=node.get("file.driver") == "host_device"
                            or str(image).startswith("/dev/"))
    cfg = CurrentConfig({**values, **later}, "QEMU command line", defaulted + later_defaulted, disk=existing)
    # The qcow2 L2 cache bound: l2-cache-size, else the combined cache-size (QEMU gives the L2 cache up to it).
    option = next((k for k in QEMU_L2_CACHE_OPTIONS if k in node), None)
    if option is not None:
        try:
            cache_bytes = parse_size(node[option])
        except ValueError:
            raise _bad(option, node[option], "a size in bytes or with a K/M/G/T suffix, e.g. 64M") from None
        _set_l2_cache(cfg, cache_bytes, option)
    return cfg


def _from_drive(kv: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    defaulted: list[str] = []
    if "format" in kv:
        values["format"] = _value("format", "format", kv["format"])
    if "cache" in kv:
        values["cache"] = _value("cache", "cache", kv["cache"])
    elif any(k in kv for k in ("cache.direct", "cache.no-flush")):
        values["cache"] = cache_from_switches(_onoff("cache.direct", kv.get("cache.direct", "off")), True,
                                            _onoff("cache.no-flush", kv.get("cache.no-flush", "off"))).value
    else:
        values["cache"] = QEMU_DEFAULT_CACHE
        defaulted.append(f"cache (QEMU -drive default: {QEMU_DEFAULT_CACHE})")
    if "aio" in kv:
        values["aio"] = _value("aio", "aio", kv["aio"])
    else:
        values["aio"] = QEMU_DEFAULT_AIO
        defaulted.append(f"aio (QEMU default: {QEMU_DEFAULT_AIO})")
    if kv.get("if", "none") != "none":
        if kv["if"] not in DRIVE_IF:
            raise _bad("if", kv["if"], ", ".join(DRIVE_IF) + " or none with a -device")
        values["bus"] = DRIVE_IF[kv["if"]].value
    return values, defaulted


def _from_blockdev(kv: dict[str, str], device: Device) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    defaulted: list[str] = []
    if kv.get("driver", "") in {f.value for f in Format}:
        values["format"] = kv["driver"]
    direct = _onoff("cache.direct", kv.get("cache.direct", kv.get("file.cache.direct", "off")))
    no_flush = _onoff("cache.no-flush", kv.get("cache.no-flush", kv.get("file.cache.no-flush", "off")))
    wc = _onoff("write-cache", device.get("write-cache", "on"))
    values["cache"] = cache_from_switches(direct, wc, no_flush).value
    aio = kv.get("file.aio", kv.get("aio"))
    if aio is None:
        values["aio"] = QEMU_DEFAULT_AIO
        defaulted.append(f"aio (QEMU default: {QEMU_DEFAULT_AIO})")
    else:
        values["aio"] = _value("aio", "aio", aio)
    return values, defaulted


# A qcow2 node's L2 cache bound (block/qcow2.c read_cache_sizes): l2-cache-size, else the combined cache-size.
QEMU_L2_CACHE_OPTIONS = ("l2-cache-size", "cache-size")
DEVICE_PREFIX = "-device "  # how _later_axes_from_qemu names a -device property among the node's options


def _later_axes_from_qemu(node: dict[str, str], device: Device) -> tuple[dict[str, str], list[str]]:
    """The registry's later axes, read back through their QEMU options: format-node options on the -drive or
    the first -blockdev, protocol-node ones as file.KEY there (or KEY on a -drive), device ones on the
    -device. An axis none of whose options is given is left out: it is at QEMU's default."""

    def given(key: str) -> str | None:
        if key.startswith(DEVICE_PREFIX):
            return device.get(key.removeprefix(DEVICE_PREFIX))
        return node.get(key, node.get(key.removeprefix("file.")))

    values: dict[str, str] = {}
    defaulted: list[str] = []
    for axis in axes.axes():
        if axis.always_named or axis.qemu is None or axis.on_controller:  # (read by _qemu_device_axes)
            continue
        spelled = {v: (*q.format_node, *((f"file.{k}", val) for k, val in (*q.file_node, *q.file_protocol)),
                       *((DEVICE_PREFIX + k, val) for k, val in q.device))
                   for v in axis.values if (q := axis.qemu(v))}
        value = _read_back(spelled, given, lambda key: key)
        if value is not None:  # (one left out is at its default implicitly, as in a cell's key)
            values[axis.name] = value
    return values, defaulted


# --------------------------------------------------------------------------- Proxmox VE
# `qm config VMID` output, or the VM's file /etc/pve/qemu-server/VMID.conf (the same "key: value" lines, then a
# [snapshot] section per snapshot, which is not the running configuration). What qemu-server runs for a drive
# that does not set an option (PVE/QemuServer.pm print_drive_commandline_full and PVE/QemuServer/Drive.pm of
# qemu-server 8, Proxmox VE 8):
#   cache: none (O_DIRECT) unless the storage is btrfs without nocow;
#   aio: io_uring (since Proxmox VE 7.0), but native (with cache none/directsync) or threads on LVM and CIFS
#     storages and on krbd without O_DIRECT;
#   detect_zeroes: on, and unmap with discard=on (only detect_zeroes=0 turns it off);
#   discard: ignore; iothread: off; scsihw: lsi (qm.conf's default; the web interface writes virtio-scsi-single
#   for new VMs); a scsi drive's iothread and queues take effect only with scsihw virtio-scsi-single.
PROXMOX_DRIVE = re.compile(r"^(ide|sata|scsi|virtio)(\d+)$")
PROXMOX_BUS = {"virtio": Bus.VIRTIO_BLK, "ide": Bus.IDE, "sata": Bus.SATA}
PROXMOX_SCSIHW = {"virtio-scsi-pci": Bus.VIRTIO_SCSI, "virtio-scsi-single": Bus.VIRTIO_SCSI_SINGLE}
PROXMOX_DEFAULT_SCSIHW = "lsi"
PROXMOX_DEFAULT_CACHE = "none"
PROXMOX_DEFAULT_AIO = "io_uring"
PROXMOX_TRUE = ("1", "on", "yes", "true")
PROXMOX_FALSE = ("0", "off", "no", "false")
# qemu-server's drive order when it picks a boot disk itself (PVE/QemuServer/Drive.pm valid_drive_names).
PROXMOX_DRIVE_ORDER = ("ide", "scsi", "virtio", "sata")
PROXMOX_IMAGE_EXTENSIONS = {f".{f.value}": f.value for f in Format}
# A line of `qm config`: "key: value" (a key has letters, digits, '-' and '_').
PROXMOX_LINE = re.compile(r"^([a-z][a-z0-9_-]*):\s?(.*)$")


def looks_like_qm_config(text: str) -> bool:
    """Whether `text` is `qm config` output: key: value lines, one of them a disk drive or scsihw."""
    lines = list(itertools.takewhile(lambda line: not line.startswith("["), text.splitlines()))
    matches = [PROXMOX_LINE.match(line) for line in lines if line.strip() and not line.startswith("#")]
    return all(matches) and any(PROXMOX_DRIVE.match(m.group(1)) or m.group(1) == "scsihw" for m in matches if m)


def _qm_config(text: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("["):  # a snapshot's section: the running configuration ends here
            break
        if not line.strip() or line.startswith("#"):
            continue
        m = PROXMOX_LINE.match(line)
        if m is None:
            raise _bad("qm config line", line, "'key: value' lines of 'qm config VMID'")
        conf[m.group(1)] = m.group(2).strip()
    return conf


def _qm_drive(value: str) -> dict[str, str]:
    """A drive's property string: [file=]VOLUME,key=value,…"""
    parts = value.split(",")
    drive = {"file": parts[0]} if "=" not in parts[0] else {}
    for part in parts[0 if not drive else 1:]:
        k, sep, v = part.partition("=")
        if not sep:
            raise _bad("drive property", part, "key=value after the volume")
        drive["file" if k == "volume" else k] = v
    return drive


def _qm_disks(conf: dict[str, str]) -> list[str]:
    """The VM's disks (not CD-ROM drives), the boot order's first."""
    found = [(m.group(1), int(m.group(2)), key) for key in conf if (m := PROXMOX_DRIVE.match(key))]
    drives = {key: _qm_drive(conf[key]) for _, _, key in found}
    disks = [key for _, _, key in sorted(found, key=lambda f: (PROXMOX_DRIVE_ORDER.index(f[0]), f[1]))
             if drives[key].get("media", "disk") != "cdrom" and drives[key].get("file") != "none"]
    boot = conf.get("boot", "")
    order = boot.removeprefix("order=").split(";") if boot.startswith("order=") else []
    order += [conf["bootdisk"]] if "bootdisk" in conf else []
    first = [k for k in order if k in disks]
    return first[:1] + [k for k in disks if k not in first[:1]]


def _qm_bool(key: str, value: str) -> bool:
    if value in PROXMOX_TRUE:
        return True
    if value in PROXMOX_FALSE:
        return False
    raise _bad(key, value, "a Proxmox boolean: 1/0, on/off, yes/no")


def from_proxmox(text: str, source: str, disk: str | None = None) -> CurrentConfig:
    conf = _qm_config(text)
    disks = _qm_disks(conf)
    if disk is not None and disk not in disks:
        raise UserError(f"--current: {source} has no disk {disk}",
                        hint=f"disks in it: {', '.join(disks) or 'none'} (--current-disk scsi0)")
    if not disks:
        raise UserError(f"--current: {source} has no disk", hint="give 'qm config VMID' output of a VM with a disk")
    key = disk or disks[0]
    drive = _qm_drive(conf[key])
    values, defaulted = _proxmox_drive_axes(key, drive, conf)
    volume = drive.get("file", "")
    vmid = m.group(1) if (m := re.search(r"(\d+)", Path(source).stem)) else None  # 100.conf, qm100.conf
    # A volume of a directory/NFS storage is an image file (…/vm-100-disk-0.qcow2); LVM, ZFS and Ceph are not.
    block = not any(volume.endswith(e) for e in PROXMOX_IMAGE_EXTENSIONS)
    existing = ExistingDisk("proxmox", None, key, volume or None, vmid, block)
    return CurrentConfig(values, f"Proxmox {source}, disk {key}", defaulted, disk=existing)


def _proxmox_bus(key: str, conf: dict[str, str]) -> tuple[Bus, str]:
    """(the bus, its scsihw) of drive `key`."""
    prefix = PROXMOX_DRIVE.match(key).group(1)  # type: ignore[union-attr]
    if prefix != "scsi":
        return PROXMOX_BUS[prefix], ""
    scsihw = conf.get("scsihw", PROXMOX_DEFAULT_SCSIHW)
    if scsihw not in PROXMOX_SCSIHW:
        raise _bad("scsihw", scsihw, f"{', '.join(PROXMOX_SCSIHW)} (iomatrix measures no other scsi controller; "
                                     f"'{PROXMOX_DEFAULT_SCSIHW}' is qm.conf's default when scsihw is absent)")
    return PROXMOX_SCSIHW[scsihw], scsihw


def _proxmox_drive_axes(key: str, drive: dict[str, str], conf: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    defaulted: list[str] = []
    volume = drive.get("file", "")
    if "format" in drive:
        values["format"] = _value("format", "format", drive["format"])
    else:  # qemu-server: a file's extension, else (LVM, ZFS, Ceph volumes) raw
        ext = next((e for e in PROXMOX_IMAGE_EXTENSIONS if volume.endswith(e)), None)
        values["format"] = PROXMOX_IMAGE_EXTENSIONS[ext] if ext else Format.RAW.value
    if "cache" in drive:
        values["cache"] = _value("cache", "cache", drive["cache"])
    else:
        values["cache"] = PROXMOX_DEFAULT_CACHE
        defaulted.append(f"cache (Proxmox default: {PROXMOX_DEFAULT_CACHE}; writeback on a btrfs storage)")
    if "aio" in drive:
        values["aio"] = _value("aio", "aio", drive["aio"])
    else:
        values["aio"] = PROXMOX_DEFAULT_AIO
        defaulted.append(f"aio (Proxmox ≥ 7.0 default: {PROXMOX_DEFAULT_AIO}; native or threads on LVM and CIFS "
                         "storages)")
    bus, scsihw = _proxmox_bus(key, conf)
    values["bus"] = bus.value
    discard_on = drive.get("discard", "ignore") == "on"
    if drive.get("discard", "ignore") not in ("ignore", "on"):
        raise _bad("discard", drive["discard"], "ignore or on")
    if discard_on:
        values["discard"] = "unmap"
    zeroes = _qm_bool("detect_zeroes", drive["detect_zeroes"]) if "detect_zeroes" in drive else None
    values["detect_zeroes"] = "off" if zeroes is False else ("unmap" if discard_on else "on")
    if zeroes is None:
        defaulted.append(f"detect_zeroes (Proxmox default: {values['detect_zeroes']}, unless detect_zeroes=0)")
    # A scsi drive's iothread and queues take effect with scsihw virtio-scsi-single only (qemu-server ignores them
    # on a shared controller); virtio drives have iothread and no queues.
    own_controller = bus == Bus.VIRTIO_BLK or scsihw == "virtio-scsi-single"
    if own_controller and _qm_bool("iothread", drive.get("iothread", "0")):
        values["iothread"] = IOThread.ON.value
    if own_controller and "queues" in drive:
        values["queues"] = _value("queues", "queues", drive["queues"])
    return values, defaulted


# --------------------------------------------------------------------------- plain axes


def from_axes(text: str) -> CurrentConfig:
    """Any axis of the registry as key=value (tier and backing are not a disk's configuration)."""
    values: dict[str, str] = {}
    known = [a.name for a in axes.plan_axes()]
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or k not in known:
            raise _bad("axis", part, f"{', '.join(known)} as key=value; or {FORMS}")
        values[k] = _value(k, k, v)
    if "cache" not in values:
        raise UserError("--current: the axes give no cache mode", hint=f"add cache=… ({axes.get('cache').choices()})")
    return CurrentConfig(values, "axes given on the command line")


def _read_text(path: Path) -> str:
    """The text of a --current file; a one-line error for a file that cannot be read or is not UTF-8 text."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"--current: cannot read {path} ({e.strerror or e})",
                        hint="give a file you can read, e.g. 'virsh dumpxml VM > vm.xml'") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"--current: {path} is not a text file (byte {data[e.start]:#04x} at offset {e.start} "
                        "is not UTF-8)", hint=f"give {FORMS}") from None


def parse_current(value: str, disk: str | None = None) -> CurrentConfig:
    """--current VALUE → CurrentConfig; a one-line UserError naming the field and the accepted forms."""
    value = value.strip()
    if not value:
        raise UserError("--current is empty", hint=f"give {FORMS}")
    path = Path(value)
    if len(value) < 4096 and "=" not in value and path.is_dir():
        raise UserError(f"--current: {value} is a directory",
                        hint="give a file in it, e.g. 'virsh dumpxml VM > vm.xml' or 'qm config VMID > vm.conf'")
    if value.endswith((".xml", ".conf")) or (len(value) < 4096 and "=" not in value and path.is_file()):
        if not path.is_file():
            raise UserError(f"--current: no such file {value}",
                            hint="give 'virsh dumpxml VM > vm.xml' or 'qm config VMID > vm.conf' output")
        text = _read_text(path)
        if not text.lstrip().startswith("<") and looks_like_qm_config(text):
            return _checked(from_proxmox(text, path.name, disk))
        return from_libvirt_xml(path, disk)
    if disk is not None:
        raise UserError(f"--current-disk {disk}: the --current value is not a file with several disks",
                        hint="--current-disk picks a disk of a libvirt XML or 'qm config' file; leave it out here")
    if value.startswith(("-drive", "-blockdev", "-device")) or "file=" in value or "driver=" in value:
        text = value if value.startswith("-") else ("-blockdev " if "driver=" in value.split(",")[0] else "-drive ") \
            + value
        cfg = from_qemu(text)
    else:
        cfg = from_axes(value)
    return _checked(cfg)


def _checked(cfg: CurrentConfig) -> CurrentConfig:
    if cfg.axes.get("cache") and cfg.axes.get("aio") and (why := domain.aio_rule(cfg.axes["cache"], cfg.axes["aio"])):
        raise UserError(f"--current: {why}", hint="QEMU would not start this configuration")
    return cfg
