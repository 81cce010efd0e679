"""The disk-configuration vocabulary: every axis value and what it means.

With :mod:`iomatrix.domain.rules` (the rules between axis values), this module is the single
definition of what a VM disk configuration is. The plan model, the matrix, every tier, the risk
statements and the configuration snippets read it; nothing else spells an axis value, a cache mode's
semantics or a rule between axes (domain-brief §1–§4).

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

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "BLOCK_BACKINGS",
    "BUS",
    "CACHE",
    "FILE_PREALLOCATIONS",
    "FIO_ENGINE",
    "NA",
    "NULL_BACKING",
    "NULL_LUN",
    "PREALLOCATIONS",
    "SAFETY_ORDER",
    "SCSI_CONTROLLER_BUSES",
    "Aio",
    "BackingKind",
    "Bus",
    "BusSpelling",
    "CacheMode",
    "CacheSemantics",
    "Format",
    "Modifier",
    "Preallocation",
    "SafetyLevel",
    "is_ceiling",
]


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


class BackingKind(StrEnum):
    """What the image lives on locally: a file on a filesystem, or a whole block device (LV,
    partition, disk). A disk served over the network is of its protocol's kind: the protocol's name
    (iomatrix.protocols), which a DiskConfig keeps in place of one of these."""

    FILE = "file"
    BLOCK = "block"


# Backing types (plan `[[backing]] type`) whose target is a block device rather than an image file.
BLOCK_BACKINGS = ("blockdev", "lvm")
