"""Where a disk served over the network lives, as each tool names it, written and read back (issues
34, 35).

A network disk is an iSCSI LUN (reached by QEMU's libiscsi or by the host kernel's open-iscsi), an
image file on an NFS export (reached by QEMU's libnfs or through the kernel's NFS mount) or a Ceph
RBD image (reached by QEMU's librbd or mapped by the host kernel's krbd): the cell's ``initiator``,
``nfs_client`` and ``rbd_client`` axes choose which. Each protocol's own spellings (its URL, libvirt
source, -blockdev node, Proxmox storage) are in its house (:mod:`iomatrix.protocols`); the writing
half here is what `network_snippets` adds (tgt ``targets.conf``, ceph.conf's [client] lines, `rbd
create`); the addresses are placeholders from the documentation ranges that the user replaces with
their own (`iomatrix.protocols.place.NetworkPlace`). The reading half (``--current``) reads the same
places back as libvirt, QEMU and Proxmox write them: the disk's protocol, its address (a URL) and
the client axes, with, for RBD, the librbd cache settings a QEMU filename gives. Each protocol's own
parsing is its reader (`DiskReader`: vmconfig/read_iscsi.py, read_nfs.py, read_rbd.py, named by the
protocol's `reader`); what is here asks every reader, or the one of the disk's protocol. Pure
parsers and writers: nothing here connects to a server."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from iomatrix.domain import axes
from iomatrix.plugins import load_object
from iomatrix.protocols import network_protocol, protocols
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.protocols.iscsi import LUN_WRITE_CACHE_RISK, LunType
from iomatrix.protocols.place import NetworkPlace
from iomatrix.protocols.rbd import ceph_value
from iomatrix.vmconfig.reading import _bad

# The options a disk QEMU reaches with its own network client has no use for: aio is the file
# protocol's.
NETWORK_SKIPPED_KEYS = {"libvirt": ("io",), "proxmox": ("aio",), "virt-install": ("io",)}


# tgt's backing-store types (targets.conf bs-type / tgtadm --bstype) per lun_type, and the open
# flags.
TGT_BS_TYPE = {LunType.NULL: "null", LunType.FILEIO: "rdwr", LunType.BLOCKIO: "rdwr"}
TGT_BS_OFLAGS = {LunType.BLOCKIO: "direct"}


def tgt_targets_conf(values: Mapping[str, str], place: NetworkPlace) -> str:
    """The target's LUN as tgt-admin reads it (/etc/tgt/conf.d/*.conf; scripts/tgt-admin in
    fujita/tgt): the backing store, its type and open flags (lun_type) and the write cache
    (lun_write_cache; tgt's own default is on, so it is always written)."""
    lun_type = LunType(values.get("lun_type", LunType.FILEIO))
    store = "/dev/null" if lun_type == LunType.NULL else place.lun_file
    lines = [f"<target {place.iqn}>"]
    if lun_type == LunType.NULL:
        # /dev/null is open by every process: tgt-admin skips a backing store it finds in use unless
        # told.
        lines.append("    allow-in-use yes")
    lines += [f"    <backing-store {store}>", f"        bs-type {TGT_BS_TYPE[lun_type]}"]
    if lun_type in TGT_BS_OFLAGS:
        lines.append(f"        bsoflags {TGT_BS_OFLAGS[lun_type]}")
    lines += [
        f"        write-cache {values.get('lun_write_cache', 'off')}",
        f"        lun {place.lun}",
        "    </backing-store>",
        "</target>",
    ]
    return "\n".join(lines)


def tgt_note(values: Mapping[str, str]) -> str:
    lun_type = values.get("lun_type", LunType.FILEIO)
    what = {
        LunType.NULL: "a null LUN (bs-type null on /dev/null: reads return zeroes, writes are "
        "dropped) measures "
        "the protocol's ceiling and stores nothing: never put a VM on it",
        LunType.FILEIO: "fileio: the LUN's file through the target host's page cache (bs-type "
        "rdwr)",
        LunType.BLOCKIO: "blockio: the LUN's file or device opened O_DIRECT (bs-type rdwr, "
        "bsoflags direct), "
        "the target host's page cache bypassed",
    }[LunType(lun_type)]
    cache = (
        "write-cache on: " + LUN_WRITE_CACHE_RISK
        if values.get("lun_write_cache") == "on"
        else "write-cache off: the target syncs every write to its disk before acknowledging "
        "it (safe, slower: "
        "tgt's own default is on)"
    )
    return (
        "on the target host (tgt): save as /etc/tgt/conf.d/vm-disk.conf, then tgt-admin "
        "--update ALL; "
        f"{what}; {cache}; restrict access with initiator-address or incominguser"
    )


# --------------------------------------------------------------------------- Ceph RBD: librbd's
# cache, the image The rbd axes (domain/axes.py), whose defaults are Ceph's own: what a cell that
# leaves one out was measured with, and what a [client] section without the line gives.
RBD_AXIS_NAMES = (
    "rbd_cache",
    "rbd_cache_policy",
    "rbd_cache_writethrough_until_flush",
    "rbd_object_size",
    "rbd_client",
)
# The ceph.conf option each librbd cache axis is written as (ceph.conf takes spaces or underscores
# alike).
CEPH_CLIENT_OPTIONS = {
    "rbd_cache": "rbd cache",
    "rbd_cache_policy": "rbd cache policy",
    "rbd_cache_writethrough_until_flush": "rbd cache writethrough until flush",
}
RBD_CACHE_POLICY_WORDS = {
    "writeback": "writeback: a write is acknowledged once it is in librbd's cache (client "
    "memory, up to rbd cache "
    "max dirty, 24 MiB by default) and reaches the OSDs later or at the guest's flush: a "
    "crash of the "
    "client host or of QEMU loses what the guest has not flushed, like a disk's volatile "
    "write cache "
    "(safe for a guest that flushes, which QEMU cache=writeback tells it to do)",
    "writearound": "writearound (Ceph's default since Octopus): a write is acknowledged once "
    "sent, before the OSDs "
    "have it, and is not kept for later reads; as writeback, a client crash loses what the guest "
    "has not flushed",
    "writethrough": "writethrough: a write is acknowledged once the OSDs have it; the cache "
    "serves reads only "
    "(safe, the slowest for writes)",
}
WRITETHROUGH_UNTIL_FLUSH = (
    "with rbd cache writethrough until flush = true (Ceph's default) librbd's cache "
    "stays writethrough until the "
    "guest's first flush, so QEMU cache=writeback is no faster than cache=none for a "
    "guest or workload that never "
    "flushes"
)
# QEMU sets rbd_cache itself from its cache mode, over ceph.conf (block/rbd.c qemu_rbd_connect:
# cache.direct=on, i.e. cache=none or directsync, sets it false; every other mode true).
QEMU_SETS_RBD_CACHE = (
    "QEMU sets rbd cache itself from its cache mode, over this file (block/rbd.c: "
    "cache=none and directsync turn "
    "it off, writeback, writethrough and unsafe on): for QEMU's disks the cache mode is "
    "the switch, and the line "
    "applies to the host's other librbd clients (fio's rbd engine, rbd-nbd)"
)


def _ceph_bool(value: str) -> str:
    return "true" if value == "on" else "false"


def ceph_client_conf(values: Mapping[str, str]) -> str:
    """The [client] lines of ceph.conf for librbd's cache as the cell was measured: every one
    written, as Ceph's defaults are what the rbd axes measure against."""
    lines = ["[client]"]
    for axis, option in CEPH_CLIENT_OPTIONS.items():
        value = ceph_value(values, axis)
        lines.append(f"{option} = {value if axis == 'rbd_cache_policy' else _ceph_bool(value)}")
    return "\n".join(lines)


def ceph_client_recommended(values: Mapping[str, str], varied: Collection[str]) -> str | None:
    """The [client] lines an answer sets (its first screen, issue 49): the librbd cache options the
    sweep chose among (`varied`) and those the answer holds away from Ceph's default; not rbd cache,
    which QEMU sets from its cache mode (QEMU_SETS_RBD_CACHE). None when there is nothing to set:
    Ceph's defaults are the answer."""
    lines = []
    for axis, option in CEPH_CLIENT_OPTIONS.items():
        value = ceph_value(values, axis)
        if axis != "rbd_cache" and (axis in varied or value != str(axes.get(axis).default)):
            lines.append(f"{option} = {value if axis == 'rbd_cache_policy' else _ceph_bool(value)}")
    return "\n".join(["[client]", *lines]) if lines else None


def ceph_client_summary(values: Mapping[str, str]) -> str:
    """The [client] lines in one line (the answer's first screen)."""
    return ", ".join(ceph_client_conf(values).splitlines()[1:])


# The cache options `rbd config image set` writes per image: not rbd_cache, which QEMU sets itself
# from its cache mode (QEMU_SETS_RBD_CACHE); a per-image value would only compete with that.
RBD_IMAGE_CONFIG_AXES = ("rbd_cache_policy", "rbd_cache_writethrough_until_flush")


def rbd_image_config(values: Mapping[str, str], place: NetworkPlace) -> str:
    """`rbd config image set POOL/IMAGE KEY VALUE` (rbd(8), Ceph 14 and later): the same cache
    settings as the [client] lines, kept in the image's metadata, for this one image whichever host
    opens it."""
    lines = []
    for axis in RBD_IMAGE_CONFIG_AXES:
        value = ceph_value(values, axis)
        value = value if axis == "rbd_cache_policy" else _ceph_bool(value)
        lines.append(f"rbd config image set --id {place.ceph_user} {place.rbd_name} {axis} {value}")
    return "\n".join(lines)


RBD_IMAGE_CONFIG_NOTE = (
    "the cache settings of the [client] lines kept in the image's own metadata (rbd "
    "config image list shows them): "
    "librbd applies them to this image on every host that opens it, over that host's "
    "ceph.conf; rbd cache is left "
    "out, as QEMU sets it from its cache mode; run where client.{user} may write the "
    "image's metadata"
)


def ceph_client_notes(values: Mapping[str, str]) -> list[str]:
    """What each cache line does and risks, the writethrough-until-flush interaction in its own
    sentence, and that the lines are the whole host's."""
    notes = [
        "on each client host: the [client] section of /etc/ceph/ceph.conf (Proxmox-managed Ceph: "
        "/etc/pve/ceph.conf, shared by every node of the cluster), or `ceph config set "
        "client ...` on the "
        "cluster; it applies to every librbd client of that host, every VM's disk on it, "
        "not one disk"
    ]
    notes.append(QEMU_SETS_RBD_CACHE)
    if values.get("cache") in ("none", "directsync"):
        notes.append(
            f"with cache={values['cache']} QEMU turns librbd's cache off for this disk: "
            "the lines below "
            "rbd cache do not change it"
        )
    notes.append(
        "rbd cache policy = " + RBD_CACHE_POLICY_WORDS[ceph_value(values, "rbd_cache_policy")]
    )
    if ceph_value(values, "rbd_cache_writethrough_until_flush") == "on":
        notes.append(WRITETHROUGH_UNTIL_FLUSH)
    else:
        notes.append(
            "rbd cache writethrough until flush = false: the cache policy applies from "
            "the first write, "
            "also for a guest that never flushes (an old kernel, a driver without flush "
            "support), which "
            "then loses acknowledged writes, and possibly its filesystem, in a client crash"
        )
    return notes


def rbd_create(values: Mapping[str, str], place: NetworkPlace, size_gib: int) -> str:
    """`rbd create` of the image with the object size it was measured with (rbd(8): --object-size
    B/K/M)."""
    size = ceph_value(values, "rbd_object_size")
    return (
        f"rbd create --id {place.ceph_user} --size {size_gib}G --object-size {size} "
        f"{place.rbd_name}"
    )


def rbd_create_note(values: Mapping[str, str]) -> str:
    size = ceph_value(values, "rbd_object_size")
    return (
        f"the object size ({size}) is a property of the image, fixed when it is created: "
        "the image is striped "
        "over RADOS objects of that size; larger objects suit large sequential I/O, "
        "smaller ones spread small "
        "random I/O over more placement groups and copy less on a clone's first write; "
        "an existing image "
        "keeps its own (rbd info shows its order): copy it into a new one (rbd export | rbd import "
        "--object-size, or qemu-img convert); images Proxmox or `rbd create` make "
        "without the option take "
        "[client] rbd default order (22: 4 MiB objects)"
    )


# An RBD image as libvirt and the rbd tool name it: POOL/IMAGE, or POOL/NAMESPACE/IMAGE, with an
# optional @SNAP.
RBD_NAME = re.compile(r"^([^/@:]+)/(?:([^/@:]+)/)?([^/@:]+)(?:@([^/@:]+))?$")


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


def rbd_url(name: str) -> str:
    """An RBD image as QEMU's -drive names it (rbd:POOL/IMAGE), the form the results and snippets
    show."""
    return f"rbd:{name}"


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
