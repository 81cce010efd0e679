"""Render fio job files for a matrix cell.

Bare metal reproduces each QEMU cache mode on the host with fio options
(domain-brief §1, §9): what matters is whether the host page cache is used
(O_DIRECT or not) and whether guest flushes reach the disk after every write,
at the end only, or never. Inside a guest fio always uses O_DIRECT on the
virtual disk, so what is measured is the host-side cache mode, not the guest's
own page cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from iomatrix.domain import CACHE, FIO_ENGINE, Aio, CacheMode
from iomatrix.tiers import declaration
from iomatrix.workloads import Workload

MEASURE_JOB = "measure"
PREFILL_JOB = "prefill"
# fio's default clock source (the TSC) costs ~70 ms of start-up per run checking that the TSC is monotonic
# across CPUs (fio_monotonic_clocktest) plus ~100 ms calibrating it; clock_gettime (vDSO) costs nothing at
# start-up, and its few ns per call are nothing against an NBD round trip of ≥ 10 µs. The block-layer tier uses
# it (0.28–0.31 s → 0.21–0.22 s per fio start); in TCG guests it saved nothing measurable (their fio start-up
# is the prefill and fio's own sleeps), so the guest keeps fio's default. docs/benchmarks.md (issues 10, 15).
FIO_CLOCKSOURCE = "--clocksource=clock_gettime"
# The measured job logs its IOPS per interval into IOPS_LOG_FILE (in fio's
# working directory), ~10 points per run, for the steady-state check.
IOPS_LOG_PREFIX = "iomx"
IOPS_LOG_FILE = f"{IOPS_LOG_PREFIX}_iops.log"
STEADY_POINTS = 10


@dataclass(frozen=True)
class JobShape:
    """Size and duration of a run: the plan's, or a workload's own region and image (Workload.image_bytes)."""

    size_bytes: int
    runtime_s: float
    ramp_s: float = 0.0
    image_bytes: int | None = None  # the disk image each run creates; None: the plan's image_size

    @classmethod
    def for_workload(cls, w: Workload, *, size_bytes: int, image_bytes: int, runtime_s: float,
                     ramp_s: float = 0.0) -> JobShape:
        """The plan's region and image, or the workload's own image as its whole region."""
        if w.image_bytes is not None:
            return cls(size_bytes=w.image_bytes, runtime_s=runtime_s, ramp_s=ramp_s, image_bytes=w.image_bytes)
        return cls(size_bytes=size_bytes, runtime_s=runtime_s, ramp_s=ramp_s, image_bytes=image_bytes)


def _workload_lines(w: Workload) -> list[str]:
    lines = [f"rw={w.rw}", f"bs={w.bs}", f"iodepth={w.iodepth}"]
    if w.rwmixread is not None:
        lines.append(f"rwmixread={w.rwmixread}")
    if w.zero_buffers:
        lines.append("zero_buffers=1")
    if w.prefill_stride is not None:
        # fio's map of blocks already touched costs a bit per block (32 MiB for 1 TiB of 4 KiB blocks) and start-up
        # time; a time-based random job across a wide sparse image needs no such coverage guarantee.
        lines.append("norandommap=1")
    if w.rate_iops is not None:
        lines.append(f"rate_iops={w.rate_iops}")
    elif w.rate_of_max is not None:  # never run a rate-limited job without its limit (the runner sets it first)
        raise ValueError(f"workload {w.name}: its rate ({w.rate_of_max.fraction:.0%} of the bare-metal maximum) "
                         "is not resolved yet")
    return lines


def _timing_lines(shape: JobShape) -> list[str]:
    # Milliseconds: fio truncates fractional seconds ("0.5s" runs ~0.26 s).
    runtime_ms = round(shape.runtime_s * 1000)
    lines = ["time_based=1", f"runtime={runtime_ms}ms",
             f"write_iops_log={IOPS_LOG_PREFIX}", f"log_avg_msec={max(50, runtime_ms // (STEADY_POINTS + 2))}",
             "per_job_logs=0"]
    if shape.ramp_s:
        lines.append(f"ramp_time={round(shape.ramp_s * 1000)}ms")
    return lines


PREFILL_BLOCK_BYTES = 4096  # a strided prefill's block


def _prefill_section(w: Workload, shape: JobShape, bs: str = "1m") -> list[str]:
    # Reads of never-written blocks hit holes (sparse file, unallocated qcow2
    # cluster) and never touch the disk, and rewrites and trims need written
    # blocks: write the region first, unmeasured.
    if w.prefill_stride is not None:
        # One block per stride (fio's `rw=write:N` skips N bytes after each write): the image's metadata for the
        # whole region exists, its data stays thin (Workload.prefill_stride). fio counts a job's bytes, not its
        # offsets: without number_ios it would wrap around until it had written `size` bytes.
        writes = -(-shape.size_bytes // w.prefill_stride)
        return [f"[{PREFILL_JOB}]", f"rw=write:{w.prefill_stride - PREFILL_BLOCK_BYTES}", f"bs={PREFILL_BLOCK_BYTES}",
                f"number_ios={writes}", "time_based=0", "end_fsync=1", ""]
    return [f"[{PREFILL_JOB}]", "rw=write", f"bs={bs}", "time_based=0", "end_fsync=1", ""]


def baremetal_job(w: Workload, *, cache: str, aio: str, target: str, shape: JobShape,
                  custom_text: str | None = None) -> str:
    """fio job file reproducing `cache` and `aio` on the host against `target`.

    `target` is a file path (created by fio) or a whole block device.
    """
    sem = CACHE[CacheMode(cache)]
    fdatasync = w.fdatasync
    if sem.flush_every_write:
        fdatasync = 1
    if sem.no_flush:
        fdatasync = 0
    glob = [
        "[global]",
        f"filename={target}",
        f"size={shape.size_bytes}",
        f"direct={int(sem.direct)}",
        f"ioengine={FIO_ENGINE[Aio(aio)]}",
        # The guest's final flush (a clean shutdown) reaches the disk unless flushes are dropped.
        f"end_fsync={int(sem.honours_flush)}",
        # fio's default, stated: POSIX_FADV_DONTNEED on the file before each
        # job, so buffered reads do not start from the prefill's pages.
        "invalidate=1",
        "randrepeat=0",
        "group_reporting=0",
        # Jobs as threads of the one fio process iomatrix starts, not forked processes in sessions of their
        # own: the parent-death signal iomatrix sets on fio then stops all of its I/O if iomatrix is killed.
        "thread=1",
        "",
    ]
    if custom_text is not None:
        if fdatasync:
            glob.insert(-1, f"fdatasync={fdatasync}")
        return "\n".join(glob) + custom_text
    lines = list(glob)
    if w.writes_first:
        lines += _prefill_section(w, shape)
    lines += [f"[{MEASURE_JOB}]", "stonewall", *_workload_lines(w), *_timing_lines(shape)]
    if fdatasync:
        lines.append(f"fdatasync={fdatasync}")
    return "\n".join(lines) + "\n"


GUEST_DISK_PLACEHOLDER = "@DISK@"


def guest_job(w: Workload, *, shape: JobShape, custom_text: str | None = None) -> str:
    """fio job run inside the guest against the raw disk under test.

    O_DIRECT with libaio in the guest: the guest's page cache is kept out, so
    the host cache mode is what differs between cells. The disk path is the
    placeholder the guest's init replaces with the device it finds.
    """
    glob = [
        "[global]",
        f"filename={GUEST_DISK_PLACEHOLDER}",
        f"size={shape.size_bytes}",
        "direct=1",
        "ioengine=libaio",
        "end_fsync=1",
        "randrepeat=0",
        "",
    ]
    if custom_text is not None:
        return "\n".join(glob) + custom_text
    lines = list(glob)
    if w.writes_first:
        lines += _prefill_section(w, shape)
    lines += [f"[{MEASURE_JOB}]", "stonewall", *_workload_lines(w), *_timing_lines(shape)]
    if w.fdatasync:
        lines.append(f"fdatasync={w.fdatasync}")
    return "\n".join(lines) + "\n"


# fio's nbd engine (libnbd) has no fdatasync: `fdatasync=N` fails with EINVAL. `fsync=N` becomes an NBD flush,
# which is all a block device can be asked for anyway (a guest's fdatasync reaches its disk as a flush too).
_FDATASYNC_LINE = re.compile(r"^(\s*)fdatasync(\s*=)", re.MULTILINE)
SUBST_FDATASYNC = "fdatasync=N -> fsync=N (fio's nbd engine refuses fdatasync; both become an NBD flush)"


def nbd_uri(socket: str, export: str) -> str:
    """libnbd URI of an export on a UNIX socket (a relative socket path is resolved in fio's working dir)."""
    return f"nbd+unix:///{export}?socket={socket}"


@dataclass(frozen=True)
class NbdJob:
    text: str
    substitutions: list[str] = field(default_factory=list)  # what was changed so the nbd engine runs it


def nbd_job(w: Workload, *, uri: str, shape: JobShape, custom_text: str | None = None) -> NbdJob:
    """fio job talking NBD to qemu-storage-daemon's export of the cell's block graph.

    There is no host page cache or O_DIRECT on fio's side: every request goes over the socket to QEMU's
    block layer, and the cache mode is applied there, exactly as for a guest's requests. The workload's own
    flush cadence (fdatasync=N) is sent as NBD flushes; end_fsync=1 is the final flush a guest sends before
    a clean shutdown (as in the guest tier's job).
    """
    glob = [
        "[global]",
        "ioengine=nbd",
        f"uri={uri}",
        f"size={shape.size_bytes}",
        "end_fsync=1",
        "randrepeat=0",
        "",
    ]
    subst: list[str] = []
    if custom_text is not None:
        text, n = _FDATASYNC_LINE.subn(r"\1fsync\2", custom_text)
        if n:
            subst.append(SUBST_FDATASYNC)
        return NbdJob("\n".join(glob) + text, subst)
    lines = list(glob)
    if w.writes_first:
        lines += _prefill_section(w, shape)
    lines += [f"[{MEASURE_JOB}]", "stonewall", *_workload_lines(w), *_timing_lines(shape)]
    if w.fdatasync:
        lines.append(f"fsync={w.fdatasync}")
        subst.append(SUBST_FDATASYNC)
    return NbdJob("\n".join(lines) + "\n", subst)


def page_cache_method(w: Workload, *, tier: str, cache: str, caches_dropped: bool) -> str:
    """How the page cache was kept out of a read measurement (recorded per run); the tier words its part
    (Tier.page_cache_wording)."""
    if not w.reads:
        return "n/a (no reads measured)"
    dropped = "host caches dropped before the run" if caches_dropped else "host caches NOT dropped"
    return f"{declaration(tier).page_cache_wording(cache)}; {dropped}"
