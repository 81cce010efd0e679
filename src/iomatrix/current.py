"""The configuration a user runs today (`--current`), read from what they already have.

Accepted forms:
  * a libvirt domain XML file (``virsh dumpxml VM > vm.xml``): the first ``<disk device='disk'>``, or the
    one whose ``<target dev=...>`` is given as ``disk``;
  * a QEMU ``-drive`` or ``-blockdev`` option string (with or without the option name, with the matching
    ``-device`` when there is one): ``-drive file=vm.qcow2,format=qcow2,cache=none,aio=native,if=virtio``;
  * plain axes: ``cache=none,aio=threads,format=qcow2,bus=virtio-blk``.

Unset values take the tool's documented default (QEMU ``-drive``: cache=writeback, aio=threads; libvirt: no
cache/io attribute = the hypervisor default, i.e. QEMU's), and the result says which were defaulted.

Every axis of the registry (`iomatrix.domain.axes`) is read: the plain form takes any axis and checks its
values; libvirt's ``<driver>`` attributes are read back through each axis's libvirt spelling, and QEMU's
options through each later axis's QEMU options. The first release's axes keep their own QEMU parsing (cache
from its three switches, the bus from ``if=`` or the ``-device`` driver), and the bus comes from libvirt's
``<target bus=>``.
"""

from __future__ import annotations

import itertools
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from iomatrix import domain
from iomatrix.domain import BUS, CACHE, Bus, CacheMode, Format, axes
from iomatrix.errors import UserError

FORMS = ("a libvirt domain XML file, a QEMU -drive/-blockdev string (e.g. '-drive file=vm.qcow2,cache=none,"
         "aio=native,if=virtio') or axes 'cache=none,aio=threads,format=qcow2,bus=virtio-blk'")
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


@dataclass
class CurrentConfig:
    """Axes of today's configuration (only those known), where they came from, and what was defaulted."""

    axes: dict[str, str]
    source: str
    defaulted: list[str] = field(default_factory=list)

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
    disks = [d for d in root.iter("disk") if d.get("device", "disk") == "disk"]
    if disk is not None:
        disks = [d for d in disks if (t := d.find("target")) is not None and t.get("dev") == disk]
    if not disks:
        devs = [t.get("dev") for d in root.iter("disk") if (t := d.find("target")) is not None]
        raise UserError(f"--current: {path} has no disk{f' {disk}' if disk else ''}",
                        hint=f"disks in it: {', '.join(filter(None, devs)) or 'none'} (--current-disk DEV)")
    d = disks[0]
    drv = d.find("driver")
    tgt = d.find("target")
    values, defaulted = _libvirt_driver_axes(dict(drv.attrib) if drv is not None else {})
    bus = tgt.get("bus") if tgt is not None else None
    if bus is not None:
        if bus not in LIBVIRT_BUS:
            raise _bad("target bus", bus, ", ".join(LIBVIRT_BUS))
        values["bus"] = LIBVIRT_BUS[bus].value
    dev = tgt.get("dev") if tgt is not None else "?"
    return CurrentConfig(values, f"libvirt {path.name}, disk {dev}", defaulted)


def _libvirt_driver_axes(attrs: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Every axis libvirt spells on <driver>, read back through its spelling; an axis none of whose
    attributes is there takes the hypervisor's default (QEMU's)."""
    values: dict[str, str] = {}
    defaulted: list[str] = []
    if attrs.get("cache") == "default":  # libvirt's explicit "the hypervisor's"
        attrs = {k: v for k, v in attrs.items() if k != "cache"}
    for axis in axes.axes():
        spell = axis.tools.get("libvirt")
        if spell is None or axis.name == "bus":  # the bus is <target bus=>: read by the caller
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


def _qemu_options(tokens: list[str]) -> tuple[dict[str, str] | None, dict[str, str] | None, dict[str, str]]:
    """(the -drive, the first -blockdev (the format node), the disk's -device) of a command line."""
    drive: dict[str, str] | None = None
    blockdev: dict[str, str] | None = None
    device: dict[str, str] = {}
    for tok, arg in itertools.pairwise(tokens):
        if tok == "-drive":
            drive = dict(_split_opts(arg))
        elif tok == "-blockdev" and blockdev is None:
            blockdev = dict(_split_opts(arg))
        elif tok == "-device" and not device:
            name, _, rest = arg.partition(",")  # -device DRIVER,key=value,...
            opts = [("driver", name), *_split_opts(rest)]
            if any(k == "drive" for k, _ in opts):  # a disk device, not a controller
                device = dict(opts)
    return drive, blockdev, device


def from_qemu(text: str) -> CurrentConfig:
    drive, blockdev, device = _qemu_options(shlex.split(text))
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
    later, later_defaulted = _later_axes_from_qemu(drive if drive is not None else blockdev or {}, device)
    return CurrentConfig({**values, **later}, "QEMU command line", defaulted + later_defaulted)


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


def _from_blockdev(kv: dict[str, str], device: dict[str, str]) -> tuple[dict[str, str], list[str]]:
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


DEVICE_PREFIX = "-device "  # how _later_axes_from_qemu names a -device property among the node's options


def _later_axes_from_qemu(node: dict[str, str], device: dict[str, str]) -> tuple[dict[str, str], list[str]]:
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
        if axis.always_named or axis.qemu is None:
            continue
        spelled = {v: (*q.format_node, *((f"file.{k}", val) for k, val in (*q.file_node, *q.file_protocol)),
                       *((DEVICE_PREFIX + k, val) for k, val in q.device))
                   for v in axis.values if (q := axis.qemu(v))}
        value = _read_back(spelled, given, lambda key: key)
        if value is not None:  # (one left out is at its default implicitly, as in a cell's key)
            values[axis.name] = value
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


def parse_current(value: str, disk: str | None = None) -> CurrentConfig:
    """--current VALUE → CurrentConfig; a one-line UserError naming the field and the accepted forms."""
    value = value.strip()
    if not value:
        raise UserError("--current is empty", hint=f"give {FORMS}")
    path = Path(value)
    if value.endswith(".xml") or (len(value) < 4096 and "=" not in value and path.is_file()):
        if not path.is_file():
            raise UserError(f"--current: no such file {value}", hint="give 'virsh dumpxml VM > vm.xml' output")
        return from_libvirt_xml(path, disk)
    if value.startswith(("-drive", "-blockdev", "-device")) or "file=" in value or "driver=" in value:
        text = value if value.startswith("-") else ("-blockdev " if "driver=" in value.split(",")[0] else "-drive ") \
            + value
        cfg = from_qemu(text)
    else:
        cfg = from_axes(value)
    if cfg.axes.get("cache") and cfg.axes.get("aio") and (why := domain.aio_rule(cfg.axes["cache"], cfg.axes["aio"])):
        raise UserError(f"--current: {why}", hint="QEMU would not start this configuration")
    return cfg
