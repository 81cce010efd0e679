"""--current for disks served over the network (issue 34): an iSCSI LUN or an image on NFS, as libvirt, QEMU and
Proxmox write them, read back as the disk's protocol, its address (a URL) and the client axes (``initiator``,
``nfs_client``). Pure parsers: nothing here connects to a server.

What they read:

* libvirt: ``<disk type='network'>`` with ``<source protocol='iscsi' name='IQN/LUN'>`` or ``protocol='nfs'
  name='/export/file'`` and its ``<host name= port=>`` (QEMU's own client); a ``type='block'`` disk whose source is
  udev's ``/dev/disk/by-path/ip-HOST:PORT-iscsi-IQN-lun-N`` (the kernel's initiator);
* QEMU: ``-drive file=iscsi://HOST[:PORT]/IQN/LUN`` or ``file=nfs://HOST/PATH``, ``-blockdev`` whose protocol node
  is ``driver=iscsi`` (portal, target, lun) or ``driver=nfs`` (server.host, path), as the format node's ``file.``
  options or as the first -blockdev itself;
* Proxmox: a volume on an ``iscsidirect`` storage (``STORE:lunN``), an ``iscsi`` one (``STORE:0.0.N.scsi-WWID``),
  and with a storage.cfg beside the ``qm config`` file, an ``nfs`` one (which qm config alone cannot tell from a
  directory storage).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from iomatrix.current.common import _bad
from iomatrix.domain.axes import ISCSI, KERNEL_CLIENT, NFS

ISCSI_PORT = 3260
# iscsi://[USER[%PASSWORD]@]HOST[:PORT]/IQN/LUN (QEMU's block/iscsi.c, libiscsi's URL form)
ISCSI_URL = re.compile(r"^iscsi://(?:[^@/]*@)?(\[[^\]]+\]|[^:/]+)(?::(\d+))?/([^/]+)/(\d+)$")
# nfs://HOST[:PORT]/PATH[?OPTIONS] (libnfs's URL form, QEMU's block/nfs.c)
NFS_URL = re.compile(r"^nfs://([^/:?]+)(?::\d+)?(/[^?]*)(?:\?.*)?$")
# udev's link of a LUN the kernel's initiator logged in to (60-persistent-storage.rules).
BY_PATH_ISCSI = re.compile(r"^/dev/disk/by-path/ip-(.+):(\d+)-iscsi-(.+)-lun-(\d+)(?:-part\d+)?$")
# Proxmox volume names on iSCSI storages (pve-storage ISCSIDirectPlugin / ISCSIPlugin parse_volname).
PROXMOX_ISCSIDIRECT_VOLUME = re.compile(r"^lun(\d+)$")
PROXMOX_ISCSI_VOLUME = re.compile(r"^\d+\.\d+\.(\d+)\.[^/\s]+$")
ISCSI_FORMS = "iscsi://HOST[:PORT]/IQN/LUN"
NFS_FORMS = "nfs://HOST/EXPORT/PATH/IMAGE"


@dataclass
class NetworkDiskRead:
    """What a configuration says of a network disk: its protocol, its URL where the configuration gives the
    address, the client axes away from their default, and how it was read (one line for the notes)."""

    protocol: str
    url: str | None
    axes: dict[str, str] = field(default_factory=dict)
    note: str = ""


def iscsi_url(host: str, port: int | str | None, iqn: str, lun: int | str) -> str:
    return f"iscsi://{host}:{port or ISCSI_PORT}/{iqn}/{lun}"


def _checked_lun(lun: str, where: str) -> str:
    if not lun.isdigit() or int(lun) > 16383:  # SAM's flat LUN space (14 bits)
        raise _bad(where, lun, "a LUN number 0–16383")
    return str(int(lun))


def read_url(url: str, where: str) -> NetworkDiskRead | None:
    """An iscsi:// or nfs:// URL (QEMU's -drive file=, qemu-img): the disk it names; None for another scheme; a
    one-line error for a malformed one."""
    if url.startswith("iscsi://"):
        m = ISCSI_URL.match(url)
        if m is None:
            raise _bad(where, url, ISCSI_FORMS)
        host, port, iqn, lun = m.groups()
        return NetworkDiskRead(ISCSI, iscsi_url(host, port, iqn, _checked_lun(lun, where)),
                               note=f"an iSCSI LUN reached by QEMU's own initiator (libiscsi): {url}")
    if url.startswith("nfs://"):
        m = NFS_URL.match(url)
        if m is None or m.group(2) in ("", "/"):
            raise _bad(where, url, NFS_FORMS)
        return NetworkDiskRead(NFS, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}")
    if re.match(r"^[a-z][a-z0-9+]*://", url):
        scheme = url.split(":", 1)[0]
        raise _bad(where, url, f"a file, a device, {ISCSI_FORMS} or {NFS_FORMS} (iomatrix does not measure "
                               f"{scheme} disks)")
    return None


def read_by_path(dev: str) -> NetworkDiskRead | None:
    """A block device named by udev's iSCSI by-path link: the LUN the host kernel's initiator logged in to."""
    m = BY_PATH_ISCSI.match(dev)
    if m is None:
        return None
    host, port, iqn, lun = m.groups()
    return NetworkDiskRead(ISCSI, iscsi_url(host, port, iqn, lun), {"initiator": KERNEL_CLIENT},
                           f"an iSCSI LUN the host kernel's initiator logged in to ({dev})")


def read_libvirt_source(source: Mapping[str, str], hosts: list[Mapping[str, str]], dev: str) -> NetworkDiskRead:
    """A libvirt <disk type='network'>'s <source> attributes and its <host> elements."""
    protocol = source.get("protocol")
    if protocol not in (ISCSI, NFS):
        raise _bad(f"disk {dev} source protocol", protocol or "(none)",
                   "iscsi or nfs (iomatrix measures no other network disk)")
    name = source.get("name", "")
    if not hosts or not hosts[0].get("name"):
        raise _bad(f"disk {dev} source host", "(none)", "<host name='SERVER' port='PORT'/> inside <source>")
    host, port = hosts[0]["name"], hosts[0].get("port")
    if protocol == ISCSI:
        iqn, _, lun = name.rpartition("/")
        if not iqn:  # libvirt: "IQN/LUN"; a name without "/LUN" is LUN 0
            iqn, lun = name, "0"
        if not iqn:
            raise _bad(f"disk {dev} source name", name or "(none)", "IQN/LUN, e.g. iqn.2024-01.com.example:t/1")
        url = iscsi_url(host, port, iqn, _checked_lun(lun, f"disk {dev} source name LUN"))
        return NetworkDiskRead(ISCSI, url, note=f"an iSCSI LUN reached by QEMU's own initiator (libiscsi): {url}")
    if not name.startswith("/"):
        raise _bad(f"disk {dev} source name", name or "(none)", "the image's path on the export, e.g. "
                                                                 "/srv/nfs/vm/disk.qcow2")
    url = f"nfs://{host}{name}"
    return NetworkDiskRead(NFS, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}")


def read_qemu_node(node: Mapping[str, str]) -> NetworkDiskRead | None:
    """A -blockdev's protocol node (``file.``-prefixed under a format node, or bare when the first -blockdev is the
    protocol node) or a -drive's ``file=`` URL; None where it is a local file or device."""
    for prefix in ("file.", ""):
        driver = node.get(f"{prefix}driver")
        if driver == ISCSI:
            portal, target, lun = (node.get(f"{prefix}{k}") for k in ("portal", "target", "lun"))
            if not portal or not target:
                raise _bad("-blockdev driver=iscsi", f"portal={portal or ''},target={target or ''}",
                           "portal=HOST[:PORT] and target=IQN (and lun=N)")
            host, _, port = portal.rpartition(":") if re.search(r":\d+$", portal) else (portal, "", "")
            url = iscsi_url(host, port or None, target, _checked_lun(lun or "0", "-blockdev lun"))
            return NetworkDiskRead(ISCSI, url, note=f"an iSCSI LUN reached by QEMU's own initiator (libiscsi): {url}")
        if driver == NFS:
            host, path = node.get(f"{prefix}server.host"), node.get(f"{prefix}path")
            if not host or not path:
                raise _bad("-blockdev driver=nfs", f"server.host={host or ''},path={path or ''}",
                           "server.host=SERVER and path=/EXPORT/IMAGE")
            url = f"nfs://{host}{path}"
            return NetworkDiskRead(NFS, url, note=f"an image on NFS reached by QEMU's own client (libnfs): {url}")
        if driver in ("host_device", "file") and (name := node.get(f"{prefix}filename")):
            return read_by_path(name)
    drive_file = node.get("file")
    if drive_file is not None:
        return read_url(drive_file, "-drive file") or read_by_path(drive_file)
    return None


# --------------------------------------------------------------------------- Proxmox storage.cfg


def parse_storage_cfg(text: str) -> dict[str, tuple[str, dict[str, str]]]:
    """/etc/pve/storage.cfg: storage id → (type, its properties). A stanza is 'TYPE: ID' then indented
    'key value' lines (PVE/Storage/Plugin.pm parse_config)."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    current: dict[str, str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            m = re.match(r"^([a-z][a-z0-9]*):\s*(\S+)\s*$", line)
            if m is None:
                raise _bad(f"storage.cfg line {n}", line, "'TYPE: ID' then indented 'key value' lines")
            current = {}
            out[m.group(2)] = (m.group(1), current)
        elif current is None:
            raise _bad(f"storage.cfg line {n}", line.strip(), "a 'TYPE: ID' line before its properties")
        else:
            key, _, value = line.strip().partition(" ")
            current[key] = value.strip()
    return out


def read_proxmox_volume(volume: str, storage: Mapping[str, tuple[str, dict[str, str]]] | None
                        ) -> tuple[NetworkDiskRead | None, str | None]:
    """(the network disk a Proxmox volume id is on, or None; a note where qm config alone cannot tell)."""
    sid, sep, volname = volume.partition(":")
    if not sep:
        return None, None
    if storage is not None and sid in storage:
        kind, props = storage[sid]
        if kind in ("iscsidirect", "iscsi"):
            m = PROXMOX_ISCSIDIRECT_VOLUME.match(volname) or PROXMOX_ISCSI_VOLUME.match(volname)
            lun = m.group(1) if m else "0"
            portal = props.get("portal", "")
            host, _, port = portal.rpartition(":") if re.search(r":\d+$", portal) else (portal, "", "")
            url = iscsi_url(host, port or None, props.get("target", "IQN"), lun) if host else None
            return _proxmox_iscsi(kind, sid, url), None
        if kind == "nfs":
            server, export = props.get("server"), props.get("export", "")
            return NetworkDiskRead(NFS, None, {"nfs_client": KERNEL_CLIENT},
                                   f"an image on the NFS storage {sid} ({server}:{export}), which Proxmox mounts with "
                                   "the host kernel's client"), None
        return None, None
    if m := PROXMOX_ISCSIDIRECT_VOLUME.match(volname):
        return _proxmox_iscsi("iscsidirect", sid, None), None
    if PROXMOX_ISCSI_VOLUME.match(volname):
        return _proxmox_iscsi("iscsi", sid, None), None
    if storage is None and "/" in volname:
        return None, (f"storage {sid} may be a directory or an NFS storage: qm config does not say; put a copy of "
                      "/etc/pve/storage.cfg beside the file, named storage.cfg, to read it")
    return None, None


def _proxmox_iscsi(kind: str, sid: str, url: str | None) -> NetworkDiskRead:
    if kind == "iscsidirect":
        return NetworkDiskRead(ISCSI, url, note=f"a LUN of the iscsidirect storage {sid}: QEMU's own initiator "
                                                "(libiscsi)")
    return NetworkDiskRead(ISCSI, url, {"initiator": KERNEL_CLIENT},
                           f"a LUN of the iscsi storage {sid}: the host kernel's initiator (open-iscsi)")
