"""The disk-configuration vocabulary: every axis value, what it means, and the rules between them.

This module is the single definition of what a VM disk configuration is. The plan model, the matrix,
every tier, the risk statements and the configuration snippets read it; nothing else spells an axis
value, a cache mode's semantics or a rule between axes (domain-brief §1–§4).

Cache modes (QEMU ``-drive cache=``) are three independent switches (domain-brief §1):

===============  ============  ==============  ==============
cache            cache.direct  write-cache     cache.no-flush
===============  ============  ==============  ==============
writeback        off           on              off
none             on            on              off
writethrough     off           off             off
directsync       on            off             off
unsafe           off           on              on
===============  ============  ==============  ==============

``cache.direct`` opens the host file with O_DIRECT (host page cache bypassed); ``write-cache`` is
what the guest sees: off means QEMU flushes after every write; ``cache.no-flush`` drops every flush
the guest sends."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

# Shown for an axis that does not apply to a tier (bare metal has no image format or bus).
NA = "-"
# The backing label of the null-co ceiling cell: no storage at all.
NULL_BACKING = "null"
# The iSCSI LUN type that stores nothing (tgt's null backing store): the protocol's own ceiling,
# like null-co.
NULL_LUN = "null"


def is_ceiling(axes: Mapping[str, str]) -> bool:
    """Whether a cell measures a ceiling (no storage: QEMU's null-co, or a null iSCSI LUN), never an
    answer: it keeps no data, so it is shown beside the ranking, not in it."""
    return axes.get("backing") == NULL_BACKING or axes.get("lun_type") == NULL_LUN


class Format(StrEnum):
    RAW = "raw"
    QCOW2 = "qcow2"
    QED = "qed"


class Preallocation(StrEnum):
    OFF = "off"
    METADATA = "metadata"
    FALLOC = "falloc"
    FULL = "full"


class CacheMode(StrEnum):
    NONE = "none"
    WRITEBACK = "writeback"
    WRITETHROUGH = "writethrough"
    DIRECTSYNC = "directsync"
    UNSAFE = "unsafe"


class Aio(StrEnum):
    THREADS = "threads"
    NATIVE = "native"
    IO_URING = "io_uring"


class Bus(StrEnum):
    VIRTIO_BLK = "virtio-blk"
    VIRTIO_SCSI = "virtio-scsi"
    # One virtio-scsi controller per disk (what gives each disk its own IOThread; Proxmox VE's
    # default controller for new VMs, scsihw virtio-scsi-single). virtio-scsi shares one controller
    # between disks.
    VIRTIO_SCSI_SINGLE = "virtio-scsi-single"
    IDE = "ide"
    SATA = "sata"
    NVME = "nvme"


class Modifier(StrEnum):
    """A host-side wrapper around the process doing the I/O."""

    NONE = "none"
    EATMYDATA = "eatmydata"


class SafetyLevel(StrEnum):
    """What a host crash or power loss costs (documented semantics, not a measurement)."""

    SAFE = "safe"  # every completed write is on stable storage
    # writes since the guest's last flush may be lost, as on a real disk
    LIKE_A_DISK_CACHE = "like-a-disk-cache"
    UNSAFE = "unsafe"  # flushes are dropped: acknowledged, flushed data may be lost


# Best first: a tie-break that prefers safety sorts by this.
SAFETY_ORDER = (SafetyLevel.SAFE, SafetyLevel.LIKE_A_DISK_CACHE, SafetyLevel.UNSAFE)


@dataclass(frozen=True)
class CacheSemantics:
    """One QEMU cache mode: the three switches, and what they risk according to QEMU's
    documentation."""

    direct: bool  # cache.direct: O_DIRECT on the host file, host page cache bypassed
    write_cache: bool  # the guest sees a volatile write cache; off = QEMU flushes after every write
    no_flush: bool  # cache.no-flush: the guest's flushes never reach the disk
    on_qemu_crash: str
    on_power_loss: str
    level: SafetyLevel

    @property
    def flush_every_write(self) -> bool:
        return not self.write_cache

    @property
    def honours_flush(self) -> bool:
        return not self.no_flush


CACHE: dict[CacheMode, CacheSemantics] = {
    CacheMode.WRITEBACK: CacheSemantics(
        direct=False,
        write_cache=True,
        no_flush=False,
        on_qemu_crash="completed writes survive (they are in the host page cache)",
        on_power_loss="writes since the guest's last flush are lost (host page cache); flushes "
        "are honoured",
        level=SafetyLevel.LIKE_A_DISK_CACHE,
    ),
    CacheMode.NONE: CacheSemantics(
        direct=True,
        write_cache=True,
        no_flush=False,
        on_qemu_crash="completed writes survive (they reached the host)",
        on_power_loss="writes since the guest's last flush may be lost (the disk's volatile "
        "cache), as on "
        "bare metal",
        level=SafetyLevel.LIKE_A_DISK_CACHE,
    ),
    CacheMode.WRITETHROUGH: CacheSemantics(
        direct=False,
        write_cache=False,
        no_flush=False,
        on_qemu_crash="safe",
        on_power_loss="safe if the device honours flush (every write is flushed)",
        level=SafetyLevel.SAFE,
    ),
    CacheMode.DIRECTSYNC: CacheSemantics(
        direct=True,
        write_cache=False,
        no_flush=False,
        on_qemu_crash="safe",
        on_power_loss="safe (O_DIRECT and a flush after every write)",
        level=SafetyLevel.SAFE,
    ),
    CacheMode.UNSAFE: CacheSemantics(
        direct=False,
        write_cache=True,
        no_flush=True,
        on_qemu_crash="completed writes survive (they are in the host page cache)",
        on_power_loss="guest flushes are ignored: everything not yet written back is lost and "
        "the image may "
        "be unusable",
        level=SafetyLevel.UNSAFE,
    ),
}

# Which preallocation values each format accepts (qemu-img create -o help, QEMU 7.2). qed has no
# preallocation option at all: "off" means "do not pass one".
PREALLOCATIONS: dict[Format, tuple[Preallocation, ...]] = {
    Format.RAW: (Preallocation.OFF, Preallocation.FALLOC, Preallocation.FULL),
    Format.QCOW2: (
        Preallocation.OFF,
        Preallocation.METADATA,
        Preallocation.FALLOC,
        Preallocation.FULL,
    ),
    Format.QED: (Preallocation.OFF,),
}

# Preallocation that writes or reserves the image file's blocks: meaningless on a whole block
# device.
FILE_PREALLOCATIONS = (Preallocation.FALLOC, Preallocation.FULL)

# aio → the fio engine that issues I/O the same way on the host: QEMU's thread pool issues blocking
# pread/pwrite from worker threads (psync); native is Linux AIO (libaio); io_uring is io_uring.
FIO_ENGINE: dict[Aio, str] = {Aio.THREADS: "psync", Aio.NATIVE: "libaio", Aio.IO_URING: "io_uring"}


@dataclass(frozen=True)
class BusSpelling:
    """How each tool names a guest bus; None where the tool has no such bus."""

    qemu_device: str  # the -device driver the disk is attached with
    libvirt: str  # <target bus=...>
    proxmox: str | None  # qm disk key prefix (virtio0, scsi0, ide0, sata0)
    guest_kernel_ready: bool  # the guest kernel iomatrix boots has the driver
    unavailable_reason: str = ""
    # The -device takes werror=/rerror= (QEMU's error policy; its default pauses the VM on ENOSPC).
    # QEMU 7.2's nvme has no such property: it always completes a failed request with an error to
    # the guest.
    error_policy: bool = True


BUS: dict[Bus, BusSpelling] = {
    Bus.VIRTIO_BLK: BusSpelling("virtio-blk-pci", "virtio", "virtio", True),
    # virtio-scsi-single spells like virtio-scsi (plus a controller per disk) and is listed first: a
    # reverse lookup by spelling (current.py's libvirt <target bus='scsi'>) ends on virtio-scsi, the
    # shared controller.
    Bus.VIRTIO_SCSI_SINGLE: BusSpelling("scsi-hd", "scsi", "scsi", True),
    Bus.VIRTIO_SCSI: BusSpelling("scsi-hd", "scsi", "scsi", True),
    Bus.IDE: BusSpelling("ide-hd", "ide", "ide", True),
    Bus.SATA: BusSpelling(
        "ide-hd",
        "sata",
        "sata",
        False,
        "the guest kernel (Debian's cloud kernel) has no ahci driver",
    ),
    Bus.NVME: BusSpelling("nvme", "nvme", None, True, error_policy=False),
}


# The buses whose disks hang off a virtio-scsi controller: the device axes' options that serve every
# disk on it (Axis.on_controller) are set there, shared (virtio-scsi) or one controller per disk
# (virtio-scsi-single).
SCSI_CONTROLLER_BUSES: tuple[Bus, ...] = (Bus.VIRTIO_SCSI, Bus.VIRTIO_SCSI_SINGLE)


def direct_io(cache: str) -> bool:
    return CACHE[CacheMode(cache)].direct


def aio_rule(cache: str, aio: str) -> str | None:
    """aio=native needs O_DIRECT: QEMU refuses to open the image otherwise."""
    if aio == Aio.NATIVE and not direct_io(cache):
        return (
            f"aio=native needs O_DIRECT (cache none or directsync); cache={cache} would make QEMU "
            "refuse to open the image ('aio=native was specified, but it requires cache.direct=on')"
        )
    return None


def preallocation_rule(
    fmt: str, preallocation: str, *, on_block_device: bool = False
) -> str | None:
    """Which preallocation a format supports, and that file preallocation needs an image file."""
    allowed = PREALLOCATIONS[Format(fmt)]
    if preallocation not in allowed:
        return (
            f"format {fmt} does not support preallocation={preallocation} "
            f"(it supports: {', '.join(allowed)})"
        )
    if on_block_device and preallocation in FILE_PREALLOCATIONS:
        return (
            f"preallocation={preallocation} preallocates an image file; the backing is a "
            "whole block device"
        )
    return None


def o_direct_rule(cache: str, backing_supports_o_direct: bool, backing: str) -> str | None:
    if not backing_supports_o_direct and direct_io(cache):
        return (
            f"cache={cache} opens with O_DIRECT, which backing {backing} does not support "
            "(tmpfs before Linux 6.6 and ZFS datasets refuse O_DIRECT)"
        )
    return None


def modifier_rule(modifier: str, cache: str) -> str | None:
    if modifier == Modifier.EATMYDATA and cache == CacheMode.UNSAFE:
        return "cache=unsafe already drops every flush; eatmydata would change nothing"
    return None


def bus_rule(bus: str) -> str | None:
    spelling = BUS[Bus(bus)]
    if not spelling.guest_kernel_ready:
        return f"bus={bus}: {spelling.unavailable_reason}"
    return None


def safety_level(cache: str, modifier: str = Modifier.NONE) -> SafetyLevel:
    """Documented power-loss safety of a cache mode under a host modifier."""
    if modifier == Modifier.EATMYDATA:
        return SafetyLevel.UNSAFE
    return CACHE[CacheMode(cache)].level


def choices(enum: type[StrEnum]) -> str:
    """'a, b or c': the valid values of an axis, for error messages."""
    vals = [e.value for e in enum]
    return ", ".join(vals[:-1]) + f" or {vals[-1]}" if len(vals) > 1 else vals[0]


def did_you_mean(value: object, valid: Iterable[str]) -> str:
    """' — did you mean 'writeback'?': the valid value(s) closest to a mistyped one, appended to a
    one-line error; '' when none is close. Close is, in order: the same but for case ('None'),
    difflib's similarity ≥ 0.7 (two at most: 'writebak' → writeback; not 0.6 as for keys, which
    offers rbd for 'nbd', a different protocol), or a valid value of three letters or more that the
    text starts with or that starts with the text ('directory' → dir: too short a name for difflib's
    ratio, 2·3/12 = 0.5)."""
    choices = [str(v) for v in valid]
    text = str(value).strip()
    folded = {c.lower(): c for c in choices}
    close = (
        [folded[text.lower()]]
        if text.lower() in folded
        else difflib.get_close_matches(text, choices, n=2, cutoff=0.7)
        or [
            c
            for c in choices
            if len(c) >= 3
            and len(text) >= 3
            and (text.lower().startswith(c.lower()) or c.lower().startswith(text.lower()))
        ][:2]
    )
    if not close or not text:
        return ""
    return " — did you mean " + " or ".join(f"'{c}'" for c in close) + "?"


# --------------------------------------------------------------------------- other tools' spellings
# How libvirt, virt-install, Proxmox and OpenStack Nova spell the same axis values; checked against:
#   libvirt formatdomain "Hard drives" <driver>: cache = default|none|writethrough|writeback|directsync|unsafe,  # noqa: E501
#     io = threads|native|io_uring (io_uring since 6.3.0), discard = unmap|ignore, detect_zeroes = off|on|unmap;  # noqa: E501
#     <target bus=ide|fdc|scsi|virtio|xen|usb|sata|sd> (domaincommon.rng of libvirt 9.0: no nvme)
#   virt-install(1) --disk: format=, bus=, cache=, io=, discard=, detect_zeroes=, sparse=yes|no
#   pve-docs qm.conf(5): ide[n]/sata[n]/scsi[n]/virtio[n]: [file=]<volume> [,aio=<io_uring|native|threads>]  # noqa: E501
#     [,cache=<directsync|none|unsafe|writeback|writethrough>] [,detect_zeroes=<boolean>] [,discard=<ignore|on>]  # noqa: E501
#     [,format=<cloop|qcow|qcow2|qed|raw|vmdk>]; qm(1) "STORAGE_ID:SIZE_IN_GiB" allocates a new volume  # noqa: E501
#   Nova configuration reference [libvirt]: disk_cachemodes = list of "<source>=<mode>" with source
#     file|block|network and mode default|none|writethrough|writeback|directsync|unsafe;
#     images_type = raw|flat|qcow2|lvm|rbd|ploop|default; preallocate_images = none|space;
#     image property hw_disk_bus = virtio|scsi|ide|sata|... (hw_scsi_model=virtio-scsi for scsi).

# discard and detect-zeroes are not axes: every tier measures QEMU's defaults (-blockdev
# discard=ignore, detect-zeroes=off), spelled here per tool so that a snippet reproduces the
# measurement even where the tool's own default differs (Proxmox's qemu-server turns detect-zeroes
# on unless a disk says detect_zeroes=0).
MEASURED_DISCARD: dict[str, str] = {
    "qemu": "ignore",
    "libvirt": "ignore",
    "virt-install": "ignore",
    "proxmox": "ignore",
}
MEASURED_DETECT_ZEROES: dict[str, str] = {
    "qemu": "off",
    "libvirt": "off",
    "virt-install": "off",
    "proxmox": "0",
}

# Cache-mode and aio names are identical in QEMU, libvirt, virt-install and Proxmox (the axis
# registry spells them: iomatrix.domain.axes); the tables below are where a tool's spelling differs.
PROXMOX_FORMAT: dict[Format, str] = {Format.RAW: "raw", Format.QCOW2: "qcow2", Format.QED: "qed"}
# Proxmox disk keys take an index: ide 0-3, sata 0-5, scsi 0-30, virtio 0-15 (qm.conf(5)).
PROXMOX_MAX_INDEX: dict[str, int] = {"ide": 3, "sata": 5, "scsi": 30, "virtio": 15}
# Nova's images_type for an image format; None = Nova cannot use it for instance disks.
NOVA_IMAGES_TYPE: dict[Format, str | None] = {
    Format.RAW: "raw",
    Format.QCOW2: "qcow2",
    Format.QED: None,
}
# hw_disk_bus image property per bus (Nova image metadata reference).
NOVA_DISK_BUS: dict[Bus, str] = {
    Bus.VIRTIO_BLK: "virtio",
    Bus.VIRTIO_SCSI: "scsi",
    Bus.VIRTIO_SCSI_SINGLE: "scsi",
    Bus.IDE: "ide",
    Bus.SATA: "sata",
    Bus.NVME: "nvme",
}
# Buses Nova cannot express: it attaches every scsi disk of an instance to one controller
# (hw_scsi_model).
NOVA_BUS_UNAVAILABLE: dict[Bus, str] = {
    Bus.VIRTIO_SCSI_SINGLE: "Nova attaches every scsi disk to one virtio-scsi controller "
    "(hw_disk_bus=scsi, "
    "hw_scsi_model=virtio-scsi); it has no controller per disk",
}
# Buses libvirt's <target bus=...> cannot express (domaincommon.rng, libvirt 9.0 as in Debian 12).
LIBVIRT_BUS_UNAVAILABLE: dict[Bus, str] = {
    Bus.NVME: "libvirt's disk <target bus=...> has no nvme (domain schema of libvirt 9.0); "
    "use virtio-blk, or pass the -blockdev/-device below through <qemu:commandline>",
}
# libvirt <target dev=...> prefix per bus (vda for virtio, sda for scsi/sata, hda for ide, nvme0n1
# for nvme).
LIBVIRT_DEV: dict[Bus, str] = {
    Bus.VIRTIO_BLK: "vda",
    Bus.VIRTIO_SCSI: "sda",
    Bus.VIRTIO_SCSI_SINGLE: "sda",
    Bus.IDE: "hda",
    Bus.SATA: "sda",
    Bus.NVME: "nvme0n1",
}


class BackingKind(StrEnum):
    """What the image lives on locally: a file on a filesystem, or a whole block device (LV,
    partition, disk). A disk served over the network is of its protocol's kind: the protocol's name
    (iomatrix.protocols), which a DiskConfig keeps in place of one of these."""

    FILE = "file"
    BLOCK = "block"


# Backing types (plan `[[backing]] type`) whose target is a block device rather than an image file.
BLOCK_BACKINGS = ("blockdev", "lvm")


@dataclass(frozen=True)
class Baseline:
    """A named configuration people run without choosing: a tool's defaults."""

    name: str
    cache: CacheMode
    aio: Aio
    source: str  # where the default is documented
    # The platform's disk bus, and the later axes it sets away from QEMU's defaults (Proxmox:
    # virtio-scsi-single with an IOThread); None and (): the user's bus stays and every later axis
    # is at QEMU's default.
    bus: Bus | None = None
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def said(self) -> str:
        """How an answer names it: "QEMU's default", "Proxmox's default"."""
        return f"{self.name.removesuffix(' default')}'s default"

    def values_text(self) -> str:
        """Its settings as axis values: "cache=none aio=io_uring bus=virtio-scsi-single
        iothread=on"."""
        bus = [("bus", self.bus.value)] if self.bus is not None else []
        return " ".join(
            f"{k}={v}"
            for k, v in (("cache", self.cache.value), ("aio", self.aio.value), *bus, *self.settings)
        )


BASELINES: tuple[Baseline, ...] = (
    Baseline(
        "QEMU default",
        CacheMode.WRITEBACK,
        Aio.THREADS,
        "qemu-system-x86_64(1) -drive: 'The default mode is cache=writeback'; aio "
        "defaults to threads",
    ),
    Baseline(
        "libvirt default",
        CacheMode.WRITEBACK,
        Aio.THREADS,
        "libvirt formatdomain: without cache=/io= the hypervisor default applies, i.e. QEMU's",
    ),
)

# The platforms' own defaults, each an answer's baseline with --target of that platform (issue 49:
# the user's platform as the baseline), read from the platform's source:
PROXMOX_DEFAULT = Baseline(
    "Proxmox default",
    CacheMode.NONE,
    Aio.IO_URING,
    "qemu-server src/PVE/QemuServer/Drive.pm: a disk without cache= gets cache.direct on "
    "(drive_uses_cache_direct; "
    "pve-docs qm.adoc: 'The No cache default'), without aio= io_uring "
    "(aio_cmdline_option, Proxmox VE ≥ 7.0; "
    "native or threads on LVM, CIFS and krbd without O_DIRECT); pve-manager's VM wizard: "
    "controller VirtIO SCSI "
    "single (www/manager6/qemu/OSDefaults.js, since 2022) and IO thread checked on a new "
    "disk (qemu/HDEdit.js); "
    "qm.conf's own scsihw default is lsi",
    Bus.VIRTIO_SCSI_SINGLE,
    (("iothread", "on"),),
)
NOVA_DEFAULT = Baseline(
    "Nova default",
    CacheMode.NONE,
    Aio.THREADS,
    "nova/virt/libvirt/driver.py disk_cachemode: none where the instances path supports "
    "O_DIRECT, else "
    "writeback ([libvirt]disk_cachemodes unset); imagebackend.py leaves driver_io unset "
    "for qcow2 and flat images "
    "(native only with preallocate_images=space, thick LVM and Cinder iSCSI/FC/NFS "
    "volumes), so QEMU's threads; "
    "hw_disk_bus virtio",
    Bus.VIRTIO_BLK,
)
# snippet target (report/headline.py TARGETS) → the platform's defaults: libvirt (and virt-install,
# which writes libvirt domains) leave cache= and io= to QEMU, so theirs are QEMU's.
PLATFORM_BASELINES: dict[str, Baseline] = {
    "qemu": BASELINES[0],
    "libvirt": BASELINES[1],
    "virt-install": BASELINES[1],
    "proxmox": PROXMOX_DEFAULT,
    "nova": NOVA_DEFAULT,
}
