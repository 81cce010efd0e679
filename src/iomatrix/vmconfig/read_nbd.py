"""Reading an NBD export back from a VM's configuration (``--current``, issue 48): its nbd:// URL
(and QEMU's older nbd:HOST:PORT filename), libvirt's <source protocol='nbd'> and QEMU's driver=nbd
node. NBD's house (:mod:`iomatrix.protocols.nbd`) names this module's READER; pure parsers.

Only NBD over TCP is read: an export on a UNIX socket (nbd+unix://, nbd:unix:PATH, server.type=unix,
libvirt's <host transport='unix'>) is on the same host, no network disk, and iomatrix measures none.
Proxmox VE has no NBD storage type (`Nbd.proxmox_unavailable`), so no Proxmox volume is read."""

from __future__ import annotations

import re
from collections.abc import Mapping

from iomatrix.protocols import nbd
from iomatrix.vmconfig.network import DiskReader, NetworkDiskRead, first_host
from iomatrix.vmconfig.reading import _bad

NAME = nbd.NAME

# nbd://HOST[:PORT][/EXPORT] and nbd+tcp://… (QEMU's block/nbd.c nbd_parse_uri: the export is the
# path without its leading '/', none for the server's default export; a query is for nbd+unix only)
NBD_URL = re.compile(r"^nbd(?:\+tcp)?://(\[[^\]]+\]|[^/:?\[\]]+)(?::(\d+))?(?:/([^?]*))?$")
# QEMU's older filename: nbd:HOST:PORT[:exportname=EXPORT] (nbd_parse_filename)
NBD_LEGACY = re.compile(r"^nbd:(\[[^\]]+\]|[^:/\[\]]+):(\d+)(?::exportname=(.*))?$")
UNIX_FORMS = ("nbd+unix:", "nbd:unix:")

NBD_FORMS = "nbd://HOST[:PORT]/EXPORT"
TCP_ONLY = "an NBD export over TCP (iomatrix measures no UNIX-socket export: it is on this host)"


def nbd_url(host: str, port: str | None, export: str) -> str:
    """The export as QEMU's -drive names it, with its port (the results' and snippets' form)."""
    return f"nbd://{host}:{port or nbd.NBD_PORT}/{export}"


def _checked_port(port: str | None, where: str) -> str | None:
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise _bad(where, port, "a TCP port 1–65535")
    return port


def _qemu_client(url: str) -> NetworkDiskRead:
    return NetworkDiskRead(
        NAME, url, note=f"an NBD export reached by QEMU's own client (its nbd driver): {url}"
    )


class NbdReader(DiskReader):
    forms = NBD_FORMS

    def url(self, url: str, where: str) -> NetworkDiskRead | None:
        if url.startswith(UNIX_FORMS):
            raise _bad(where, url, TCP_ONLY)
        if not url.startswith(("nbd://", "nbd+tcp://", "nbd:")):
            return None
        m = NBD_URL.match(url) or NBD_LEGACY.match(url)
        if m is None:
            raise _bad(where, url, f"{NBD_FORMS} or nbd:HOST:PORT:exportname=EXPORT")
        host, port, export = m.groups()
        return _qemu_client(nbd_url(host, _checked_port(port, f"{where} port"), export or ""))

    def libvirt(
        self,
        source: Mapping[str, str],
        hosts: list[Mapping[str, str]],
        dev: str,
        username: str | None,
    ) -> NetworkDiskRead:
        if hosts and hosts[0].get("transport") == "unix":
            raise _bad(f"disk {dev} source host", "transport='unix'", TCP_ONLY)
        host, port = first_host(hosts, dev)
        port = _checked_port(port, f"disk {dev} source host port")
        # (libvirt: no name is the server's default export)
        return _qemu_client(nbd_url(host, port, source.get("name", "")))

    def qemu_node(self, node: Mapping[str, str]) -> NetworkDiskRead:
        """A driver=nbd protocol node's options (server.type, server.host, server.port, export;
        -drive's older host= and port= too)."""
        if node.get("server.type", "inet") != "inet" or "path" in node:
            where = "-blockdev driver=nbd server.type"
            raise _bad(where, node.get("server.type", "unix"), TCP_ONLY)
        host = node.get("server.host", node.get("host"))
        if not host:
            raise _bad(
                "-blockdev driver=nbd",
                f"server.host={host or ''}",
                "server.type=inet,server.host=SERVER,server.port=PORT (and export=NAME)",
            )
        port = _checked_port(node.get("server.port", node.get("port")), "-blockdev server.port")
        return _qemu_client(nbd_url(host, port, node.get("export", "")))


READER = NbdReader()
