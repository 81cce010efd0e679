"""Reading an image on NFS back from a VM's configuration (``--current``, issue 34): its nfs://
URL, libvirt's <source protocol='nfs'>, QEMU's driver=nfs node and Proxmox's nfs volumes. NFS's
house (:mod:`iomatrix.protocols.nfs`) names this module's READER; pure parsers."""

from __future__ import annotations

import re
from collections.abc import Mapping

from iomatrix.domain.axes import KERNEL_CLIENT
from iomatrix.protocols import nfs
from iomatrix.vmconfig.network import DiskReader, NetworkDiskRead, first_host
from iomatrix.vmconfig.reading import _bad

NAME = nfs.NAME

# nfs://HOST[:PORT]/PATH[?OPTIONS] (libnfs's URL form, QEMU's block/nfs.c)
NFS_URL = re.compile(r"^nfs://([^/:?]+)(?::\d+)?(/[^?]*)(?:\?.*)?$")

NFS_FORMS = "nfs://HOST/EXPORT/PATH/IMAGE"


def _libnfs(url: str) -> NetworkDiskRead:
    return NetworkDiskRead(
        NAME, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}"
    )


class NfsReader(DiskReader):
    forms = NFS_FORMS

    def url(self, url: str, where: str) -> NetworkDiskRead | None:
        if not url.startswith("nfs://"):
            return None
        m = NFS_URL.match(url)
        if m is None or m.group(2) in ("", "/"):
            raise _bad(where, url, NFS_FORMS)
        return _libnfs(url)

    def libvirt(
        self,
        source: Mapping[str, str],
        hosts: list[Mapping[str, str]],
        dev: str,
        username: str | None,
    ) -> NetworkDiskRead:
        name = source.get("name", "")
        host, _ = first_host(hosts, dev)
        if not name.startswith("/"):
            raise _bad(
                f"disk {dev} source name",
                name or "(none)",
                "the image's path on the export, e.g. /srv/nfs/vm/disk.qcow2",
            )
        return _libnfs(f"nfs://{host}{name}")

    def qemu_node(self, node: Mapping[str, str]) -> NetworkDiskRead:
        """A driver=nfs protocol node's options (server.host, path)."""
        host, path = node.get("server.host"), node.get("path")
        if not host or not path:
            raise _bad(
                "-blockdev driver=nfs",
                f"server.host={host or ''},path={path or ''}",
                "server.host=SERVER and path=/EXPORT/IMAGE",
            )
        return _libnfs(f"nfs://{host}{path}")

    def proxmox(
        self, kind: str, sid: str, volname: str, props: Mapping[str, str]
    ) -> NetworkDiskRead | None:
        server, export = props.get("server"), props.get("export", "")
        return NetworkDiskRead(
            NAME,
            None,
            {"nfs_client": KERNEL_CLIENT},
            f"an image on the NFS storage {sid} ({server}:{export}), which Proxmox mounts with "
            "the host kernel's client",
            kernel_client=True,
        )

    def proxmox_guess(
        self, sid: str, volname: str, storage_known: bool
    ) -> tuple[NetworkDiskRead | None, str | None] | None:
        if storage_known or "/" not in volname:
            return None
        return None, (
            f"storage {sid} may be a directory or an NFS storage: qm config does not "
            "say; put a copy of "
            "/etc/pve/storage.cfg beside the file, named storage.cfg, to read it"
        )


READER = NfsReader()
