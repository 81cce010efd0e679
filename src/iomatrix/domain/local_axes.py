"""The axes of a local disk (issue 24 and the 2013 matrix): format, preallocation, cache, aio, bus,
backing, modifier, QEMU's image layer (discard, detect-zeroes, cluster size, extended L2, L2 cache)
and the device axes (IOThread, queues). Registered, in this order, by :mod:`iomatrix.domain.axes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

from iomatrix import domain
from iomatrix.domain import NA, SafetyLevel
from iomatrix.domain.axis_model import (
    Axis,
    DiskContext,
    Layer,
    QemuOptions,
    Rule,
    RuleContext,
    ToolOption,
    WorkloadShape,
    onoff,
    version_text,
)
from iomatrix.protocols.built_in import known_protocol

# --------------------------------------------------------------------- the axes of the 2013 matrix


def _cache_qemu(value: str) -> QemuOptions:
    sem = domain.CACHE[domain.CacheMode(value)]
    direct, no_flush = onoff(sem.direct), onoff(sem.no_flush)
    # cache.direct and cache.no-flush go on both nodes (what -drive cache= does); the write cache
    # belongs to whoever issues requests: the guest device (write-cache=) or the block export
    # (writethrough=).
    return QemuOptions(
        format_node=(("cache.direct", direct), ("cache.no-flush", no_flush)),
        file_node=(("cache.direct", direct), ("cache.no-flush", no_flush)),
        device=(("write-cache", onoff(sem.write_cache)),),
        export=(("writethrough", onoff(not sem.write_cache)),),
    )


def _same_name(key: str) -> Callable[[str], ToolOption]:
    """Cache-mode and aio names are identical in QEMU, libvirt, virt-install and Proxmox."""
    return lambda value: ToolOption(((key, value),))


def _format_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    on_device = ctx.backing is not None and ctx.backing.is_device
    return domain.preallocation_rule(
        values["format"], values["preallocation"], on_block_device=on_device
    )


def _o_direct(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if ctx.backing is None:
        return None
    return domain.o_direct_rule(values["cache"], ctx.backing.o_direct, ctx.backing_label)


def _eatmydata_note(values: Mapping[str, str]) -> str | None:
    if (
        values.get("modifier") == domain.Modifier.EATMYDATA
        and values.get("aio") == domain.Aio.IO_URING
    ):
        return (
            "eatmydata does not intercept flushes sent through io_uring: cells with aio=io_uring "
            "still flush "
            "under eatmydata"
        )
    return None


def _network_aio_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    """QEMU's aio= is an option of its file/host_device protocol: a disk QEMU opens with its own
    iSCSI or NFS client (driver=iscsi, driver=nfs) has none; through the kernel's client it is a
    file or device again."""
    protocol = ctx.backing.protocol if ctx.backing is not None else None
    if protocol is None or values["aio"] == domain.Aio.THREADS:
        return None
    network = known_protocol(protocol)
    if network is not None and network.client_is_kernel(values):
        return None
    return (
        f"aio={values['aio']} is an option of QEMU's file protocol; QEMU's {protocol} driver on "
        "backing "
        f"{ctx.backing_label} issues its own network I/O (aio applies only through the kernel's "
        "client)"
    )


def _nova_format(value: str) -> ToolOption:
    images_type = domain.NOVA_IMAGES_TYPE[domain.Format(value)]
    if images_type is None:
        return ToolOption(unavailable=f"Nova's images_type cannot be {value}")
    return ToolOption((("images_type", images_type),))


def _bus_tool(tool: str) -> Callable[[str], ToolOption]:
    def spell(value: str) -> ToolOption:
        bus = domain.Bus(value)
        if tool in ("libvirt", "virt-install"):
            if bus in domain.LIBVIRT_BUS_UNAVAILABLE:
                return ToolOption(unavailable=domain.LIBVIRT_BUS_UNAVAILABLE[bus])
            return ToolOption((("bus", domain.BUS[bus].libvirt),))
        if tool == "proxmox":
            prefix = domain.BUS[bus].proxmox
            if prefix is None:
                return ToolOption(
                    unavailable=f"Proxmox VE has no {value} disk bus (qm.conf offers ide, sata, "
                    "scsi and virtio); the nearest is virtio (virtio-blk)"
                )
            return ToolOption((("disk-key", prefix),))
        if bus in domain.NOVA_BUS_UNAVAILABLE:
            return ToolOption(unavailable=domain.NOVA_BUS_UNAVAILABLE[bus])
        # Nova's scsi bus is an LSI controller unless the image asks for virtio-scsi.
        scsi_model = (("hw_scsi_model", "virtio-scsi"),) if bus == domain.Bus.VIRTIO_SCSI else ()
        return ToolOption((("hw_disk_bus", domain.NOVA_DISK_BUS[bus]), *scsi_model))

    return spell


TIER = Axis(
    "tier",
    "which measurement: bare metal, QEMU's block layer, a guest, …",
    (),
    "",
    (),
    frozenset({Layer.SWEEP}),
    always_named=True,
    free_values=True,
)
FORMAT = Axis(
    "format",
    "disk image format",
    tuple(domain.Format),
    domain.Format.RAW,
    (domain.Format.RAW,),
    frozenset({Layer.IMAGE}),
    always_named=True,
    simpler=(domain.Format.RAW, domain.Format.QCOW2),
    qemu=lambda v: QemuOptions(),  # the format node's driver itself (qemu_block.blockdev_spec)
    tools={
        "libvirt": lambda v: ToolOption((("type", v),)),
        "proxmox": lambda v: ToolOption((("format", domain.PROXMOX_FORMAT[domain.Format(v)]),)),
        "virt-install": lambda v: ToolOption((("format", v),)),
        "nova": _nova_format,
    },
)
PREALLOCATION = Axis(
    "preallocation",
    "what qemu-img allocates when it creates the image",
    tuple(domain.Preallocation),
    domain.Preallocation.OFF,
    (domain.Preallocation.OFF,),
    frozenset({Layer.IMAGE}),
    always_named=True,
    short="prealloc",
    rules=(Rule(("format", "preallocation"), _format_rule),),
    simpler=tuple(domain.Preallocation),
    # (qemu-img create -o preallocation= is create_image's own argument: it depends on the format,
    # qed has none) Proxmox: a property of the directory/NFS storage (pvesm set), not of one disk;
    # off is not set at all.
    tools={
        "nova": lambda v: ToolOption((("preallocate_images", "none" if v == "off" else "space"),)),
        "proxmox": lambda v: ToolOption() if v == "off" else ToolOption((("preallocation", v),)),
    },
)
CACHE = Axis(
    "cache",
    "QEMU cache mode: O_DIRECT, the guest-visible write cache, and whether flushes reach the disk",
    tuple(domain.CacheMode),
    domain.CacheMode.WRITEBACK,
    (domain.CacheMode.NONE,),
    frozenset({Layer.HOST_IO, Layer.IMAGE}),
    always_named=True,
    rules=(Rule(("cache",), _o_direct),),
    qemu=_cache_qemu,
    tools={
        "libvirt": _same_name("cache"),
        "proxmox": _same_name("cache"),
        "virt-install": _same_name("cache"),
        "nova": _same_name("disk_cachemodes"),
    },
    risk=lambda v: domain.CACHE[domain.CacheMode(v)].level,
)
AIO = Axis(
    "aio",
    "how QEMU issues I/O on the host: a thread pool, Linux AIO or io_uring",
    tuple(domain.Aio),
    domain.Aio.THREADS,
    (domain.Aio.THREADS,),
    frozenset({Layer.HOST_IO, Layer.IMAGE}),
    always_named=True,
    rules=(
        Rule(("cache", "aio"), lambda v, ctx: domain.aio_rule(v["cache"], v["aio"])),
        Rule(("aio",), lambda v, ctx: _network_aio_rule(v, ctx)),
    ),
    # threads needs nothing from the host, io_uring a recent kernel, native needs O_DIRECT.
    simpler=(domain.Aio.THREADS, domain.Aio.IO_URING, domain.Aio.NATIVE),
    qemu=lambda v: QemuOptions(file_protocol=(("aio", v),)),
    tools={
        "libvirt": _same_name("io"),
        "proxmox": _same_name("aio"),
        "virt-install": _same_name("io"),
        "nova": lambda v: ToolOption(
            note="Nova has no option for aio (libvirt io=); it chooses it itself"
        ),
    },
)
BUS = Axis(
    "bus",
    "the guest's disk bus (virtual device)",
    tuple(domain.Bus),
    domain.Bus.VIRTIO_BLK,
    (domain.Bus.VIRTIO_BLK,),
    frozenset({Layer.DEVICE}),
    always_named=True,
    rules=(Rule(("bus",), lambda v, ctx: domain.bus_rule(v["bus"])),),
    simpler=(domain.Bus.VIRTIO_BLK, domain.Bus.VIRTIO_SCSI, domain.Bus.VIRTIO_SCSI_SINGLE),
    qemu=lambda v: (
        QemuOptions()
    ),  # the -device driver and its controller (qemu_block.disk_device_args)
    tools={t: _bus_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
BACKING = Axis(
    "backing",
    "what the image lives on: a directory, a filesystem on a loop device, a block device",
    (),
    "",
    (),
    frozenset({Layer.SWEEP}),
    always_named=True,
    free_values=True,
)
MODIFIER = Axis(
    "modifier",
    "a host-side wrapper around the process doing the I/O",
    tuple(domain.Modifier),
    domain.Modifier.NONE,
    (domain.Modifier.NONE,),
    frozenset({Layer.PROCESS}),
    always_named=True,
    rules=(
        Rule(("modifier", "cache"), lambda v, ctx: domain.modifier_rule(v["modifier"], v["cache"])),
    ),
    simpler=(domain.Modifier.NONE,),
    risk=lambda v: SafetyLevel.UNSAFE if v == domain.Modifier.EATMYDATA else None,
    cell_note=_eatmydata_note,
)


# ------------------------------------------------------------------ QEMU's image layer (issue 24)
# What QEMU implements below the guest, measured in the block-layer tier (and the same options in
# every tier that runs QEMU's block graph). A value at its default sets nothing: a cell at the
# default runs the very command line it ran before these axes existed. docs/axes.md has what each
# does and what was measured.

QCOW2 = domain.Format.QCOW2
# qemu-img create -o cluster_size= values, in bytes. QEMU allows powers of two from 512 B to 2 MiB
# (block/qcow2.h MIN_CLUSTER_BITS 9, MAX_CLUSTER_BITS 21); 64 KiB is its default
# (DEFAULT_CLUSTER_SIZE).
CLUSTER_BYTES: dict[str, int] = {"64k": 64 << 10, "128k": 128 << 10, "1M": 1 << 20, "2M": 2 << 20}
DEFAULT_CLUSTER_BYTES = CLUSTER_BYTES["64k"]
# Extended L2 entries split a cluster into 32 subclusters of at least 512 B: QEMU refuses smaller
# clusters (block/qcow2.c validate_cluster_size: "Extended L2 entries are only supported with
# cluster sizes of at least 16384 bytes"). Every CLUSTER_BYTES value satisfies it
# (tests/test_axes_image.py checks), so no rule is needed.
EXTENDED_L2_MIN_CLUSTER_BYTES = 16 << 10
# QEMU ≥ 3.1 on Linux: the L2 cache grows up to 32 MiB (block/qcow2.h DEFAULT_L2_CACHE_MAX_SIZE) and
# never beyond what the image's L2 tables need (block/qcow2.c read_cache_sizes), i.e. it already
# covers the whole image up to 32 MiB × cluster_size / 8 bytes (256 GiB at 64 KiB clusters; half
# that with extended L2 entries).
DEFAULT_L2_CACHE_MAX_BYTES = 32 << 20
# l2_cache=whole-image where the image's size is not known (a snippet): 1 GiB, which QEMU caps at
# what the image needs; it holds the whole mapping of images up to 8 TiB at 64 KiB clusters (4 TiB
# with extended L2 entries).
L2_CACHE_ANY_IMAGE_BYTES = 1 << 30
# QEMU's refusal of detect-zeroes=unmap without discard=unmap (block.c bdrv_parse_detect_zeroes; the
# message of QEMU 7.2's qemu-storage-daemon and qemu-system, verbatim).
QEMU_DETECT_ZEROES_UNMAP = (
    "setting detect-zeroes to unmap is not allowed without setting discard operation to unmap"
)


def _qcow2_only(axis: str, default: str) -> Rule:
    """A qcow2 creation/open option: another format with a value other than the default is
    pruned."""

    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if values["format"] != QCOW2 and values[axis] != default:
            return f"{axis} applies to qcow2 images only"
        return None

    return Rule(("format", axis), check)


def _discard_qemu(value: str) -> QemuOptions:
    if value == "ignore":
        return QemuOptions()
    # The format node's policy decides whether a discard (a guest's, an NBD trim,
    # detect-zeroes=unmap) goes below it. QEMU gives an inline protocol child discard=unmap by
    # default whatever its parent says (block.c bdrv_inherited_options); stating it on both nodes
    # keeps it so should the file node ever be defined apart.
    return QemuOptions(format_node=(("discard", value),), file_node=(("discard", value),))


def _proxmox_discard(value: str) -> ToolOption:
    return ToolOption((("discard", "on" if value == "unmap" else "ignore"),))


def _detect_zeroes_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["detect_zeroes"] == "unmap" and values["discard"] != "unmap":
        return f'detect_zeroes=unmap needs discard=unmap (QEMU: "{QEMU_DETECT_ZEROES_UNMAP}")'
    return None


def _proxmox_detect_zeroes(value: str) -> ToolOption:
    # qemu-server (PVE/QemuServer.pm print_drive_commandline): detect_zeroes=0 → off; otherwise (set
    # or not) → unmap when the disk has discard=on, else on. So Proxmox's default is on, and 'unmap'
    # is spelled by detect_zeroes=1 together with discard=on.
    if value == "off":
        return ToolOption(
            (("detect_zeroes", "0"),),
            note="Proxmox turns zero detection on unless a disk says detect_zeroes=0",
        )
    if value == "on":
        return ToolOption(
            (("detect_zeroes", "1"),),
            note="Proxmox passes detect-zeroes=on only while discard is ignore: with discard=on "
            "the same detect_zeroes=1 becomes QEMU's detect-zeroes=unmap",
        )
    return ToolOption(
        (("detect_zeroes", "1"),),
        note="Proxmox has no detect_zeroes=unmap: detect_zeroes=1 on a disk with discard=on is "
        "QEMU's detect-zeroes=unmap",
    )


def _nova_detect_zeroes(value: str) -> ToolOption:
    if value == "off":
        return ToolOption(
            note="Nova has no zero-detection setting; libvirt's default (off) is what it runs"
        )
    return ToolOption(
        unavailable="Nova has no zero-detection setting (libvirt's detect_zeroes is not exposed)"
    )


def _precreated(axis: str, option: str, default: str) -> Mapping[str, Callable[[str], ToolOption]]:
    """Spellings of a qcow2 creation option: no tool sets it on a disk statement, but libvirt,
    virt-install and Proxmox open an image created beforehand, so their snippets hold with the
    command that creates it."""

    def create(value: str) -> str:
        return f"qemu-img create -f qcow2 -o {option}={value} IMAGE SIZE"

    def libvirt(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(
            note=f"{axis}={value} is set when the image is created: {create(value)}, then point "
            "<source file=…> at it (a storage pool's vol-create cannot set it)"
        )

    def virt_install(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(
            note=f"{axis}={value} is set when the image is created: {create(value)}, then "
            "--disk path=IMAGE (a new volume from --disk size= gets QEMU's default)"
        )

    def proxmox(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(
            note=f"qm allocates volumes (STORAGE:SIZE, qm disk import) with QEMU's default {axis}: "
            f"{create(value)} as images/VMID/vm-VMID-disk-N.qcow2 on a directory storage, "
            "then qm rescan --vmid VMID and attach the volume"
        )

    def nova(value: str) -> ToolOption:
        if value == default:
            return ToolOption()
        return ToolOption(
            unavailable=f"Nova creates instance disks itself with QEMU's default {axis}; it has no "
            f"option for {option}"
        )

    return {"libvirt": libvirt, "virt-install": virt_install, "proxmox": proxmox, "nova": nova}


def _cluster_bytes(values: Mapping[str, str]) -> int:
    return CLUSTER_BYTES.get(values.get("cluster_size", NA), DEFAULT_CLUSTER_BYTES)


def _l2_entry_bytes(values: Mapping[str, str]) -> int:
    return (
        16 if values.get("extended_l2") == "on" else 8
    )  # docs/qcow2-cache.txt, "Extended L2 Entries"


def whole_image_l2_cache_bytes(
    image_size_bytes: int, cluster_bytes: int, entry_bytes: int = 8
) -> int:
    """The L2 cache holding every L2 table of an image: QEMU's own bound (block/qcow2.c
    read_cache_sizes: one entry per cluster, rounded up to whole clusters, as an L2 table is one
    cluster on disk)."""
    entries = -(-image_size_bytes // cluster_bytes)
    return -(-entries * entry_bytes // cluster_bytes) * cluster_bytes


def default_l2_cache_covers_bytes(cluster_bytes: int, entry_bytes: int = 8) -> int:
    """How large an image QEMU's default L2 cache (≤ 32 MiB on Linux, QEMU ≥ 3.1) covers whole."""
    return DEFAULT_L2_CACHE_MAX_BYTES // entry_bytes * cluster_bytes


def _l2_cache_qemu(values: Mapping[str, str], ctx: DiskContext) -> QemuOptions:
    if values.get("l2_cache", "default") == "default" or values.get("format") != QCOW2:
        return QemuOptions()
    if ctx.image_size_bytes is None:
        # A snippet for the user's own image, whose size iomatrix does not know: QEMU caps
        # l2-cache-size at the image's whole L2 metadata (block/qcow2.c read_cache_sizes:
        # MIN(max_l2_cache, l2-cache-size)) and allocates no more, so a bound above any image's need
        # means "the whole image" for every image.
        return QemuOptions(format_node=(("l2-cache-size", str(L2_CACHE_ANY_IMAGE_BYTES)),))
    size = whole_image_l2_cache_bytes(
        ctx.image_size_bytes, _cluster_bytes(values), _l2_entry_bytes(values)
    )
    return QemuOptions(format_node=(("l2-cache-size", str(size)),))


def l2_cache_read_back(cache_bytes: int, option: str) -> tuple[str, str]:
    """(l2_cache value, what it means) of an L2 cache size a user's configuration sets (`option`
    names it: QEMU's l2-cache-size, its combined cache-size, libvirt's <metadata_cache><max_size>),
    for ``--current``. The image it is for is not in the configuration: a bound above QEMU's default
    (32 MiB) reads as ``whole-image``, which it is for every image up to what it covers (QEMU gives
    the L2 cache MIN(image's need, bound); with only the combined cache-size, the rest goes to the
    refcount cache: block/qcow2.c read_cache_sizes), else as ``default``. ``recommend`` checks the
    bound against the image a workload ran on (:func:`l2_cache_holds`)."""
    covers = (
        default_l2_cache_covers_bytes(DEFAULT_CLUSTER_BYTES)
        // DEFAULT_L2_CACHE_MAX_BYTES
        * cache_bytes
    )
    value = "whole-image" if cache_bytes > DEFAULT_L2_CACHE_MAX_BYTES else "default"
    smaller = (
        "; smaller than QEMU's default, which iomatrix does not measure"
        if cache_bytes < DEFAULT_L2_CACHE_MAX_BYTES
        else ""
    )
    return value, (
        f"l2_cache={value} from {option}={size_words(cache_bytes)}: it holds the whole L2 metadata "
        "of "
        f"images up to {size_words(covers)} at 64 KiB clusters (QEMU's default cache: up to "
        f"{size_words(default_l2_cache_covers_bytes(DEFAULT_CLUSTER_BYTES))}){smaller}"
    )


def l2_cache_holds(cache_bytes: int, image_bytes: int, values: Mapping[str, str]) -> bool:
    """Whether an L2 cache bound of `cache_bytes` holds the whole L2 metadata of an `image_bytes`
    image with the cell's cluster layout (what ``l2_cache=whole-image`` measured)."""
    return cache_bytes >= whole_image_l2_cache_bytes(
        image_bytes, _cluster_bytes(values), _l2_entry_bytes(values)
    )


def _l2_cache_note(values: Mapping[str, str]) -> str | None:
    if values.get("l2_cache") != "whole-image":
        return None
    return (
        "l2_cache=whole-image sets l2-cache-size to the image's whole L2 metadata; QEMU ≥ 3.1's "
        "default already "
        "covers images up to 256 GiB at 64 KiB clusters (128 GiB with extended_l2=on, 32× more at "
        "2 MiB), so "
        "below that the two values run the same cache (workloads on smaller images run at the "
        "default only; "
        "rand-read-4k-sparse-1t reads across a 1 TiB thin image)"
    )


def _l2_cache_tool(tool: str) -> Callable[[str], ToolOption]:
    covered = (
        "QEMU ≥ 3.1 already caches the whole L2 metadata of images up to 256 GiB at 64 KiB "
        "clusters "
        "(default l2-cache-size, up to 32 MiB)"
    )

    def spell(value: str) -> ToolOption:
        if value == "default":
            return ToolOption()
        if tool == "libvirt":
            return ToolOption(
                note=f"{covered}; for a larger image libvirt ≥ 7.0 sizes it with "
                "<driver><metadata_cache><max_size unit='bytes'>N</max_size></metadata_cache>, "
                "N = image size × 8 / cluster size (× 16 with extended_l2)"
            )
        return ToolOption(unavailable=f"{tool} has no qcow2 L2 cache option; {covered}")

    return spell


def _zeroes_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    if not shape.known or shape.zero_writes:
        return None
    return "only reads" if not shape.writes else "writes no zero-filled blocks"


def _discard_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    # detect-zeroes=unmap turns zero-filled writes into discards: the policy shows with those too.
    if (
        not shape.known
        or shape.trims
        or (shape.zero_writes and values.get("detect_zeroes") == "unmap")
    ):
        return None
    return "sends no discards (trims)"


def _layout_shown(values: Mapping[str, str], shape: WorkloadShape, image_bytes: int) -> str | None:
    # Reads of blocks written before them (read workloads fill their region first, unmeasured) find
    # data clusters of any size alike through an L2 cache that holds the image's whole mapping;
    # beyond what QEMU's default cache covers, the cluster size (and extended L2's wider entries)
    # decide how much of the mapping it holds. Trims show the layout too: qcow2 frees only whole
    # clusters (a 64 KiB trim inside a 1 MiB cluster frees nothing).
    if not shape.known or shape.writes or shape.trims:
        return None
    covers = default_l2_cache_covers_bytes(_cluster_bytes(values), _l2_entry_bytes(values))
    if image_bytes > covers:
        return None
    return (
        "only reads blocks written before it, through an L2 cache that holds the whole image's "
        "mapping"
    )


def _l2_cache_shown(
    values: Mapping[str, str], shape: WorkloadShape, image_bytes: int
) -> str | None:
    # QEMU's default L2 cache already holds every L2 table of an image up to what it covers (256 GiB
    # at 64 KiB clusters): below that, `default` and `whole-image` are the same cache, whatever the
    # workload does.
    if not shape.known:
        return None
    covers = default_l2_cache_covers_bytes(_cluster_bytes(values), _l2_entry_bytes(values))
    if image_bytes > covers:
        return None
    return (
        f"runs on a {size_words(image_bytes)} image, whose whole L2 metadata QEMU's default cache "
        "already "
        f"holds (up to {size_words(covers)} at this cluster size)"
    )


def size_words(n: int) -> str:
    """A byte count in the largest binary unit it reaches: whole where it divides ("1 TiB", "64
    MiB"), else to one decimal ("95.4 MiB": a libvirt size in KB, powers of 1000); below 1 MiB in
    bytes."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return (
                f"{n >> shift} {unit}"
                if n % (1 << shift) == 0
                else f"{n / (1 << shift):.1f} {unit}"
            )
    return f"{n} B"


DISCARD = Axis(
    "discard",
    "whether discard requests (guest TRIM, NBD trim) free space in the image and below it",
    ("ignore", "unmap"),
    "ignore",
    ("ignore",),
    frozenset({Layer.IMAGE}),
    simpler=("ignore", "unmap"),
    shown_by=_discard_shown,
    qemu=_discard_qemu,
    tools={
        "libvirt": lambda v: ToolOption((("discard", v),)),
        "proxmox": _proxmox_discard,
        "virt-install": lambda v: ToolOption((("discard", v),)),
        "nova": lambda v: ToolOption(
            (("hw_disk_discard", v),),
            note="Nova's hw_disk_discard ([libvirt] in nova.conf) applies to every "
            "instance disk of the compute host",
        ),
    },
)
DETECT_ZEROES = Axis(
    "detect_zeroes",
    "QEMU's zero detection: writes of zeroes become zero clusters / holes (unmap) instead of data",
    ("off", "on", "unmap"),
    "off",
    ("off",),
    frozenset({Layer.IMAGE}),
    rules=(Rule(("detect_zeroes", "discard"), _detect_zeroes_rule),),
    simpler=("off", "on", "unmap"),
    shown_by=_zeroes_shown,
    qemu=lambda v: (
        QemuOptions() if v == "off" else QemuOptions(format_node=(("detect-zeroes", v),))
    ),
    tools={
        "libvirt": lambda v: ToolOption((("detect_zeroes", v),)),
        "proxmox": _proxmox_detect_zeroes,
        "virt-install": lambda v: ToolOption((("detect_zeroes", v),)),
        "nova": _nova_detect_zeroes,
    },
)
CLUSTER_SIZE = Axis(
    "cluster_size",
    "qcow2 cluster size: the unit of allocation and of an L2 entry's mapping",
    tuple(CLUSTER_BYTES),
    "64k",
    ("64k",),
    frozenset({Layer.IMAGE}),
    rules=(_qcow2_only("cluster_size", "64k"),),
    simpler=tuple(CLUSTER_BYTES),
    shown_by=_layout_shown,
    qemu=lambda v: QemuOptions() if v == "64k" else QemuOptions(create=(("cluster_size", v),)),
    tools=_precreated("cluster_size", "cluster_size", "64k"),
)
EXTENDED_L2 = Axis(
    "extended_l2",
    "qcow2 extended L2 entries: 32 subclusters per cluster, allocated separately",
    ("off", "on"),
    "off",
    ("off",),
    frozenset({Layer.IMAGE}),
    rules=(_qcow2_only("extended_l2", "off"),),
    simpler=("off", "on"),
    shown_by=_layout_shown,
    qemu=lambda v: QemuOptions() if v == "off" else QemuOptions(create=(("extended_l2", v),)),
    tools=_precreated("extended_l2", "extended_l2", "off"),
)
L2_CACHE = Axis(
    "l2_cache",
    "qcow2 L2 cache size: QEMU's default, or one that holds the whole image's L2 tables",
    ("default", "whole-image"),
    "default",
    ("default",),
    frozenset({Layer.IMAGE}),
    rules=(_qcow2_only("l2_cache", "default"),),
    simpler=("default", "whole-image"),
    shown_by=_l2_cache_shown,
    qemu_cell=_l2_cache_qemu,
    tools={t: _l2_cache_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")},
    cell_note=_l2_cache_note,
)
IMAGE_AXES = (DISCARD, DETECT_ZEROES, CLUSTER_SIZE, EXTENDED_L2, L2_CACHE)

# -------------------------------------------------------------------------- device axes (issue 24)
# What only the request issuer shows: a guest device's IOThread and virtqueues (and the block
# export's IOThread where qemu-storage-daemon's NBD export supports one). Facts of the installed
# QEMU come from iomatrix.qemu_caps through RuleContext.qemu; a rule without them does not apply.

VIRTIO_BUSES = (domain.Bus.VIRTIO_BLK, domain.Bus.VIRTIO_SCSI, domain.Bus.VIRTIO_SCSI_SINGLE)
# The PCI device whose properties decide what a virtio bus's IOThread/queue options can be (its MMIO
# twin on microvm has the same properties: they belong to the virtio device, not the transport).
VIRTIO_PROBED_DEVICE = {
    domain.Bus.VIRTIO_BLK: "virtio-blk-pci",
    domain.Bus.VIRTIO_SCSI: "virtio-scsi-pci",
    domain.Bus.VIRTIO_SCSI_SINGLE: "virtio-scsi-pci",
}
# Where QEMU gained what (qemu/qemu history): virtio-blk's iothread-vq-mapping in 9.0 (commit
# "virtio-blk: add iothread-vq-mapping parameter", block pull of 2023-12-21), virtio-scsi's in 10.0.
VQ_MAPPING_SINCE = {"virtio-blk-pci": "9.0", "virtio-scsi-pci": "10.0"}
# The NBD export's iothread= exists since 5.2, but before commit f816310d0c32 ("nbd/server: only
# traverse NBDExport->clients from main loop thread", QEMU 9.0, backported to stable 8.2.3) a
# client's disconnect runs its close callback in the IOThread, and qemu-storage-daemon aborts
# (measured on 7.2.22: "Assertion `qemu_in_main_thread() && nbd_server' failed" in
# nbd_blockdev_client_closed, when fio connects).
NBD_EXPORT_IOTHREAD_SINCE = (8, 2, 3)


class IOThread(StrEnum):
    OFF = "off"  # requests run in QEMU's main loop (QEMU's and libvirt's default)
    ON = "on"  # one IOThread for the disk (virtio-scsi: for its controller)
    VQ_MAPPING = "vq-mapping"  # one IOThread per virtqueue (QEMU ≥ 9.0 iothread-vq-mapping)


def _is_virtio(bus: str) -> bool:
    return bus in VIRTIO_BUSES


def _iothread_bus_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["iothread"] != IOThread.OFF and not _is_virtio(values["bus"]):
        return (
            f"bus={values['bus']} has no IOThread option in QEMU (its requests run in the main "
            "loop): "
            "iothread needs virtio-blk, virtio-scsi or virtio-scsi-single"
        )
    return None


def _vq_mapping_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["iothread"] != IOThread.VQ_MAPPING or not _is_virtio(values["bus"]):
        return None
    if not values.get("queues", NA).isdigit() or int(values["queues"]) < 2:
        return (
            "iothread=vq-mapping spreads a disk's virtqueues over IOThreads (one each): it needs "
            "queues of 2 or more"
        )
    if ctx.qemu is None:
        return None
    device = VIRTIO_PROBED_DEVICE[domain.Bus(values["bus"])]
    if ctx.qemu.has_property(device, "iothread-vq-mapping") is False:
        return (
            f"iothread=vq-mapping needs QEMU ≥ {VQ_MAPPING_SINCE[device]} ({device}'s "
            "iothread-vq-mapping); "
            f"this host has {version_text(ctx.qemu.system_version)}"
        )
    return None


def _export_iothread_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    """Where no guest device applies (bus "-"), the request issuer is the block-layer tier's NBD
    export."""
    if values.get("bus", NA) != NA or values["iothread"] == IOThread.OFF:
        return None
    if values["iothread"] == IOThread.VQ_MAPPING:
        return (
            "iothread=vq-mapping maps a guest device's virtqueues to IOThreads; an NBD export has "
            "no "
            "virtqueues: guest tier only"
        )
    if (
        ctx.qemu is not None
        and ctx.qemu.daemon_version is not None
        and ctx.qemu.daemon_version < NBD_EXPORT_IOTHREAD_SINCE
    ):
        return (
            f"qemu-storage-daemon {version_text(ctx.qemu.daemon_version)} aborts when an NBD "
            "client of an "
            "export with iothread= disconnects (assertion in nbd_blockdev_client_closed; fixed in "
            "QEMU 9.0 "
            "and 8.2.3): on this QEMU the guest tier measures IOThreads"
        )
    return None


def _iothread_qemu(value: str) -> QemuOptions:
    if value == IOThread.OFF:
        return QemuOptions()
    objects = (("iothread", "iothread"),)
    if value == IOThread.VQ_MAPPING:
        # qemu_block gives the device one IOThread per virtqueue (iothread0, iothread1, …) in JSON
        # syntax.
        return QemuOptions(objects=objects, device=(("iothread-vq-mapping", "iothread"),))
    return QemuOptions(
        objects=objects, device=(("iothread", "iothread"),), export=(("iothread", "iothread"),)
    )


def _iothread_tool(tool: str) -> Callable[[str], ToolOption]:
    def spell(value: str) -> ToolOption:
        if value == IOThread.OFF:
            return ToolOption()
        if value == IOThread.VQ_MAPPING:
            return ToolOption(
                unavailable={
                    "libvirt": "libvirt 9.0 (Debian 12) has no per-virtqueue IOThread mapping; "
                    "libvirt ≥ 10.0 writes it as <driver queues='N'><iothreads><iothread id='1'/>…"
                    "</iothreads></driver>",
                    "proxmox": "Proxmox VE has no per-virtqueue IOThread mapping (iothread=1 is "
                    "one IOThread per disk)",
                    "virt-install": "virt-install has no --disk key for a per-virtqueue IOThread "
                    "mapping",
                    "nova": "Nova has no per-disk IOThread setting",
                }[tool]
            )
        # IOThread 1 of the domain's <iothreads>; snippets.py puts it where each tool wants it (a
        # virtio-scsi controller's, the domain's <iothreads>, virt-install's --iothreads).
        return {
            "libvirt": ToolOption((("iothread", "1"),)),
            "proxmox": ToolOption((("iothread", "1"),)),
            "virt-install": ToolOption((("driver.iothread", "1"),)),
            "nova": ToolOption(
                unavailable="Nova has no per-disk IOThread setting (no image property or flavor "
                "extra spec for <driver iothread=>)"
            ),
        }[tool]

    return spell


IOTHREAD = Axis(
    "iothread",
    "where QEMU runs the disk's requests: the main loop, an IOThread, or one IOThread per "
    "virtqueue",
    tuple(IOThread),
    IOThread.OFF,
    (IOThread.OFF,),
    frozenset({Layer.FRONTEND}),
    rules=(
        Rule(("iothread", "bus"), _iothread_bus_rule),
        Rule(("iothread", "bus"), _vq_mapping_rule),
        Rule(("iothread",), _export_iothread_rule),
    ),
    simpler=tuple(IOThread),
    qemu=_iothread_qemu,
    on_controller={"iothread": "iothread", "iothread-vq-mapping": "iothread-vq-mapping"},
    tools={t: _iothread_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)


QUEUES_AUTO = "auto"


def _queues_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    queues = values["queues"]
    if queues == QUEUES_AUTO:
        return None
    if not _is_virtio(values["bus"]):
        return (
            f"bus={values['bus']} has no virtqueues to count: queues needs virtio-blk, virtio-scsi "
            "or "
            "virtio-scsi-single"
        )
    if ctx.host_cpus is not None and int(queues) > ctx.host_cpus:
        return (
            f"queues={queues} needs {queues} guest vCPUs (the guest boots one per queue: more "
            "queues than "
            f"vCPUs go unused); this host has {ctx.host_cpus} CPUs"
        )
    return None


def _queues_tool(tool: str) -> Callable[[str], ToolOption]:
    def spell(value: str) -> ToolOption:
        if value == QUEUES_AUTO:
            return ToolOption()  # nothing set: QEMU's default
        # Proxmox (qemu-server PVE/QemuServer/Drive.pm): scsiN drives have queues=<integer> (minimum
        # 2), given to the disk's own controller as num_queues with scsihw virtio-scsi-single only;
        # virtioN drives have none. snippets.py says where a bus cannot take it.
        if tool == "proxmox" and int(value) < 2:
            return ToolOption(
                unavailable=f"Proxmox's queues= starts at 2 (qm.conf); without it QEMU gives one "
                f"queue per vCPU, not {value}"
            )
        return {
            "libvirt": ToolOption((("queues", value),)),
            "proxmox": ToolOption((("queues", value),)),
            "virt-install": ToolOption((("driver.queues", value),)),
            "nova": ToolOption(
                unavailable="Nova has no per-disk virtqueue count (its multiqueue setting, "
                "hw_vif_multiqueue_enabled, is for network interfaces)"
            ),
        }[tool]

    return spell


QUEUES = Axis(
    # QEMU's default (num-queues unset, 'auto'): one virtqueue per vCPU on PCI since QEMU 5.2, one
    # on virtio-mmio.
    "queues",
    "how many virtqueues the guest's virtio disk (or virtio-scsi controller) has; the guest gets a "
    "vCPU "
    "per queue",
    (QUEUES_AUTO, "1", "2", "4", "8"),
    QUEUES_AUTO,
    (QUEUES_AUTO,),
    frozenset({Layer.DEVICE}),
    rules=(Rule(("queues", "bus"), _queues_rule),),
    simpler=(QUEUES_AUTO, "1", "2", "4", "8"),
    # virtio-blk's num-queues; qemu_block moves it onto the controller as num_queues for
    # virtio-scsi.
    qemu=lambda v: QemuOptions() if v == QUEUES_AUTO else QemuOptions(device=(("num-queues", v),)),
    on_controller={"num-queues": "num_queues"},
    tools={t: _queues_tool(t) for t in ("libvirt", "proxmox", "virt-install", "nova")},
)
