"""iSCSI: a LUN of a target (tgt, lab-started, or an existing one), reached by QEMU's libiscsi or by
the host kernel's open-iscsi (the ``initiator`` axis). Its names and addresses (portals, IQNs and
``iscsi://`` URLs, parsed and checked: pure, no socket), its spellings and its wire (the few PDUs
iomatrix speaks itself over one session: login, MODE SENSE of the caching page, NOP pings) are
here; the lab half (the backing spec, tgtd, the existing-LUN checks, the rtt relay's iSCSI side) is
:mod:`iomatrix.backing.iscsi`; what --current reads and the target snippets are
:mod:`iomatrix.vmconfig.read_iscsi`."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from iomatrix import domain
from iomatrix.domain import NA, SafetyLevel
from iomatrix.domain.axis_model import KERNEL_CLIENT, Axis, Layer, Rule, RuleContext, ToolOption
from iomatrix.domain.protocol_rules import kernel_client_rule, only_on
from iomatrix.protocols.base import CUT_TARGET_POWER, LibvirtSource, NetworkProtocol
from iomatrix.protocols.place import NetworkPlace, address_problem

NAME = "iscsi"

# ------------------------------------------------------------------ names and addresses
# RFC 3720 §3.2.6.3: "iqn." + year-month + "." + reversed domain [":" anything], "eui." + 16 hex
# digits, "naa." + 16 or 32 hex digits. Names are case-insensitive and normalised to lower case
# (stringprep).
_IQN = re.compile(
    r"iqn\.\d{4}-(0[1-9]|1[0-2])\.[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
    r"(:[a-z0-9.:_-]+)?"
)
_EUI = re.compile(r"eui\.[0-9a-f]{16}")
_NAA = re.compile(r"naa\.([0-9a-f]{16}|[0-9a-f]{32})")
_HOSTNAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
IQN_EXAMPLE = (
    'e.g. "iqn.2003-01.org.example:disk1", "eui.02004567a425678d" or "naa.52004567ba64678d"'
)
PORTAL_EXAMPLE = 'write HOST:PORT, e.g. "192.0.2.10:3260" or "[2001:db8::1]:3260"'
# SAM's LUN space as QEMU's iscsi driver and libiscsi address it (flat space up to 16383; tgt allows
# 0-255).
MAX_LUN = 16383
# How --allow-destroy URLs arrive: typer turns the argument into a Path, which folds "//" into "/".
_URL = re.compile(
    r"iscsi:/{1,2}(?P<portal>\[[0-9A-Fa-f:.]+\](:\d+)?|[^/\[\]]+)/(?P<iqn>[^/]+)/(?P<lun>\d+)"
)


def check_iqn(name: str) -> str:
    """The iSCSI name in its canonical (lower-case) form, or ValueError naming what is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"empty iSCSI name: {IQN_EXAMPLE}")
    low = name.strip().lower()
    if len(low.encode()) > 223:  # RFC 3720 §3.2.6.1: at most 223 bytes
        raise ValueError(f"iSCSI name {name[:40]!r}… is longer than 223 bytes (RFC 3720)")
    if _IQN.fullmatch(low) or _EUI.fullmatch(low) or _NAA.fullmatch(low):
        return low
    raise ValueError(
        f"bad iSCSI name {name[:80]!r}: not an iqn./eui./naa. name (RFC 3720); {IQN_EXAMPLE}"
    )


@dataclass(frozen=True)
class Portal:
    """An iSCSI portal: host (a name, an IPv4 or an IPv6 address) and TCP port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_portal(text: str) -> Portal:
    """ "HOST:PORT" (IPv6 in brackets) → Portal; ValueError naming the problem otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty portal: {PORTAL_EXAMPLE}")
    t = text.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})", t) or re.fullmatch(
        r"([^:\[\]/\s]+):(\d{1,5})", t
    )
    if m is None:
        raise ValueError(f"bad portal {text[:80]!r}: {PORTAL_EXAMPLE}")
    host, port = m.group(1), int(m.group(2))
    if not 1 <= port <= 65535:
        raise ValueError(f"bad portal {text[:80]!r}: port {port} is not between 1 and 65535")
    if t.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"bad portal {text[:80]!r}: {host!r} is not an IPv6 address") from None
    elif not _HOSTNAME.fullmatch(host) or len(host) > 253:
        raise ValueError(
            f"bad portal {text[:80]!r}: {host!r} is not a host name or address; {PORTAL_EXAMPLE}"
        )
    elif (why := address_problem(host)) is not None:
        raise ValueError(f"bad portal {text[:80]!r}: {why}")
    return Portal(host, port)


@dataclass(frozen=True)
class IscsiLun:
    """One LUN of one target behind one portal: what ``--allow-destroy iscsi://HOST:PORT/IQN/LUN``
    hands over."""

    portal: Portal
    iqn: str
    lun: int

    @property
    def url(self) -> str:
        return f"iscsi://{self.portal}/{self.iqn}/{self.lun}"


def parse_iscsi_url(text: str) -> IscsiLun:
    """``iscsi://HOST:PORT/IQN/LUN`` (also the ``iscsi:/…`` a Path makes of it) → IscsiLun;
    ValueError otherwise."""
    m = _URL.fullmatch(str(text).strip())
    if m is None:
        raise ValueError(
            f"bad iSCSI URL {str(text)[:100]!r}: write iscsi://HOST:PORT/IQN/LUN, "
            "e.g. iscsi://192.0.2.10:3260/iqn.2003-01.org.example:disk1/1"
        )
    lun = int(m.group("lun"))
    if lun > MAX_LUN:
        raise ValueError(f"bad iSCSI URL {str(text)[:100]!r}: LUN {lun} is above {MAX_LUN}")
    return IscsiLun(parse_portal(m.group("portal")), check_iqn(m.group("iqn")), lun)


def is_iscsi_url(text: object) -> bool:
    """Whether an --allow-destroy argument is meant as an iSCSI URL (it starts with the scheme)."""
    return str(text).strip().lower().startswith("iscsi:")


def target_name(name: str, *, prefix: str = "iqn.2026-11.org.iomatrix") -> str:
    """A valid IQN for a target iomatrix creates, from a free-form disk name."""
    tail = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip(".-")[:120] or "disk"
    return check_iqn(f"{prefix}:{tail}")


# ------------------------------------------------------------------ the protocol
# Proxmox's two storages of an iSCSI LUN: QEMU's own initiator (libiscsi), and the kernel's
# (open-iscsi).
PROXMOX_DIRECT, PROXMOX_KERNEL = "iscsidirect", "iscsi"
PROXMOX_STORAGE_ID = {PROXMOX_DIRECT: "san-direct", PROXMOX_KERNEL: "san"}
# Placeholders of a libvirt iSCSI pool: the initiator name QEMU's libiscsi logs in as, and the usage
# name of the libvirt secret holding the CHAP password (never a credential itself).
LIBVIRT_INITIATOR = "iqn.2024-01.com.example:client"
CHAP_SECRET_USAGE = "iomatrix-chap"
LUN_WRITE_CACHE_RISK = (
    "the LUN's write cache is volatile memory in the target host: a write is acknowledged before "
    "it is on the "
    "target's disk, and a target power loss loses what the guest has not flushed yet (tgt honours "
    "SYNCHRONIZE "
    "CACHE and FUA; a target whose cache is not battery/flash-protected and that acknowledges a "
    "flush without "
    "syncing loses flushed data too)"
)
# What a target power loss loses with the LUN's write cache on or off (tgt's semantics,
# _lun_write_cache_risk below): the first clause is the statement, the parenthesis why (a short
# screen keeps the first clause).
LUN_POWER_LOSS = {
    "on": "with lun_write_cache=on, loses what the guest has not flushed yet "
    f"({LUN_WRITE_CACHE_RISK})",
    "off": "with lun_write_cache=off, loses no acknowledged write (the target syncs every write "
    "to its disk before acknowledging it)",
}
# Where no durability trial cut a target with the LUN's settings (the iscsi-durability plan does).
NOT_MEASURED_HERE = "not measured here: iomatrix run iscsi-durability cuts a target's power"


# ------------------------------------------------------------------------------ its axes (issue 34)
# The target's LUN (what backs it, its write cache) and the initiator QEMU reaches it with. The
# LUN's axes are read by the iSCSI server (backing/iscsi.py, NetworkServer.new_disk) and set nothing
# on QEMU; the initiator chooses the protocol node (qemu_node). docs/shared-storage.md has what
# each does and what was measured.


class LunType(StrEnum):
    """What backs an iSCSI LUN in the target: the article's IET nullio/fileio/blockio as tgt's
    backing stores."""

    NULL = (
        "null"  # tgt bs-type null: reads return zeroes, writes are dropped (the protocol's ceiling)
    )
    FILEIO = "fileio"  # tgt bs-type rdwr: a file through the target host's page cache
    BLOCKIO = "blockio"  # tgt bs-type rdwr with bsoflags direct: the file opened O_DIRECT


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
    rules=(only_on(NAME, "lun_type", LunType.FILEIO), Rule(("lun_type",), _null_lun_rule)),
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
    rules=(only_on(NAME, "lun_write_cache", "off"),),
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
    rules=(only_on(NAME, "initiator", "libiscsi"), kernel_client_rule("initiator")),
    simpler=("libiscsi", KERNEL_CLIENT),
    # The disk's type itself (libvirt network vs block, Proxmox iscsidirect vs iscsi): the tool
    # modules of iomatrix.vmconfig.
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
AXES = (LUN_TYPE, LUN_WRITE_CACHE, INITIATOR)


class Iscsi(NetworkProtocol):
    name = NAME
    title = "iSCSI"
    client_axis = "initiator"
    kernel_client = "kernel"
    userspace_library = "libiscsi"
    server_noun = "iSCSI target"
    is_volume = True
    spec = "iomatrix.backing.iscsi:IscsiBacking"
    # tgtd's start: 0.9 s from the sweep's start to its first run in
    # tests/data/answers/iscsi-lun-cache-jobs.sqlite (estimate.py counts it once per lab target)
    lab_setup_s = 1.0
    extra_snippets: ClassVar[tuple[str, ...]] = (
        "iomatrix.vmconfig.read_iscsi:tgt_snippet",
        "iomatrix.vmconfig.read_iscsi:tgtadm_snippet",
        "iomatrix.vmconfig.read_iscsi:lio_snippet",
        "iomatrix.vmconfig.read_iscsi:san_snippet",
    )
    snippet_targets: ClassVar[tuple[str, ...]] = ("tgt", "targetcli", "san")
    proxmox_types: ClassVar[tuple[str, ...]] = (PROXMOX_DIRECT, PROXMOX_KERNEL)
    # tgt (the lab target), libiscsi-bin (the initiator-side probes), QEMU's iscsi driver
    # (block-iscsi.so), targetcli-fb (whose signatures check the targetcli snippets)
    packages: ClassVar[tuple[str, ...]] = (
        "tgt",
        "libiscsi-bin",
        "qemu-block-extra",
        "targetcli-fb",
    )
    lab_server = "iomatrix.backing.iscsi:provision_iscsi"
    leftover_kinds = ("iomatrix.backing.iscsi:TgtdLeftover",)
    axes: ClassVar[tuple[Axis, ...]] = AXES
    axes_before = "rtt"
    reader = "iomatrix.vmconfig.read_iscsi:READER"
    kernel_probe = "iomatrix.backing.iscsi:probe_kernel_client"
    server_write_cache_axis = "lun_write_cache"
    lab_disks_in_workdir = True
    # libiscsi takes a portal: the relay sits between it and the target
    rtt_relay = "iomatrix.backing.iscsi:through_relay"
    durability_cut = CUT_TARGET_POWER
    durability_must_match: ClassVar[tuple[str, ...]] = ("lun_type", "lun_write_cache")
    qemu_img_raw_note = "none needed: a raw disk on a block device is the device itself"
    proxmox_raw_only = (
        "Proxmox uses an iSCSI LUN as one raw disk ({kind} storage: format raw only); a qcow2 "
        "image on iSCSI is not a Proxmox layout (LVM on top of the LUN gives raw volumes)"
    )

    def durability_reason(self, cell: Mapping[str, str], lab_started: bool | None) -> str | None:
        """On a LUN of a target iomatrix starts the cut is a target power loss
        (tiers/durability_target.py)."""
        if not lab_started:
            return (
                "the durability tier cuts the power of an iSCSI target it starts itself (a LUN "
                "over a "
                "volatile cache); an existing target cannot be cut: use a lab-started iscsi "
                "backing (no "
                "portal/iqn)"
            )
        if cell.get("lun_type", NA) == "null":
            return (
                "a null LUN stores nothing: a cut has nothing to lose, so it has no durability to "
                "measure"
            )
        if cell.get("rtt", NA) not in (NA, "0"):
            return (
                f"rtt={cell['rtt']}: what a target power loss takes does not depend on the "
                "network's round "
                "trip; the durability tier runs at rtt=0"
            )
        return None

    def server_power_loss(self, axes: Mapping[str, str]) -> str | None:
        """What a target power loss loses with the LUN's write cache on or off, documented (tgt's
        semantics), saying it was not measured."""
        cache = axes.get(self.server_write_cache_axis or "")
        return (
            None if cache not in LUN_POWER_LOSS else f"{LUN_POWER_LOSS[cache]}; {NOT_MEASURED_HERE}"
        )

    def handed_over_problem(self, url: str) -> str | None:
        """An ``iscsi://HOST:PORT/IQN/LUN`` hands over one LUN of an existing target."""
        try:
            parse_iscsi_url(url)
        except ValueError as err:
            return str(err)
        return None

    def url(self, place: NetworkPlace, fmt: str) -> str:
        return f"iscsi://{place.portal}/{place.iqn}/{place.lun}"

    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> LibvirtSource:
        if self.client_is_kernel(values):
            return "block", {"dev": place.by_path()}, None
        return (
            "network",
            {"protocol": self.name, "name": f"{place.iqn}/{place.lun}"},
            {"name": place.host, "port": str(place.port)},
        )

    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        if self.client_is_kernel(values):
            return [("driver", "host_device"), ("filename", place.by_path())]
        return [
            ("driver", self.name),
            ("transport", "tcp"),
            ("portal", place.portal),
            ("target", place.iqn),
            ("lun", str(place.lun)),
        ]

    def kernel_client_steps(self, place: NetworkPlace) -> str:
        return (
            "log the host in first (open-iscsi): iscsiadm -m discovery -t sendtargets -p "
            f"{place.portal}; "
            f"iscsiadm -m node -T {place.iqn} -p {place.portal} --login"
        )

    def placeholder_where(self, place: NetworkPlace) -> str:
        return f"portal {place.portal}, target {place.iqn}, LUN {place.lun}"

    def disk_notes(self, values: Mapping[str, str], more: Mapping[str, str]) -> list[str]:
        if "lun_write_cache" in more:
            return []
        return [
            "measured with the LUN's write cache off, which is not tgt's default: see the tgt "
            "targets.conf snippet"
        ]

    def libvirt_pool(self, values: Mapping[str, str], place: NetworkPlace) -> tuple[str, str]:
        """iscsi-direct for libiscsi (QEMU's initiator: its volumes are network disks), iscsi for
        the kernel's (libvirt logs the host in with iscsiadm; its volumes are by-path devices)."""
        kernel = self.client_is_kernel(values)
        kind = "iscsi" if kernel else "iscsi-direct"
        initiator = (
            ""
            if kernel
            else (f'\n    <initiator>\n      <iqn name="{LIBVIRT_INITIATOR}" />\n    </initiator>')
        )
        target = "\n  <target>\n    <path>/dev/disk/by-path</path>\n  </target>" if kernel else ""
        xml = (
            f'<pool type="{kind}">\n  <name>{PROXMOX_STORAGE_ID[PROXMOX_KERNEL]}</name>\n'
            "  <source>\n"
            f'    <host name="{place.host}" port="{place.port}" />\n    <device '
            f'path="{place.iqn}" />'
            f"{initiator}\n"
            '    <auth type="chap" username="CHAP-USER">\n      <secret '
            f'usage="{CHAP_SECRET_USAGE}" />\n'
            f"    </auth>\n  </source>{target}\n</pool>"
        )
        client = (
            "the host kernel's initiator (open-iscsi): libvirt logs in and the LUNs are "
            "by-path devices"
            if kernel
            else f"QEMU's own initiator (libiscsi), as measured, logging in as {LIBVIRT_INITIATOR} "
            "(your host's initiator name)"
        )
        return xml, (
            "virsh pool-define FILE; virsh pool-start "
            f"{PROXMOX_STORAGE_ID[PROXMOX_KERNEL]}: the {kind} "
            f"pool, {client}; <auth> is CHAP's: its secret is the libvirt secret of "
            "usage type iscsi "
            f"named {CHAP_SECRET_USAGE} (virsh secret-define, then secret-set-value the "
            "CHAP password); "
            "leave <auth> out where the target asks no login"
        )

    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        """iscsidirect for libiscsi (QEMU's initiator), iscsi for the kernel's (open-iscsi)."""
        kind = PROXMOX_KERNEL if self.client_is_kernel(values) else PROXMOX_DIRECT
        sid = PROXMOX_STORAGE_ID[kind]
        return (
            kind,
            sid,
            f"{kind}: {sid}\n\tportal {place.host}\n\ttarget {place.iqn}\n\tcontent images",
        )

    def proxmox_volume(self, kind: str, sid: str, place: NetworkPlace, size_gib: int) -> str:
        """The volume id of the LUN on an iSCSI storage (pvesm list STORAGE shows yours):
        iscsidirect names LUNs lunN (PVE/Storage/ISCSIDirectPlugin.pm parse_volname), iscsi
        CHANNEL.ID.LUN.scsi-WWID."""
        if kind == PROXMOX_DIRECT:
            return f"{sid}:lun{place.lun}"
        return f"{sid}:0.0.{place.lun}.scsi-WWID"

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        if kind == PROXMOX_DIRECT:
            return [
                "iscsidirect: QEMU's own initiator (libiscsi), as measured; the LUN is used whole "
                "(volume "
                f"lun{place.lun}); Proxmox cannot create volumes on it"
            ]
        return [
            "iscsi: the host kernel's initiator (open-iscsi) logs in and the LUN is a block "
            "device; the "
            "volume id is CHANNEL.ID.LUN.scsi-WWID: pvesm list san shows yours"
        ]


# ---------------------------------------------------------------------------------------------
# the wire: MODE SENSE and NOP pings over one iSCSI session
# ---------------------------------------------------------------------------------------------

OP_NOP_OUT, OP_SCSI_CMD, OP_LOGIN, OP_LOGOUT = 0x00, 0x01, 0x03, 0x06
OP_NOP_IN, OP_SCSI_RSP, OP_LOGIN_RSP, OP_DATA_IN, OP_LOGOUT_RSP = 0x20, 0x21, 0x23, 0x25, 0x26
BHS = 48
IMMEDIATE = 0x40
INITIATOR_NAME = "iqn.2026-11.org.iomatrix:probe"
CACHING_PAGE = 0x08
WCE = 0x04  # byte 2 of the caching mode page (SBC-3 §6.4.5)
UNIT_ATTENTION = 0x06
CHECK_CONDITION = 0x02


class IscsiProbeError(Exception):
    """The target refused the login or a command, or the connection broke."""


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _keys(pairs: dict[str, str]) -> bytes:
    return _pad(b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs.items()))


def lun_field(lun: int) -> bytes:
    """The 8-byte LUN field: peripheral device addressing below 256, flat space above (SAM-5
    §4.7)."""
    if lun < 256:
        return bytes([0, lun]) + bytes(6)
    return bytes([0x40 | (lun >> 8), lun & 0xFF]) + bytes(6)


def caching_wce(mode_data: bytes) -> bool:
    """The WCE bit of a MODE SENSE(6) answer holding the caching page (header, block descriptors,
    page)."""
    if len(mode_data) < 4:
        raise IscsiProbeError(f"MODE SENSE answer too short ({len(mode_data)} bytes)")
    page = mode_data[4 + mode_data[3] :]
    if len(page) < 3 or page[0] & 0x3F != CACHING_PAGE:
        raise IscsiProbeError(f"MODE SENSE answer holds no caching page: {mode_data.hex()}")
    return bool(page[2] & WCE)


@dataclass
class _Pdu:
    header: bytes
    data: bytes

    @property
    def opcode(self) -> int:
        return self.header[0] & 0x3F


class Session:
    """One logged-in iSCSI session to (host, port, target)."""

    def __init__(self, host: str, port: int, target: str, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.isid = bytes([0x80]) + os.urandom(5)  # "random" ISID format (RFC 3720 §10.12.5)
        self.itt = 0
        self.cmdsn = 1
        self.statsn = 0
        self.tsih = 0
        self.target = target

    # -- framing ---------------------------------------------------------------------------------
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise IscsiProbeError("the target closed the connection")
            buf += chunk
        return bytes(buf)

    def _recv(self) -> _Pdu:
        header = self._recv_exact(BHS)
        ahs = header[4] * 4
        length = int.from_bytes(header[5:8], "big")
        rest = self._recv_exact(ahs + length + (-length % 4))
        return _Pdu(header, rest[ahs : ahs + length])

    def _next_itt(self) -> bytes:
        self.itt += 1
        return self.itt.to_bytes(4, "big")

    # -- login -----------------------------------------------------------------------------------
    def _login_step(self, csg: int, nsg: int, keys: dict[str, str]) -> None:
        data = _keys(keys)
        header = (
            bytes([IMMEDIATE | OP_LOGIN, 0x80 | (csg << 2) | nsg, 0, 0, 0])
            + len(data).to_bytes(3, "big")
            + self.isid
            + self.tsih.to_bytes(2, "big")
            + self._next_itt()
            + bytes(4)
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1 if self.statsn else 0).to_bytes(4, "big")
            + bytes(16)
        )
        self.sock.sendall(header + data)
        rsp = self._recv()
        if rsp.opcode != OP_LOGIN_RSP:
            raise IscsiProbeError(f"login: unexpected answer opcode 0x{rsp.opcode:02x}")
        status = (rsp.header[36], rsp.header[37])
        if status != (0, 0):
            what = {
                (2, 1): "authentication failed",
                (2, 2): "not authorised (ACL)",
                (2, 3): f"target {self.target} not found",
            }.get(status, f"status class {status[0]} detail {status[1]}")
            raise IscsiProbeError(f"login refused: {what}")
        self.tsih = int.from_bytes(rsp.header[14:16], "big")
        self.statsn = int.from_bytes(rsp.header[24:28], "big")

    def login(self) -> None:
        self._login_step(
            0,
            1,
            {
                "InitiatorName": INITIATOR_NAME,
                "TargetName": self.target,
                "SessionType": "Normal",
                "AuthMethod": "None",
            },
        )
        self._login_step(
            1,
            3,
            {
                "HeaderDigest": "None",
                "DataDigest": "None",
                "MaxRecvDataSegmentLength": "262144",
                "InitialR2T": "Yes",
                "ImmediateData": "No",
                "ErrorRecoveryLevel": "0",
            },
        )

    # -- full feature phase ----------------------------------------------------------------------
    def _send_cmd(self, lun: int, cdb: bytes, read_len: int) -> tuple[int, bytes]:
        header = (
            bytes([OP_SCSI_CMD, 0xC1, 0, 0, 0, 0, 0, 0])
            + lun_field(lun)
            + self._next_itt()
            + read_len.to_bytes(4, "big")
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1).to_bytes(4, "big")
            + cdb.ljust(16, b"\0")
        )
        self.cmdsn += 1
        self.sock.sendall(header)
        data = bytearray()
        while True:
            rsp = self._recv()
            if rsp.opcode == OP_DATA_IN:
                data += rsp.data
                if rsp.header[1] & 0x01:  # S bit: the status rides on the last Data-In
                    self.statsn = int.from_bytes(rsp.header[24:28], "big")
                    return rsp.header[3], bytes(data)
            elif rsp.opcode == OP_SCSI_RSP:
                self.statsn = int.from_bytes(rsp.header[24:28], "big")
                sense = rsp.data[2:] if len(rsp.data) >= 2 else b""
                return rsp.header[3], bytes(sense) if rsp.header[3] == CHECK_CONDITION else bytes(
                    data
                )
            elif rsp.opcode != OP_NOP_IN:
                raise IscsiProbeError(f"unexpected answer opcode 0x{rsp.opcode:02x}")

    def command(self, lun: int, cdb: bytes, read_len: int) -> bytes:
        """Run a read-type SCSI command; retried once after the unit attention a fresh nexus gets
        first."""
        for _attempt in range(3):
            status, data = self._send_cmd(lun, cdb, read_len)
            if status == 0:
                return data
            if not (
                status == CHECK_CONDITION and len(data) > 2 and data[2] & 0x0F == UNIT_ATTENTION
            ):
                raise IscsiProbeError(
                    f"SCSI command 0x{cdb[0]:02x} on LUN {lun} failed: status {status}, "
                    f"sense {data[:18].hex()}"
                )
        raise IscsiProbeError(
            f"SCSI command 0x{cdb[0]:02x} on LUN {lun}: unit attention did not clear"
        )

    def nop(self) -> None:
        """One NOP-Out answered by a NOP-In (a ping inside the session)."""
        header = (
            bytes([IMMEDIATE | OP_NOP_OUT, 0x80, 0, 0, 0, 0, 0, 0])
            + bytes(8)
            + self._next_itt()
            + b"\xff\xff\xff\xff"
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1).to_bytes(4, "big")
            + bytes(16)
        )
        self.sock.sendall(header)
        while True:
            rsp = self._recv()
            if rsp.opcode == OP_NOP_IN and rsp.header[16:20] == self.itt.to_bytes(4, "big"):
                self.statsn = int.from_bytes(rsp.header[24:28], "big")
                return
            if rsp.opcode != OP_NOP_IN:
                raise IscsiProbeError(f"NOP: unexpected answer opcode 0x{rsp.opcode:02x}")

    def logout(self) -> None:
        header = (
            bytes([IMMEDIATE | OP_LOGOUT, 0x80, 0, 0, 0, 0, 0, 0])
            + bytes(8)
            + self._next_itt()
            + bytes(4)
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1).to_bytes(4, "big")
            + bytes(16)
        )
        with contextlib.suppress(OSError, IscsiProbeError):
            self.sock.sendall(header)
            self._recv()


@contextlib.contextmanager
def session(host: str, port: int, target: str, timeout: float = 10.0) -> Iterator[Session]:
    """A logged-in session, logged out and closed afterwards. Raises IscsiProbeError or OSError."""
    try:
        s = Session(host, port, target, timeout)
    except OSError as exc:
        raise IscsiProbeError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
    try:
        s.login()
        yield s
        s.logout()
    except (OSError, TimeoutError) as exc:
        raise IscsiProbeError(f"{host}:{port}: {exc}") from None
    finally:
        s.sock.close()


def read_write_cache(host: str, port: int, target: str, lun: int, timeout: float = 10.0) -> bool:
    """Whether the LUN reports its write cache on (WCE of the caching mode page), as an initiator
    reads it."""
    cdb = bytes([0x1A, 0x08, CACHING_PAGE, 0, 255, 0])  # MODE SENSE(6), DBD, current values, page 8
    with session(host, port, target, timeout) as s:
        return caching_wce(s.command(lun, cdb, 255))


def nop_rtts(
    host: str, port: int, target: str, count: int = 30, timeout: float = 10.0
) -> list[float]:
    """Round-trip times in seconds of `count` NOP pings in one session (the first one is not
    counted: it may pay for a cold path)."""
    times = []
    with session(host, port, target, timeout) as s:
        s.nop()
        for _ in range(count):
            t0 = time.perf_counter()
            s.nop()
            times.append(time.perf_counter() - t0)
    return times
