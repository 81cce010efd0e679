"""Reading an iSCSI LUN back from a VM's configuration (``--current``, issue 34): its iscsi:// URL,
the by-path device of the kernel's initiator, libvirt's <source protocol='iscsi'>, QEMU's
driver=iscsi node and Proxmox's iscsi/iscsidirect volumes. iSCSI's house
(:mod:`iomatrix.protocols.iscsi`) names this module's READER; pure parsers."""

from __future__ import annotations

import re
from collections.abc import Mapping

from iomatrix.domain.axes import KERNEL_CLIENT
from iomatrix.protocols import iscsi
from iomatrix.protocols.place import ISCSI_PORT
from iomatrix.vmconfig.network import DiskReader, NetworkDiskRead, first_host
from iomatrix.vmconfig.reading import _bad

NAME = iscsi.NAME

# iscsi://[USER[%PASSWORD]@]HOST[:PORT]/IQN/LUN (QEMU's block/iscsi.c, libiscsi's URL form)
ISCSI_URL = re.compile(r"^iscsi://(?:[^@/]*@)?(\[[^\]]+\]|[^:/]+)(?::(\d+))?/([^/]+)/(\d+)$")

# udev's link of a LUN the kernel's initiator logged in to (60-persistent-storage.rules).
BY_PATH_ISCSI = re.compile(r"^/dev/disk/by-path/ip-(.+):(\d+)-iscsi-(.+)-lun-(\d+)(?:-part\d+)?$")

# Proxmox volume names on iSCSI storages (pve-storage ISCSIDirectPlugin / ISCSIPlugin
# parse_volname).
PROXMOX_ISCSIDIRECT_VOLUME = re.compile(r"^lun(\d+)$")

PROXMOX_ISCSI_VOLUME = re.compile(r"^\d+\.\d+\.(\d+)\.[^/\s]+$")

ISCSI_FORMS = "iscsi://HOST[:PORT]/IQN/LUN"


def iscsi_url(host: str, port: int | str | None, iqn: str, lun: int | str) -> str:
    return f"iscsi://{host}:{port or ISCSI_PORT}/{iqn}/{lun}"


def _checked_lun(lun: str, where: str) -> str:
    if not lun.isdigit() or int(lun) > 16383:  # SAM's flat LUN space (14 bits)
        raise _bad(where, lun, "a LUN number 0–16383")
    return str(int(lun))


def _proxmox_iscsi(kind: str, sid: str, url: str | None) -> NetworkDiskRead:
    if kind == iscsi.PROXMOX_DIRECT:
        return NetworkDiskRead(
            NAME,
            url,
            note=f"a LUN of the iscsidirect storage {sid}: QEMU's own initiator (libiscsi)",
        )
    return NetworkDiskRead(
        NAME,
        url,
        {"initiator": KERNEL_CLIENT},
        f"a LUN of the iscsi storage {sid}: the host kernel's initiator (open-iscsi)",
    )


def _libiscsi(url: str, how: str) -> NetworkDiskRead:
    return NetworkDiskRead(NAME, url, note=f"{how}: {url}")


_LIBISCSI = "an iSCSI LUN reached by QEMU's own initiator (libiscsi)"


class IscsiReader(DiskReader):
    forms = ISCSI_FORMS

    def url(self, url: str, where: str) -> NetworkDiskRead | None:
        if not url.startswith("iscsi://"):
            return None
        m = ISCSI_URL.match(url)
        if m is None:
            raise _bad(where, url, ISCSI_FORMS)
        host, port, iqn, lun = m.groups()
        return NetworkDiskRead(
            NAME,
            iscsi_url(host, port, iqn, _checked_lun(lun, where)),
            note=f"{_LIBISCSI}: {url}",
        )

    def device(self, dev: str) -> NetworkDiskRead | None:
        """udev's by-path link of the LUN the host kernel's initiator logged in to."""
        m = BY_PATH_ISCSI.match(dev)
        if m is None:
            return None
        host, port, iqn, lun = m.groups()
        return NetworkDiskRead(
            NAME,
            iscsi_url(host, port, iqn, lun),
            {"initiator": KERNEL_CLIENT},
            f"an iSCSI LUN the host kernel's initiator logged in to ({dev})",
            kernel_client=True,
        )

    def libvirt(
        self,
        source: Mapping[str, str],
        hosts: list[Mapping[str, str]],
        dev: str,
        username: str | None,
    ) -> NetworkDiskRead:
        name = source.get("name", "")
        host, port = first_host(hosts, dev)
        iqn, _, lun = name.rpartition("/")
        if not iqn:  # libvirt: "IQN/LUN"; a name without "/LUN" is LUN 0
            iqn, lun = name, "0"
        if not iqn:
            raise _bad(
                f"disk {dev} source name",
                name or "(none)",
                "IQN/LUN, e.g. iqn.2024-01.com.example:t/1",
            )
        url = iscsi_url(host, port, iqn, _checked_lun(lun, f"disk {dev} source name LUN"))
        return _libiscsi(url, _LIBISCSI)

    def qemu_node(self, node: Mapping[str, str]) -> NetworkDiskRead:
        """A driver=iscsi protocol node's options (portal, target, lun)."""
        portal, target, lun = (node.get(k) for k in ("portal", "target", "lun"))
        if not portal or not target:
            raise _bad(
                "-blockdev driver=iscsi",
                f"portal={portal or ''},target={target or ''}",
                "portal=HOST[:PORT] and target=IQN (and lun=N)",
            )
        host, _, port = portal.rpartition(":") if re.search(r":\d+$", portal) else (portal, "", "")
        url = iscsi_url(host, port or None, target, _checked_lun(lun or "0", "-blockdev lun"))
        return _libiscsi(url, _LIBISCSI)

    def proxmox(
        self, kind: str, sid: str, volname: str, props: Mapping[str, str]
    ) -> NetworkDiskRead | None:
        m = PROXMOX_ISCSIDIRECT_VOLUME.match(volname) or PROXMOX_ISCSI_VOLUME.match(volname)
        lun = m.group(1) if m else "0"
        portal = props.get("portal", "")
        host, _, port = portal.rpartition(":") if re.search(r":\d+$", portal) else (portal, "", "")
        url = iscsi_url(host, port or None, props.get("target", "IQN"), lun) if host else None
        return _proxmox_iscsi(kind, sid, url)

    def proxmox_guess(
        self, sid: str, volname: str, storage_known: bool
    ) -> tuple[NetworkDiskRead | None, str | None] | None:
        if PROXMOX_ISCSIDIRECT_VOLUME.match(volname):
            return _proxmox_iscsi(iscsi.PROXMOX_DIRECT, sid, None), None
        if PROXMOX_ISCSI_VOLUME.match(volname):
            return _proxmox_iscsi(iscsi.PROXMOX_KERNEL, sid, None), None
        return None


READER = IscsiReader()
