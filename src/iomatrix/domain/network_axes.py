"""The axes of a disk served over the network (issues 34, 35): the iSCSI target's LUN, each
protocol's client, the round-trip time, the client count and librbd's cache and image. Registered
after the local axes by :mod:`iomatrix.domain.axes`; each protocol's house
(:mod:`iomatrix.protocols`) names its client axis."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

from iomatrix import domain
from iomatrix.domain import NA, SafetyLevel, clients, rtt
from iomatrix.domain.axis_model import (
    ISCSI,
    KERNEL_CLIENT,
    KRBD,
    NFS,
    RBD,
    Axis,
    Layer,
    Rule,
    RuleContext,
    ToolOption,
)
from iomatrix.domain.spellings import PROTOCOL_LOOKUP
from iomatrix.protocols import ceph
from iomatrix.protocols.iscsi import LUN_WRITE_CACHE_RISK as LUN_WRITE_CACHE_RISK

# ----------------------------------------------------------------------- shared storage (issue 34)
# What decides a disk served over the network: the iSCSI target's LUN (what backs it, its write
# cache), the client QEMU reaches the server with, and the network's round-trip time. The LUN's axes
# are read by the iSCSI server (backing/iscsi.py, NetworkServer.new_disk) and set nothing on QEMU;
# the client axes choose the protocol node (qemu_block). A local backing keeps every one at its
# default, as _qcow2_only does for another format. docs/shared-storage.md has what each does and
# what was measured.


class LunType(StrEnum):
    """What backs an iSCSI LUN in the target: the article's IET nullio/fileio/blockio as tgt's
    backing stores."""

    NULL = (
        "null"  # tgt bs-type null: reads return zeroes, writes are dropped (the protocol's ceiling)
    )
    FILEIO = "fileio"  # tgt bs-type rdwr: a file through the target host's page cache
    BLOCKIO = "blockio"  # tgt bs-type rdwr with bsoflags direct: the file opened O_DIRECT


def _protocol(ctx: RuleContext) -> str | None:
    return ctx.backing.protocol if ctx.backing is not None else None


def _only_on(protocol: str, axis: str, default: str) -> Rule:
    """An axis of one protocol's server or client: any other backing keeps its default (a local
    backing runs no server and no network client)."""

    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if ctx.backing is None or values[axis] == default:
            return None  # no backing facts (a snippet): the user's storage is whatever they say
        mine = _protocol(ctx)
        if mine != protocol:
            on = f"a {mine} backing" if mine else "a local backing"
            return f"{axis} applies to {protocol} backings only; {ctx.backing_label} is {on}"
        return None

    return Rule((axis,), check)


def _null_lun_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["lun_type"] != LunType.NULL:
        return None
    if values.get("format", NA) not in (NA, domain.Format.RAW):
        return (
            "a null LUN stores nothing (writes are dropped, reads return zeroes): "
            f"format={values['format']} "
            "could not read its own metadata back; the null LUN runs raw only"
        )
    if values.get("lun_write_cache", "off") != "off":
        return (
            "a null LUN stores nothing, so it has no write cache to turn on "
            "(lun_write_cache=off only)"
        )
    return None


def _kernel_client_rule(axis: str, kernel_value: str = KERNEL_CLIENT) -> Rule:
    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if (
            values[axis] != kernel_value
            or ctx.backing is None
            or ctx.backing.kernel_client_missing is None
        ):
            return None
        missing = ctx.backing.kernel_client_missing
        return f"{axis}={kernel_value} needs the host's kernel client: {missing}"

    return Rule((axis,), check)


def _target_side(
    axis: str, default: str, what: Callable[[str], str]
) -> Mapping[str, Callable[[str], ToolOption]]:
    """A setting of the iSCSI target, not of the VM's disk: no VM tool sets it; the tgt snippet
    (targets.conf) carries it, and the VM tools' snippets say so."""

    def spell(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        if value == LunType.NULL:
            return ToolOption(
                unavailable="a null LUN stores nothing (writes are dropped): it measures the "
                "protocol's ceiling and is no configuration to deploy"
            )
        return ToolOption(
            note=f"{axis}={value} is set on the iSCSI target, not on the VM: {what(value)} (see "
            "the tgt targets.conf snippet)"
        )

    return {t: spell for t in ("libvirt", "proxmox", "virt-install", "nova")}


def _lun_type_words(value: str) -> str:
    return {
        "fileio": "tgt bs-type rdwr",
        "blockio": "tgt bs-type rdwr with bsoflags direct",
        "null": "tgt bs-type null",
    }[value]


def _lun_write_cache_risk(value: str) -> SafetyLevel | None:
    # With the LUN's write cache on, tgt acknowledges a write from the target host's page cache; the
    # initiator's SYNCHRONIZE CACHE and FUA writes still reach its disk (tgt usr/bs_rdwr.c:
    # fdatasync for both), and QEMU's iscsi driver sends SYNCHRONIZE CACHE on every guest flush
    # (block/iscsi.c iscsi_co_flush). So what a target power loss can lose is what the guest has not
    # flushed: a disk's volatile cache, no worse (a target that acknowledges SYNCHRONIZE CACHE
    # without syncing is worse, and is what LUN_WRITE_CACHE_RISK warns of).
    return SafetyLevel.LIKE_A_DISK_CACHE if value == "on" else None


def _rtt_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["rtt"] == "0" or ctx.backing is None:
        return None
    protocol = _protocol(ctx)
    if protocol is None:
        return (
            "rtt emulates the network between a disk's client and its storage server; "
            f"{ctx.backing_label} is "
            "a local backing"
        )
    # (the protocol registry's lookup: this module cannot import it)
    network = PROTOCOL_LOOKUP[0](protocol)
    if network is None or network.measures_rtt:
        return None
    # a protocol without its own sentence is refused too: a cell at rtt ≠ 0 that no relay delayed
    # would claim a round trip it never had
    return network.rtt_unavailable or (
        f"rtt is emulated by a relay between client and server; {ctx.backing_label}'s client "
        "does not go through it"
    )


def _rtt_tool(value: str) -> ToolOption:
    if value == "0":
        return ToolOption()
    return ToolOption(
        note=f"rtt={value} was the network's emulated round-trip time when this was measured, not "
        "a setting: your own network's round trip decides what you get"
    )


LUN_TYPE = Axis(
    "lun_type",
    "what backs the iSCSI LUN in the target: nothing (null: the protocol's ceiling), a file "
    "through the "
    "target's page cache (fileio: tgt rdwr) or a file opened O_DIRECT (blockio: tgt rdwr, bsoflags "
    "direct)",
    tuple(LunType),
    LunType.FILEIO,
    (LunType.FILEIO,),
    frozenset({Layer.IMAGE}),
    short="lun",
    rules=(_only_on(ISCSI, "lun_type", LunType.FILEIO), Rule(("lun_type",), _null_lun_rule)),
    simpler=(LunType.FILEIO, LunType.BLOCKIO, LunType.NULL),
    # A null LUN keeps nothing: "acknowledged writes survive" is false of it by construction, so no
    # answer that requires it (the safe default) can be a null LUN.
    risk=lambda v: SafetyLevel.UNSAFE if v == LunType.NULL else None,
    tools=_target_side("lun_type", LunType.FILEIO, _lun_type_words),
)
LUN_WRITE_CACHE = Axis(
    "lun_write_cache",
    "the iSCSI LUN's write cache in the target (SCSI caching mode page 8, WCE): on, writes are "
    "acknowledged from the target's memory; off, the target syncs each write (tgt's own default is "
    "on)",
    ("off", "on"),
    "off",
    ("off",),
    frozenset({Layer.IMAGE}),
    short="lun_wc",
    rules=(_only_on(ISCSI, "lun_write_cache", "off"),),
    simpler=("off", "on"),
    risk=_lun_write_cache_risk,
    tools=_target_side("lun_write_cache", "off", lambda v: f"targets.conf write-cache {v}"),
)
INITIATOR = Axis(
    "initiator",
    "the iSCSI initiator QEMU reaches the LUN with: its own (libiscsi, Proxmox 'iscsidirect') or "
    "the "
    "host kernel's (open-iscsi: the LUN is a /dev/sdX block device)",
    ("libiscsi", KERNEL_CLIENT),
    "libiscsi",
    ("libiscsi",),
    frozenset({Layer.IMAGE}),
    rules=(_only_on(ISCSI, "initiator", "libiscsi"), _kernel_client_rule("initiator")),
    simpler=("libiscsi", KERNEL_CLIENT),
    # The disk's type itself (libvirt network vs block, Proxmox iscsidirect vs iscsi): the tool
    # modules of iomatrix.vmconfig.
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
NFS_CLIENT = Axis(
    "nfs_client",
    "the NFS client QEMU reaches an image on NFS with: its own (libnfs, nfs:// URLs) or the host "
    "kernel's mount (the image is a file under the mount point)",
    ("libnfs", KERNEL_CLIENT),
    "libnfs",
    ("libnfs",),
    frozenset({Layer.IMAGE}),
    short=NFS,
    rules=(_only_on(NFS, "nfs_client", "libnfs"), _kernel_client_rule("nfs_client")),
    simpler=("libnfs", KERNEL_CLIENT),
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
RTT = Axis(
    "rtt",
    "the network round-trip time emulated between the disk's client and its storage server (0: the "
    "direct "
    "path; e.g. 0.5ms, 2ms, 500us)",
    ("0", "0.5ms", "1ms", "2ms", "5ms"),
    "0",
    ("0",),
    frozenset({Layer.IMAGE}),
    rules=(Rule(("rtt",), _rtt_rule),),
    simpler=("0",),
    check_value=rtt.rtt_problem,
    tools={t: _rtt_tool for t in ("libvirt", "proxmox", "virt-install", "nova")},
)


def _clients_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    return clients.prune_reason(
        values["clients"],
        ctx.backing is not None,
        _protocol(ctx),
        ctx.backing_label,
        ctx.backing.client_hosts if ctx.backing is not None else 0,
    )


CLIENTS = Axis(
    "clients",
    "how many clients run the workload at once against one shared backing, each on a disk of its "
    "own "
    "with its own export and fio, started together (1: one client alone)",
    clients.VALUES,
    "1",
    ("1",),
    frozenset({Layer.FRONTEND}),
    rules=(Rule(("clients",), _clients_rule),),
    simpler=("1",),
    check_value=clients.value_error,
    tools={
        t: (lambda v: ToolOption(note=clients.tool_note(v)))
        for t in ("libvirt", "proxmox", "virt-install", "nova")
    },
)


# ---------------------------------------------------------------------------- Ceph RBD (issue 35)
# librbd's cache, written into the per-disk ceph.conf's client section by the RBD backing
# (backing/rbd.py) and read by QEMU's rbd driver through conf=; the client (QEMU's librbd or the
# kernel's krbd); the image's object size (rbd create --object-size). Defaults are Ceph 16's
# (`ceph-conf -c /dev/null --show-config-value`: rbd_cache true, rbd_cache_policy writearound,
# rbd_cache_writethrough_until_flush true, rbd_default_order 22 = 4M).
def _rbd_cache_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    # QEMU and krbd decide librbd's cache over ceph.conf: protocols.ceph says when a cell's setting
    # is lost
    return ceph.cache_rule_reason(values, _protocol(ctx))


def _ceph_client_tool(axis: str, default: str) -> Mapping[str, Callable[[str], ToolOption]]:
    """A librbd setting of the client host's ceph.conf ([client] section), not of the VM's disk
    definition."""

    def spell(value: str) -> ToolOption:
        return (
            ToolOption()
            if value == default
            else ToolOption(note=ceph.client_setting_note(axis, value))
        )

    return {t: spell for t in ("libvirt", "proxmox", "virt-install", "nova")}


# The three cache axes are written into the per-disk ceph.conf's [client.NAME] section
# (backing/rbd.py); a cell that leaves one at "-" or at its default writes nothing, so Ceph's own
# default applies, as on a stock client.
RBD_CACHE = Axis(
    "rbd_cache",
    "librbd's client-side cache (ceph.conf rbd cache); QEMU sets it from its cache mode (off with "
    "cache=none/directsync, on otherwise), so cells where the two disagree are pruned",
    ("on", "off"),
    "on",
    ("on",),
    frozenset({Layer.IMAGE}),
    rules=(
        _only_on(RBD, "rbd_cache", "on"),
        Rule(("rbd_cache", "cache", "rbd_client", *ceph.CACHE_AXES[1:]), _rbd_cache_rule),
    ),
    simpler=("on", "off"),
    tools=_ceph_client_tool("rbd_cache", "on"),
)
RBD_CACHE_POLICY = Axis(
    "rbd_cache_policy",
    "what librbd's cache does with writes (ceph.conf rbd cache policy): writearound (Ceph's "
    "default: writes are sent to the OSDs at once but acknowledged while in flight, up to rbd "
    "cache max dirty; "
    "reads are cached), writeback (writes are held in the client's memory "
    "until a flush or the dirty limit), writethrough (every write waits for the OSDs)",
    ("writearound", "writeback", "writethrough"),
    "writearound",
    ("writearound",),
    frozenset({Layer.IMAGE}),
    short="rbd_policy",
    rules=(_only_on(RBD, "rbd_cache_policy", "writearound"),),
    simpler=("writearound", "writethrough", "writeback"),
    # writeback holds acknowledged writes in the client until the guest flushes, and writearound
    # acknowledges a write while it is still in flight to the OSDs (librbd's
    # WriteAroundObjectDispatch "completes it back to the invoker"): either loses unflushed writes
    # on a client crash, like a disk's volatile cache; flushes are honoured
    risk=lambda v: SafetyLevel.LIKE_A_DISK_CACHE if v in ("writeback", "writearound") else None,
    tools=_ceph_client_tool("rbd_cache_policy", "writearound"),
)
RBD_WRITETHROUGH_UNTIL_FLUSH = Axis(
    "rbd_cache_writethrough_until_flush",
    "whether librbd's cache stays writethrough until the guest's first flush "
    "(ceph.conf rbd cache writethrough until flush; Ceph's default on): a workload that never "
    "flushes never gets "
    "the writeback cache, whatever QEMU's cache mode says",
    ("on", "off"),
    "on",
    ("on",),
    frozenset({Layer.IMAGE}),
    short="rbd_wt_until_flush",
    rules=(_only_on(RBD, "rbd_cache_writethrough_until_flush", "on"),),
    simpler=("on", "off"),
    tools=_ceph_client_tool("rbd_cache_writethrough_until_flush", "on"),
)
# krbd maps the image as a block device on the host: the kernel's page cache and QEMU's aio apply
# there, not librbd's cache; this host has no rbd module (backing.rbd.probe_kernel_client), so its
# cells are pruned with the reason.
RBD_CLIENT = Axis(
    "rbd_client",
    "the Ceph client QEMU reaches the image with: its own (librbd, driver=rbd) or the host "
    "kernel's "
    "(krbd: the image mapped as /dev/rbdN, Proxmox 'krbd 1')",
    ("librbd", KRBD),
    "librbd",
    ("librbd",),
    frozenset({Layer.IMAGE}),
    rules=(_only_on(RBD, "rbd_client", "librbd"), _kernel_client_rule("rbd_client", KRBD)),
    simpler=("librbd", KRBD),
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
# The object size is fixed when the image is created (rbd create --object-size): larger objects mean
# fewer, larger OSD operations for sequential I/O; the default 4M is what almost every cluster runs.
RBD_OBJECT_SIZE = Axis(
    "rbd_object_size",
    "the RBD image's object size (rbd create --object-size; Ceph's default 4M): the unit the "
    "image is striped over the OSDs in",
    ceph.OBJECT_SIZES,
    "4M",
    ("4M",),
    frozenset({Layer.IMAGE}),
    short="rbd_obj",
    rules=(
        _only_on(RBD, "rbd_object_size", "4M"),
        Rule(
            ("format",),
            lambda values, ctx: ceph.format_reason(
                values.get("format", NA), _protocol(ctx), values.get("preallocation", NA)
            ),
        ),
    ),
    simpler=ceph.OBJECT_SIZES,
    check_value=ceph.object_size_problem,
    tools=_ceph_client_tool("rbd_object_size", "4M"),
)
RBD_AXES = (RBD_CACHE, RBD_CACHE_POLICY, RBD_WRITETHROUGH_UNTIL_FLUSH, RBD_CLIENT, RBD_OBJECT_SIZE)
NETWORK_AXES = (LUN_TYPE, LUN_WRITE_CACHE, INITIATOR, NFS_CLIENT, RTT, CLIENTS, *RBD_AXES)
