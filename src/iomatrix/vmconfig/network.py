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
the client axes, with, for RBD, the librbd cache settings a QEMU filename gives. Pure parsers and
writers: nothing here connects to a server."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from iomatrix.domain import CacheMode, axes
from iomatrix.domain.axes import ISCSI, KERNEL_CLIENT, KRBD, LUN_WRITE_CACHE_RISK, NFS, RBD, LunType
from iomatrix.protocols import iscsi, nfs, rbd
from iomatrix.protocols.place import ISCSI_PORT, NetworkPlace
from iomatrix.protocols.rbd import ceph_value
from iomatrix.vmconfig.reading import _bad, _value

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


# iscsi://[USER[%PASSWORD]@]HOST[:PORT]/IQN/LUN (QEMU's block/iscsi.c, libiscsi's URL form)
ISCSI_URL = re.compile(r"^iscsi://(?:[^@/]*@)?(\[[^\]]+\]|[^:/]+)(?::(\d+))?/([^/]+)/(\d+)$")
# nfs://HOST[:PORT]/PATH[?OPTIONS] (libnfs's URL form, QEMU's block/nfs.c)
NFS_URL = re.compile(r"^nfs://([^/:?]+)(?::\d+)?(/[^?]*)(?:\?.*)?$")
# udev's link of a LUN the kernel's initiator logged in to (60-persistent-storage.rules).
BY_PATH_ISCSI = re.compile(r"^/dev/disk/by-path/ip-(.+):(\d+)-iscsi-(.+)-lun-(\d+)(?:-part\d+)?$")
# Proxmox volume names on iSCSI storages (pve-storage ISCSIDirectPlugin / ISCSIPlugin
# parse_volname).
PROXMOX_ISCSIDIRECT_VOLUME = re.compile(r"^lun(\d+)$")
PROXMOX_ISCSI_VOLUME = re.compile(r"^\d+\.\d+\.(\d+)\.[^/\s]+$")
# An rbd storage's volume: vm-VMID-disk-N, base-VMID-disk-N (a template), a linked clone base/disk
# (RBDPlugin parse_volname), also the volume name of an LVM or ZFS storage.
PROXMOX_RBD_VOLUME = re.compile(r"^(?:(?:base|vm)-\d+-[\w.-]+/)?(?:base|vm)-\d+-[\w.-]+$")
ISCSI_FORMS = "iscsi://HOST[:PORT]/IQN/LUN"
NFS_FORMS = "nfs://HOST/EXPORT/PATH/IMAGE"
RBD_FORMS = "rbd:POOL/IMAGE[:id=USER][:conf=FILE]"
# An RBD image as libvirt and the rbd tool name it: POOL/IMAGE, or POOL/NAMESPACE/IMAGE, with an
# optional @SNAP.
RBD_NAME = re.compile(r"^([^/@:]+)/(?:([^/@:]+)/)?([^/@:]+)(?:@([^/@:]+))?$")
# udev's link of an image the kernel's krbd mapped (ceph's udev/50-rbd.rules:
# /dev/rbd/POOL[/NAMESPACE]/IMAGE).
BY_RBD = re.compile(r"^/dev/rbd/([^/]+)/(?:([^/]+)/)?([^/@]+)(?:@[^/]+)?$")
# The Ceph options of a QEMU rbd: filename that the rbd axes name (block/rbd.c passes them to
# librados as they are): rbd_cache is not among them, as QEMU sets it from its own cache mode
# (`note_qemu_rbd_cache`).
RBD_FILENAME_AXES = ("rbd_cache_policy", "rbd_cache_writethrough_until_flush")
CEPH_TRUE, CEPH_FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


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


def _rbd_name(name: str, where: str) -> str:
    """POOL/IMAGE (or POOL/NAMESPACE/IMAGE, @SNAP) checked; a one-line error otherwise."""
    if RBD_NAME.match(name) is None:
        raise _bad(where, name or "(none)", "POOL/IMAGE, e.g. rbd/vm-100-disk-0")
    return name


def _rbd_read(
    name: str, how: str, axes_read: dict[str, str] | None = None, kernel: bool = False
) -> NetworkDiskRead:
    client = "the host kernel's krbd" if kernel else "QEMU's own client (librbd)"
    return NetworkDiskRead(
        RBD,
        rbd_url(name),
        {**({"rbd_client": KRBD} if kernel else {}), **(axes_read or {})},
        f"a Ceph RBD image reached by {client}: {name}{how}",
        kernel_client=kernel,
    )


def _ceph_onoff(key: str, value: str) -> str:
    if value.lower() in CEPH_TRUE:
        return "on"
    if value.lower() in CEPH_FALSE:
        return "off"
    raise _bad(key, value, "true or false")


def rbd_filename_axes(options: Mapping[str, str], where: str) -> dict[str, str]:
    """The rbd axes a QEMU rbd: filename's Ceph options set (Ceph spells them with '_' or ' '), away
    from Ceph's defaults."""
    found: dict[str, str] = {}
    for key, raw in options.items():
        axis = key.replace(" ", "_")
        if axis not in RBD_FILENAME_AXES:
            continue
        value = raw if axis == "rbd_cache_policy" else _ceph_onoff(f"{where} {key}", raw)
        value = _value(axis, f"{where} {key}", value)
        if value != axes.get(axis).default:
            found[axis] = value
    return found


def note_qemu_rbd_cache(network: NetworkDiskRead, cache: str | None) -> None:
    """Say, in the disk's note, that QEMU turns librbd's cache off itself for cache=none/directsync
    (block/rbd.c qemu_rbd_connect, over ceph.conf): the cell keeps rbd_cache at its default, as the
    rbd axes' rule does."""
    if (
        network.protocol == RBD
        and not network.kernel_client
        and cache in (CacheMode.NONE, CacheMode.DIRECTSYNC)
    ):
        network.note += (
            f"; QEMU turns librbd's cache off for cache={cache} (block/rbd.c), whatever "
            "ceph.conf says"
        )


def read_rbd_filename(text: str, where: str) -> NetworkDiskRead:
    """QEMU's rbd:POOL/IMAGE[@SNAP][:KEY=VALUE…] (block/rbd.c qemu_rbd_parse_filename; '\\:' is a literal colon):
    the image, its user (id=) and the cache options the axes name."""  # noqa: E501
    parts = re.split(r"(?<!\\):", text.removeprefix("rbd:"))
    if RBD_NAME.match(parts[0]) is None:
        raise _bad(where, text, RBD_FORMS)
    name = parts[0]
    options: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise _bad(where, text, RBD_FORMS)
        options[key] = value.replace("\\:", ":")
    user = f", user {options['id']}" if "id" in options else ""
    return _rbd_read(name, user, rbd_filename_axes(options, where))


def iscsi_url(host: str, port: int | str | None, iqn: str, lun: int | str) -> str:
    return f"iscsi://{host}:{port or ISCSI_PORT}/{iqn}/{lun}"


def _checked_lun(lun: str, where: str) -> str:
    if not lun.isdigit() or int(lun) > 16383:  # SAM's flat LUN space (14 bits)
        raise _bad(where, lun, "a LUN number 0–16383")
    return str(int(lun))


def read_url(url: str, where: str) -> NetworkDiskRead | None:
    """An iscsi:// or nfs:// URL (QEMU's -drive file=, qemu-img): the disk it names; None for
    another scheme; a one-line error for a malformed one."""
    if url.startswith("iscsi://"):
        m = ISCSI_URL.match(url)
        if m is None:
            raise _bad(where, url, ISCSI_FORMS)
        host, port, iqn, lun = m.groups()
        return NetworkDiskRead(
            ISCSI,
            iscsi_url(host, port, iqn, _checked_lun(lun, where)),
            note=f"an iSCSI LUN reached by QEMU's own initiator (libiscsi): {url}",
        )
    if url.startswith("nfs://"):
        m = NFS_URL.match(url)
        if m is None or m.group(2) in ("", "/"):
            raise _bad(where, url, NFS_FORMS)
        return NetworkDiskRead(
            NFS, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}"
        )
    if url.startswith("rbd:"):
        return read_rbd_filename(url, where)
    if re.match(r"^[a-z][a-z0-9+]*://", url):
        scheme = url.split(":", 1)[0]
        raise _bad(
            where,
            url,
            f"a file, a device, {ISCSI_FORMS}, {NFS_FORMS} or {RBD_FORMS} (iomatrix does not "
            f"measure {scheme} disks)",
        )
    return None


def read_by_path(dev: str) -> NetworkDiskRead | None:
    """A block device named by udev's iSCSI by-path link (the LUN the host kernel's initiator logged
    in to) or by its /dev/rbd/POOL/IMAGE link (the RBD image the kernel's krbd mapped)."""
    if m := BY_RBD.match(dev):
        pool, namespace, image = m.groups()
        return _rbd_read("/".join(filter(None, (pool, namespace, image))), f" ({dev})", kernel=True)
    m = BY_PATH_ISCSI.match(dev)
    if m is None:
        return None
    host, port, iqn, lun = m.groups()
    return NetworkDiskRead(
        ISCSI,
        iscsi_url(host, port, iqn, lun),
        {"initiator": KERNEL_CLIENT},
        f"an iSCSI LUN the host kernel's initiator logged in to ({dev})",
        kernel_client=True,
    )


def read_libvirt_source(
    source: Mapping[str, str], hosts: list[Mapping[str, str]], dev: str, username: str | None = None
) -> NetworkDiskRead:
    """A libvirt <disk type='network'>'s <source> attributes, its <host> elements and its <auth
    username=>."""
    protocol = source.get("protocol")
    if protocol not in (ISCSI, NFS, RBD):
        raise _bad(
            f"disk {dev} source protocol",
            protocol or "(none)",
            "iscsi, nfs or rbd (iomatrix measures no other network disk)",
        )
    name = source.get("name", "")
    if protocol == RBD:  # the monitors may be left to ceph.conf: <host> is optional
        name = _rbd_name(name, f"disk {dev} source name")
        monitors = ", ".join(f"{h['name']}:{h.get('port', '6789')}" for h in hosts if h.get("name"))
        how = "".join(
            (
                f", monitors {monitors}" if monitors else ", monitors from ceph.conf",
                f", user {username}" if username else "",
            )
        )
        return _rbd_read(name, how)
    if not hosts or not hosts[0].get("name"):
        raise _bad(
            f"disk {dev} source host", "(none)", "<host name='SERVER' port='PORT'/> inside <source>"
        )
    host, port = hosts[0]["name"], hosts[0].get("port")
    if protocol == ISCSI:
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
        return NetworkDiskRead(
            ISCSI, url, note=f"an iSCSI LUN reached by QEMU's own initiator (libiscsi): {url}"
        )
    if not name.startswith("/"):
        raise _bad(
            f"disk {dev} source name",
            name or "(none)",
            "the image's path on the export, e.g. /srv/nfs/vm/disk.qcow2",
        )
    url = f"nfs://{host}{name}"
    return NetworkDiskRead(
        NFS, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}"
    )


def _rbd_node(node: Mapping[str, str]) -> NetworkDiskRead:
    """A driver=rbd protocol node's options (QEMU 7.2's BlockdevOptionsRbd: pool, namespace, image,
    conf, user)."""
    pool, image = node.get("pool"), node.get("image")
    if not pool or not image:
        raise _bad(
            "-blockdev driver=rbd",
            f"pool={pool or ''},image={image or ''}",
            "pool=POOL and image=IMAGE (and conf=FILE, user=USER)",
        )
    for key, value in (("pool", pool), ("image", image)):
        if "/" in value or "@" in value:
            raise _bad(f"-blockdev driver=rbd {key}", value, f"a {key} name (no '/' or '@')")
    name = _rbd_name(
        "/".join(filter(None, (pool, node.get("namespace"), image))),
        "-blockdev driver=rbd pool/image",
    )
    user = node.get("user")
    return _rbd_read(name, f", user {user}" if user else "")


def _iscsi_node(node: Mapping[str, str]) -> NetworkDiskRead:
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
    return NetworkDiskRead(
        ISCSI, url, note=f"an iSCSI LUN reached by QEMU's own initiator (libiscsi): {url}"
    )


def _nfs_node(node: Mapping[str, str]) -> NetworkDiskRead:
    """A driver=nfs protocol node's options (server.host, path)."""
    host, path = node.get("server.host"), node.get("path")
    if not host or not path:
        raise _bad(
            "-blockdev driver=nfs",
            f"server.host={host or ''},path={path or ''}",
            "server.host=SERVER and path=/EXPORT/IMAGE",
        )
    url = f"nfs://{host}{path}"
    return NetworkDiskRead(
        NFS, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}"
    )


def _local_node(node: Mapping[str, str]) -> NetworkDiskRead | None:
    """A file or host_device protocol node: a network disk only where the kernel's client named the
    device."""
    return read_by_path(name) if (name := node.get("filename")) else None


# QEMU's protocol drivers a network disk is opened with, and the local ones a kernel client's device
# or file is.
_PROTOCOL_NODES: dict[str, Callable[[Mapping[str, str]], NetworkDiskRead | None]] = {
    ISCSI: _iscsi_node,
    NFS: _nfs_node,
    RBD: _rbd_node,
    "host_device": _local_node,
    "file": _local_node,
}


def read_qemu_node(node: Mapping[str, str]) -> NetworkDiskRead | None:
    """A -blockdev's protocol node (``file.``-prefixed under a format node, or bare when the first
    -blockdev is the protocol node) or a -drive's ``file=`` URL; None where it is a local file or
    device."""
    for prefix in ("file.", ""):
        reader = _PROTOCOL_NODES.get(node.get(f"{prefix}driver", ""))
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
    tell)."""
    sid, sep, volname = volume.partition(":")
    if not sep:
        return None, None
    if storage is not None and sid in storage:
        kind, props = storage[sid]
        if kind in (iscsi.PROXMOX_DIRECT, iscsi.PROXMOX_KERNEL):
            m = PROXMOX_ISCSIDIRECT_VOLUME.match(volname) or PROXMOX_ISCSI_VOLUME.match(volname)
            lun = m.group(1) if m else "0"
            portal = props.get("portal", "")
            host, _, port = (
                portal.rpartition(":") if re.search(r":\d+$", portal) else (portal, "", "")
            )
            url = iscsi_url(host, port or None, props.get("target", "IQN"), lun) if host else None
            return _proxmox_iscsi(kind, sid, url), None
        if kind == nfs.NAME:
            server, export = props.get("server"), props.get("export", "")
            return NetworkDiskRead(
                NFS,
                None,
                {"nfs_client": KERNEL_CLIENT},
                f"an image on the NFS storage {sid} ({server}:{export}), which Proxmox mounts with "
                "the host kernel's client",
                kernel_client=True,
            ), None
        if kind == RBD:
            return _proxmox_rbd(sid, volname, props), None
        return None, None
    if m := PROXMOX_ISCSIDIRECT_VOLUME.match(volname):
        return _proxmox_iscsi("iscsidirect", sid, None), None
    if PROXMOX_ISCSI_VOLUME.match(volname):
        return _proxmox_iscsi(iscsi.PROXMOX_KERNEL, sid, None), None
    if storage is None and "/" in volname:
        return None, (
            f"storage {sid} may be a directory or an NFS storage: qm config does not "
            "say; put a copy of "
            "/etc/pve/storage.cfg beside the file, named storage.cfg, to read it"
        )
    if storage is None and PROXMOX_RBD_VOLUME.match(volname):
        return None, (
            f"storage {sid} may be LVM, ZFS or Ceph RBD: qm config does not say; put a copy of "
            "/etc/pve/storage.cfg beside the file, named storage.cfg, to read an RBD one"
        )
    return None, None


def _proxmox_rbd(sid: str, volname: str, props: Mapping[str, str]) -> NetworkDiskRead:
    """A volume of an rbd storage (PVE/Storage/RBDPlugin.pm): the image POOL/VOLNAME, reached by
    QEMU's librbd, or mapped by the host kernel's krbd where the storage says krbd 1."""
    if PROXMOX_RBD_VOLUME.match(volname) is None:
        raise _bad(
            f"volume {sid}:{volname}", volname, "an rbd storage's image name, e.g. vm-101-disk-0"
        )
    krbd = props.get("krbd", "0")
    if krbd not in ("0", "1"):
        raise _bad(f"storage.cfg rbd: {sid} krbd", krbd, "0 or 1")
    pool = props.get("pool", rbd.PROXMOX_DEFAULT_POOL)
    where = f" on the rbd storage {sid}" + (
        f" (monitors {props['monhost']})"
        if "monhost" in props
        else " (the Proxmox-managed cluster)"
    )
    # a linked clone's BASE/IMAGE: the image is the clone (its parent: BASE)
    image = volname.rpartition("/")[2]
    return _rbd_read(
        _rbd_name(f"{pool}/{image}", f"volume {sid}:{volname}"), where, kernel=krbd == "1"
    )


def _proxmox_iscsi(kind: str, sid: str, url: str | None) -> NetworkDiskRead:
    if kind == "iscsidirect":
        return NetworkDiskRead(
            ISCSI,
            url,
            note=f"a LUN of the iscsidirect storage {sid}: QEMU's own initiator (libiscsi)",
        )
    return NetworkDiskRead(
        ISCSI,
        url,
        {"initiator": KERNEL_CLIENT},
        f"a LUN of the iscsi storage {sid}: the host kernel's initiator (open-iscsi)",
    )
