"""The configuration a user runs today (`--current`), read from what they already have.

Accepted forms:
  * a libvirt domain XML file (``virsh dumpxml VM > vm.xml``): the first ``<disk device='disk'>``, or the
    one whose ``<target dev=...>`` is given as ``disk``;
  * a QEMU ``-drive`` or ``-blockdev`` option string (with or without the option name, with the matching
    ``-device`` when there is one): ``-drive file=vm.qcow2,format=qcow2,cache=none,aio=native,if=virtio``;
  * plain axes: ``cache=none,aio=threads,format=qcow2,bus=virtio-blk``.

Unset values take the tool's documented default (QEMU ``-drive``: cache=writeback, aio=threads; libvirt: no
cache/io attribute = the hypervisor default, i.e. QEMU's), and the result says which were defaulted.
"""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from iomatrix import domain
from iomatrix.domain import BUS, CACHE, Aio, Bus, CacheMode, Format, Preallocation
from iomatrix.errors import UserError

FORMS = ("a libvirt domain XML file, a QEMU -drive/-blockdev string (e.g. '-drive file=vm.qcow2,cache=none,"
         "aio=native,if=virtio') or axes 'cache=none,aio=threads,format=qcow2,bus=virtio-blk'")
QEMU_DEFAULT_CACHE = CacheMode.WRITEBACK  # qemu-system-x86_64(1): "The default mode is cache=writeback"
QEMU_DEFAULT_AIO = Aio.THREADS
AXIS_KEYS = ("format", "preallocation", "cache", "aio", "bus")
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
        return " ".join(f"{k}={self.axes[k]}" for k in AXIS_KEYS if k in self.axes)


def _bad(field_name: str, value: str, accepted: str) -> UserError:
    return UserError(f"--current: cannot read {field_name} '{value}'", hint=f"accepted: {accepted}")


def _enum(enum: type, axis: str, value: str):  # type: ignore[no-untyped-def]
    try:
        return enum(value)
    except ValueError:
        raise _bad(axis, value, domain.choices(enum)) from None


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
    axes: dict[str, str] = {}
    defaulted: list[str] = []
    fmt = drv.get("type") if drv is not None else None
    if fmt:
        axes["format"] = _enum(Format, "driver type", fmt).value
    cache = drv.get("cache") if drv is not None else None
    if cache in (None, "default"):
        axes["cache"] = QEMU_DEFAULT_CACHE.value
        defaulted.append("cache (libvirt default: the hypervisor's, QEMU cache=writeback)")
    else:
        axes["cache"] = _enum(CacheMode, "driver cache", cache).value
    io = drv.get("io") if drv is not None else None
    if io is None:
        axes["aio"] = QEMU_DEFAULT_AIO.value
        defaulted.append("aio (libvirt default: the hypervisor's, QEMU aio=threads)")
    else:
        axes["aio"] = _enum(Aio, "driver io", io).value
    bus = tgt.get("bus") if tgt is not None else None
    if bus is not None:
        if bus not in LIBVIRT_BUS:
            raise _bad("target bus", bus, ", ".join(LIBVIRT_BUS))
        axes["bus"] = LIBVIRT_BUS[bus].value
    dev = tgt.get("dev") if tgt is not None else "?"
    return CurrentConfig(axes, f"libvirt {path.name}, disk {dev}", defaulted)


# --------------------------------------------------------------------------- QEMU


def from_qemu(text: str) -> CurrentConfig:
    tokens = shlex.split(text)
    drive: list[tuple[str, str]] | None = None
    blockdev: list[tuple[str, str]] | None = None
    device: list[tuple[str, str]] | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-drive", "-blockdev", "-device") and i + 1 < len(tokens):
            arg = tokens[i + 1]
            if tok == "-drive":
                drive = _split_opts(arg)
            elif tok == "-blockdev" and blockdev is None:  # the first -blockdev: the format node
                blockdev = _split_opts(arg)
            elif tok == "-device" and device is None:
                name, _, rest = arg.partition(",")  # -device DRIVER,key=value,...
                opts = [("driver", name), *_split_opts(rest)]
                if any(k == "drive" for k, _ in opts):  # a disk device, not a controller
                    device = opts
            i += 2
            continue
        i += 1
    if drive is None and blockdev is None:
        raise _bad("QEMU option", text, FORMS)
    axes: dict[str, str] = {}
    defaulted: list[str] = []
    if drive is not None:
        kv = dict(drive)
        if "format" in kv:
            axes["format"] = _enum(Format, "format", kv["format"]).value
        if "cache" in kv:
            axes["cache"] = _enum(CacheMode, "cache", kv["cache"]).value
        elif any(k in kv for k in ("cache.direct", "cache.no-flush")):
            axes["cache"] = cache_from_switches(_onoff("cache.direct", kv.get("cache.direct", "off")), True,
                                                _onoff("cache.no-flush", kv.get("cache.no-flush", "off"))).value
        else:
            axes["cache"] = QEMU_DEFAULT_CACHE.value
            defaulted.append("cache (QEMU -drive default: writeback)")
        if "aio" in kv:
            axes["aio"] = _enum(Aio, "aio", kv["aio"]).value
        else:
            axes["aio"] = QEMU_DEFAULT_AIO.value
            defaulted.append("aio (QEMU default: threads)")
        if kv.get("if", "none") != "none":
            if kv["if"] not in DRIVE_IF:
                raise _bad("if", kv["if"], ", ".join(DRIVE_IF) + " or none with a -device")
            axes["bus"] = DRIVE_IF[kv["if"]].value
    else:
        assert blockdev is not None
        kv = dict(blockdev)
        drv = kv.get("driver", "")
        if drv in {f.value for f in Format}:
            axes["format"] = drv
        direct = _onoff("cache.direct", kv.get("cache.direct", kv.get("file.cache.direct", "off")))
        no_flush = _onoff("cache.no-flush", kv.get("cache.no-flush", kv.get("file.cache.no-flush", "off")))
        wc = _onoff("write-cache", dict(device or []).get("write-cache", "on"))
        axes["cache"] = cache_from_switches(direct, wc, no_flush).value
        aio = kv.get("file.aio", kv.get("aio"))
        if aio is None:
            axes["aio"] = QEMU_DEFAULT_AIO.value
            defaulted.append("aio (QEMU default: threads)")
        else:
            axes["aio"] = _enum(Aio, "aio", aio).value
    if device is not None:
        drv = dict(device)["driver"]
        if drv not in QEMU_DEVICE:
            raise _bad("-device", drv, ", ".join(QEMU_DEVICE))
        axes["bus"] = QEMU_DEVICE[drv].value
    return CurrentConfig(axes, "QEMU command line", defaulted)


# --------------------------------------------------------------------------- plain axes


def from_axes(text: str) -> CurrentConfig:
    axes: dict[str, str] = {}
    enums = {"format": Format, "preallocation": Preallocation, "cache": CacheMode, "aio": Aio, "bus": Bus}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or k not in enums:
            raise _bad("axis", part, f"{', '.join(enums)} as key=value; or {FORMS}")
        axes[k] = _enum(enums[k], k, v).value
    if "cache" not in axes:
        raise UserError("--current: the axes give no cache mode", hint=f"add cache=… ({domain.choices(CacheMode)})")
    return CurrentConfig(axes, "axes given on the command line")


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
