"""Proxmox VE: the disk's snippet writer (``qm set`` with the drive line, the storage's own
settings) and the ``--current`` reader of ``qm config VMID`` output (or
``/etc/pve/qemu-server/VMID.conf``).

Writer and reader round-trip in tests/test_snippet_round_trips.py.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from iomatrix.domain import (
    BackingKind,
    Bus,
    Format,
    Modifier,
    axes,
)
from iomatrix.domain.axes import QUEUES_AUTO, IOThread
from iomatrix.errors import UserError
from iomatrix.protocol_registry import protocol
from iomatrix.vmconfig.config import (
    DEFAULT_SIZE_GIB,
    DiskConfig,
    Pairs,
    Snippet,
    _not_available,
    _partition,
    measured_defaults,
    shell_command,
)
from iomatrix.vmconfig.network import (
    NetworkDiskRead,
    note_client_cache,
    parse_storage_cfg,
    read_proxmox_volume,
)
from iomatrix.vmconfig.reading import CurrentConfig, ExistingDisk, _bad, _value

# Proxmox: the key prefix of the drive (virtio0, scsi0), and the keys set on the storage (pvesm
# set), not the drive; a block storage (LVM, ZFS) has no image file, so no format on the drive and
# no preallocation.
PROXMOX_DISK_KEY = "disk-key"
PROXMOX_STORAGE_KEYS = ("preallocation",)
PROXMOX_IMAGE_FILE_KEYS = ("format", "preallocation")


def _proxmox_options(cfg: DiskConfig) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    skip = PROXMOX_IMAGE_FILE_KEYS if cfg.backing == BackingKind.BLOCK else ()
    return axes.tool_options(cfg.axis_values(), "proxmox", skip_keys=skip)


def _proxmox_drive_options(opts: Pairs) -> Pairs:
    """The axes' options that are properties of the drive (not its key, not the storage's)."""
    return _partition(opts, lambda k: k != PROXMOX_DISK_KEY and k not in PROXMOX_STORAGE_KEYS)[0]


# Proxmox's format names (qm disk move --format).
PROXMOX_FORMAT_NAMES = {Format.RAW: "raw", Format.QCOW2: "qcow2", Format.QED: "qed"}
# qm.conf scsihw per bus: virtio-scsi-pci is one controller for every scsi disk, virtio-scsi-single
# one per disk.
PROXMOX_SCSIHW = {Bus.VIRTIO_SCSI: "virtio-scsi-pci", Bus.VIRTIO_SCSI_SINGLE: "virtio-scsi-single"}


def _proxmox_device_unavailable(cfg: DiskConfig) -> list[str]:
    """What Proxmox cannot set on this bus (qemu-server PVE/QemuServer.pm config_to_command: a scsi
    drive's iothread and queues go on its controller only with scsihw virtio-scsi-single, and are
    ignored otherwise; PVE/QemuServer/Drive.pm: virtio drives have iothread but no queues)."""
    iothread, queues = cfg.more.get("iothread", IOThread.OFF), cfg.more.get("queues", QUEUES_AUTO)
    out = []
    if cfg.bus == Bus.VIRTIO_SCSI and iothread != IOThread.OFF:
        out.append(
            "Proxmox gives a scsi disk an IOThread only with scsihw virtio-scsi-single "
            "(with virtio-scsi-pci "
            "it ignores iothread=1): use bus virtio-scsi-single"
        )
    if cfg.bus == Bus.VIRTIO_SCSI and queues != QUEUES_AUTO:
        out.append(
            "Proxmox sets a scsi disk's queues only with scsihw virtio-scsi-single (a "
            "controller per disk)"
        )
    if cfg.bus == Bus.VIRTIO_BLK and queues != QUEUES_AUTO:
        out.append(
            "Proxmox's virtio drives have no queues option: QEMU gives them one queue per vCPU"
        )
    return out


def proxmox_drive_value(
    cfg: DiskConfig, storage: str = "STORAGE", size_gib: int = DEFAULT_SIZE_GIB
) -> str:
    """The qm.conf property string: STORAGE:SIZE allocates a new volume of SIZE GiB."""
    drive = _proxmox_drive_options(_proxmox_options(cfg)[0])
    drive += measured_defaults("proxmox", dict(drive))
    return ",".join([f"{storage}:{size_gib}", *(f"{k}={v}" for k, v in drive)])


# Where a new disk goes when the sweep did not measure the bus: Proxmox VE's own default for a new
# VM's disk (scsi0, its web interface's), on whatever SCSI controller the VM has.
PROXMOX_DEFAULT_DISK_KEY = "scsi"


@dataclass(frozen=True)
class NewDrive:
    """What a new disk's `qm set` line writes: the drive key's bus (`prefix`), the drive's options,
    whether the controller (--scsihw) is set, the storage's own options (`pvesm set`), and the axes
    left at Proxmox's own defaults."""

    prefix: str
    options: Pairs
    scsihw: bool
    storage: Pairs
    left: tuple[str, ...] = ()

    def left_note(self) -> str:
        """The note naming what was left at Proxmox's defaults ('' when nothing was)."""
        if not self.left:
            return ""
        where = (
            f" (the disk goes on {PROXMOX_DEFAULT_DISK_KEY}0, the VM's own SCSI controller)"
            if not self.scsihw
            else ""
        )
        return (
            f"not measured by this sweep, so left at Proxmox's defaults: {', '.join(self.left)}"
            f"{where}"
        )


def new_drive(cfg: DiskConfig, opts: Pairs, varied: Collection[str] | None) -> NewDrive:
    """A new disk's drive (`opts`: every axis's Proxmox options of `cfg`). With `varied` (the axes
    the sweep measured at more than one value for the answer), only those axes' options are
    written and the rest, discard and zero detection too, are left at Proxmox's own defaults, as
    --current leaves them at the user's (vmconfig/keeping.py; issue 70: the quick plan's answer
    moved the disk to virtio0 and set aio=threads, which it ran at one value only); None: every
    axis as measured."""
    drive = _proxmox_drive_options(opts)
    written = measured_defaults("proxmox", dict(drive))
    storage = _partition(opts, PROXMOX_STORAGE_KEYS.__contains__)[0]
    if varied is None:
        return NewDrive(dict(opts)[PROXMOX_DISK_KEY], drive + written, True, storage)
    skip = PROXMOX_IMAGE_FILE_KEYS if cfg.backing == BackingKind.BLOCK else ()
    values = cfg.axis_values()

    def spelled(names: Collection[str]) -> set[str]:
        chosen = {k: v for k, v in values.items() if k in names}
        return {k for k, _ in axes.tool_options(chosen, "proxmox", skip_keys=skip)[0]}

    keys = spelled(varied)
    left = [a for a in values if a not in varied and spelled([a])]
    left += [{"detect_zeroes": "zero detection"}.get(k, k) for k, _ in written]
    bus = "bus" in varied
    return NewDrive(
        dict(opts)[PROXMOX_DISK_KEY] if bus else PROXMOX_DEFAULT_DISK_KEY,
        [kv for kv in drive if kv[0] in keys],
        bus,
        [kv for kv in storage if kv[0] in keys],
        tuple(left),
    )


def proxmox_snippet(
    cfg: DiskConfig,
    vmid: str = "VMID",
    storage: str = "STORAGE",
    size_gib: int = DEFAULT_SIZE_GIB,
    varied: Collection[str] | None = None,
) -> Snippet:
    """`qm set` of a new disk of `cfg` (`varied`: only those axes set, new_drive)."""
    title = "Proxmox VE (qm set)"
    opts, axis_notes, unavailable = _proxmox_options(cfg)
    unavailable += _proxmox_device_unavailable(cfg)
    if unavailable:
        return Snippet("proxmox", title, None, _not_available(unavailable))
    drive = new_drive(cfg, opts, varied)
    cmd = f"qm set {vmid}"
    if cfg.bus in PROXMOX_SCSIHW and drive.scsihw:
        # the controller measured; Proxmox's default may be LSI
        cmd += f" --scsihw {PROXMOX_SCSIHW[cfg.bus]}"
    cmd = shell_command(
        [
            *cmd.split(),
            f"--{drive.prefix}0",
            ",".join([f"{storage}:{size_gib}", *(f"{k}={v}" for k, v in drive.options)]),
        ]
    )
    measured = dict(drive.options)
    notes = [
        "STORAGE:SIZE allocates a new volume of SIZE GiB; use an existing volume id to "
        "reconfigure a disk"
    ]
    if drive.left:
        notes.append(drive.left_note())
    if measured.get("detect_zeroes") == "0":
        notes.append(
            "detect_zeroes=0 because Proxmox turns QEMU's zero detection on by default "
            "and iomatrix "
            "measured it off"
        )
    if "discard" in measured or "discard" in drive.left:
        notes.append("discard=on (guest TRIM frees thin storage) is an option, not measured here")
    notes += axis_notes
    if cfg.modifier == Modifier.EATMYDATA:
        notes.append(
            "eatmydata cannot be expressed: Proxmox starts QEMU itself and has no per-VM wrapper "
            "(only a host-wide replacement of /usr/bin/kvm would do, for every VM)"
        )
    if on_storage := drive.storage:
        cmd += f"\npvesm set {storage}" + "".join(f" --{k} {v}" for k, v in on_storage)
        notes.append(
            f"{', '.join(k for k, _ in on_storage)} is a property of a directory/NFS "
            "storage, not of "
            "one disk"
        )
    return Snippet("proxmox", title, cmd, "; ".join(notes))


# `qm config VMID` output, or the VM's file /etc/pve/qemu-server/VMID.conf (the same "key: value"
# lines, then a [snapshot] section per snapshot, which is not the running configuration). What
# qemu-server runs for a drive that does not set an option (PVE/QemuServer.pm
# print_drive_commandline_full and PVE/QemuServer/Drive.pm of qemu-server 8, Proxmox VE 8):
#   cache: none (O_DIRECT) unless the storage is btrfs without nocow;
#   aio: io_uring (since Proxmox VE 7.0), but native (with cache none/directsync) or threads on LVM and CIFS  # noqa: E501
#     storages and on krbd without O_DIRECT;
#   detect_zeroes: on, and unmap with discard=on (only detect_zeroes=0 turns it off);
#   discard: ignore; iothread: off; scsihw: lsi (qm.conf's default; the web interface writes virtio-scsi-single  # noqa: E501
#   for new VMs); a scsi drive's iothread and queues take effect only with scsihw virtio-scsi-single.  # noqa: E501
PROXMOX_DRIVE = re.compile(r"^(ide|sata|scsi|virtio)(\d+)$")
PROXMOX_BUS = {"virtio": Bus.VIRTIO_BLK, "ide": Bus.IDE, "sata": Bus.SATA}
# Read back through the writer's own spelling (PROXMOX_SCSIHW above), so the two cannot drift apart.
SCSIHW_BUS = {name: bus for bus, name in PROXMOX_SCSIHW.items()}
PROXMOX_DEFAULT_SCSIHW = "lsi"
PROXMOX_DEFAULT_CACHE = "none"
PROXMOX_DEFAULT_AIO = "io_uring"
PROXMOX_TRUE = ("1", "on", "yes", "true")
PROXMOX_FALSE = ("0", "off", "no", "false")
# qemu-server's drive order when it picks a boot disk itself (PVE/QemuServer/Drive.pm
# valid_drive_names).
PROXMOX_DRIVE_ORDER = ("ide", "scsi", "virtio", "sata")
PROXMOX_IMAGE_EXTENSIONS = {f".{f.value}": f.value for f in Format}
# A line of `qm config`: "key: value" (a key has letters, digits, '-' and '_').
PROXMOX_LINE = re.compile(r"^([a-z][a-z0-9_-]*):\s?(.*)$")


def looks_like_qm_config(text: str) -> bool:
    """Whether `text` is `qm config` output: key: value lines, one of them a disk drive or
    scsihw."""
    lines = list(itertools.takewhile(lambda line: not line.startswith("["), text.splitlines()))
    matches = [
        PROXMOX_LINE.match(line) for line in lines if line.strip() and not line.startswith("#")
    ]
    return all(matches) and any(
        PROXMOX_DRIVE.match(m.group(1)) or m.group(1) == "scsihw" for m in matches if m
    )


# Keys every 'qm config' holds one of, whatever its disks: a file of key: value lines with one of
# them is a Proxmox VM's configuration even when it has no disk drive.
PROXMOX_COMMON_KEYS = frozenset(
    {"boot", "bootdisk", "memory", "cores", "sockets", "ostype", "vmgenid", "smbios1", "net0"}
)


def qm_config_without_disk(text: str) -> bool:
    """Whether `text` reads as 'qm config' output with no disk drive in it (a VM with only a
    network card, a cdrom or nothing): said as such, not as "not XML"."""
    lines = list(itertools.takewhile(lambda line: not line.startswith("["), text.splitlines()))
    matches = [
        PROXMOX_LINE.match(line) for line in lines if line.strip() and not line.startswith("#")
    ]
    return (
        bool(matches)
        and all(matches)
        and any(m.group(1) in PROXMOX_COMMON_KEYS for m in matches if m)
        and not looks_like_qm_config(text)
    )


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
    for part in parts[0 if not drive else 1 :]:
        k, sep, v = part.partition("=")
        if not sep:
            raise _bad("drive property", part, "key=value after the volume")
        drive["file" if k == "volume" else k] = v
    return drive


def _qm_disks(conf: dict[str, str]) -> list[str]:
    """The VM's disks (not CD-ROM drives), the boot order's first."""
    found = [(m.group(1), int(m.group(2)), key) for key in conf if (m := PROXMOX_DRIVE.match(key))]
    drives = {key: _qm_drive(conf[key]) for _, _, key in found}
    disks = [
        key
        for _, _, key in sorted(found, key=lambda f: (PROXMOX_DRIVE_ORDER.index(f[0]), f[1]))
        if drives[key].get("media", "disk") != "cdrom" and drives[key].get("file") != "none"
    ]
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


def from_proxmox(
    text: str, source: str, disk: str | None = None, storage_cfg: str | None = None
) -> CurrentConfig:
    """`storage_cfg`: the text of /etc/pve/storage.cfg where the user gives it (a copy named
    storage.cfg beside the qm config file): what tells an NFS storage's image from a directory
    storage's."""
    conf = _qm_config(text)
    disks = _qm_disks(conf)
    if disk is not None and disk not in disks:
        raise UserError(
            f"--current: {source} has no disk {disk}",
            hint=f"disks in it: {', '.join(disks) or 'none'} (--current-disk scsi0)",
        )
    if not disks:
        raise UserError(
            f"--current: {source} has no disk",
            hint="give 'qm config VMID' output of a VM with a disk",
        )
    key = disk or disks[0]
    drive = _qm_drive(conf[key])
    values, defaulted = _proxmox_drive_axes(key, drive, conf)
    volume = drive.get("file", "")
    # 100.conf, qm100.conf
    vmid = m.group(1) if (m := re.search(r"(\d+)", Path(source).stem)) else None
    # A volume of a directory/NFS storage is an image file (…/vm-100-disk-0.qcow2); LVM, ZFS and
    # Ceph are not.
    block = not any(volume.endswith(e) for e in PROXMOX_IMAGE_EXTENSIONS)
    network, unknown = _network_volume(volume, storage_cfg, values, defaulted)
    slots = " ".join(k for k in conf if PROXMOX_DRIVE.match(k) or k.startswith("unused"))
    existing = ExistingDisk(
        "proxmox",
        network.url if network else None,
        key,
        volume or None,
        vmid,
        block,
        protocol=network.protocol if network else None,
        settings=conf[key],
        boot=conf.get("boot"),
        slots=slots,
    )
    cfg = CurrentConfig(values, f"Proxmox {source}, disk {key}", defaulted, disk=existing)
    cfg.notes += [n for n in (network.note if network else None, unknown) if n]
    return cfg


def _network_volume(
    volume: str, storage_cfg: str | None, values: dict[str, str], defaulted: list[str]
) -> tuple[NetworkDiskRead | None, str | None]:
    """What network storage a volume is on (None: a local one, or unknown: then a note says why),
    with the client axes it implies: qemu-server gives an iSCSI LUN raw, and aio only to a kernel
    initiator's device."""
    storage = parse_storage_cfg(storage_cfg) if storage_cfg is not None else None
    network, unknown = read_proxmox_volume(volume, storage)
    if network is None:
        return None, unknown
    values.update(network.axes)
    # a volume (a LUN, an RBD image): raw (qemu-server gives no other format)
    volume_disk = protocol(network.protocol).is_volume
    if volume_disk:
        values["format"] = Format.RAW.value
    if volume_disk and not network.kernel_client:
        values["aio"] = axes.get("aio").default
        defaulted[:] = [d for d in defaulted if not d.startswith("aio")]
        note_client_cache(network, values.get("cache"))
    return network, unknown


def _proxmox_bus(key: str, conf: dict[str, str]) -> tuple[Bus, str]:
    """(the bus, its scsihw) of drive `key`."""
    prefix = PROXMOX_DRIVE.match(key).group(1)  # type: ignore[union-attr]
    if prefix != "scsi":
        return PROXMOX_BUS[prefix], ""
    scsihw = conf.get("scsihw", PROXMOX_DEFAULT_SCSIHW)
    if scsihw not in SCSIHW_BUS:
        raise _bad(
            "scsihw",
            scsihw,
            f"{', '.join(SCSIHW_BUS)} (iomatrix measures no other scsi controller; "
            f"'{PROXMOX_DEFAULT_SCSIHW}' is qm.conf's default when scsihw is absent)",
        )
    return SCSIHW_BUS[scsihw], scsihw


def _proxmox_drive_axes(
    key: str, drive: dict[str, str], conf: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
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
        defaulted.append(
            f"cache (Proxmox default: {PROXMOX_DEFAULT_CACHE}; writeback on a btrfs storage)"
        )
    if "aio" in drive:
        values["aio"] = _value("aio", "aio", drive["aio"])
    else:
        values["aio"] = PROXMOX_DEFAULT_AIO
        defaulted.append(
            f"aio (Proxmox ≥ 7.0 default: {PROXMOX_DEFAULT_AIO}; native or threads on LVM and CIFS "
            "storages)"
        )
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
        defaulted.append(
            f"detect_zeroes (Proxmox default: {values['detect_zeroes']}, unless detect_zeroes=0)"
        )
    # A scsi drive's iothread and queues take effect with scsihw virtio-scsi-single only
    # (qemu-server ignores them on a shared controller); virtio drives have iothread and no queues.
    own_controller = bus == Bus.VIRTIO_BLK or scsihw == "virtio-scsi-single"
    if own_controller and _qm_bool("iothread", drive.get("iothread", "0")):
        values["iothread"] = IOThread.ON.value
    if own_controller and "queues" in drive:
        values["queues"] = _value("queues", "queues", drive["queues"])
    return values, defaulted


# --------------------------------------------------------------------------- changing the drive the
# user has `qm set VMID --scsi0 VALUE` replaces the whole drive line: an option left out of VALUE is
# gone (iothread=1, serial=…, size=…). So the value written is the user's own line with only the
# changed axes' options set (issue 49). the slot, qm disk move, pvesm set
_NOT_ON_THE_DRIVE = (PROXMOX_DISK_KEY, "format", *PROXMOX_STORAGE_KEYS)


def _drive_keys(name: str) -> set[str]:
    """Every drive option axis `name` spells in Proxmox, at any of its values."""
    spell = axes.get(name).tools.get("proxmox")
    if spell is None:
        return set()
    return {k for v in axes.get(name).values for k, _ in spell(v).options} - set(_NOT_ON_THE_DRIVE)


def proxmox_edited_drive(settings: str, changed: dict[str, str]) -> str:
    """The user's drive property string (`settings`: 'local-lvm:vm-101-disk-0,iothread=1,size=32G')
    with the options of the `changed` axes (axis → new value) set, and any other value of theirs
    removed; the rest kept in order."""
    drive = _qm_drive(settings)
    volume = drive.pop("file", "")
    for name, value in changed.items():
        keys = _drive_keys(name)
        new = {k: str(v) for k, v in axes.get(name).tools["proxmox"](value).options if k in keys}
        for k in keys - new.keys():
            drive.pop(k, None)
        drive.update(new)  # an option the user has keeps its place
    return ",".join([volume, *(f"{k}={v}" for k, v in drive.items())])


def proxmox_free_slot(prefix: str, slots: str | None) -> str:
    """The first drive key of bus `prefix` the VM does not use ('virtio0', else 'virtio1', …)."""
    used = set((slots or "").split())
    return next(f"{prefix}{n}" for n in itertools.count() if f"{prefix}{n}" not in used)


def proxmox_boot_after(boot: str | None, old: str, new: str) -> str | None:
    """The VM's 'boot:' value with drive `old` replaced by `new` ('order=scsi0;net0' →
    'order=virtio0;net0'); None when the boot order does not name `old`."""
    if not boot or not boot.startswith("order="):
        return None
    order = boot.removeprefix("order=").split(";")
    return "order=" + ";".join(new if k == old else k for k in order) if old in order else None
