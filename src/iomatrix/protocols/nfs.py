"""NFS: an image file on an export (nfs-ganesha, lab-started, or an existing server), reached by
QEMU's libnfs or through the host kernel's NFS mount (the ``nfs_client`` axis). The lab half is in
:mod:`iomatrix.backing.nfs` and :mod:`iomatrix.backing.libnfs`; the spec in
:mod:`iomatrix.backing.spec`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from iomatrix.protocols.base import LibvirtSource, NetworkProtocol
from iomatrix.protocols.place import NetworkPlace

NAME = "nfs"
PROXMOX_STORAGE_ID = "nfs-store"
# The user libnfs accesses an export as (libvirt <identity>): root, as measured (an export without
# root squash).
NFS_IDENTITY = {"user": "root", "group": "root"}


class Nfs(NetworkProtocol):
    name = NAME
    title = "NFS"
    client_axis = "nfs_client"
    kernel_client = "kernel"
    userspace_library = "libnfs"
    server_noun = "NFS server"
    is_volume = False
    spec = "iomatrix.backing.spec:NfsBacking"
    kernel_probe = "iomatrix.storage_clients:probe_nfs"
    proxmox_types: ClassVar[tuple[str, ...]] = (NAME,)

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
                f"{place.mount}\n\tcontent images\n\toptions vers=4.2"
            ),
        )

    def proxmox_placeholder(self, place: NetworkPlace) -> str:
        return place.export

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        return [
            "Proxmox mounts an nfs storage with the host kernel's NFS client (under /mnt/pve/ID); "
            + (
                "as measured"
                if self.client_is_kernel(values)
                else "iomatrix measured QEMU's own libnfs client, which Proxmox does not use: the "
                "kernel client's figures may differ (measure nfs_client=kernel where the host has "
                "one)"
            ),
            "STORAGE:SIZE allocates a new image of SIZE GiB on the export",
        ]
