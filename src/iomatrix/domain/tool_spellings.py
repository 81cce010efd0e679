"""How other tools (libvirt, virt-install, Proxmox, OpenStack Nova) spell the axis values where
their spelling differs from QEMU's, and the discard and detect-zeroes settings every tier
measures."""

from __future__ import annotations

from iomatrix.domain.values import Bus, Format

__all__ = [
    "LIBVIRT_BUS_UNAVAILABLE",
    "LIBVIRT_DEV",
    "MEASURED_DETECT_ZEROES",
    "MEASURED_DISCARD",
    "NOVA_BUS_UNAVAILABLE",
    "NOVA_DISK_BUS",
    "NOVA_IMAGES_TYPE",
    "PROXMOX_FORMAT",
    "PROXMOX_MAX_INDEX",
]

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
