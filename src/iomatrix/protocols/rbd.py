"""Ceph RBD: an image of a Ceph cluster (one node iomatrix starts, or an existing cluster), opened
by QEMU's librbd or mapped by the host kernel's krbd (the ``rbd_client`` axis). The lab half (the
spec, the one-node cluster, the fence, leftovers) is in :mod:`iomatrix.backing.rbd`; what --current
reads and the storage-side snippets (ceph.conf, `rbd config`, `rbd create`) in
:mod:`iomatrix.vmconfig.read_rbd`.

Its axes (issue 35): librbd's cache, the client, the image's object size (`AXES`, the protocol's
axes for the axis registry); why a cell QEMU or krbd contradicts is pruned, how an object size is
checked, and what a librbd setting means for a VM tool. Pure: no I/O.

Defaults are Ceph 16's (Debian 12's 16.2.15: `ceph-conf -c /dev/null --show-config-value OPTION`):
rbd_cache true, rbd_cache_policy writearound, rbd_cache_writethrough_until_flush true,
rbd_default_order 22 (4 MiB objects). QEMU's rbd driver sets rbd_cache itself when it opens an
image, over ceph.conf (block/rbd.c: false with cache.direct=on, true otherwise); read back through a
live client's admin socket in tests/test_rbd_backing.py."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import ClassVar

from iomatrix.domain import NA, CacheMode, SafetyLevel
from iomatrix.domain.axis_model import Axis, Layer, Rule, RuleContext, ToolOption
from iomatrix.domain.protocol_rules import backing_protocol, kernel_client_rule, only_on
from iomatrix.protocols.base import (
    CUT_CLIENT_CRASH,
    FlushGatedCache,
    LibvirtSource,
    NetworkProtocol,
)
from iomatrix.protocols.place import CEPH_MON_PORT, NetworkPlace

# ------------------------------------------------------------------ the axes (librbd, the client)
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


# ------------------------------------------------------------------ the protocol
NAME = RBD
PROXMOX_STORAGE_ID = "ceph-vm"
# RBDPlugin: an rbd storage without 'pool' uses the pool named rbd.
PROXMOX_DEFAULT_POOL = "rbd"
# The pool of a placeholder disk (a NetworkPlace that names none): the one `rbd pool init` makes by
# default.
DEFAULT_POOL = "rbd"


def pool_of(place: NetworkPlace) -> str:
    """The Ceph pool `place`'s image is in: its own, or the placeholder default."""
    return place.pool or DEFAULT_POOL


def rbd_name(place: NetworkPlace) -> str:
    """The image as libvirt and the rbd tool name it: POOL/IMAGE."""
    return f"{pool_of(place)}/{place.image}"


def rbd_device(place: NetworkPlace) -> str:
    """The image's stable device name once the host kernel has mapped it (udev's
    /dev/rbd/POOL/IMAGE link)."""
    return f"/dev/rbd/{rbd_name(place)}"


# The rbd(8) tool, whose `rbd create` snippet makes the image with its object size.
RBD_TOOL = "rbd"


def ceph_value(values: Mapping[str, str], axis: str) -> str:
    """A cell's value of an rbd axis; Ceph's own default where the cell leaves it out (or shows
    '-')."""
    default = DEFAULTS[axis]
    value = values.get(axis, default)
    return default if value in ("-", "") else value


def rbd_order(object_size: str) -> int:
    """An object size as rbd(8) writes it (4M, 512K, 4194304) as the image's order, log2 of its
    bytes (Ceph's rbd_default_order: 22 is 4 MiB); a one-line ValueError for one that is not a power
    of two from 4K to 32M."""
    m = re.fullmatch(r"(\d+)([KM]?)B?", object_size.upper())
    size = int(m.group(1)) << {"": 0, "K": 10, "M": 20}[m.group(2)] if m else 0
    if size < 4096 or size > 32 << 20 or size & (size - 1):
        raise ValueError(f"object size '{object_size}' is not a power of two from 4K to 32M")
    return size.bit_length() - 1


class Rbd(NetworkProtocol):
    name = NAME
    title = "Ceph RBD"
    article = "a"
    client_axis = "rbd_client"
    kernel_client = KRBD
    userspace_library = "librbd"
    server_noun = "Ceph cluster"
    is_volume = True
    spec = "iomatrix.backing.rbd:RbdBacking"
    # Ceph's monitor, manager and OSD on a file: ceph_startup_s 12.2 s, 13.0 s from the sweep's
    # start to its first run in tests/data/answers/ceph-flush-trap.sqlite, 19.5 s in
    # ceph-custom-jobs.sqlite (estimate.py counts it once per lab cluster)
    lab_setup_s = 16.0
    extra_snippets: ClassVar[tuple[str, ...]] = (
        "iomatrix.vmconfig.read_rbd:ceph_conf_snippet",
        "iomatrix.vmconfig.read_rbd:rbd_create_snippet",
        "iomatrix.vmconfig.read_rbd:rbd_config_snippet",
    )
    snippet_targets: ClassVar[tuple[str, ...]] = ("ceph", RBD_TOOL)
    nova_snippet = "iomatrix.vmconfig.read_rbd:nova_rbd_snippet"
    answer_snippet = "iomatrix.vmconfig.read_rbd:answer_ceph_snippet"
    findings: ClassVar[tuple[str, ...]] = ("iomatrix.report.flush_gate:flush_gate_findings",)
    flush_gated_cache = FlushGatedCache(
        client="librbd",
        where=NAME,
        until_flush_axis="rbd_cache_writethrough_until_flush",
        policy_axis="rbd_cache_policy",
        default_policy=DEFAULTS["rbd_cache_policy"],
        default_until_flush=DEFAULTS["rbd_cache_writethrough_until_flush"],
        defaults_of="Ceph",
        scope="image",
        context_axes=("rbd_object_size",),
    )
    proxmox_types: ClassVar[tuple[str, ...]] = (NAME,)
    qemu_img_raw_note = (
        "none needed: a raw disk on Ceph is the RBD image itself, which the rbd create "
        "snippet makes with its object size"
    )
    proxmox_raw_only = (
        "a Proxmox rbd storage holds raw images only (RBD has its own thin provisioning and "
        "snapshots)"
    )
    # A trial on Ceph RBD also makes two RBD images, fences the crashed client and reads both images
    # back through librbd: 7.5-11.4 s measured, about 9 s (docs/benchmarks-history.md, "Issue 35: a
    # Ceph client crash").
    durability_trial_s = 9.0
    # the lab cluster's monitor and OSD, the ceph/rbd tools, QEMU's rbd driver (block-rbd.so)
    packages: ClassVar[tuple[str, ...]] = (
        "ceph-mon",
        "ceph-osd",
        "ceph-common",
        "qemu-block-extra",
    )
    lab_server = "iomatrix.backing.rbd:provision_rbd"
    leftover_kinds = ("iomatrix.backing.rbd:RbdImageLeftover",)
    # librbd's cache, the client, the object size (above), after every other axis
    axes: ClassVar[tuple[Axis, ...]] = AXES
    existing_check = "iomatrix.backing.rbd:existing_pool_problem"
    reader = "iomatrix.vmconfig.read_rbd:READER"
    kernel_probe = "iomatrix.backing.rbd:probe_kernel_client"
    # Its cells are read apart for the cache findings (report/flush_gate.py): librbd keeps its own.
    kernel_client_page_cache = False
    # BlueStore keeps an image's objects in its own block file: there is no file of the disk to run
    # fio on.
    server_baseline_unavailable = (
        "an RBD image has no file of its own on the server (BlueStore keeps objects in its block "
        "file); the "
        "server-side baseline for RBD would be fio's ioengine=rbd, which iomatrix does not run yet"
    )
    durability_cut = CUT_CLIENT_CRASH
    rtt_unavailable = (
        "rtt is emulated by a relay between client and server; a Ceph client learns the OSDs' "
        "addresses from the monitor's map and connects to them directly, past any relay: iSCSI only"
    )
    durability_must_match: ClassVar[tuple[str, ...]] = (
        "rbd_cache_policy",
        "rbd_cache_writethrough_until_flush",
    )
    userspace_client_caches = True

    def durability_reason(self, cell: Mapping[str, str], lab_started: bool | None) -> str | None:
        """On RBD the trial's cut is a Ceph client crash (QEMU SIGKILLed with librbd's cache in it);
        the cluster is then told to forget the dead client (`ceph osd blocklist`), which takes a
        cluster iomatrix started."""
        if not lab_started:
            return (
                "the durability tier crashes a Ceph client and then fences it (ceph osd blocklist) "
                "on a "
                "cluster it starts itself; it never fences clients of an existing cluster: use a "
                "lab-started rbd backing (no conf/pool)"
            )
        if cell.get("rbd_client", NA) == KRBD:
            return (
                "rbd_client=krbd keeps no librbd cache: a QEMU crash leaves its writes in the host "
                "kernel; "
                "the durability tier crashes librbd clients"
            )
        return None

    def userspace_cache_texts(self, axes: Mapping[str, str]) -> tuple[str, str, str, str]:
        """librbd's cache, which QEMU's cache modes that keep one turn on (block/rbd.c)."""
        crash, power, migration, no_flush = LIBRBD_CACHE_TEXTS
        if axes.get("rbd_cache_writethrough_until_flush") == "off":
            no_flush = LIBRBD_NO_FLUSH_UNTIL_OFF
        return crash, power, migration, no_flush

    def client_crash_risk(self, axes: Mapping[str, str]) -> tuple[str, str] | None:
        """librbd's writeback cache holds acknowledged writes in the QEMU process until a flush
        (policy writeback; writearound's are in flight, the QEMU crash line says so)."""
        if axes.get("rbd_cache_policy") == "writeback":
            return CLIENT_CRASH, RBD_CACHE_RISK
        return None

    def url(self, place: NetworkPlace, fmt: str) -> str:
        # QEMU's rbd: pseudo-URL (block/rbd.c qemu_rbd_parse_filename): Ceph options after ':'
        return f"rbd:{rbd_name(place)}:id={place.ceph_user}:conf={place.ceph_conf}"

    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> LibvirtSource:
        if self.client_is_kernel(values):
            return "block", {"dev": rbd_device(place)}, None
        return (
            "network",
            {"protocol": self.name, "name": rbd_name(place)},
            {"name": place.host, "port": str(CEPH_MON_PORT)},
        )

    def libvirt_auth(self, place: NetworkPlace) -> tuple[dict[str, str], dict[str, str]]:
        """The cephx user and the libvirt secret holding its key."""
        return {"username": place.ceph_user}, {"type": "ceph", "uuid": place.secret_uuid}

    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        # QEMU 7.2's BlockdevOptionsRbd (qapi/block-core.json): the monitors come from conf
        if self.client_is_kernel(values):
            return [("driver", "host_device"), ("filename", rbd_device(place))]
        return [
            ("driver", self.name),
            ("pool", pool_of(place)),
            ("image", place.image),
            ("conf", place.ceph_conf),
            ("user", place.ceph_user),
        ]

    def nova_conf(self, place: NetworkPlace) -> list[tuple[str, str]]:
        # nova.conf [libvirt]: the rbd image backend, its pool, conf, user and libvirt secret
        return [
            ("images_type", "rbd"),  # Nova's name for its rbd image backend
            ("images_rbd_pool", pool_of(place)),
            ("images_rbd_ceph_conf", place.ceph_conf),
            ("rbd_user", place.ceph_user),
            ("rbd_secret_uuid", place.secret_uuid),
        ]

    def kernel_client_steps(self, place: NetworkPlace) -> str:
        return (
            f"map the image on the host first (ceph-common, the kernel's rbd module): rbd map "
            f"{rbd_name(place)} --id {place.ceph_user} (udev links {rbd_device(place)}; list it in "
            "/etc/ceph/rbdmap to map it at boot); librbd's [client] cache settings do not apply to "
            "a mapped "
            "image: the host's page cache and QEMU's cache mode do"
        )

    def placeholder_where(self, place: NetworkPlace) -> str:
        return (
            f"monitor {place.host}, image {rbd_name(place)}, user {place.ceph_user}, secret "
            f"{place.secret_uuid}"
        )

    def userspace_notes(self, place: NetworkPlace) -> list[str]:
        return [
            f"QEMU reads the monitors from {place.ceph_conf} and client.{place.ceph_user}'s key "
            "from "
            "the keyring it names (libvirt passes the key from its secret instead)"
        ]

    def disk_notes(self, values: Mapping[str, str], more: Mapping[str, str]) -> list[str]:
        return [
            "librbd's cache (rbd cache, its policy, writethrough until flush) is set in "
            "ceph.conf's "
            "[client] section, not on the disk: see the ceph.conf snippet"
        ]

    def qemu_img_target(self, values: Mapping[str, str], place: NetworkPlace, fmt: str) -> str:
        """A qcow2 image on RBD as qemu-img creates it: QEMU's rbd driver creates the RBD image
        itself, with the object size its connection's rbd_default_order gives (a Ceph option in the
        rbd: filename)."""
        order = rbd_order(ceph_value(values, "rbd_object_size"))
        return f"{self.url(place, fmt)}:rbd_default_order={order}"

    def libvirt_pool(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str | None, str]:
        """An rbd pool: its volumes are librbd network disks; an image the kernel maps needs
        none."""
        if self.client_is_kernel(values):
            return None, (
                "none needed: libvirt's rbd pool opens images with librbd; the image "
                "krbd maps is a "
                "block device (the <disk> above)"
            )
        usage = f"client.{place.ceph_user} secret"
        xml = (
            f'<pool type="rbd">\n  <name>{PROXMOX_STORAGE_ID}</name>\n  <source>\n'
            f"    <name>{pool_of(place)}</name>\n"
            f'    <host name="{place.host}" port="{CEPH_MON_PORT}" />\n'
            f'    <auth type="ceph" username="{place.ceph_user}">\n'
            f'      <secret usage="{usage}" />\n    </auth>\n  </source>\n</pool>'
        )
        return xml, (
            f"virsh pool-define FILE; virsh pool-start {PROXMOX_STORAGE_ID}: pool "
            f"{pool_of(place)}'s images "
            "as volumes, opened by QEMU's librbd as measured; <auth> names the libvirt "
            "secret holding "
            f"client.{place.ceph_user}'s cephx key by its usage name ('{usage}': the "
            "<usage type='ceph'> "
            "name in virsh secret-define's XML); librbd's cache is the ceph.conf snippet's"
        )

    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        """PVE/Storage/RBDPlugin.pm: krbd 1 maps the image with the kernel's client."""
        sid = PROXMOX_STORAGE_ID
        krbd = int(self.client_is_kernel(values))
        return (
            self.name,
            sid,
            (
                f"rbd: {sid}\n\tpool {pool_of(place)}\n\tmonhost {place.host}\n\tusername "
                f"{place.ceph_user}\n\tcontent images\n\tkrbd {krbd}"
            ),
        )

    def proxmox_placeholder(self, place: NetworkPlace) -> str:
        return f"pool {pool_of(place)}, user {place.ceph_user}"

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        krbd = self.client_is_kernel(values)
        return [
            f"krbd {int(krbd)}: "
            + (
                "the host kernel's rbd client maps each image (/dev/rbdN), as "
                "measured; librbd's [client] cache settings do not apply"
                if krbd
                else "QEMU's own librbd client, as measured; its cache is set in the "
                "[client] section of ceph.conf (see the ceph.conf snippet)"
            ),
            "for a cluster Proxmox does not manage, its key goes in /etc/pve/priv/ceph/"
            f"{PROXMOX_STORAGE_ID}.keyring; STORAGE:SIZE creates a new image vm-VMID-disk-N of "
            "SIZE GiB "
            "(its object size: the rbd create snippet)",
        ]
