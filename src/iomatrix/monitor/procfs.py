"""Pure parsers and rate functions over the text of /proc and /sys files.

Nothing here reads a file: every parser takes the file's text, and every rate
function takes two parsed snapshots plus the elapsed seconds between them. That
keeps the arithmetic testable against captured real content (tests/data/proc/).

Units used throughout the monitor package:
  * "mb" is MiB (2**20 bytes); "mbps" is MiB per second.
  * "_pct" is a percentage (0-100) of the interval (CPU states: of all CPUs).
  * "_ms" is milliseconds.

Counters that go backwards between two snapshots (a device detached and
re-attached under the same name, the well-known iowait counter wobble on NO_HZ
kernels) are treated as a zero delta rather than producing negative rates.
"""

from __future__ import annotations

from dataclasses import dataclass

# /proc/diskstats always counts 512-byte sectors, whatever the device's block size
SECTOR_BYTES = 512
MIB = 1024 * 1024


def _delta(a: int, b: int) -> int:
    """b - a for monotonic counters, clamped at 0 (reset or wobble)."""
    d = b - a
    return d if d > 0 else 0


# --------------------------------------------------------------------------- /proc/stat


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The aggregate `cpu` line of /proc/stat, in USER_HZ ticks.

    guest/guest_nice are already included in user/nice by the kernel, so they
    are not added again.
    """

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )


def parse_proc_stat(text: str) -> CpuTimes:
    """Parse the aggregate `cpu ` line of /proc/stat."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            parts = line.split()
            vals = [int(x) for x in parts[1:9]]
            vals += [0] * (8 - len(vals))  # very old kernels lack steal
            return CpuTimes(*vals)
    raise ValueError("no aggregate 'cpu ' line in /proc/stat text")


def cpu_pct(a: CpuTimes, b: CpuTimes) -> dict[str, float]:
    """Percent of all CPU time between snapshots a and b spent in each state.

    Keys: usr (user+nice, includes guest time), sys (system+irq+softirq),
    iowait, steal, idle. They sum to 100 (all 0 if no tick elapsed).
    """
    usr = _delta(a.user, b.user) + _delta(a.nice, b.nice)
    sys = _delta(a.system, b.system) + _delta(a.irq, b.irq) + _delta(a.softirq, b.softirq)
    iowait = _delta(a.iowait, b.iowait)
    steal = _delta(a.steal, b.steal)
    idle = _delta(a.idle, b.idle)
    total = usr + sys + iowait + steal + idle
    if total == 0:
        return {"usr": 0.0, "sys": 0.0, "iowait": 0.0, "steal": 0.0, "idle": 0.0}
    k = 100.0 / total
    return {
        "usr": usr * k,
        "sys": sys * k,
        "iowait": iowait * k,
        "steal": steal * k,
        "idle": idle * k,
    }


# --------------------------------------------------------------------------- /proc/diskstats


@dataclass(frozen=True, slots=True)
class DiskStats:
    """One line of /proc/diskstats (Documentation/admin-guide/iostats.rst).

    Times are milliseconds, sizes are 512-byte sectors. Discard/flush fields are
    0 on kernels that do not report them.
    """

    major: int
    minor: int
    name: str
    reads: int
    reads_merged: int
    sectors_read: int
    read_ticks: int
    writes: int
    writes_merged: int
    sectors_written: int
    write_ticks: int
    in_flight: int
    io_ticks: int
    time_in_queue: int
    discards: int = 0
    discards_merged: int = 0
    sectors_discarded: int = 0
    discard_ticks: int = 0
    flushes: int = 0
    flush_ticks: int = 0


def parse_diskstats(
    text: str, names: set[str] | frozenset[str] | None = None
) -> dict[str, DiskStats]:
    """Parse /proc/diskstats into {device name: DiskStats}.

    `names` restricts parsing to those devices (cheap on hosts with hundreds of
    devices). Lines with fewer than the 11 classic counters are skipped.
    """
    out: dict[str, DiskStats] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        name = parts[2]
        if names is not None and name not in names:
            continue
        nums = [int(x) for x in parts[3:20]]
        out[name] = DiskStats(int(parts[0]), int(parts[1]), name, *nums)
    return out


def disk_rates(a: DiskStats, b: DiskStats, interval: float) -> dict[str, float]:
    """Rates for one device between snapshots a and b taken `interval` seconds apart.

    Keys: read_mbps, write_mbps (MiB/s), read_iops, write_iops, util_pct
    (io_ticks delta / interval, capped at 100), queue_depth (time_in_queue
    delta / interval) and, only when at least one read or write completed in
    the interval, await_ms ((read_ticks + write_ticks delta) / (reads + writes
    delta)). Discards and flushes are not part of await or IOPS.
    """
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    reads = _delta(a.reads, b.reads)
    writes = _delta(a.writes, b.writes)
    ms = interval * 1000.0
    out = {
        "read_mbps": _delta(a.sectors_read, b.sectors_read) * SECTOR_BYTES / MIB / interval,
        "write_mbps": _delta(a.sectors_written, b.sectors_written) * SECTOR_BYTES / MIB / interval,
        "read_iops": reads / interval,
        "write_iops": writes / interval,
        "util_pct": min(100.0, _delta(a.io_ticks, b.io_ticks) * 100.0 / ms),
        "queue_depth": _delta(a.time_in_queue, b.time_in_queue) / ms,
    }
    ios = reads + writes
    if ios:
        out["await_ms"] = (
            _delta(a.read_ticks, b.read_ticks) + _delta(a.write_ticks, b.write_ticks)
        ) / ios
    return out


# --------------------------------------------------------------------------- /proc/meminfo


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse /proc/meminfo into {field: value}; values are kB as the file states
    (HugePages_* counts are unitless and kept as given)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if fields:
            out[key.strip()] = int(fields[0])
    return out


def mem_mb(info: dict[str, int]) -> dict[str, float]:
    """Memory gauges in MiB from a parsed /proc/meminfo.

    used    = MemTotal - MemFree - Buffers - Cached - SReclaimable
              (the classic `free` "used": real memory, excluding cache;
              procps-ng >= 4 `free` prints MemTotal - MemAvailable instead)
    cached  = Cached + SReclaimable (`free`'s "cache" column)
    buffers = Buffers; dirty = Dirty; writeback = Writeback
    so that used + cached + buffers + MemFree == MemTotal.
    """
    g = info.get
    total, free = g("MemTotal", 0), g("MemFree", 0)
    buffers, cached, srecl = g("Buffers", 0), g("Cached", 0), g("SReclaimable", 0)
    used = total - free - buffers - cached - srecl
    if used < 0:  # can happen transiently on some kernels; `free` falls back the same way
        used = total - free
    return {
        "used": used / 1024.0,
        "cached": (cached + srecl) / 1024.0,
        "buffers": buffers / 1024.0,
        "dirty": g("Dirty", 0) / 1024.0,
        "writeback": g("Writeback", 0) / 1024.0,
    }


# --------------------------------------------------------------------------- /proc/pressure/*


@dataclass(frozen=True, slots=True)
class PsiLine:
    """One `some` or `full` line of a /proc/pressure file; total is in microseconds."""

    avg10: float
    avg60: float
    avg300: float
    total: int


def parse_pressure(text: str) -> dict[str, PsiLine]:
    """Parse /proc/pressure/{cpu,io,memory} into {"some": PsiLine, "full": PsiLine?}.

    The cpu file has a `full` line only on kernels >= 5.13 (always zero at the
    system level); it is returned when present.
    """
    out: dict[str, PsiLine] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("some", "full"):
            continue
        kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        out[parts[0]] = PsiLine(
            float(kv["avg10"]), float(kv["avg60"]), float(kv["avg300"]), int(kv["total"])
        )
    return out


def psi_stall_pct(a: PsiLine, b: PsiLine, interval: float) -> float:
    """Percent of wall time in the interval during which tasks stalled
    (delta of the `total=` microsecond counter / interval), capped at 100."""
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    return min(100.0, _delta(a.total, b.total) / (interval * 1e6) * 100.0)


# --------------------------------------------------------------------------- /sys/kernel/mm/ksm


def parse_int_file(text: str) -> int:
    """Parse a single-integer sysfs file such as /sys/kernel/mm/ksm/pages_sharing."""
    return int(text.strip())


# --------------------------------------------------------------------------- /proc/<pid>/stat,
# status


@dataclass(frozen=True, slots=True)
class PidStat:
    """The fields of /proc/<pid>/stat the consolidation tier needs: state, and user/system CPU in
    USER_HZ ticks (a zombie keeps its final counts until it is reaped)."""

    state: str
    utime: int
    stime: int


def parse_pid_stat(text: str) -> PidStat:
    """Parse /proc/<pid>/stat. The command name (field 2) may hold spaces and parentheses, so fields
    are counted after its last ')': state is field 3, utime field 14, stime field 15."""
    _, sep, rest = text.rpartition(")")
    if not sep:
        raise ValueError("not a /proc/<pid>/stat line")
    fields = rest.split()
    return PidStat(state=fields[0], utime=int(fields[11]), stime=int(fields[12]))


def parse_status_kb(text: str, key: str) -> int | None:
    """A "Key:   N kB" value of /proc/<pid>/status (e.g. VmHWM, the peak resident set), or None."""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            parts = line.split()
            return int(parts[1]) if len(parts) >= 2 else None
    return None


def parse_status_ctx_switches(text: str) -> int | None:
    """Context switches of one task: voluntary_ctxt_switches + nonvoluntary_ctxt_switches of
    /proc/<pid>/task/<tid>/status, or None when the kernel does not print them. The counts are per
    task (thread), not per process: a process's switches are the sum over its tasks
    (``process_ctx_switches``)."""
    total = None
    for line in text.splitlines():
        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
            parts = line.split()
            if len(parts) >= 2:
                total = (total or 0) + int(parts[1])
    return total


def process_ctx_switches(task_status_texts: list[str]) -> int | None:
    """A process's context switches: the sum over the status files of its live tasks (IOThreads, the
    aio thread pool's workers, vCPUs), None when no task printed them. A task that exited took its
    count with it, so a delta between two readings is a lower bound when worker threads come and go
    between them."""
    counts = [c for c in (parse_status_ctx_switches(t) for t in task_status_texts) if c is not None]
    return sum(counts) if counts else None
