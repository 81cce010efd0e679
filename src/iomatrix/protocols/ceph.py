"""The Ceph RBD axes (issue 35): librbd's cache, the client, the image's object size (`AXES`, which
the protocol's house :mod:`iomatrix.protocols.rbd` lists as its axes for the axis registry); why a
cell QEMU or krbd contradicts is pruned, how an object size is checked, and what a librbd setting
means for a VM tool. Pure: no I/O.

Defaults are Ceph 16's (Debian 12's 16.2.15: `ceph-conf -c /dev/null --show-config-value OPTION`):
rbd_cache true, rbd_cache_policy writearound, rbd_cache_writethrough_until_flush true,
rbd_default_order 22 (4 MiB objects). QEMU's rbd driver sets rbd_cache itself when it opens an
image, over ceph.conf (block/rbd.c: false with cache.direct=on, true otherwise); read back through a
live client's admin socket in tests/test_rbd_backing.py."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from iomatrix.domain import NA, CacheMode, SafetyLevel
from iomatrix.domain.axis_model import Axis, Layer, Rule, RuleContext, ToolOption
from iomatrix.domain.network_axes import backing_protocol, kernel_client_rule, only_on

RBD = "rbd"
KRBD = "krbd"  # rbd_client's kernel value: the host kernel's rbd module maps the image as /dev/rbdN
CACHE_AXES = ("rbd_cache", "rbd_cache_policy", "rbd_cache_writethrough_until_flush")
DEFAULTS = {
    "rbd_cache": "on",
    "rbd_cache_policy": "writearound",
    "rbd_cache_writethrough_until_flush": "on",
    "rbd_client": "librbd",
    "rbd_object_size": "4M",
}
OBJECT_SIZES = ("4M", "1M", "16M")
CACHE_OFF_IN_QEMU = (CacheMode.NONE, CacheMode.DIRECTSYNC)

# What QEMU's cache modes that keep a cache (writeback, writethrough) mean on an rbd disk, in the
# order of the risk situations (report/recommend/risks.py SITUATIONS: QEMU crash, host crash or
# power loss, live migration, a guest that sends no flushes): QEMU turns librbd's cache on
# (block/rbd.c) and no host page cache is involved, so the file-based texts of domain.CACHE do not
# apply.
LIBRBD_CACHE_TEXTS = (
    "writes librbd acknowledged but has not sent to the OSDs yet are lost (librbd's cache is "
    "memory in the QEMU process); what the guest flushed survives",
    "as for a QEMU crash: what the guest flushed survives, librbd's unflushed writes are lost",
    "QEMU flushes the disk, librbd's cache included, before the guest runs on the destination; "
    "no host page cache is involved",
    "under Ceph's default rbd_cache_writethrough_until_flush=on librbd stays writethrough for it: "
    "its writes wait for the OSDs, and are not lost",
)
# The last of them where rbd_cache_writethrough_until_flush is off.
LIBRBD_NO_FLUSH_UNTIL_OFF = (
    "its writes may wait in librbd's cache (up to rbd cache max dirty) and are lost on a QEMU "
    "crash or host power loss"
)

# The situation a Ceph client's crash is (a risk line of its own where librbd's cache holds writes).
CLIENT_CRASH = "Ceph client crash"
RBD_CACHE_RISK = (
    "librbd's writeback cache is memory in the client (the QEMU process): a write is "
    "acknowledged before it reaches "
    "the OSDs, and a client crash or host power loss loses what the guest has not "
    "flushed yet, like a disk's "
    "volatile cache; flushes are honoured (librbd writes the dirty data out before it "
    "acknowledges one)"
)


def cache_rule_reason(values: Mapping[str, str], protocol: str | None) -> str | None:
    """Why a cell's librbd cache settings cannot take effect, or None: krbd has no librbd cache at
    all, and QEMU decides rbd_cache from its own cache mode (so rbd_cache=off only repeats or
    contradicts what QEMU sets)."""
    if values.get("rbd_client", "librbd") == KRBD:
        changed = [a for a in CACHE_AXES if values.get(a, NA) not in (NA, DEFAULTS[a])]
        if changed:
            return (
                f"{changed[0]} is a setting of librbd's cache; krbd (rbd_client=krbd) uses "
                "the host's page cache"
            )
        return None
    cache = values.get("cache", NA)
    if protocol == RBD and cache in CACHE_OFF_IN_QEMU:
        # librbd's cache is off under these modes, so its policy and its until-flush switch are not
        # used: a cell varying them would measure the default one again (the ceph plan varies them
        # under writeback only)
        changed = [a for a in CACHE_AXES[1:] if values.get(a, NA) not in (NA, DEFAULTS[a])]
        if changed:
            return (
                f"QEMU's rbd driver turns librbd's cache off for cache={cache} "
                "(block/rbd.c: rbd_cache=false "
                f"with cache.direct=on): {changed[0]}={values[changed[0]]} cannot take effect"
            )
    if values.get("rbd_cache", "on") == "on" or protocol != RBD:
        return None
    if cache in CACHE_OFF_IN_QEMU:
        return (
            f"QEMU's rbd driver already sets rbd_cache=off for cache={cache} "
            "(block/rbd.c): the cell would "
            "repeat the rbd_cache=on one"
        )
    return (
        "QEMU's rbd driver sets rbd_cache itself over ceph.conf (block/rbd.c: on for "
        f"cache={cache}): "
        "rbd_cache=off cannot take effect through QEMU"
    )


def format_reason(fmt: str, protocol: str | None, preallocation: str = NA) -> str | None:
    """The RBD backing makes raw images with `rbd create`, and qcow2 ones with `qemu-img create` on
    the rbd: URL (the cell's object size passed as rbd_default_order); qed is not offered, and
    QEMU's rbd driver cannot preallocate with falloc/full under a qcow2 node."""
    if protocol != RBD or fmt in (NA, "raw"):
        return None
    if fmt != "qcow2":
        return f"format={fmt} on an rbd backing: iomatrix makes RBD images raw or qcow2"
    if preallocation not in (NA, "off", "metadata"):
        return (
            f"preallocation={preallocation} with qcow2 on an rbd backing: qemu-img "
            "creates it through QEMU's "
            "rbd driver, which preallocates only off or metadata under a qcow2 node"
        )
    return None


def object_order(value: str) -> int:
    """rbd_default_order of an object size ("4M" → 22): what `qemu-img create` on an rbd: URL
    takes."""
    m = re.fullmatch(r"(\d+)([KM])", value)
    if m is None or object_size_problem(value):
        raise ValueError(object_size_problem(value) or value)
    return (int(m.group(1)) << (10 if m.group(2) == "K" else 20)).bit_length() - 1


def object_size_problem(value: str) -> str | None:
    """Why `value` is not an RBD object size (a power of two from 4K to 32M, as `rbd create` takes),
    or None."""
    m = re.fullmatch(r"(\d+)([KM])", value)
    size = int(m.group(1)) << (10 if m.group(2) == "K" else 20) if m else 0
    if not m or size & (size - 1) or not 4 << 10 <= size <= 32 << 20:
        return (
            f"'{value}' is not an RBD object size: a power of two from 4K to 32M, e.g. "
            '"4M" (Ceph\'s default)'
        )
    return None


def client_setting_note(axis: str, value: str) -> str:
    """What a VM tool's snippet says of an RBD setting that is not the VM's: the object size is
    chosen when the image is created; the cache settings live in the client host's ceph.conf."""
    if axis == "rbd_object_size":
        return (
            f"rbd_object_size={value} is chosen when the image is created (rbd create "
            f"--object-size {value}), "
            "not in the VM's disk"
        )
    return (
        f"{axis}={value} is a librbd setting of the client's ceph.conf [client] section "
        "(see the ceph snippet), "
        "not of the VM's disk"
    )


# ---------------------------------------------------------------------------- the axes (issue 35)
# librbd's cache, written into the per-disk ceph.conf's client section by the RBD backing
# (backing/rbd.py) and read by QEMU's rbd driver through conf=; the client (QEMU's librbd or the
# kernel's krbd); the image's object size (rbd create --object-size). Defaults are Ceph 16's
# (`ceph-conf -c /dev/null --show-config-value`: rbd_cache true, rbd_cache_policy writearound,
# rbd_cache_writethrough_until_flush true, rbd_default_order 22 = 4M).
def _rbd_cache_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    # QEMU and krbd decide librbd's cache over ceph.conf: cache_rule_reason says when a cell's
    # setting is lost
    return cache_rule_reason(values, backing_protocol(ctx))


def _ceph_client_tool(axis: str, default: str) -> Mapping[str, Callable[[str], ToolOption]]:
    """A librbd setting of the client host's ceph.conf ([client] section), not of the VM's disk
    definition."""

    def spell(value: str) -> ToolOption:
        return (
            ToolOption() if value == default else ToolOption(note=client_setting_note(axis, value))
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
        only_on(RBD, "rbd_cache", "on"),
        Rule(("rbd_cache", "cache", "rbd_client", *CACHE_AXES[1:]), _rbd_cache_rule),
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
    rules=(only_on(RBD, "rbd_cache_policy", "writearound"),),
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
    rules=(only_on(RBD, "rbd_cache_writethrough_until_flush", "on"),),
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
    rules=(only_on(RBD, "rbd_client", "librbd"), kernel_client_rule("rbd_client", KRBD)),
    simpler=("librbd", KRBD),
    tools={t: (lambda v: ToolOption()) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
# The object size is fixed when the image is created (rbd create --object-size): larger objects mean
# fewer, larger OSD operations for sequential I/O; the default 4M is what almost every cluster runs.
RBD_OBJECT_SIZE = Axis(
    "rbd_object_size",
    "the RBD image's object size (rbd create --object-size; Ceph's default 4M): the unit the "
    "image is striped over the OSDs in",
    OBJECT_SIZES,
    "4M",
    ("4M",),
    frozenset({Layer.IMAGE}),
    short="rbd_obj",
    rules=(
        only_on(RBD, "rbd_object_size", "4M"),
        Rule(
            ("format",),
            lambda values, ctx: format_reason(
                values.get("format", NA), backing_protocol(ctx), values.get("preallocation", NA)
            ),
        ),
    ),
    simpler=OBJECT_SIZES,
    check_value=object_size_problem,
    tools=_ceph_client_tool("rbd_object_size", "4M"),
)
AXES = (RBD_CACHE, RBD_CACHE_POLICY, RBD_WRITETHROUGH_UNTIL_FLUSH, RBD_CLIENT, RBD_OBJECT_SIZE)
