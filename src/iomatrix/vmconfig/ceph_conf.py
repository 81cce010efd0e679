"""What a Ceph RBD disk sets beside the VM's own configuration (issue 35): ceph.conf's [client]
lines for librbd's cache as measured or as an answer recommends them, the same settings kept in the
image's metadata (`rbd config image set`), and `rbd create` with the image's object size, each with
its note. Written into snippets by :mod:`iomatrix.vmconfig.network_snippets` (the functions Ceph
RBD's house, :mod:`iomatrix.protocols.rbd`, names in ``extra_snippets``); pure writers."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from iomatrix.domain import axes
from iomatrix.protocols.place import NetworkPlace
from iomatrix.protocols.rbd import ceph_value

# The rbd axes (protocols/ceph.py), whose defaults are Ceph's own: what a cell that leaves one out
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
