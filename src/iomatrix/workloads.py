"""Workload presets: what a run asks of the disk.

Presets follow the seeds: the Windows-guests-on-KVM I/O article's HD-Tune-like sweep (sequential 1
MiB, random 512 B / 4 KiB / 64 KiB / 1 MiB), a database-like 4 KiB write with an fdatasync after
every write, a 70/30 mix, and the KVM-on-ext4 timing article's filesystem-level read-heavy /
write-heavy jobs (on a guest filesystem). Issue 24's presets make QEMU's image-layer axes visible
(docs/axes.md): zero-filled writes (zero detection), trims of a written region (discard), and first
writes to a fresh thin image against rewrites of written blocks (qcow2 cluster layout). A custom
workload is an fio job file, named in a plan as ``file:PATH``. A tier's own workloads (its workload
kind) are not here: its declaration makes them (``TierDeclaration.workload_named``), and
:func:`resolve` and :func:`preset` ask the registered tiers, so that this catalogue names no tier.

What a workload is (the ``Workload`` model) is ``iomatrix.domain.workload``'s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from iomatrix import tiers
from iomatrix.domain.axes import Layer
from iomatrix.domain.workload import RateOfMax, Workload
from iomatrix.errors import UserError
from iomatrix.fio.allowlist import MAX_JOB_FILE_BYTES, validate_job_text
from iomatrix.roles import role_workload, role_workload_names
from iomatrix.textfile import read_small_text


def _fio(name: str, description: str, rw: str, bs: str, metric: str, **kw: object) -> Workload:
    return Workload(name=name, description=description, rw=rw, bs=bs, primary_metric=metric, **kw)  # type: ignore[arg-type]


# The queue depths of the latency-against-load family (rand-read-4k-qd1 ... -qd64).
QD_SWEEP = (1, 4, 16, 64)
# rand-read-4k-rate2000: random 4 KiB at a fixed offered load (fio rate_iops), the rate in the name.
_RATE_NAME = re.compile(r"^rand-(read|write)-4k-rate([0-9]+)$")
MAX_RATE_IOPS = 10_000_000
# Queue depth of a rate-limited job: enough in flight that a slow configuration can still reach the
# rate.
RATE_IODEPTH = 16
# rand-read-4k-rate50pct: the same at N% of the bare-metal maximum of rand-read-4k-qd16 measured in
# the same sweep.
_RATE_PCT_NAME = re.compile(r"^rand-(read|write)-4k-rate([0-9]+)pct$")
# A workload of a queue-depth family: "<family>-qd<depth>".
_QD_NAME = re.compile(r"^(.+)-qd([0-9]+)$")


def qd_point(name: str) -> tuple[str, int] | None:
    """(family, queue depth) of a queue-depth family member ("rand-read-4k-qd16" → ("rand-read-4k",
    16))."""
    m = _QD_NAME.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def rate_workload(name: str) -> Workload | None:
    """The fixed-load preset rand-read-4k-rateN / rand-write-4k-rateN (N IOPS offered), or None for
    another name. A rate the host cannot reach is not refused here: each run says whether it reached
    it (load.reached)."""
    m = _RATE_NAME.match(name)
    if m is None:
        return rate_of_max_workload(name)
    d, rate = m.group(1), int(m.group(2))
    if not 1 <= rate <= MAX_RATE_IOPS:
        raise UserError(
            f"workload '{name}': rate {rate} IOPS is out of range",
            hint=f"write rand-{d}-4k-rateN with N from 1 to {MAX_RATE_IOPS}, e.g. "
            f"rand-{d}-4k-rate2000",
        )
    return Workload(
        name=name,
        description=f"random {d}, 4 KiB, at a fixed offered load of {rate} IOPS "
        f"(queue depth up to {RATE_IODEPTH})",
        rw=f"rand{d}",
        bs="4k",
        iodepth=RATE_IODEPTH,
        rate_iops=rate,
        primary_metric=f"{d}.clat_p99_us",
        higher_is_better=False,
    )


def rate_of_max_workload(name: str) -> Workload | None:
    """rand-read-4k-rateNpct / rand-write-4k-rateNpct: the fixed-load job at N% (1-100) of the
    bare-metal maximum of the same job without a rate (rand-<rw>-4k-qd16, queue depth RATE_IODEPTH)
    measured in the same sweep; its rate_iops is set when the sweep knows that maximum
    (iomatrix.rates). None for another name."""
    m = _RATE_PCT_NAME.match(name)
    if m is None:
        return None
    d, pct = m.group(1), int(m.group(2))
    if not 1 <= pct <= 100:
        raise UserError(
            f"workload '{name}': {pct}% of the bare-metal maximum is out of range",
            hint=f"write rand-{d}-4k-rateNpct with N from 1 to 100, e.g. rand-{d}-4k-rate50pct",
        )
    reference = f"rand-{d}-4k-qd{RATE_IODEPTH}"
    return Workload(
        name=name,
        description=f"random {d}, 4 KiB, at a fixed offered load of {pct}% of the bare-metal "
        f"maximum of {reference} in the same sweep (queue depth up to {RATE_IODEPTH})",
        rw=f"rand{d}",
        bs="4k",
        iodepth=RATE_IODEPTH,
        rate_of_max=RateOfMax(pct / 100, reference),
        primary_metric=f"{d}.clat_p99_us",
        higher_is_better=False,
    )


# rand-read-4k-sparse-1t: an image larger than QEMU's default L2 cache covers (256 GiB at 64 KiB
# clusters, 32 MiB of L2 tables; docs/axes.md, l2_cache), four times over, so the default cache
# holds a quarter of its L2 tables. One written block per 512 MiB allocates every L2 table (one
# table maps 512 MiB at 64 KiB clusters, more at larger ones) with 2048 writes: 128 MiB of tables
# and 128 MiB of data clusters on the backing at 64 KiB clusters (4 GiB of clusters at 2 MiB),
# whatever the virtual size.
SPARSE_L2_WORKLOAD = "rand-read-4k-sparse-1t"
SPARSE_L2_IMAGE_BYTES = 1 << 40
SPARSE_L2_STRIDE = 512 << 20
# rand-write-4k-first: first writes need a region far larger than a run writes, counted in clusters.
# On the plans' usual 128–256 MiB regions a 1 s run at ~25k IOPS has allocated nearly all 2048
# clusters of 64 KiB within its first 0.3 s and spends the rest rewriting them (64k vs 1M:
# 0.94–0.97×, not separable from 5% in 60 runs); on 16 GiB (262144 clusters of 64 KiB, 16384 of 1
# MiB) most writes allocate: 1M 1.28× 64k in 4 runs (docs/benchmarks-history.md,
# "Issue 24: `modern` on a quiet host"). The space a run allocates
# is what it touches: ≤ 2 GiB at 64 KiB clusters, up to ~12 GiB at 1 MiB (QEMU fallocates the rest
# of each new cluster), freed when the run's image is deleted. seq-write-zeroes-1m-first uses the
# same size: its writes go no faster than the block layer's transport (NBD over a UNIX socket,
# ~1.3–1.7 GB/s here), so a run of up to 8 s never wraps around to rewrite what it wrote.
FIRST_WRITES_IMAGE_BYTES = 16 << 30


FLUSHING_WRITE_WORKLOAD = "rand-write-4k-flush32"


def _sizes() -> list[tuple[str, str]]:
    return [("512", "512"), ("4k", "4k"), ("64k", "64k"), ("1m", "1m")]


PRESETS: dict[str, Workload] = {
    w.name: w
    for w in [
        _fio("seq-read-1m", "sequential read, 1 MiB blocks", "read", "1m", "read.bw_mbps"),
        _fio("seq-write-1m", "sequential write, 1 MiB blocks", "write", "1m", "write.bw_mbps"),
        *[
            _fio(
                f"rand-read-{label}",
                f"random read, {bs} blocks (block-size sweep)",
                "randread",
                bs,
                "read.iops" if label in ("512", "4k") else "read.bw_mbps",
            )
            for label, bs in _sizes()
        ],
        *[
            _fio(
                f"rand-write-{label}",
                f"random write, {bs} blocks (block-size sweep)",
                "randwrite",
                bs,
                "write.iops" if label in ("512", "4k") else "write.bw_mbps",
            )
            for label, bs in _sizes()
        ],
        _fio(
            "rand-read-4k-qd32",
            "random read, 4 KiB, queue depth 32",
            "randread",
            "4k",
            "read.iops",
            iodepth=32,
        ),
        # Pure latency: one I/O in flight, so nothing queues in front of it (ranked by p99
        # completion latency).
        _fio(
            "rand-read-4k-qd1",
            "random read, 4 KiB, queue depth 1: pure latency",
            "randread",
            "4k",
            "read.clat_p99_us",
            higher_is_better=False,
        ),
        _fio(
            "rand-write-4k-qd1",
            "random write, 4 KiB, queue depth 1: pure latency",
            "randwrite",
            "4k",
            "write.clat_p99_us",
            higher_is_better=False,
        ),
        # Latency against load: one family, one point per queue depth (stats/knee.py finds where
        # latency starts to grow faster than throughput); qd1 above is the family's first point.
        *[
            _fio(
                f"rand-{d}-4k-qd{qd}",
                f"random {d}, 4 KiB, queue depth {qd} (latency-against-load sweep)",
                f"rand{d}",
                "4k",
                f"{d}.iops",
                iodepth=qd,
            )
            for d in ("read", "write")
            for qd in QD_SWEEP[1:]
        ],
        _fio(
            "db-write-4k-fdatasync",
            "database-like: 4 KiB random write, fdatasync after every write",
            "randwrite",
            "4k",
            "write.iops",
            fdatasync=1,
        ),
        # A guest that flushes now and then (a filesystem's journal commits): one flush per 32
        # writes. What turns librbd's cache from writethrough into writeback under Ceph's default
        # rbd_cache_writethrough_until_flush, which a workload that never flushes never does (the
        # ceph plan measures both).
        _fio(
            FLUSHING_WRITE_WORKLOAD,
            "random 4 KiB writes that flush now and then (fdatasync every 32 writes, as a "
            "guest filesystem's journal commits)",
            "randwrite",
            "4k",
            "write.iops",
            fdatasync=32,
        ),
        _fio(
            "mixed-70-30",
            "random 4 KiB mix, 70% read / 30% write",
            "randrw",
            "4k",
            "total.iops",
            rwmixread=70,
        ),
        _fio(
            "seq-write-zeroes-1m",
            "sequential write of zero-filled 1 MiB blocks (what QEMU's zero detection "
            "turns into zero clusters or holes)",
            "write",
            "1m",
            "write.bw_mbps",
            zero_buffers=True,
        ),
        # The first pass over fresh space is what a guest zeroing a new disk does, and where zero
        # detection saves the most: with it off every write also allocates; on a plan's small region
        # a run wraps around and mostly rewrites (docs/benchmarks-history.md, "Issue 24: zero
        # detection in the block layer": qcow2 on/off 2.11× on first writes, 1.72× wrapping around).
        _fio(
            "seq-write-zeroes-1m-first",
            "sequential write of zero-filled 1 MiB blocks across a fresh "
            f"{FIRST_WRITES_IMAGE_BYTES >> 30} GiB thin image of its own: first writes "
            "of zeros, as a guest zeroing a "
            "new disk does (what QEMU's zero detection turns into zero clusters or holes "
            "instead of allocating)",
            "write",
            "1m",
            "write.bw_mbps",
            zero_buffers=True,
            image_bytes=FIRST_WRITES_IMAGE_BYTES,
            needs_layer=Layer.IMAGE,
            needs_why="writes zeros into a fresh thin disk image through QEMU (zero detection is "
            "QEMU's); fio on the "
            "host writes a file it lays out (fallocates) first",
        ),
        _fio(
            "rand-trim-64k",
            "random 64 KiB trims (discards) over a written region: what QEMU's discard policy "
            "does with them",
            "randtrim",
            "64k",
            "trim.iops",
            prefill=True,
            needs_layer=Layer.IMAGE,
            needs_why="trims a disk image through QEMU (its discard policy decides what a trim "
            "does); fio on the "
            "host cannot trim an image file (BLKDISCARD is for block devices)",
        ),
        _fio(
            "rand-write-4k-first",
            "random 4 KiB writes at queue depth 16 across a fresh "
            f"{FIRST_WRITES_IMAGE_BYTES >> 30} GiB thin image of its own: a run touches "
            "a small share of its "
            "clusters, so most writes allocate (qcow2 cluster layout)",
            "randwrite",
            "4k",
            "write.iops",
            iodepth=16,
            image_bytes=FIRST_WRITES_IMAGE_BYTES,
            needs_layer=Layer.IMAGE,
            needs_why="allocates in a fresh thin disk image through QEMU; fio on the host writes "
            "a file it lays out "
            "(fallocates) first",
        ),
        _fio(
            "rand-write-4k-rewrite",
            "random 4 KiB writes at queue depth 16 to blocks written before (an unmeasured "
            "prefill): rewrites, no allocation",
            "randwrite",
            "4k",
            "write.iops",
            iodepth=16,
            prefill=True,
        ),
        _fio(
            SPARSE_L2_WORKLOAD,
            f"random 4 KiB reads at queue depth 16 across a {SPARSE_L2_IMAGE_BYTES >> 40} TiB "
            f"thin image with one 4 KiB block written every {SPARSE_L2_STRIDE >> 20} MiB "
            "(an unmeasured prefill): "
            "every qcow2 L2 table exists and nearly every read finds a hole, so what a "
            "read costs is finding its "
            "L2 entry: in QEMU's L2 cache, or read from the image",
            "randread",
            "4k",
            "read.iops",
            iodepth=16,
            image_bytes=SPARSE_L2_IMAGE_BYTES,
            prefill_stride=SPARSE_L2_STRIDE,
            needs_layer=Layer.IMAGE,
            needs_why="reads a qcow2 image's metadata through QEMU (its L2 cache); fio on the "
            "host has no image "
            "layer",
        ),
        Workload(
            "fs-read",
            "read-heavy filesystem job: walk a file tree and list a large tarball (guest fs)",
            kind="fs-read",
            primary_metric="workload.seconds",
            higher_is_better=False,
        ),
        Workload(
            "fs-write",
            "write-heavy filesystem job: large sequential writes with sync, then extract a "
            "tarball and sync (guest fs)",
            kind="fs-write",
            primary_metric="workload.seconds",
            higher_is_better=False,
        ),
    ]
}


def load_custom(spec: str, base_dir: Path | None = None) -> Workload:
    """Load a ``file:PATH`` workload: an fio job file holding workload-shape options only.

    The file is validated against `iomatrix.fio.allowlist` and kept as its canonical
    re-rendering (`custom_text`): what runs is what was checked, even if the file
    changes later. The workload is named by the path as written in the plan, so two
    job files with the same base name stay two workloads.
    """
    raw = spec.removeprefix("file:")
    if not raw.strip():
        raise UserError(
            f"custom workload '{spec}': no path given",
            hint="write file:PATH, e.g. file:jobs/oltp.fio",
        )
    path = Path(raw)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    label = f"custom workload '{spec[:200]}': {str(path)[:200]}"
    refuse_outside(path, base_dir, label)
    text = read_small_text(
        path,
        label=label,
        noun="fio job file",
        a_noun="an fio job file",
        limit=MAX_JOB_FILE_BYTES,
        hint="give the path of an fio job file you wrote (UTF-8 text)",
    )
    job = validate_job_text(text, str(path))
    rw = "randrw" if job.reads and job.writes else ("randread" if job.reads else "randwrite")
    return Workload(
        name=f"file:{os.path.normpath(raw)}",
        description=f"custom fio job file {path}",
        kind="custom",
        rw=rw,
        custom_path=path,
        custom_text=job.text,
        primary_metric="total.iops",
    )


# Directories whose files are the host's own (accounts, keys, kernel interfaces, devices): a job
# file is never read from them, whatever the plan's own directory is.
SYSTEM_ROOTS = {
    Path("/etc"): "the host's configuration",
    Path("/proc"): "a kernel interface",
    Path("/sys"): "a kernel interface",
    Path("/dev"): "a kernel interface",
}


def refuse_outside(path: Path, base_dir: Path | None, label: str) -> None:
    """Refuse, by its path and before it is read, a job file under a system directory or outside
    the plan's directory (`base_dir`; None for a built-in plan or a direct call, which have none).

    A plan is data anyone may hand over; what its errors quote of a job file must never be a line
    of /etc/shadow, so such a file is not opened at all. Both the path as written and the path its
    links lead to are checked: `jobs/x.fio` linked to /etc/shadow is refused like /etc/shadow."""
    hint = "put the fio job file in the plan's directory (or below it) and name it from there"
    written = Path(os.path.normpath(path))
    real = Path(os.path.realpath(path))
    for root, what in SYSTEM_ROOTS.items():
        if written == root or written.is_relative_to(root):
            raise UserError(f"{label} is under {root}, {what}, not a job file", hint=hint)
        if real == root or real.is_relative_to(root):
            raise UserError(
                f"{label} leads to a file under {root}, {what}, not a job file", hint=hint
            )
    if base_dir is None:
        return
    home = Path(os.path.realpath(base_dir))
    if not (written.is_relative_to(base_dir) and real.is_relative_to(home)):
        raise UserError(f"{label} is outside the plan's directory {home}", hint=hint)


def listed(name: str) -> Workload | None:
    """A preset or a workload a tier's declaration lists as its own, by name; None for any other (a
    rate, a name a tier makes its workload from, a custom job file)."""
    return PRESETS.get(name) or tiers.listed_tier_workloads().get(name) or role_workload(name)


def preset(name: str) -> Workload | None:
    """A preset by its stored name (the fixed-load rand-*-4k-rateN included), None for a custom or
    unknown one."""
    try:
        return (
            PRESETS.get(name)
            or rate_workload(name)
            or tiers.tier_workload(name)
            or role_workload(name)
        )
    except UserError:
        return None


def resolve(name: str, base_dir: Path | None = None) -> Workload:
    """A preset by name, a tier's own workload (named by its declaration), or a custom job file
    given as ``file:PATH``."""
    if name.startswith("file:"):
        return load_custom(name, base_dir)
    if (own := tiers.tier_workload(name)) is not None:
        return own
    if (rated := rate_workload(name)) is not None:
        return rated
    # a built-in role's job ("database:data", iomatrix.roles)
    if (job := role_workload(name)) is not None:
        return job
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(
            f"unknown workload '{name}'",
            hint=f"valid presets: {', '.join([*PRESETS, *tiers.listed_tier_workloads()])}, "
            f"role jobs {', '.join(role_workload_names())}, "
            "rand-read-4k-rateN / rand-write-4k-rateN "
            "(N IOPS offered), rand-read-4k-rateNpct / rand-write-4k-rateNpct (N% of the "
            "bare-metal "
            "maximum); or file:PATH for an fio job file",
        ) from None
