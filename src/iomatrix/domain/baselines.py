"""Baselines: the configurations people run without choosing (QEMU's, libvirt's, Proxmox's and
Nova's defaults), which an answer is compared with."""

from __future__ import annotations

from dataclasses import dataclass

from iomatrix.domain.values import Aio, Bus, CacheMode

__all__ = [
    "BASELINES",
    "NOVA_DEFAULT",
    "PLATFORM_BASELINES",
    "PROXMOX_DEFAULT",
    "Baseline",
]


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
