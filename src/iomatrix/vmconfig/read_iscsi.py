"""Reading an iSCSI LUN back from a VM's configuration (``--current``, issue 34): its iscsi:// URL,
the by-path device of the kernel's initiator, libvirt's <source protocol='iscsi'>, QEMU's
driver=iscsi node and Proxmox's iscsi/iscsidirect volumes. iSCSI's house
(:mod:`iomatrix.protocols.iscsi`) names this module's READER; pure parsers.

And the iSCSI target's own snippets (issues 34, 49: snippets set everything the answer
recommends): the LUN as measured (``lun_type``, ``lun_write_cache``) in tgt's targets.conf
(`tgt_targets_conf`, `tgt_snippet`), for tgt's tgtadm, for the kernel's LIO target (targetcli), and
a sentence for a SAN array, whose management tool is the vendor's. Named by
:class:`iomatrix.protocols.iscsi.Iscsi`'s ``extra_snippets`` and imported on use; pure writers:
nothing runs a target."""

from __future__ import annotations

import re
from collections.abc import Mapping

from iomatrix.domain.axes import KERNEL_CLIENT
from iomatrix.protocols import iscsi
from iomatrix.protocols.iscsi import LUN_WRITE_CACHE_RISK, LunType
from iomatrix.protocols.place import ISCSI_PORT, NetworkPlace
from iomatrix.vmconfig.config import DiskConfig, Snippet, shell_command
from iomatrix.vmconfig.network import DiskReader, NetworkDiskRead, first_host
from iomatrix.vmconfig.reading import _bad

NAME = iscsi.NAME

# iscsi://[USER[%PASSWORD]@]HOST[:PORT]/IQN/LUN (QEMU's block/iscsi.c, libiscsi's URL form)
ISCSI_URL = re.compile(r"^iscsi://(?:[^@/]*@)?(\[[^\]]+\]|[^:/]+)(?::(\d+))?/([^/]+)/(\d+)$")

# udev's link of a LUN the kernel's initiator logged in to (60-persistent-storage.rules).
BY_PATH_ISCSI = re.compile(r"^/dev/disk/by-path/ip-(.+):(\d+)-iscsi-(.+)-lun-(\d+)(?:-part\d+)?$")

# Proxmox volume names on iSCSI storages (pve-storage ISCSIDirectPlugin / ISCSIPlugin
# parse_volname).
PROXMOX_ISCSIDIRECT_VOLUME = re.compile(r"^lun(\d+)$")

PROXMOX_ISCSI_VOLUME = re.compile(r"^\d+\.\d+\.(\d+)\.[^/\s]+$")

ISCSI_FORMS = "iscsi://HOST[:PORT]/IQN/LUN"


def iscsi_url(host: str, port: int | str | None, iqn: str, lun: int | str) -> str:
    return f"iscsi://{host}:{port or ISCSI_PORT}/{iqn}/{lun}"


def _checked_lun(lun: str, where: str) -> str:
    if not lun.isdigit() or int(lun) > 16383:  # SAM's flat LUN space (14 bits)
        raise _bad(where, lun, "a LUN number 0–16383")
    return str(int(lun))


def _proxmox_iscsi(kind: str, sid: str, url: str | None) -> NetworkDiskRead:
    if kind == iscsi.PROXMOX_DIRECT:
        return NetworkDiskRead(
            NAME,
            url,
            note=f"a LUN of the iscsidirect storage {sid}: QEMU's own initiator (libiscsi)",
        )
    return NetworkDiskRead(
        NAME,
        url,
        {"initiator": KERNEL_CLIENT},
        f"a LUN of the iscsi storage {sid}: the host kernel's initiator (open-iscsi)",
    )


def _libiscsi(url: str, how: str) -> NetworkDiskRead:
    return NetworkDiskRead(NAME, url, note=f"{how}: {url}")


_LIBISCSI = "an iSCSI LUN reached by QEMU's own initiator (libiscsi)"


class IscsiReader(DiskReader):
    forms = ISCSI_FORMS

    def url(self, url: str, where: str) -> NetworkDiskRead | None:
        if not url.startswith("iscsi://"):
            return None
        m = ISCSI_URL.match(url)
        if m is None:
            raise _bad(where, url, ISCSI_FORMS)
        host, port, iqn, lun = m.groups()
        return NetworkDiskRead(
            NAME,
            iscsi_url(host, port, iqn, _checked_lun(lun, where)),
            note=f"{_LIBISCSI}: {url}",
        )

    def device(self, dev: str) -> NetworkDiskRead | None:
        """udev's by-path link of the LUN the host kernel's initiator logged in to."""
        m = BY_PATH_ISCSI.match(dev)
        if m is None:
            return None
        host, port, iqn, lun = m.groups()
        return NetworkDiskRead(
            NAME,
            iscsi_url(host, port, iqn, lun),
            {"initiator": KERNEL_CLIENT},
            f"an iSCSI LUN the host kernel's initiator logged in to ({dev})",
            kernel_client=True,
        )

    def libvirt(
        self,
        source: Mapping[str, str],
        hosts: list[Mapping[str, str]],
        dev: str,
        username: str | None,
    ) -> NetworkDiskRead:
        name = source.get("name", "")
        host, port = first_host(hosts, dev)
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
        return _libiscsi(url, _LIBISCSI)

    def qemu_node(self, node: Mapping[str, str]) -> NetworkDiskRead:
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
        return _libiscsi(url, _LIBISCSI)

    def proxmox(
        self, kind: str, sid: str, volname: str, props: Mapping[str, str]
    ) -> NetworkDiskRead | None:
        m = PROXMOX_ISCSIDIRECT_VOLUME.match(volname) or PROXMOX_ISCSI_VOLUME.match(volname)
        lun = m.group(1) if m else "0"
        portal = props.get("portal", "")
        host, _, port = portal.rpartition(":") if re.search(r":\d+$", portal) else (portal, "", "")
        url = iscsi_url(host, port or None, props.get("target", "IQN"), lun) if host else None
        return _proxmox_iscsi(kind, sid, url)

    def proxmox_guess(
        self, sid: str, volname: str, storage_known: bool
    ) -> tuple[NetworkDiskRead | None, str | None] | None:
        if PROXMOX_ISCSIDIRECT_VOLUME.match(volname):
            return _proxmox_iscsi(iscsi.PROXMOX_DIRECT, sid, None), None
        if PROXMOX_ISCSI_VOLUME.match(volname):
            return _proxmox_iscsi(iscsi.PROXMOX_KERNEL, sid, None), None
        return None


READER = IscsiReader()


# ---------------------------------------------------------------------------------------------
# the target's snippets
# ---------------------------------------------------------------------------------------------

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


# tgt-admin's own update for `write-cache off` (/usr/sbin/tgt-admin, fujita/tgt scripts/tgt-admin):
# the caching mode page (8) with its WCE bit clear. A new LUN's write cache is on (tgt's default),
# so `on` needs no line.
TGT_WRITE_CACHE_OFF = (
    "mode_page=8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0"
)
TGT_TID = 1  # the target's id in tgtd (tgt-admin numbers the targets of a file from 1)
# LIO's backstore per LUN type (targetcli-fb): fileio goes through the target host's page cache;
# block submits to a block device directly (LIO has no O_DIRECT file backstore); a ramdisk with
# nullio stores nothing.
LIO_BACKSTORE = {LunType.FILEIO: "fileio", LunType.BLOCKIO: "block", LunType.NULL: "ramdisk"}
LIO_NAME = "vm-disk"  # the backstore's name in targetcli
# a placeholder device for the block backstore (an LV, a RAID volume)
LIO_BLOCK_DEVICE = "/dev/vg0/vm-disk"


def _lun_type(values: Mapping[str, str]) -> LunType:
    return LunType(values.get("lun_type", LunType.FILEIO))


def _cache(values: Mapping[str, str]) -> str:
    return values.get("lun_write_cache", "off")


def tgtadm_lines(values: Mapping[str, str], place: NetworkPlace) -> str:
    """The tgtadm commands that make the LUN on a running tgtd, as tgt-admin runs them for the
    targets.conf snippet (tgtadm(8)): the target, its LUN with the backing store's type and open
    flags, the write cache, and the initiators let in."""
    lun_type = _lun_type(values)
    store = "/dev/null" if lun_type == LunType.NULL else place.lun_file
    head = f"tgtadm --lld iscsi --tid {TGT_TID}"
    # (long options with '=': a line continued by the shell never parts an option from its value)
    lun = f"{head} --op new --mode logicalunit --lun {place.lun} --bstype={TGT_BS_TYPE[lun_type]}"
    if lun_type in TGT_BS_OFLAGS:
        lun += f" --bsoflags={TGT_BS_OFLAGS[lun_type]}"
    lines = [
        f"{head} --op new --mode target --targetname={place.iqn}",
        f"{lun} --backing-store={store}",
    ]
    if _cache(values) == "off":
        lines.append(
            f"{head} --op update --mode logicalunit --lun {place.lun} "
            f"--params={TGT_WRITE_CACHE_OFF}"
        )
    lines.append(f"{head} --op bind --mode target --initiator-address=ALL")
    return "\n".join(shell_command(line.split()) for line in lines)


TGTADM_NOTE = (
    "the same LUN on a running tgtd without a file (lost when tgtd restarts: the "
    "targets.conf snippet keeps it); "
    "tid {tid} must be free (tgtadm --op show --mode target lists those taken); "
    "write-cache {cache}{default}; "
    "--initiator-address=ALL lets every initiator in, as tgt-admin does when a target "
    "names none: name your "
    "hosts' addresses instead"
)


def tgtadm_snippet(cfg: DiskConfig) -> Snippet:
    cache = _cache(cfg.values)
    default = (
        " is tgt's default for a new LUN: no line sets it"
        if cache == "on"
        else " is the mode_page update"
    )
    return Snippet(
        "tgt",
        "tgtadm (the same LUN on a running tgtd)",
        tgtadm_lines(cfg.values, NetworkPlace()),
        TGTADM_NOTE.format(tid=TGT_TID, cache=cache, default=default),
    )


# The widest a targetcli line is written: an answer indents its snippets by 4, and a screen may be
# 80 columns wide.
TARGETCLI_WIDTH = 76


def targetcli_lines(values: Mapping[str, str], place: NetworkPlace, size_gib: int = 32) -> str:
    """targetcli-fb commands for the LUN on the kernel's LIO target: the backstore the LUN type
    matches, its write cache (emulate_write_cache, and fileio's write_back), the target and the
    LUN."""
    lun_type, on = _lun_type(values), _cache(values) == "on"
    kind = LIO_BACKSTORE[lun_type]
    store = f"/backstores/{kind}"
    if lun_type == LunType.FILEIO:
        create = f"name={LIO_NAME} file_or_dev={place.lun_file} write_back={str(on).lower()}"
    elif lun_type == LunType.BLOCKIO:
        create = f"name={LIO_NAME} dev={LIO_BLOCK_DEVICE}"
    else:
        create = f"name={LIO_NAME} size={size_gib}G nullio=true"
    lines = [f"targetcli {store} create {create}"]
    # a block backstore reports the device's own cache: not settable
    if lun_type != LunType.BLOCKIO:
        lines.append(f"targetcli {store}/{LIO_NAME} set attribute emulate_write_cache={int(on)}")
    lines += [
        f"targetcli /iscsi create {place.iqn}",
        f"targetcli /iscsi/{place.iqn}/tpg1/luns create {store}/{LIO_NAME} lun={place.lun}",
        "targetcli saveconfig",
    ]
    # continued where wider than TARGETCLI_WIDTH: with an answer's 4-column indent, within an
    # 80-column screen
    return "\n".join(shell_command(line.split(), TARGETCLI_WIDTH) for line in lines)


def _lio_note(values: Mapping[str, str]) -> str:
    lun_type, cache = _lun_type(values), _cache(values)
    what = {
        LunType.FILEIO: "fileio: the file through the target host's page cache, as measured; "
        "write_back and "
        f"emulate_write_cache set the write cache {cache}; add size=32G to make a new file",
        LunType.BLOCKIO: "block: LIO submits to a block device directly, bypassing the target "
        "host's page cache as "
        "blockio did through O_DIRECT on a file (LIO has no O_DIRECT file backstore); it reports "
        f"the device's own write cache, which LIO cannot change: turn it {cache} on the device "
        f"(hdparm -W {int(cache == 'on')}, or the RAID controller's setting)",
        LunType.NULL: "a ramdisk with nullio=true stores nothing (the protocol's ceiling): never "
        "put a VM on it",
    }[lun_type]
    return (
        "on the target host, the kernel's LIO target (targetcli-fb; tgt's LUN measured, "
        f"LIO not): {what}; "
        "let your hosts in: targetcli /iscsi/IQN/tpg1/acls create INITIATOR-IQN; "
        f"replace {LIO_NAME} and the "
        "paths with yours"
    )


def lio_snippet(cfg: DiskConfig) -> Snippet:
    return Snippet(
        "targetcli",
        "LIO targetcli (the kernel's iSCSI target: the same LUN)",
        targetcli_lines(cfg.values, NetworkPlace()),
        _lio_note(cfg.values),
    )


def san_sentence(values: Mapping[str, str]) -> str:
    cache, lun_type = _cache(values), _lun_type(values)
    safe = (
        "keep it off unless the array protects its cache on power loss (battery or "
        "flash): its documentation "
        "says"
        if cache == "off"
        else "on is safe only where the array protects its cache on power loss (battery or "
        "flash) or the guest "
        "flushes: the array's documentation says"
    )
    return (
        f"set the LUN's write cache {cache} in the array's management tool; iomatrix "
        "measured a tgt LUN "
        f"({lun_type}) with its write cache {cache}; {safe}"
    )


def san_snippet(cfg: DiskConfig) -> Snippet:
    return Snippet("san", "a SAN array's LUN", None, san_sentence(cfg.values))


def lun_summary(values: Mapping[str, str]) -> str:
    """The LUN's settings in one line, for the answer's first screen."""
    cache, lun_type = _cache(values), _lun_type(values)
    lio = (
        f"the device's cache {cache}"
        if lun_type == LunType.BLOCKIO
        else f"emulate_write_cache={int(cache == 'on')}"
    )
    return f"LUN: {lun_type}, write cache {cache} (tgt write-cache {cache}; LIO {lio})"


def tgt_snippet(cfg: DiskConfig) -> Snippet:
    """tgt's targets.conf for the LUN the configuration was measured on (lun_type,
    lun_write_cache)."""
    return Snippet(
        "tgt",
        "tgt targets.conf (the iSCSI target's LUN: type and write cache)",
        tgt_targets_conf(cfg.values, NetworkPlace()),
        tgt_note(cfg.values),
        "conf",
        summary=lun_summary(cfg.values),
    )
