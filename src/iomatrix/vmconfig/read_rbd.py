"""Reading a Ceph RBD image back from a VM's configuration (``--current``, issue 35): QEMU's
rbd: filename (with the librbd cache options it gives), the /dev/rbd link of the kernel's krbd,
libvirt's <source protocol='rbd'>, QEMU's driver=rbd node and Proxmox's rbd volumes (krbd 0|1).
Ceph RBD's house (:mod:`iomatrix.protocols.rbd`) names this module's READER; pure parsers."""

from __future__ import annotations

import re
from collections.abc import Mapping

from iomatrix.domain import CacheMode, axes
from iomatrix.protocols import rbd
from iomatrix.protocols.rbd import KRBD
from iomatrix.vmconfig.network import DiskReader, NetworkDiskRead
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
