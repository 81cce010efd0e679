"""Background host sampler: CPU states, disk rates along a device chain, memory,
PSI, KSM and (optionally) the QEMU processes, at a fixed rate in a daemon thread.

    with HostSampler(["loop3", "vda"], interval=1.0) as s:
        s.attach_pid(qemu.pid)
        run_fio()
    samples = s.samples            # list[MonitorSample]

Timing: a baseline snapshot is taken in start() (t = 0); tick k is due at
t0 + k * interval (fixed rate: lateness never accumulates; missed ticks are
skipped, not bunched). Each sample's rates are computed over the *measured*
time since the previous snapshot, and MonitorSample.t is the snapshot time in
seconds since the baseline, so sample i covers (t[i-1], t[i]] with t[-1] = 0.
stop() samples the final partial interval (always when no sample exists yet,
otherwise when it is at least MIN_TAIL_FRACTION of an interval), so even a
0.5 s run at 1 Hz yields one sample.

Cost: each tick opens and reads /proc/stat, /proc/diskstats, /proc/meminfo,
/proc/pressure/{cpu,io,memory} and two KSM files, and, when a pid is attached,
psutil's cpu_times()/memory_info() (/proc/<pid>/stat and statm) per followed
process. Nothing is spawned. `cpu_seconds` reports the sampler thread's own CPU time.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from iomatrix.monitor import procfs
from iomatrix.monitor.sample import MonitorSample
from iomatrix.sysfs import read_text

PROC_STAT = "/proc/stat"
PROC_DISKSTATS = "/proc/diskstats"
PROC_MEMINFO = "/proc/meminfo"
PRESSURE_DIR = Path("/proc/pressure")
KSM_DIR = Path("/sys/kernel/mm/ksm")

MIN_TAIL_FRACTION = 0.2

CPU_FIELDS = ("cpu.usr_pct", "cpu.sys_pct", "cpu.iowait_pct", "cpu.steal_pct", "cpu.idle_pct")
# Summed over every attached process (the consolidation tier attaches all QEMUs of a sweep point).
PROC_FIELDS = ("proc.cpu_pct", "proc.rss_mb", "proc.count")
# The I/O path alone (processes attached with role "io" and their children; not the load generator
# beside it): CPU seconds and context switches spent in the interval, summed (what a run's cost per
# I/O divides).
IOPATH_FIELDS = ("iopath.cpu_s", "iopath.ctx_switches", "iopath.count")
# Roles of a followed process: "io" is the I/O path (QEMU, qemu-storage-daemon; bare metal: fio
# itself), "load" generates the load beside it (fio driving the block layer over NBD): in proc.*,
# not in iopath.*; "server" is the far end of the I/O path on a network backing (tgtd, ganesha.nfsd
# started by iomatrix): shared storage costs CPU on both sides, so it counts in iopath.* like "io",
# under a name of its own in the run's recorded processes.
ROLES = ("io", "load", "server")
IOPATH_ROLES = frozenset({"io", "server"})
DISK_KEYS = (
    "read_mbps",
    "write_mbps",
    "read_iops",
    "write_iops",
    "util_pct",
    "await_ms",
    "queue_depth",
)
MEM_FIELDS = ("mem.used_mb", "mem.cached_mb", "mem.buffers_mb", "mem.dirty_mb", "mem.writeback_mb")
PSI_FIELDS = (
    "psi.cpu_some_pct",
    "psi.io_some_pct",
    "psi.io_full_pct",
    "psi.mem_some_pct",
    "psi.mem_full_pct",
)
KSM_FIELDS = ("ksm.pages_shared", "ksm.pages_sharing")

# (field, pressure file, line)
_PSI_SOURCES = (
    ("psi.cpu_some_pct", "cpu", "some"),
    ("psi.io_some_pct", "io", "some"),
    ("psi.io_full_pct", "io", "full"),
    ("psi.mem_some_pct", "memory", "some"),
    ("psi.mem_full_pct", "memory", "full"),
)


def disk_field_names(devices: list[str]) -> list[str]:
    """Field names the sampler emits for a device chain: disk.* for the last
    (physical) device, dev.<name>.* for each of the others."""
    if not devices:
        return []
    names = [f"disk.{k}" for k in DISK_KEYS]
    for d in devices[:-1]:
        names += [f"dev.{d}.{k}" for k in DISK_KEYS]
    return names


@dataclass
class _Snapshot:
    ts: float
    cpu: procfs.CpuTimes | None
    disks: dict[str, procfs.DiskStats]
    psi: dict[str, dict[str, procfs.PsiLine]]


class HostSampler:
    """Sample host metrics every `interval` seconds in a daemon thread.

    `devices` is a chain from devices.resolve_device_chain(): the last entry is
    reported as disk.*, the others as dev.<name>.*. An empty list samples no disk.
    """

    def __init__(self, devices: list[str], interval: float = 1.0) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.devices = list(devices)
        self.interval = float(interval)
        self._prefix = {d: f"dev.{d}." for d in self.devices[:-1]}
        if self.devices:
            self._prefix[self.devices[-1]] = "disk."
        self._names = frozenset(self.devices)
        if self.devices:
            known = procfs.parse_diskstats(
                read_text(PROC_DISKSTATS, strip=False) or "", self._names
            )
            missing = [d for d in self.devices if d not in known]
            if missing:
                raise ValueError(f"block device(s) {', '.join(missing)} not in {PROC_DISKSTATS}")
        # resolved once: path strings, so a tick does no pathlib work
        self._psi_files = [
            (r, str(PRESSURE_DIR / r))
            for r in ("cpu", "io", "memory")
            if (PRESSURE_DIR / r).exists()
        ]
        self._ksm_files = [
            (f"ksm.{k}", str(KSM_DIR / k))
            for k in ("pages_shared", "pages_sharing")
            if (KSM_DIR / k).exists()
        ]

        self._lock = threading.Lock()
        # pid -> (process, (monotonic ts, cpu seconds) at the last reading)
        self._procs: dict[int, tuple[psutil.Process, tuple[float, float]]] = {}
        self._roles: dict[int, str] = {}  # pid -> role (ROLES); children inherit their parent's
        # pid -> context switches at the last reading (role "io" only)
        self._ctx: dict[int, int] = {}
        self._counted: dict[int, tuple[str, str]] = {}  # every pid ever followed -> (name, role)

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: list[MonitorSample] = []
        self._error: BaseException | None = None
        self._t0 = 0.0
        self._prev: _Snapshot | None = None
        self.cpu_seconds = 0.0  # CPU time used by the sampler thread (valid after stop())
        self.ticks_skipped = 0

    # ------------------------------------------------------------------ public API

    def attach_pid(self, pid: int, role: str = "io") -> None:
        """Also follow `pid` (e.g. QEMU): proc.cpu_pct and proc.rss_mb are summed over every
        attached process still running, proc.count says how many. May be called before or after
        start(), and several times (one sweep point of the consolidation tier runs many guests at
        once). `role` "io" (the default) counts the process (and its children) as the I/O path in
        iopath.*; "load" marks the load generator beside it (proc.* only); "server" a network
        backing's server, counted in iopath.* like "io". Raises ProcessLookupError if the process
        does not exist."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        try:
            proc = psutil.Process(pid)
            base = self._proc_cpu(proc)
            name = proc.name()
        except psutil.NoSuchProcess as e:
            raise ProcessLookupError(f"no process with pid {pid}") from e
        ctx = _task_ctx_switches(pid) if role in IOPATH_ROLES else None
        with self._lock:
            self._procs[pid] = (proc, (time.monotonic(), base))
            self._roles[pid] = role
            self._counted[pid] = (name, role)
            if ctx is not None:
                self._ctx[pid] = ctx

    def followed_processes(self) -> list[dict[str, object]]:
        """Every process followed so far (attached or adopted as a child): pid, name and role, pid
        order."""
        with self._lock:
            return [
                {"pid": pid, "name": name, "role": role}
                for pid, (name, role) in sorted(self._counted.items())
            ]

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("HostSampler already started")
        self._t0 = time.monotonic()
        self._prev = self._snapshot(self._t0)
        with self._lock:
            # attached before start: rebase to t = 0
            for pid, (proc, _base) in list(self._procs.items()):
                try:
                    self._procs[pid] = (proc, (self._t0, self._proc_cpu(proc)))
                except psutil.Error:
                    del self._procs[pid]
                    continue
                if pid in self._ctx and (ctx := _task_ctx_switches(pid)) is not None:
                    self._ctx[pid] = ctx
        self._thread = threading.Thread(target=self._run, name="iomatrix-host-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[MonitorSample]:
        """Stop, sample the final partial interval, and return all samples.
        Idempotent; re-raises an unexpected error from the sampler thread."""
        if self._thread is None:
            raise RuntimeError("HostSampler was not started")
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError("host sampler thread failed") from self._error
        return self._samples

    @property
    def samples(self) -> list[MonitorSample]:
        return self._samples

    def __enter__(self) -> HostSampler:
        self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.stop()
        except RuntimeError:
            if exc_type is None:  # don't mask the exception that ended the with-block
                raise

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            k = 1
            while True:
                due = self._t0 + k * self.interval
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    break
                now = time.monotonic()
                self._tick(now)
                # fixed rate: next deadline strictly in the future, skipping missed ones
                k_next = int((now - self._t0) / self.interval) + 1
                self.ticks_skipped += max(0, k_next - (k + 1))
                k = max(k + 1, k_next)
            now = time.monotonic()
            assert self._prev is not None
            tail = now - self._prev.ts
            if tail > 0 and (not self._samples or tail >= MIN_TAIL_FRACTION * self.interval):
                self._tick(now)
        except BaseException as e:  # surfaced by stop()
            self._error = e
        finally:
            self.cpu_seconds = time.thread_time() - cpu0

    def _tick(self, now: float) -> None:
        snap = self._snapshot(now)
        prev = self._prev
        assert prev is not None
        dt = snap.ts - prev.ts
        if dt <= 0:
            return
        values: dict[str, float] = {}

        if prev.cpu is not None and snap.cpu is not None:
            for state, pct in procfs.cpu_pct(prev.cpu, snap.cpu).items():
                values[f"cpu.{state}_pct"] = pct

        self._proc_values(snap.ts, values)

        for name, cur in snap.disks.items():
            old = prev.disks.get(name)
            if old is None or (old.major, old.minor) != (cur.major, cur.minor):
                continue
            pre = self._prefix[name]
            for key, v in procfs.disk_rates(old, cur, dt).items():
                values[pre + key] = v

        meminfo = read_text(PROC_MEMINFO, strip=False)
        if meminfo:
            for key, v in procfs.mem_mb(procfs.parse_meminfo(meminfo)).items():
                values[f"mem.{key}_mb"] = v

        for fname, res, line in _PSI_SOURCES:
            a = prev.psi.get(res, {}).get(line)
            b = snap.psi.get(res, {}).get(line)
            if a is not None and b is not None:
                values[fname] = procfs.psi_stall_pct(a, b, dt)

        for fname, path in self._ksm_files:
            text = read_text(path, strip=False)
            if text:
                values[fname] = float(procfs.parse_int_file(text))

        self._prev = snap
        self._samples.append(MonitorSample(t=snap.ts - self._t0, values=values))

    def _snapshot(self, ts: float) -> _Snapshot:
        """Counters that need a previous value (gauges are read in _tick)."""
        stat = read_text(PROC_STAT, strip=False)
        disks = (
            procfs.parse_diskstats(read_text(PROC_DISKSTATS, strip=False) or "", self._names)
            if self._names
            else {}
        )
        psi: dict[str, dict[str, procfs.PsiLine]] = {}
        for res, path in self._psi_files:
            text = read_text(path, strip=False)
            if text:
                psi[res] = procfs.parse_pressure(text)
        return _Snapshot(
            ts=ts, cpu=procfs.parse_proc_stat(stat) if stat else None, disks=disks, psi=psi
        )

    @staticmethod
    def _proc_cpu(proc: psutil.Process) -> float:
        ct = proc.cpu_times()
        return ct.user + ct.system

    def _adopt_children(self) -> None:
        """Follow the children of followed processes too: fio does its I/O in forked job processes,
        and their CPU must count as the measured work, not as "other processes" (the interference
        judge subtracts proc.cpu_pct from the host's CPU). A child found now started after its
        parent's last sample (or its attachment: tiers attach a process as soon as it is spawned),
        so its whole CPU time belongs to the interval since then: base 0 at the parent's base
        time."""
        with self._lock:
            parents = [
                (proc, t_base, self._roles.get(pid, "io"))
                for pid, (proc, (t_base, _cpu)) in self._procs.items()
            ]
        for parent, t_base, role in parents:
            try:
                kids = parent.children(recursive=True)
            except psutil.Error:
                continue
            named = []
            for kid in kids:
                try:
                    named.append((kid, kid.name()))
                except psutil.Error:
                    continue
            with self._lock:
                for kid, name in named:
                    if kid.pid not in self._procs:
                        self._procs[kid.pid] = (kid, (t_base, 0.0))
                        self._roles[kid.pid] = role
                        self._counted.setdefault(kid.pid, (name, role))
                        if role in IOPATH_ROLES:
                            # like its CPU: every switch it made is in this interval
                            self._ctx[kid.pid] = 0

    def _proc_values(self, ts: float, values: dict[str, float]) -> None:
        self._adopt_children()
        with self._lock:
            followed = list(self._procs.items())
        if not followed:
            return
        cpu_pct = rss = io_cpu_s = 0.0
        alive = io_alive = io_ctx = 0
        for pid, (proc, (t_base, cpu_base)) in followed:
            try:
                with proc.oneshot():
                    cpu = self._proc_cpu(proc)
                    rss += proc.memory_info().rss
            except psutil.Error:  # the process exited: stop following it
                with self._lock:
                    if self._procs.get(pid, (None,))[0] is proc:
                        del self._procs[pid]
                continue
            alive += 1
            if ts > t_base:
                cpu_pct += max(0.0, cpu - cpu_base) / (ts - t_base) * 100.0
            if self._roles.get(pid, "io") in IOPATH_ROLES:
                io_alive += 1
                io_cpu_s += max(0.0, cpu - cpu_base)
                ctx = _task_ctx_switches(pid)
                if ctx is not None:
                    io_ctx += max(0, ctx - self._ctx.get(pid, ctx))
                    with self._lock:
                        self._ctx[pid] = ctx
            with self._lock:
                if self._procs.get(pid, (None,))[0] is proc:  # not replaced by attach_pid meanwhile
                    self._procs[pid] = (proc, (ts, cpu))
        if alive:
            values["proc.cpu_pct"] = cpu_pct
            values["proc.rss_mb"] = rss / procfs.MIB
            values["proc.count"] = float(alive)
        if io_alive:
            values["iopath.cpu_s"] = io_cpu_s
            values["iopath.ctx_switches"] = float(io_ctx)
            values["iopath.count"] = float(io_alive)


def _task_ctx_switches(pid: int) -> int | None:
    """The context switches of every live task (thread) of `pid`, summed
    (procfs.process_ctx_switches)."""
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return None
    texts = [t for t in (read_text(f"{base}/{tid}/status", strip=False) for tid in tids) if t]
    return procfs.process_ctx_switches(texts)
