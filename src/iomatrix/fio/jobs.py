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
from iomatrix.domain.workload import Workload

MEASURE_JOB = "measure"
PREFILL_JOB = "prefill"
# fio's default clock source (the TSC) costs ~70 ms of start-up per run checking that the TSC is
# monotonic across CPUs (fio_monotonic_clocktest) plus ~100 ms calibrating it; clock_gettime (vDSO)
# costs nothing at start-up, and its few ns per call are nothing against an NBD round trip of ≥ 10
# µs. The block-layer tier uses it (0.28–0.31 s → 0.21–0.22 s per fio start); in TCG guests it saved
# nothing measurable (their fio start-up is the prefill and fio's own sleeps), so the guest keeps
# fio's default. docs/benchmarks-history.md: "Block layer: where a run's overhead goes, and what
# was cut" (issue 10), "Quiet-host re-measurement after the merges" (issue 15).
FIO_CLOCKSOURCE = "--clocksource=clock_gettime"
# The measured job logs its IOPS per interval into IOPS_LOG_FILE (in fio's
# working directory), ~10 points per run, for the steady-state check.
IOPS_LOG_PREFIX = "iomx"
IOPS_LOG_FILE = f"{IOPS_LOG_PREFIX}_iops.log"
STEADY_POINTS = 10


@dataclass(frozen=True)
class JobShape:
    """Size and duration of a run: the plan's, or a workload's own region and image
    (Workload.image_bytes)."""

    size_bytes: int
    runtime_s: float
    ramp_s: float = 0.0
    image_bytes: int | None = None  # the disk image each run creates; None: the plan's image_size

    @classmethod
    def for_workload(
        cls,
        w: Workload,
        *,
        size_bytes: int,
        image_bytes: int,
        runtime_s: float,
        ramp_s: float = 0.0,
    ) -> JobShape:
        """The plan's region and image, or the workload's own image as its whole region."""
        if w.image_bytes is not None:
            return cls(
                size_bytes=w.image_bytes,
                runtime_s=runtime_s,
                ramp_s=ramp_s,
                image_bytes=w.image_bytes,
            )
        return cls(
            size_bytes=size_bytes, runtime_s=runtime_s, ramp_s=ramp_s, image_bytes=image_bytes
        )


def _workload_lines(w: Workload) -> list[str]:
    lines = [f"rw={w.rw}", f"bs={w.bs}", f"iodepth={w.iodepth}"]
    if w.rwmixread is not None:
        lines.append(f"rwmixread={w.rwmixread}")
    if w.zero_buffers:
        lines.append("zero_buffers=1")
    if w.prefill_stride is not None:
        # fio's map of blocks already touched costs a bit per block (32 MiB for 1 TiB of 4 KiB
        # blocks) and start-up time; a time-based random job across a wide sparse image needs no
        # such coverage guarantee.
        lines.append("norandommap=1")
    if w.rate_iops is not None:
        lines.append(f"rate_iops={w.rate_iops}")
    # never run a rate-limited job without its limit (the runner sets it first)
    elif w.rate_of_max is not None:
        raise ValueError(
            f"workload {w.name}: its rate ({w.rate_of_max.fraction:.0%} of the bare-metal maximum) "
            "is not resolved yet"
        )
    return lines


def _timing_lines(shape: JobShape) -> list[str]:
    # Milliseconds: fio truncates fractional seconds ("0.5s" runs ~0.26 s).
    runtime_ms = round(shape.runtime_s * 1000)
    lines = [
        "time_based=1",
        f"runtime={runtime_ms}ms",
        f"write_iops_log={IOPS_LOG_PREFIX}",
        f"log_avg_msec={max(50, runtime_ms // (STEADY_POINTS + 2))}",
        "per_job_logs=0",
    ]
    if shape.ramp_s:
        lines.append(f"ramp_time={round(shape.ramp_s * 1000)}ms")
    return lines


# Every job iomatrix builds runs as a thread of the one fio process it starts, never as a forked
# process in a session of its own: the parent-death signal iomatrix sets on fio (children.spawn)
# then stops all of fio's I/O when iomatrix is killed, and the ledger's record of fio's pid
# (children.record_in) names everything to reclaim. A forked job process would survive a kill with
# parent 1, writing to a backing `clean` then cannot unmount.
THREAD_LINE = "thread=1"

# fio time values: a number and an optional unit (runtime and ramp_time default to seconds,
# thinktime to µs).
_FIO_TIME = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|usec|ms|msec|s|sec|m|min|h|d)?", re.IGNORECASE)
_UNIT_S = {
    "us": 1e-6,
    "usec": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
# Options of a custom job that bound how long it runs, with the unit fio assumes for a bare number.
_DURATION_UNIT = {
    "runtime": "s",
    "timeout": "s",
    "ramp_time": "s",
    "thinktime": "us",
    "thinktime_spin": "us",
}
BOUND_NOTE = "# iomatrix: capped at the plan's runtime ({ms} ms): {what}"


def fio_seconds(value: str, default_unit: str) -> float | None:
    """Seconds of a fio time value (`500ms`, `2`, `1h`); None when it is not one fio's parser would
    read so."""
    m = _FIO_TIME.fullmatch(value.strip())
    if m is None:
        return None
    return float(m.group(1)) * _UNIT_S[(m.group(2) or default_unit).lower()]


def bounded_custom_text(text: str, runtime_s: float) -> str:
    """A validated custom job (fio.allowlist's canonical text) with the plan's `runtime` as its
    upper bound.

    A custom job may leave its runtime open (`loops=1000000`, a huge `io_size`) or set a longer one,
    and a `thinktime` is slept whole whatever the runtime (fio checks its runtime between I/Os:
    measured, a 30 s thinktime under `runtime=2` ran 30 s). Each job section gets `runtime` (fio:
    "until it completes the configured I/O workload or until it has run for this specified amount of
    time, whichever occurs first", with or without `time_based`) of at most the plan's runtime, and
    `ramp_time`, `thinktime` and `thinktime_spin` are capped at it too; a job then ends within about
    two runtimes plus its start-up, and the run's timeout is only the last resort. What was capped
    is said in a comment line of the job, which is stored with every run."""
    limit_ms = max(1, round(runtime_s * 1000))
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines():
        if line.startswith("["):
            sections.append((line[1:-1], []))
        elif line:
            sections[-1][1].append(line)
    out: list[str] = []
    global_runtime: float | None = None
    for name, lines in sections:
        kept: list[str] = []
        capped: list[str] = []
        own_runtime: float | None = None
        for line in lines:
            key, _, value = line.partition("=")
            unit = _DURATION_UNIT.get(key)
            if unit is None:
                kept.append(line)
                continue
            seconds = fio_seconds(value, unit)
            if key in ("runtime", "timeout"):
                own_runtime = seconds if seconds is not None else float("inf")
                continue  # written once below, bounded
            if seconds is None or seconds > runtime_s:
                capped.append(f"{key}={value}")
                kept.append(f"{key}={limit_ms}ms")
            else:
                kept.append(line)
        if name is None:
            out += kept
            continue
        out.append(f"[{name}]")
        if name == "global":
            global_runtime = own_runtime
        else:
            runtime = own_runtime if own_runtime is not None else global_runtime
            if runtime is None or runtime > runtime_s:
                capped.append("no runtime" if runtime is None else f"runtime {runtime:g} s")
                runtime = runtime_s
            kept.append(f"runtime={max(1, round(runtime * 1000))}ms")
        if capped:
            out.append(BOUND_NOTE.format(ms=limit_ms, what=", ".join(capped)))
        out += kept
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


PREFILL_BLOCK_BYTES = 4096  # a strided prefill's block


def _prefill_section(w: Workload, shape: JobShape, bs: str = "1m") -> list[str]:
    # Reads of never-written blocks hit holes (sparse file, unallocated qcow2
    # cluster) and never touch the disk, and rewrites and trims need written
    # blocks: write the region first, unmeasured.
    if w.prefill_stride is not None:
        # One block per stride (fio's `rw=write:N` skips N bytes after each write): the image's
        # metadata for the whole region exists, its data stays thin (Workload.prefill_stride). fio
        # counts a job's bytes, not its offsets: without number_ios it would wrap around until it
        # had written `size` bytes.
        writes = -(-shape.size_bytes // w.prefill_stride)
        return [
            f"[{PREFILL_JOB}]",
            f"rw=write:{w.prefill_stride - PREFILL_BLOCK_BYTES}",
            f"bs={PREFILL_BLOCK_BYTES}",
            f"number_ios={writes}",
            "time_based=0",
            "end_fsync=1",
            "",
        ]
    return [f"[{PREFILL_JOB}]", "rw=write", f"bs={bs}", "time_based=0", "end_fsync=1", ""]


def _custom_body(w: Workload, shape: JobShape, custom_text: str) -> str:
    """A custom job's sections, bounded by the plan's runtime; a role job that reads
    (Workload.prefill: its own sections begin with stonewall) has its region written first, as a
    preset's reads do. A user's job file keeps what it says (no prefill)."""
    prefill = "\n" + "\n".join(_prefill_section(w, shape)) + "\n" if w.prefill else ""
    return prefill + bounded_custom_text(custom_text, shape.runtime_s)


def baremetal_job(
    w: Workload,
    *,
    cache: str,
    aio: str,
    target: str,
    shape: JobShape,
    custom_text: str | None = None,
) -> str:
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
        THREAD_LINE,
        "",
    ]
    if custom_text is not None:
        if fdatasync:
            glob.insert(-1, f"fdatasync={fdatasync}")
        return "\n".join(glob) + _custom_body(w, shape, custom_text)
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
        THREAD_LINE,
        "",
    ]
    if custom_text is not None:
        return "\n".join(glob) + _custom_body(w, shape, custom_text)
    lines = list(glob)
    if w.writes_first:
        lines += _prefill_section(w, shape)
    lines += [f"[{MEASURE_JOB}]", "stonewall", *_workload_lines(w), *_timing_lines(shape)]
    if w.fdatasync:
        lines.append(f"fdatasync={w.fdatasync}")
    return "\n".join(lines) + "\n"


# fio's nbd engine (libnbd) has no fdatasync: `fdatasync=N` fails with EINVAL. `fsync=N` becomes an
# NBD flush, which is all a block device can be asked for anyway (a guest's fdatasync reaches its
# disk as a flush too).
_FDATASYNC_LINE = re.compile(r"^(\s*)fdatasync(\s*=)", re.MULTILINE)
SUBST_FDATASYNC = (
    "fdatasync=N -> fsync=N (fio's nbd engine refuses fdatasync; both become an NBD flush)"
)


def nbd_uri(socket: str, export: str) -> str:
    """libnbd URI of an export on a UNIX socket (a relative socket path is resolved in fio's working
    dir)."""
    return f"nbd+unix:///{export}?socket={socket}"


@dataclass(frozen=True)
class NbdJob:
    text: str
    # what was changed so the nbd engine runs it
    substitutions: list[str] = field(default_factory=list)


def nbd_job(w: Workload, *, uri: str, shape: JobShape, custom_text: str | None = None) -> NbdJob:
    """fio job talking NBD to qemu-storage-daemon's export of the cell's block graph.

    There is no host page cache or O_DIRECT on fio's side: every request goes over the socket to
    QEMU's block layer, and the cache mode is applied there, exactly as for a guest's requests. The
    workload's own flush cadence (fdatasync=N) is sent as NBD flushes; end_fsync=1 is the final
    flush a guest sends before a clean shutdown (as in the guest tier's job)."""
    glob = [
        "[global]",
        "ioengine=nbd",
        f"uri={uri}",
        f"size={shape.size_bytes}",
        "end_fsync=1",
        "randrepeat=0",
        THREAD_LINE,
        "",
    ]
    subst: list[str] = []
    if custom_text is not None:
        text, n = _FDATASYNC_LINE.subn(r"\1fsync\2", _custom_body(w, shape, custom_text))
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
