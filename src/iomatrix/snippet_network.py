"""Where a disk served over the network lives, as each tool names it (issue 34): the pure part of the network
disks' snippets, which `iomatrix.snippet_writers` puts into its libvirt, QEMU and Proxmox snippets and its tgt
``targets.conf`` snippet.

A network disk is an iSCSI LUN (reached by QEMU's libiscsi or by the host kernel's open-iscsi) or an image file
on an NFS export (reached by QEMU's libnfs or through the kernel's NFS mount): the cell's ``initiator`` and
``nfs_client`` axes choose which. The addresses are placeholders from the documentation ranges (RFC 5737's
192.0.2.0/24, an example.com IQN) that the user replaces with their own; `NetworkPlace` holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from iomatrix.domain.axes import ISCSI, KERNEL_CLIENT, LUN_WRITE_CACHE_RISK, LunType

ISCSI_PORT = 3260  # IANA's iSCSI port: libvirt and QEMU assume it where none is given
PROTOCOL_NAMES = {"iscsi": "iSCSI", "nfs": "NFS"}
# The user libnfs accesses an export as (libvirt <identity>): root, as measured (an export without root squash).
NFS_IDENTITY = {"user": "root", "group": "root"}
# The options a disk QEMU reaches with its own network client has no use for: aio is the file protocol's.
NETWORK_SKIPPED_KEYS = {"libvirt": ("io",), "proxmox": ("aio",), "virt-install": ("io",)}


@dataclass(frozen=True)
class NetworkPlace:
    """The server and the disk's name on it (placeholders unless --current read the user's own)."""

    host: str = "192.0.2.10"
    port: int = ISCSI_PORT
    iqn: str = "iqn.2024-01.com.example:storage.vm-disk"
    lun: int = 1
    export: str = "/srv/nfs/vm"  # the NFS export
    image: str = "vm-disk"  # the image file's name on the export, without its format suffix
    mount: str = "/mnt/pve/nfs-store"  # where the kernel client mounts the export (Proxmox's own layout)
    lun_file: str = "/srv/iscsi/vm-disk.img"  # the LUN's backing file on the target host (targets.conf)

    @property
    def portal(self) -> str:
        return f"{self.host}:{self.port}"

    def nfs_file(self, fmt: str) -> str:
        return f"{self.export}/{self.image}.{fmt}"

    def mounted_file(self, fmt: str) -> str:
        return f"{self.mount}/{self.image}.{fmt}"

    def by_path(self) -> str:
        """The LUN's stable device name once the kernel initiator has logged in (udev's by-path link)."""
        return f"/dev/disk/by-path/ip-{self.portal}-iscsi-{self.iqn}-lun-{self.lun}"


def network_url(protocol: str, place: NetworkPlace, fmt: str) -> str:
    """A network disk as qemu-img and QEMU's -drive name it."""
    if protocol == ISCSI:
        return f"iscsi://{place.portal}/{place.iqn}/{place.lun}"
    return f"nfs://{place.host}{place.nfs_file(fmt)}"


def client_is_kernel(protocol: str, values: Mapping[str, str]) -> bool:
    axis = "initiator" if protocol == ISCSI else "nfs_client"
    return values.get(axis) == KERNEL_CLIENT


def libvirt_source(protocol: str, values: Mapping[str, str], fmt: str, place: NetworkPlace
                   ) -> tuple[str, dict[str, str], dict[str, str] | None]:
    """(the <disk type=…>, the <source> attributes, its <host> attributes or None) of a network disk: a network
    disk for QEMU's own client (libvirt's protocol="iscsi"/"nfs"), a block device or a file through the kernel's."""
    if protocol == ISCSI:
        if client_is_kernel(protocol, values):
            return "block", {"dev": place.by_path()}, None
        return "network", {"protocol": "iscsi", "name": f"{place.iqn}/{place.lun}"}, {"name": place.host,
                                                                                    "port": str(place.port)}
    if client_is_kernel(protocol, values):
        return "file", {"file": place.mounted_file(fmt)}, None
    return "network", {"protocol": "nfs", "name": place.nfs_file(fmt)}, {"name": place.host}


def qemu_protocol_node(protocol: str, values: Mapping[str, str], fmt: str, place: NetworkPlace
                       ) -> list[tuple[str, str]]:
    """The protocol node's options under the format node (``file.`` keys without the prefix): QEMU's iscsi/nfs
    driver (as Proxmox's iscsidirect and the tiers open it), or the device/file the kernel's client gives."""
    if protocol == ISCSI:
        if client_is_kernel(protocol, values):
            return [("driver", "host_device"), ("filename", place.by_path())]
        return [("driver", "iscsi"), ("transport", "tcp"), ("portal", place.portal), ("target", place.iqn),
                ("lun", str(place.lun))]
    if client_is_kernel(protocol, values):
        return [("driver", "file"), ("filename", place.mounted_file(fmt))]
    return [("driver", "nfs"), ("server.type", "inet"), ("server.host", place.host), ("path", place.nfs_file(fmt))]


def kernel_client_steps(protocol: str, place: NetworkPlace) -> str:
    """What the host does before the VM starts when the kernel is the client."""
    if protocol == ISCSI:
        return (f"log the host in first (open-iscsi): iscsiadm -m discovery -t sendtargets -p {place.portal}; "
                f"iscsiadm -m node -T {place.iqn} -p {place.portal} --login")
    return f"mount the export first (nfs-common): mount -t nfs {place.host}:{place.export} {place.mount}"


# Proxmox: the storage (storage.cfg) a network disk is on, by protocol and client.
PROXMOX_STORAGE_ID = {"iscsidirect": "san-direct", "iscsi": "san", "nfs": "nfs-store"}


def proxmox_storage(protocol: str, values: Mapping[str, str], place: NetworkPlace) -> tuple[str, str, str]:
    """(storage type, storage id, its /etc/pve/storage.cfg entry): iscsidirect for libiscsi (QEMU's initiator),
    iscsi for the kernel's (open-iscsi), nfs for an export (always mounted by the kernel's client)."""
    if protocol == ISCSI:
        kind = "iscsi" if client_is_kernel(protocol, values) else "iscsidirect"
        sid = PROXMOX_STORAGE_ID[kind]
        return kind, sid, f"{kind}: {sid}\n\tportal {place.host}\n\ttarget {place.iqn}\n\tcontent images"
    sid = PROXMOX_STORAGE_ID["nfs"]
    return "nfs", sid, (f"nfs: {sid}\n\tserver {place.host}\n\texport {place.export}\n\tpath {place.mount}\n"
                        "\tcontent images\n\toptions vers=4.2")


def proxmox_volume(kind: str, sid: str, place: NetworkPlace) -> str:
    """The volume id of the LUN on an iSCSI storage (pvesm list STORAGE shows yours): iscsidirect names LUNs
    lunN (PVE/Storage/ISCSIDirectPlugin.pm parse_volname), iscsi CHANNEL.ID.LUN.scsi-WWID."""
    if kind == "iscsidirect":
        return f"{sid}:lun{place.lun}"
    return f"{sid}:0.0.{place.lun}.scsi-WWID"


# tgt's backing-store types (targets.conf bs-type / tgtadm --bstype) per lun_type, and the open flags.
TGT_BS_TYPE = {LunType.NULL: "null", LunType.FILEIO: "rdwr", LunType.BLOCKIO: "rdwr"}
TGT_BS_OFLAGS = {LunType.BLOCKIO: "direct"}


def tgt_targets_conf(values: Mapping[str, str], place: NetworkPlace) -> str:
    """The target's LUN as tgt-admin reads it (/etc/tgt/conf.d/*.conf; scripts/tgt-admin in fujita/tgt): the
    backing store, its type and open flags (lun_type) and the write cache (lun_write_cache; tgt's own default is
    on, so it is always written)."""
    lun_type = LunType(values.get("lun_type", LunType.FILEIO))
    store = "/dev/null" if lun_type == LunType.NULL else place.lun_file
    lines = [f"<target {place.iqn}>"]
    if lun_type == LunType.NULL:
        # /dev/null is open by every process: tgt-admin skips a backing store it finds in use unless told.
        lines.append("    allow-in-use yes")
    lines += [f"    <backing-store {store}>", f"        bs-type {TGT_BS_TYPE[lun_type]}"]
    if lun_type in TGT_BS_OFLAGS:
        lines.append(f"        bsoflags {TGT_BS_OFLAGS[lun_type]}")
    lines += [f"        write-cache {values.get('lun_write_cache', 'off')}", f"        lun {place.lun}",
              "    </backing-store>", "</target>"]
    return "\n".join(lines)


def tgt_note(values: Mapping[str, str]) -> str:
    lun_type = values.get("lun_type", LunType.FILEIO)
    what = {LunType.NULL: "a null LUN (bs-type null on /dev/null: reads return zeroes, writes are dropped) measures "
                          "the protocol's ceiling and stores nothing: never put a VM on it",
            LunType.FILEIO: "fileio: the LUN's file through the target host's page cache (bs-type rdwr)",
            LunType.BLOCKIO: "blockio: the LUN's file or device opened O_DIRECT (bs-type rdwr, bsoflags direct), "
                             "the target host's page cache bypassed"}[LunType(lun_type)]
    cache = ("write-cache on: " + LUN_WRITE_CACHE_RISK if values.get("lun_write_cache") == "on" else
             "write-cache off: the target syncs every write to its disk before acknowledging it (safe, slower: "
             "tgt's own default is on)")
    return (f"on the target host (tgt): save as /etc/tgt/conf.d/vm-disk.conf, then tgt-admin --update ALL; "
            f"{what}; {cache}; restrict access with initiator-address or incominguser")
