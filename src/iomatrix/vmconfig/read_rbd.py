"""Reading a Ceph RBD image back from a VM's configuration (``--current``, issue 35): QEMU's
rbd: filename (with the librbd cache options it gives), the /dev/rbd link of the kernel's krbd,
libvirt's <source protocol='rbd'>, QEMU's driver=rbd node and Proxmox's rbd volumes (krbd 0|1).
Ceph RBD's house (:mod:`iomatrix.protocols.rbd`) names this module's READER; pure parsers.

And what a Ceph RBD disk sets beside the VM's own configuration (issue 35): ceph.conf's [client]
lines for librbd's cache as measured or as an answer recommends them, the same settings kept in the
image's metadata (`rbd config image set`), `rbd create` with the image's object size, each with its
note, and Nova's rbd image backend: the snippets the house names (``extra_snippets``,
``nova_snippet``, ``answer_snippet``), imported on use; pure writers."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import replace

from iomatrix.domain import CacheMode, Format, axes
from iomatrix.protocol_registry import protocol
from iomatrix.protocols import rbd
from iomatrix.protocols.place import NetworkPlace
from iomatrix.protocols.rbd import KRBD, RBD_TOOL, ceph_value
from iomatrix.vmconfig.config import DEFAULT_SIZE_GIB, DiskConfig, Snippet, _not_available
from iomatrix.vmconfig.network import DiskReader, NetworkDiskRead
from iomatrix.vmconfig.nova import (
    NOVA_CACHE_KEY,
    NOVA_IMAGE_FILE_KEYS,
    NOVA_IMAGE_PROPERTY_PREFIX,
    image_property_line,
)
from iomatrix.vmconfig.reading import _bad, _value

NAME = rbd.NAME

# An RBD image as libvirt and the rbd tool name it: POOL/IMAGE, or POOL/NAMESPACE/IMAGE, with an
# optional @SNAP.
RBD_NAME = re.compile(r"^([^/@:]+)/(?:([^/@:]+)/)?([^/@:]+)(?:@([^/@:]+))?$")


def rbd_url(name: str) -> str:
    """An RBD image as QEMU's -drive names it (rbd:POOL/IMAGE), the form the results and snippets
    show."""
    return f"rbd:{name}"


# An rbd storage's volume: vm-VMID-disk-N, base-VMID-disk-N (a template), a linked clone base/disk
# (RBDPlugin parse_volname), also the volume name of an LVM or ZFS storage.
PROXMOX_RBD_VOLUME = re.compile(r"^(?:(?:base|vm)-\d+-[\w.-]+/)?(?:base|vm)-\d+-[\w.-]+$")

RBD_FORMS = "rbd:POOL/IMAGE[:id=USER][:conf=FILE]"

# udev's link of an image the kernel's krbd mapped (ceph's udev/50-rbd.rules:
# /dev/rbd/POOL[/NAMESPACE]/IMAGE).
BY_RBD = re.compile(r"^/dev/rbd/([^/]+)/(?:([^/]+)/)?([^/@]+)(?:@[^/]+)?$")

# The Ceph options of a QEMU rbd: filename that the rbd axes name (block/rbd.c passes them to
# librados as they are): rbd_cache is not among them, as QEMU sets it from its own cache mode
# (`RbdReader.cache_note`).
RBD_FILENAME_AXES = ("rbd_cache_policy", "rbd_cache_writethrough_until_flush")

CEPH_TRUE, CEPH_FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


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
        NAME,
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


class RbdReader(DiskReader):
    forms = RBD_FORMS

    def url(self, url: str, where: str) -> NetworkDiskRead | None:
        return read_rbd_filename(url, where) if url.startswith("rbd:") else None

    def device(self, dev: str) -> NetworkDiskRead | None:
        """udev's /dev/rbd/POOL/IMAGE link of the image the kernel's krbd mapped."""
        if m := BY_RBD.match(dev):
            pool, namespace, image = m.groups()
            name = "/".join(filter(None, (pool, namespace, image)))
            return _rbd_read(name, f" ({dev})", kernel=True)
        return None

    def libvirt(
        self,
        source: Mapping[str, str],
        hosts: list[Mapping[str, str]],
        dev: str,
        username: str | None,
    ) -> NetworkDiskRead:
        """The monitors may be left to ceph.conf: <host> is optional."""
        name = _rbd_name(source.get("name", ""), f"disk {dev} source name")
        monitors = ", ".join(f"{h['name']}:{h.get('port', '6789')}" for h in hosts if h.get("name"))
        how = "".join(
            (
                f", monitors {monitors}" if monitors else ", monitors from ceph.conf",
                f", user {username}" if username else "",
            )
        )
        return _rbd_read(name, how)

    def qemu_node(self, node: Mapping[str, str]) -> NetworkDiskRead:
        return _rbd_node(node)

    def proxmox(
        self, kind: str, sid: str, volname: str, props: Mapping[str, str]
    ) -> NetworkDiskRead | None:
        return _proxmox_rbd(sid, volname, props)

    def proxmox_guess(
        self, sid: str, volname: str, storage_known: bool
    ) -> tuple[NetworkDiskRead | None, str | None] | None:
        if storage_known or not PROXMOX_RBD_VOLUME.match(volname):
            return None
        return None, (
            f"storage {sid} may be LVM, ZFS or Ceph RBD: qm config does not say; put a copy of "
            "/etc/pve/storage.cfg beside the file, named storage.cfg, to read an RBD one"
        )

    def cache_note(self, network: NetworkDiskRead, cache: str | None) -> str | None:
        """QEMU turns librbd's cache off itself for cache=none/directsync (block/rbd.c
        qemu_rbd_connect, over ceph.conf): the cell keeps rbd_cache at its default, as the rbd
        axes' rule does."""
        if network.kernel_client or cache not in (CacheMode.NONE, CacheMode.DIRECTSYNC):
            return None
        return (
            f"; QEMU turns librbd's cache off for cache={cache} (block/rbd.c), whatever "
            "ceph.conf says"
        )


READER = RbdReader()


# ---------------------------------------------------------------------------------------------
# the storage side's snippets: ceph.conf, rbd config, rbd create, Nova
# ---------------------------------------------------------------------------------------------

# The rbd axes (protocols/rbd.py), whose defaults are Ceph's own: what a cell that leaves one out
# was measured with, and what a [client] section without the line gives.
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
        lines.append(
            f"rbd config image set --id {place.ceph_user} {rbd.rbd_name(place)} {axis} {value}"
        )
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
        f"{rbd.rbd_name(place)}"
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


def ceph_conf_snippet(cfg: DiskConfig) -> Snippet:
    """ceph.conf's [client] lines for librbd's cache as measured (rbd_cache, its policy,
    writethrough until flush); none for an image the kernel maps (krbd has no librbd cache: the rbd
    axes' rule keeps them at Ceph's defaults)."""
    title = "ceph.conf [client] (librbd's cache, on each client host)"
    if not cfg.userspace_client:
        return Snippet(
            "ceph",
            title,
            None,
            "none needed: krbd (the kernel's client) has no librbd cache; the host's "
            "page cache serves the mapped image as QEMU's cache mode says",
            "ini",
        )
    return Snippet(
        "ceph",
        title,
        ceph_client_conf(cfg.values),
        "; ".join(ceph_client_notes(cfg.values)),
        "ini",
        summary=f"ceph.conf [client]: {ceph_client_summary(cfg.values)}",
    )


def answer_ceph_snippet(s: Snippet, cfg: DiskConfig, varied: Collection[str]) -> Snippet:
    """The storage snippet an answer's first screen shows beside the VM tool's (issue 49: it sets
    what the answer recommends; Ceph RBD's `answer_snippet`): ceph.conf's [client] section with only
    the options the answer sets (ceph_client_recommended; the whole section in --detail), no text
    when it sets none; any other storage snippet as it is."""
    if s.tool != "ceph" or not cfg.userspace_client:
        return s
    text = ceph_client_recommended(cfg.values, varied)
    if text is None:
        return replace(
            s,
            text=None,
            summary="ceph.conf [client]: nothing to set, the answer is Ceph's defaults",
        )
    return replace(
        s,
        title="ceph.conf [client] (what the answer sets, on each client host)",
        text=text,
        summary="ceph.conf [client]: " + ", ".join(text.splitlines()[1:]),
    )


def rbd_config_snippet(cfg: DiskConfig) -> Snippet:
    """The same librbd cache settings for the one image (`rbd config image set`); none for an image
    the kernel maps."""
    title = "rbd config image set (librbd's cache settings for this image only)"
    if not cfg.userspace_client:
        return Snippet(
            RBD_TOOL, title, None, "none needed: krbd (the kernel's client) has no librbd cache"
        )
    place = NetworkPlace()
    return Snippet(
        RBD_TOOL,
        title,
        rbd_image_config(cfg.values, place),
        RBD_IMAGE_CONFIG_NOTE.format(user=place.ceph_user),
    )


def rbd_create_snippet(cfg: DiskConfig, size_gib: int = DEFAULT_SIZE_GIB) -> Snippet:
    """The RBD image with the object size it was measured on (rbd_object_size): set when it is
    created. A qcow2 image on RBD that QEMU opens with librbd is created by qemu-img instead (its
    snippet gives the object size); one the kernel maps is an RBD image first, whatever is written
    on it."""
    title = "rbd create (the image, with its object size)"
    if cfg.format != Format.RAW and cfg.userspace_client:
        return Snippet(
            RBD_TOOL,
            title,
            None,
            "none needed: qemu-img create makes the RBD image of a qcow2 disk itself, its object "
            "size set by rbd_default_order in the rbd: filename; " + rbd_create_note(cfg.values),
        )
    return Snippet(
        RBD_TOOL,
        title,
        rbd_create(cfg.values, NetworkPlace(), size_gib),
        rbd_create_note(cfg.values),
    )


def nova_rbd_snippet(cfg: DiskConfig, title: str) -> Snippet:
    """Nova's rbd image backend: every instance disk of the compute node an RBD image, opened by
    librbd as a libvirt network disk (nova.conf [libvirt] images_type = rbd and its pool, conf, user
    and secret; the cache mode of network disks in disk_cachemodes)."""
    unavailable = []
    if not cfg.userspace_client:
        unavailable.append(
            "Nova opens instance disks on Ceph with librbd (libvirt network disks); it "
            "has no krbd mode"
        )
    if cfg.format != Format.RAW:
        unavailable.append(
            "Nova's rbd image backend keeps raw images (a qcow2 Glance image is converted to raw)"
        )
    opts, notes, refused = axes.tool_options(
        cfg.axis_values(), "nova", skip_keys=NOVA_IMAGE_FILE_KEYS
    )
    if unavailable or refused:
        return Snippet("nova", title, None, _not_available([*unavailable, *refused]), "ini")
    place = NetworkPlace()
    props = [kv for kv in opts if kv[0].startswith(NOVA_IMAGE_PROPERTY_PREFIX)]
    conf = sorted((kv for kv in opts if kv not in props), key=lambda kv: kv[0] != NOVA_CACHE_KEY)
    own = protocol(cfg.protocol).nova_conf(place) if cfg.protocol is not None else []
    lines = [
        "[libvirt]",
        *(f"{k} = network={v}" if k == NOVA_CACHE_KEY else f"{k} = {v}" for k, v in conf),
        *(f"{k} = {v}" for k, v in own),
    ]
    if props:
        lines.append(image_property_line(props))
    notes += [
        "images_type = rbd puts every instance disk of the compute node in pool "
        f"{rbd.pool_of(place)} (volumes are "
        "Cinder's RBD driver's); rbd_secret_uuid names the libvirt secret holding the "
        "cephx key, defined on "
        "each compute node as for the libvirt snippet; librbd's cache is the ceph.conf "
        "snippet's; images Nova "
        "creates take [client] rbd default order for their object size"
    ]
    return Snippet("nova", title, "\n".join(lines), "; ".join(notes), "ini")
