"""The configuration a user runs today (`--current`), read from what they already have.

Accepted forms:
  * a libvirt domain XML file (``virsh dumpxml VM > vm.xml``): the first ``<disk device='disk'>``,
    or the one whose ``<target dev=...>`` is given as ``disk``;
  * a QEMU ``-drive`` or ``-blockdev`` option string (with or without the option name, with the
    matching ``-device`` when there is one): ``-drive
    file=vm.qcow2,format=qcow2,cache=none,aio=native,if=virtio``;
  * Proxmox VE's ``qm config VMID`` output (or the VM's ``/etc/pve/qemu-server/VMID.conf``): the
    boot disk, or the drive given as ``disk`` (``scsi0``);
  * plain axes: ``cache=none,aio=threads,format=qcow2,bus=virtio-blk``.

Unset values take the tool's documented default (QEMU ``-drive``: cache=writeback, aio=threads;
libvirt: no cache/io attribute = the hypervisor default, i.e. QEMU's; Proxmox: qemu-server's, see
below), and the result says which were defaulted.

The device axes (IOThread, queues) and the bus's controller are read where each tool puts them:
libvirt's disk ``<driver>`` for virtio-blk, the virtio-scsi ``<controller>`` the disk's
``<address>`` names for scsi disks (alone on it: virtio-scsi-single), QEMU's ``-device`` or its
controller, Proxmox's drive options with its ``scsihw``.

Every axis of the registry (`iomatrix.domain.axes`) is read: the plain form takes any axis and
checks its values; libvirt's ``<driver>`` attributes are read back through each axis's libvirt
spelling, and QEMU's options through each later axis's QEMU options. The first release's axes keep
their own QEMU parsing (cache from its three switches, the bus from ``if=`` or the ``-device``
driver), and the bus comes from libvirt's ``<target bus=>``.

One reader per form, each in its tool's module of `iomatrix.vmconfig` beside that tool's snippet
writer (`libvirt`, `qemu`, `proxmox`; `plain`); `iomatrix.vmconfig.reading` holds the result types
and what the readers share; this module's `parse_current` picks the form."""

from __future__ import annotations

from pathlib import Path

from iomatrix import domain
from iomatrix.errors import UserError
from iomatrix.vmconfig.libvirt import from_libvirt_xml
from iomatrix.vmconfig.plain import from_axes
from iomatrix.vmconfig.proxmox import from_proxmox, looks_like_qm_config, qm_config_without_disk
from iomatrix.vmconfig.qemu import from_qemu
from iomatrix.vmconfig.reading import FORMS, CurrentConfig, ExistingDisk, cache_from_switches

# a copy of /etc/pve/storage.cfg beside a qm config file (--current)
PROXMOX_STORAGE_CFG = "storage.cfg"

__all__ = [
    "FORMS",
    "CurrentConfig",
    "ExistingDisk",
    "cache_from_switches",
    "from_axes",
    "from_libvirt_xml",
    "from_proxmox",
    "from_qemu",
    "looks_like_qm_config",
    "parse_current",
]


# A domain XML or a qm config is a few KiB; a file far larger is not one (and is not read whole into
# memory).
MAX_CURRENT_BYTES = 1024 * 1024


def _read_text(path: Path) -> str:
    """The text of a --current file; a one-line error for a file that cannot be read, is too large
    to be a VM's configuration, or is not UTF-8 text."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CURRENT_BYTES + 1)
    except OSError as e:
        raise UserError(
            f"--current: cannot read {path} ({e.strerror or e})",
            hint="give a file you can read, e.g. 'virsh dumpxml VM > vm.xml'",
        ) from e
    if len(data) > MAX_CURRENT_BYTES:
        raise UserError(
            f"--current: {path} is larger than {MAX_CURRENT_BYTES // 1024} KiB, not a "
            "VM's configuration",
            hint=f"give {FORMS}",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"--current: {path} is not a text file (byte {data[e.start]:#04x} at offset {e.start} "
            "is not UTF-8)",
            hint=f"give {FORMS}",
        ) from None


def parse_current(value: str, disk: str | None = None) -> CurrentConfig:
    """--current VALUE → CurrentConfig; a one-line UserError naming the field and the accepted
    forms."""
    value = value.strip()
    if not value:
        raise UserError("--current is empty", hint=f"give {FORMS}")
    path = Path(value)
    if len(value) < 4096 and "=" not in value and path.is_dir():
        raise UserError(
            f"--current: {value} is a directory",
            hint="give a file in it, e.g. 'virsh dumpxml VM > vm.xml' or 'qm config VMID > "
            "vm.conf'",
        )
    if value.endswith((".xml", ".conf")) or (
        len(value) < 4096 and "=" not in value and path.is_file()
    ):
        return _from_file(value, disk)
    if disk is not None:
        raise UserError(
            f"--current-disk {disk}: the --current value is not a file with several disks",
            hint="--current-disk picks a disk of a libvirt XML or 'qm config' file; leave it "
            "out here",
        )
    if (
        value.startswith(("-drive", "-blockdev", "-device"))
        or "file=" in value
        or "driver=" in value
    ):
        text = (
            value
            if value.startswith("-")
            else ("-blockdev " if "driver=" in value.split(",")[0] else "-drive ") + value
        )
        cfg = from_qemu(text)
    else:
        cfg = from_axes(value)
    return _checked(cfg)


def _from_file(value: str, disk: str | None) -> CurrentConfig:
    """--current FILE: a Proxmox 'qm config' or a libvirt domain XML, by what the file holds."""
    path = Path(value)
    if not path.is_file():
        raise UserError(
            f"--current: no such file {value}",
            hint="give 'virsh dumpxml VM > vm.xml' or 'qm config VMID > vm.conf' output",
        )
    text = _read_text(path)
    if not text.lstrip().startswith("<") and looks_like_qm_config(text):
        return _checked(
            _with_volume(from_proxmox(text, path.name, disk, _storage_cfg_beside(path)))
        )
    if not text.lstrip().startswith("<") and qm_config_without_disk(text):
        raise UserError(
            f"--current: {path} is a Proxmox 'qm config' with no disk drive (no scsiN, "
            "virtioN, sataN or ideN line)",
            hint="give the config of a VM with a disk, or --current cache=…,aio=… for the "
            "settings you use",
        )
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        # virsh dumpxml writes neither; entity declarations are what XML bombs and external-file
        # reads use.
        raise UserError(
            f"--current: {path} declares a DOCTYPE or entities, which 'virsh dumpxml' never writes",
            hint="give 'virsh dumpxml VM > vm.xml' output as it is",
        )
    # Read as written, even a combination QEMU refuses: the current cell is then pruned with the
    # rule's reason (plan/current_cell.py), which says what is wrong with today's configuration.
    return from_libvirt_xml(path, disk)


def _storage_cfg_beside(path: Path) -> str | None:
    """A copy of /etc/pve/storage.cfg beside a qm config file, where the user put one: it tells an
    image on an NFS storage from one on a directory storage, which qm config alone cannot (issue
    34)."""
    beside = path.with_name(PROXMOX_STORAGE_CFG)
    return _read_text(beside) if beside.is_file() and beside != path else None


def _with_volume(cfg: CurrentConfig) -> CurrentConfig:
    """A Proxmox drive line names its volume first ('virtio0: local-lvm:vm-100-disk-0,…'); one that
    names none ('virtio0: ') is a cut or hand-edited file, not a disk the snippets could change."""
    if cfg.disk is not None and not cfg.disk.volume:
        raise UserError(
            f"--current: {cfg.source}: the drive names no volume",
            hint="give 'qm config VMID' output as it is, e.g. 'virtio0: "
            "local-lvm:vm-100-disk-0,size=32G'",
        )
    return cfg


def _checked(cfg: CurrentConfig) -> CurrentConfig:
    if (
        cfg.axes.get("cache")
        and cfg.axes.get("aio")
        and (why := domain.aio_rule(cfg.axes["cache"], cfg.axes["aio"]))
    ):
        raise UserError(f"--current: {why}", hint="QEMU would not start this configuration")
    return cfg
