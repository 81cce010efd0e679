"""Reading a disk served over the network back from a VM's configuration (``--current``, issues
34, 35, 48), whatever its protocol.

A network disk is one of a registered protocol's (:mod:`iomatrix.protocols`: an iSCSI LUN, an image
file on an NFS export, a Ceph RBD image, an NBD export), reached by QEMU's own client or by the host
kernel's where the protocol's client axis chooses that. Each protocol's own spellings (its URL,
libvirt source, -blockdev node, Proxmox storage) are in its house; what a snippet adds beside them
is the protocol's own too (`extra_snippets`: vmconfig/read_iscsi.py, vmconfig/read_rbd.py through
`network_snippets`). The reading half here reads the places libvirt, QEMU and Proxmox write back:
the disk's protocol, its address (a URL) and the client axes. Each protocol's own parsing is its
reader (`DiskReader`: vmconfig/read_iscsi.py, read_nfs.py, read_rbd.py, read_nbd.py, named by the
protocol's `reader`); what is here asks every reader, or the one of the disk's protocol. Pure
parsers: nothing here connects to a server. No protocol is named here."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from iomatrix.plugins import load_object
from iomatrix.protocol_registry import network_protocol, protocols
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.vmconfig.reading import _bad

# The options a disk QEMU reaches with its own network client has no use for: aio is the file
# protocol's.
NETWORK_SKIPPED_KEYS = {"libvirt": ("io",), "proxmox": ("aio",), "virt-install": ("io",)}


@dataclass
class NetworkDiskRead:
    """What a configuration says of a network disk: its protocol, its URL where the configuration
    gives the address, the client axes away from their default, and how it was read (one line for
    the notes)."""

    protocol: str
    url: str | None
    axes: dict[str, str] = field(default_factory=dict)
    note: str = ""
    # reached through the host kernel's client: a device or file, so aio= applies
    kernel_client: bool = False


class DiskReader:
    """How a protocol's disk is read back from a VM's configuration (``--current``): its URL, the
    device its kernel client gives, libvirt's <source>, QEMU's protocol node, a Proxmox volume. A
    protocol names its reader by "module:OBJECT" (`NetworkProtocol.reader`, imported on use); each
    method returns None where the text is not its protocol's."""

    # How its URL is written, for the one-line error naming what a disk may be.
    forms: str = ""

    def url(self, url: str, where: str) -> NetworkDiskRead | None:
        """A -drive file= or qemu-img URL of its scheme; a one-line error for a malformed one."""
        return None

    def device(self, dev: str) -> NetworkDiskRead | None:
        """The device (or file) its kernel client gives, named as udev names it."""
        return None

    def libvirt(
        self,
        source: Mapping[str, str],
        hosts: list[Mapping[str, str]],
        dev: str,
        username: str | None,
    ) -> NetworkDiskRead:
        """A libvirt <disk type='network'> of its protocol (`source`: <source>'s attributes)."""
        raise NotImplementedError

    def qemu_node(self, node: Mapping[str, str]) -> NetworkDiskRead:
        """A -blockdev protocol node of its driver (its options without ``file.``)."""
        raise NotImplementedError

    def proxmox(
        self, kind: str, sid: str, volname: str, props: Mapping[str, str]
    ) -> NetworkDiskRead | None:
        """A volume of a storage of one of its `proxmox_types` (storage.cfg's properties)."""
        return None

    def proxmox_guess(
        self, sid: str, volname: str, storage_known: bool
    ) -> tuple[NetworkDiskRead | None, str | None] | None:
        """A volume of storage `sid` that storage.cfg does not list (or no storage.cfg was given:
        `storage_known` False): (its disk, or None with a note saying why it cannot tell); None
        where the name is not one of its volumes'."""
        return None

    def cache_note(self, network: NetworkDiskRead, cache: str | None) -> str | None:
        """What the disk's note adds for QEMU's cache mode `cache` (librbd's cache, which QEMU
        turns off itself for cache=none)."""
        return None


def _readers() -> list[tuple[NetworkProtocol, DiskReader]]:
    """Every protocol that reads its disks back, with its reader, by name."""
    return [(p, load_object(p.reader)) for p in protocols() if p.reader is not None]


def _either(words: list[str]) -> str:
    """'a, b or c'."""
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else "".join(words)


def first_host(hosts: list[Mapping[str, str]], dev: str) -> tuple[str, str | None]:
    """(name, port) of a libvirt network disk's first <host>; a one-line error where it has none."""
    if not hosts or not hosts[0].get("name"):
        raise _bad(
            f"disk {dev} source host", "(none)", "<host name='SERVER' port='PORT'/> inside <source>"
        )
    return hosts[0]["name"], hosts[0].get("port")


def note_client_cache(network: NetworkDiskRead, cache: str | None) -> None:
    """Add to the disk's note what its protocol says of QEMU's cache mode `cache` (QEMU turns
    librbd's cache off itself for cache=none/directsync: the cell keeps rbd_cache at its default,
    as the rbd axes' rule does)."""
    protocol = network_protocol(network.protocol)
    reader = None if protocol is None or protocol.reader is None else load_object(protocol.reader)
    if reader is not None and (note := reader.cache_note(network, cache)) is not None:
        network.note += note


def read_url(url: str, where: str) -> NetworkDiskRead | None:
    """A network disk's URL (QEMU's -drive file=, qemu-img: iscsi://, nfs://, rbd:…): the disk it
    names; None for a local file or device; a one-line error for a malformed one or another
    scheme."""
    readers = _readers()
    for _, reader in readers:
        if (found := reader.url(url, where)) is not None:
            return found
    if re.match(r"^[a-z][a-z0-9+]*://", url):
        scheme = url.split(":", 1)[0]
        forms = _either(["a file", "a device", *(r.forms for _, r in readers)])
        raise _bad(where, url, f"{forms} (iomatrix does not measure {scheme} disks)")
    return None


def read_by_path(dev: str) -> NetworkDiskRead | None:
    """A block device a kernel client gave, as udev names it (an iSCSI LUN's by-path link, an RBD
    image's /dev/rbd/POOL/IMAGE link); None for another device."""
    for _, reader in _readers():
        if (found := reader.device(dev)) is not None:
            return found
    return None


def read_libvirt_source(
    source: Mapping[str, str], hosts: list[Mapping[str, str]], dev: str, username: str | None = None
) -> NetworkDiskRead:
    """A libvirt <disk type='network'>'s <source> attributes, its <host> elements and its <auth
    username=>."""
    protocol = source.get("protocol")
    readers = {p.name: r for p, r in _readers()}
    if protocol not in readers:
        raise _bad(
            f"disk {dev} source protocol",
            protocol or "(none)",
            f"{_either(list(readers))} (iomatrix measures no other network disk)",
        )
    return readers[protocol].libvirt(source, hosts, dev, username)


def _local_node(node: Mapping[str, str]) -> NetworkDiskRead | None:
    """A file or host_device protocol node: a network disk only where the kernel's client named the
    device."""
    return read_by_path(name) if (name := node.get("filename")) else None


def _protocol_nodes() -> dict[str, Callable[[Mapping[str, str]], NetworkDiskRead | None]]:
    """QEMU's protocol drivers a network disk is opened with (each protocol's own, named as the
    protocol), and the local ones a kernel client's device or file is."""
    nodes: dict[str, Callable[[Mapping[str, str]], NetworkDiskRead | None]] = {
        p.name: r.qemu_node for p, r in _readers()
    }
    return {**nodes, "host_device": _local_node, "file": _local_node}


def read_qemu_node(node: Mapping[str, str]) -> NetworkDiskRead | None:
    """A -blockdev's protocol node (``file.``-prefixed under a format node, or bare when the first
    -blockdev is the protocol node) or a -drive's ``file=`` URL; None where it is a local file or
    device."""
    nodes = _protocol_nodes()
    for prefix in ("file.", ""):
        reader = nodes.get(node.get(f"{prefix}driver", ""))
        if reader is not None:
            found = reader(
                {k.removeprefix(prefix): v for k, v in node.items() if k.startswith(prefix)}
            )
            if found is not None or node.get(f"{prefix}filename"):
                return found
    drive_file = node.get("file")
    if drive_file is not None:
        return read_url(drive_file, "-drive file") or read_by_path(drive_file)
    return None


# --------------------------------------------------------------------------- Proxmox storage.cfg


def parse_storage_cfg(text: str) -> dict[str, tuple[str, dict[str, str]]]:
    """/etc/pve/storage.cfg: storage id → (type, its properties). A stanza is 'TYPE: ID' then
    indented 'key value' lines (PVE/Storage/Plugin.pm parse_config)."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    current: dict[str, str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            m = re.match(r"^([a-z][a-z0-9]*):\s*(\S+)\s*$", line)
            if m is None:
                raise _bad(
                    f"storage.cfg line {n}", line, "'TYPE: ID' then indented 'key value' lines"
                )
            current = {}
            out[m.group(2)] = (m.group(1), current)
        elif current is None:
            raise _bad(
                f"storage.cfg line {n}", line.strip(), "a 'TYPE: ID' line before its properties"
            )
        else:
            key, _, value = line.strip().partition(" ")
            current[key] = value.strip()
    return out


def read_proxmox_volume(
    volume: str, storage: Mapping[str, tuple[str, dict[str, str]]] | None
) -> tuple[NetworkDiskRead | None, str | None]:
    """(the network disk a Proxmox volume id is on, or None; a note where qm config alone cannot
    tell): the protocol whose `proxmox_types` holds the storage's type reads it, and where
    storage.cfg does not list the storage each protocol's reader may recognise the volume's name."""
    sid, sep, volname = volume.partition(":")
    if not sep:
        return None, None
    readers = _readers()
    if storage is not None and sid in storage:
        kind, props = storage[sid]
        for network, reader in readers:
            if kind in network.proxmox_types:
                return reader.proxmox(kind, sid, volname, props), None
        return None, None
    for _, reader in readers:
        if (guess := reader.proxmox_guess(sid, volname, storage is not None)) is not None:
            return guess
    return None, None
