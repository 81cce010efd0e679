"""NFS: an image file on an export (nfs-ganesha, lab-started, or an existing server), reached by
QEMU's libnfs or through the host kernel's NFS mount (the ``nfs_client`` axis). The lab half (the
spec, nfs-ganesha and rpcbind, libnfs, the leftover kinds) is :mod:`iomatrix.backing.nfs`; what
--current reads is :mod:`iomatrix.vmconfig.read_nfs`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from iomatrix.domain.axis_model import KERNEL_CLIENT, Axis, Layer, ToolOption
from iomatrix.domain.protocol_rules import kernel_client_rule, only_on
from iomatrix.protocols.base import LibvirtSource, NetworkProtocol
from iomatrix.protocols.place import NetworkPlace

NAME = "nfs"
PROXMOX_STORAGE_ID = "nfs-store"
# The user libnfs accesses an export as (libvirt <identity>): root, as measured (an export without
# root squash).
NFS_IDENTITY = {"user": "root", "group": "root"}
# The NFS version measured: QEMU 7.2's libnfs speaks NFSv3, and the lab's export serves v3 only
# (backing/nfs.py NFS_VERSION).
MEASURED_VERSION = 3
# The kernel mount's own documented risks (nfs(5)), which a libnfs measurement does not cover.
KERNEL_MOUNT_RISK = (
    "its risks are the kernel client's: with cache=writeback or writethrough QEMU opens the image "
    "without O_DIRECT, so writes also sit in this host's page cache until the guest "
    "flushes (a host "
    "crash or power loss loses what was not flushed; cache=none bypasses it); the mount is hard by "
    "default, so the VM's I/O blocks while the server is unreachable; never add options soft: "
    "nfs(5) warns that a soft timeout can cause silent data corruption"
)

# Its axis (issue 34): the client QEMU reaches the export with.
NFS_CLIENT = Axis(
    "nfs_client",
    "the NFS client QEMU reaches an image on NFS with: its own (libnfs, nfs:// URLs) or the host "
    "kernel's mount (the image is a file under the mount point)",
    ("libnfs", KERNEL_CLIENT),
    "libnfs",
    ("libnfs",),
    frozenset({Layer.IMAGE}),
    short=NAME,
    rules=(only_on(NAME, "nfs_client", "libnfs"), kernel_client_rule("nfs_client")),
    simpler=("libnfs", KERNEL_CLIENT),
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)


class Nfs(NetworkProtocol):
    name = NAME
    title = "NFS"
    client_axis = "nfs_client"
    kernel_client = "kernel"
    userspace_library = "libnfs"
    server_noun = "NFS server"
    is_volume = False
    spec = "iomatrix.backing.nfs:NfsBacking"
    # nfs-ganesha's start: tgtd and nfs-ganesha together 0.5 s in a sweep of both (issue 70's
    # calibration, docs/benchmarks-history.md); estimate.py counts it once per lab server
    lab_setup_s = 1.0
    lab_disks_in_workdir = True
    # nfs-ganesha with its VFS backend (the lab server), rpcbind (libnfs finds the server through
    # the portmapper), libnfs-utils (nfs-ls), QEMU's nfs driver (block-nfs.so)
    packages: ClassVar[tuple[str, ...]] = (
        "nfs-ganesha",
        "nfs-ganesha-vfs",
        "rpcbind",
        "libnfs-utils",
        "qemu-block-extra",
    )
    lab_server = "iomatrix.backing.nfs:provision_nfs"
    leftover_kinds = (
        "iomatrix.backing.nfs:RpcRegistrationLeftover",
        "iomatrix.backing.nfs:NfsFileLeftover",
        "iomatrix.backing.nfs:RuntimeFileLeftover",
    )
    axes: ClassVar[tuple[Axis, ...]] = (NFS_CLIENT,)
    axes_before = "rtt"
    existing_check = "iomatrix.backing.nfs:existing_problem"
    reader = "iomatrix.vmconfig.read_nfs:READER"
    kernel_probe = "iomatrix.backing.nfs:probe_kernel_client"
    kernel_fs_types: ClassVar[tuple[str, ...]] = (NAME, "nfs4")
    proxmox_types: ClassVar[tuple[str, ...]] = (NAME,)
    proxmox_kernel_mount = True
    rtt_unavailable = (
        "rtt is emulated by a relay between client and server; QEMU's nfs driver has no port "
        "option (libnfs asks the server's portmapper), so no relay can be put between them: "
        "iSCSI only"
    )

    def nova_unavailable(self) -> str:
        # Nova reaches NFS through the host kernel only: its instances directory on an NFS mount,
        # or a Cinder NFS volume (os-brick mounts the share); nova.conf never names libnfs.
        return (
            "Nova mounts NFS with the kernel (an NFS mount at its "
            "instances_path, /var/lib/nova/instances, or Cinder's NFS driver, which mounts the "
            "share); nova.conf has no setting for QEMU's own libnfs client"
        )

    def url(self, place: NetworkPlace, fmt: str) -> str:
        return f"nfs://{place.host}{place.nfs_file(fmt)}"

    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> LibvirtSource:
        if self.client_is_kernel(values):
            return "file", {"file": place.mounted_file(fmt)}, None
        return "network", {"protocol": self.name, "name": place.nfs_file(fmt)}, {"name": place.host}

    def libvirt_identity(self) -> dict[str, str]:
        # libvirt's schema (9.0) requires the user and group libnfs accesses the export as.
        return NFS_IDENTITY

    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        if self.client_is_kernel(values):
            return [("driver", "file"), ("filename", place.mounted_file(fmt))]
        return [
            ("driver", self.name),
            ("server.type", "inet"),
            ("server.host", place.host),
            ("path", place.nfs_file(fmt)),
        ]

    def kernel_client_steps(self, place: NetworkPlace) -> str:
        source = f"{place.host}:{place.export}"
        return f"mount the export first (nfs-common): mount -t nfs {source} {place.mount}"

    def placeholder_where(self, place: NetworkPlace) -> str:
        return f"server {place.host}, export {place.export}"

    def userspace_notes(self, place: NetworkPlace) -> list[str]:
        return [
            "libvirt's <identity> is the user libnfs accesses the export as: root needs an export "
            "without root squash, or name the image's owner"
        ]

    def libvirt_pool(self, values: Mapping[str, str], place: NetworkPlace) -> tuple[str, str]:
        """A netfs pool: libvirt mounts the export with the host kernel's client (libnfs has no
        pool)."""
        xml = (
            f'<pool type="netfs">\n  <name>{PROXMOX_STORAGE_ID}</name>\n  <source>\n'
            f'    <host name="{place.host}" />\n    <dir path="{place.export}" />\n'
            f'    <format type="nfs" />\n    <protocol ver="{MEASURED_VERSION}" />\n  </source>\n'
            f"  <target>\n    <path>{place.mount}</path>\n  </target>\n</pool>"
        )
        if self.client_is_kernel(values):
            client = "a netfs pool is a mount by the host kernel's NFS client, as measured"
        else:
            client = (
                "a netfs pool is a kernel NFS mount, which iomatrix did not measure: it measured "
                "QEMU's own libnfs client (the <disk> above, which needs no pool); "
                f"{KERNEL_MOUNT_RISK}"
            )
        return xml, (
            f"virsh pool-define FILE; virsh pool-start {PROXMOX_STORAGE_ID}: {client}; NFS has no "
            "<auth>: the export's own rules (client addresses, root squash) decide who mounts it"
        )

    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        """nfs for an export (always mounted by the kernel's client)."""
        sid = PROXMOX_STORAGE_ID
        return (
            self.name,
            sid,
            (
                f"nfs: {sid}\n\tserver {place.host}\n\texport {place.export}\n\tpath "
                f"{place.mount}\n\tcontent images\n\toptions vers={MEASURED_VERSION}"
            ),
        )

    def proxmox_placeholder(self, place: NetworkPlace) -> str:
        return place.export

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        if self.client_is_kernel(values):
            mount = (
                "Proxmox mounts an nfs storage with the host kernel's NFS client (under "
                "/mnt/pve/ID), as measured"
            )
        else:
            mount = (
                "Proxmox's nfs storage is a kernel NFS mount (under /mnt/pve/ID), which "
                "iomatrix did "
                "not measure: it measured QEMU's own libnfs client, which Proxmox does "
                "not use, so the figures above are libnfs's and the answer's risk lines the "
                "kernel mount's, documented (measure nfs_client=kernel where the host has "
                f"one); {KERNEL_MOUNT_RISK}"
            )
        return [
            mount,
            f"options vers={MEASURED_VERSION}: the NFS version measured",
            "STORAGE:SIZE allocates a new image of SIZE GiB on the export",
        ]
