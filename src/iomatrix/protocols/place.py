"""Where a disk served over the network lives, as the snippets name it (issues 34, 35): the server
and the disk's name on it. Placeholders from the documentation ranges (RFC 5737's 192.0.2.0/24, an
example.com IQN) that the user replaces with their own, unless --current read the user's own. Pure:
no socket is opened."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

ISCSI_PORT = 3260  # IANA's iSCSI port: libvirt and QEMU assume it where none is given
CEPH_MON_PORT = 6789  # a Ceph monitor's msgr v1 port (IANA), libvirt's <host port=> for an rbd disk


@dataclass(frozen=True)
class NetworkPlace:
    """The server and the disk's name on it (placeholders unless --current read the user's own)."""

    host: str = "192.0.2.10"
    port: int = ISCSI_PORT
    iqn: str = "iqn.2024-01.com.example:storage.vm-disk"
    lun: int = 1
    export: str = "/srv/nfs/vm"  # the NFS export
    image: str = "vm-disk"  # the image file's name on the export, without its format suffix
    mount: str = (
        "/mnt/pve/nfs-store"  # where the kernel client mounts the export (Proxmox's own layout)
    )
    lun_file: str = (
        "/srv/iscsi/vm-disk.img"  # the LUN's backing file on the target host (targets.conf)
    )
    # the Ceph pool the RBD image is in; None: the RBD protocol's default (protocols/rbd.py pool_of)
    pool: str | None = None
    ceph_user: str = (
        "libvirt"  # the cephx user QEMU connects as (client.libvirt, Ceph's libvirt guide)
    )
    ceph_conf: str = (
        "/etc/ceph/ceph.conf"  # the client host's ceph.conf: monitors, [client] cache lines
    )
    # libvirt's secret holding that user's cephx key (virsh secret-define; secret-set-value from
    # `ceph auth get-key`)
    secret_uuid: str = "2a5b08e4-3dbd-4bff-8b0e-4d6b1b8f2c6a"

    @property
    def portal(self) -> str:
        return f"{self.host}:{self.port}"

    def nfs_file(self, fmt: str) -> str:
        return f"{self.export}/{self.image}.{fmt}"

    def mounted_file(self, fmt: str) -> str:
        return f"{self.mount}/{self.image}.{fmt}"

    def by_path(self) -> str:
        """The LUN's stable device name once the kernel initiator has logged in (udev's by-path
        link)."""
        return f"/dev/disk/by-path/ip-{self.portal}-iscsi-{self.iqn}-lun-{self.lun}"


_NUMERIC_HOST = re.compile(r"[0-9.]+")


def address_problem(host: str) -> str | None:
    """Why `host`, written as an IP address, is not one (``999.1.1.1``, ``10.0.0``, ``1::2::3``);
    None for a valid address or a host name. All digits and dots is an IPv4 address (no top-level
    domain is numeric); a colon makes it IPv6."""
    if _NUMERIC_HOST.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return (
                f"{host!r} is not an IPv4 address (four numbers 0-255 joined by dots, e.g. "
                "192.0.2.10)"
            )
    elif ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address (e.g. 2001:db8::1)"
    return None
