"""The iSCSI target's own snippets (issues 34, 49: snippets set everything the answer recommends):
the LUN as measured (``lun_type``, ``lun_write_cache``) in tgt's targets.conf (`tgt_targets_conf`,
`tgt_snippet`), for tgt's tgtadm, for the
kernel's LIO target (targetcli), and a sentence for a SAN array, whose management tool is the
vendor's. Named by :class:`iomatrix.protocols.iscsi.Iscsi`'s ``extra_snippets`` and imported on
use; pure writers: nothing runs a target."""

from __future__ import annotations

from collections.abc import Mapping

from iomatrix.protocols.iscsi import LUN_WRITE_CACHE_RISK, LunType
from iomatrix.protocols.place import NetworkPlace
from iomatrix.vmconfig.config import DiskConfig, Snippet, shell_command

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
