"""NBD over TCP (issue 48's proof of the protocol plug-in): an export of an NBD server, opened by
QEMU's own nbd block driver. NBD is two modules: this one, the protocol's spellings (QEMU's
-blockdev node, libvirt's network disk), which the registry imports as it discovers the protocols;
and :mod:`iomatrix.backing.nbd`, its backing spec (``[[backing]] type = "nbd"``) and its servers,
imported only when a plan names an nbd backing (``spec``). The lab half cannot sit here: every
module of this package is imported by the registry, and a lab module imports what imports the
registry (tests/test_import_graph.py).

QEMU has no kernel-client choice here (the kernel's nbd module is not used: the client is QEMU's),
Proxmox has no NBD storage type, and Nova attaches no NBD disk: those snippets say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from iomatrix.protocols.base import LibvirtSource, NetworkProtocol
from iomatrix.protocols.place import NetworkPlace

NAME = "nbd"
NBD_PORT = 10809  # IANA's NBD port: QEMU and libvirt assume it where none is given


class Nbd(NetworkProtocol):
    name = NAME
    title = "NBD"
    client_axis = "nbd_client"  # no such axis: QEMU's own client is the only one measured
    kernel_client = "kernel"
    userspace_library = "QEMU's built-in nbd driver"
    server_noun = "NBD server"
    is_volume = False  # a lab disk is an image file on the server; an existing export is raw only
    spec = "iomatrix.backing.nbd:NbdBacking"
    # nbdkit serving a file: no recorded sweep times it; one process started as tgtd is, so
    # tgtd's second (estimate.py counts it once per lab server)
    lab_setup_s = 1.0
    lab_disks_in_workdir = True
    # nbdkit serves the lab's exports; QEMU's nbd driver is built in (no qemu-block-extra)
    packages: ClassVar[tuple[str, ...]] = ("nbdkit",)
    # --current reads its URL, libvirt's <source protocol='nbd'> and QEMU's driver=nbd node
    reader = "iomatrix.vmconfig.read_nbd:READER"
    server_baseline_unavailable = (
        "the server-side baseline of an NBD disk is not built (nbdkit serves a file iomatrix could "
        "run fio on, but an existing export has none)"
    )
    # QEMU's nbd client takes a host and port, so a relay could sit between it and the server, but
    # the lab's NBD server and the relay are not wired together: a cell at rtt ≠ 0 would claim a
    # round trip it never had.
    rtt_unavailable = (
        "rtt is emulated by a relay between client and server; iomatrix does not put its relay "
        "in front of an NBD server yet: iSCSI only"
    )

    def client_is_kernel(self, values: Mapping[str, str]) -> bool:
        """Never: no axis chooses the kernel's nbd client (nothing here measures it)."""
        return False

    def url(self, place: NetworkPlace, fmt: str) -> str:
        return f"nbd://{place.host}:{NBD_PORT}/{place.image}.{fmt}"

    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> LibvirtSource:
        source = {"protocol": NAME, "name": f"{place.image}.{fmt}"}
        return "network", source, {"name": place.host, "port": str(NBD_PORT)}

    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        return [
            ("driver", NAME),
            ("server.type", "inet"),
            ("server.host", place.host),
            ("server.port", str(NBD_PORT)),
            ("export", f"{place.image}.{fmt}"),
        ]

    def kernel_client_steps(self, place: NetworkPlace) -> str:
        return (
            "none: QEMU connects to the export itself (the kernel's nbd-client is not what was "
            "measured)"
        )

    def placeholder_where(self, place: NetworkPlace) -> str:
        return f"NBD server {place.host}:{NBD_PORT}, export {place.image}.FORMAT"

    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        return NAME, "", ""

    def proxmox_unavailable(self) -> str | None:
        return (
            "Proxmox VE has no NBD storage type (storage.cfg): a disk on an NBD export is "
            "QEMU's -blockdev or libvirt's network disk"
        )

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        return []
