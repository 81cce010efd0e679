"""The host's view of one consolidation sweep point: every QEMU process's CPU and peak memory, the
host's CPU split, memory used without cache, KSM sharing and the disk's utilisation and await.

CPU of each QEMU comes from /proc/<pid>/stat at its start and at its end (read while it is a zombie,
before it is reaped, so the final ticks count); peak RSS is the kernel's VmHWM. The host-wide
figures are deltas of /proc/stat and /proc/diskstats over the point, and peaks of /proc/meminfo and
KSM polled while it runs. Parsing is `iomatrix.monitor.procfs`; this class only reads files."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from iomatrix.monitor import procfs
from iomatrix.sysfs import read_text

KSM_DIR = "/sys/kernel/mm/ksm"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class _Followed:
    label: str
    first: procfs.PidStat | None
    last: procfs.PidStat | None = None
    hwm_kb: int = 0


@dataclass
class PointProbe:
    devices: list[str]  # device chain of the backing; the last is the physical disk
    _pids: dict[int, _Followed] = field(default_factory=dict)
    _mem_used: list[float] = field(default_factory=list)
    _mem_with_cache: list[float] = field(default_factory=list)
    _ksm: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._cpu0 = self._cpu()
        self._disk0 = self._disk()
        self.poll()

    def follow(self, pid: int, label: str) -> None:
        st = self._pid_stat(pid)
        self._pids[pid] = _Followed(label, st, st)

    def poll(self) -> None:
        """Read every followed QEMU (call it often, and before reaping one) and the memory
        gauges."""
        for pid, f in self._pids.items():
            st = self._pid_stat(pid)
            if st is not None:
                f.last = st
            status = read_text(f"/proc/{pid}/status", strip=False)
            if status:
                hwm = procfs.parse_status_kb(status, "VmHWM")
                if hwm:
                    f.hwm_kb = max(f.hwm_kb, hwm)
        meminfo = read_text("/proc/meminfo", strip=False)
        if meminfo:
            mem = procfs.mem_mb(procfs.parse_meminfo(meminfo))
            self._mem_used.append(mem["used"])
            self._mem_with_cache.append(mem["used"] + mem["cached"] + mem["buffers"])
        for name in ("pages_shared", "pages_sharing"):
            text = read_text(f"{KSM_DIR}/{name}", strip=False)
            if text:
                with contextlib.suppress(ValueError):
                    self._ksm[name] = max(
                        self._ksm.get(name, 0.0), float(procfs.parse_int_file(text))
                    )

    def finish(self) -> dict[str, float]:
        """Metrics of the point (names registered in iomatrix.metrics)."""
        self.poll()
        out: dict[str, float] = {}
        dt = time.monotonic() - self._t0
        cpu1 = self._cpu()
        if self._cpu0 is not None and cpu1 is not None:
            pct = procfs.cpu_pct(self._cpu0, cpu1)
            for state in ("usr", "sys", "iowait", "idle", "steal"):
                if state in pct:
                    out[f"host.cpu_{state}_pct"] = round(pct[state], 2)
        disk1 = self._disk()
        if self.devices and dt > 0:
            phys = self.devices[-1]
            a, b = self._disk0.get(phys), disk1.get(phys)
            if a is not None and b is not None:
                rates = procfs.disk_rates(a, b, dt)
                out["host.disk_util_pct"] = round(rates["util_pct"], 2)
                out["host.disk_read_mbps"] = round(rates["read_mbps"], 3)
                out["host.disk_write_mbps"] = round(rates["write_mbps"], 3)
                if "await_ms" in rates:
                    out["host.disk_await_ms"] = round(rates["await_ms"], 3)
        user = sys_ = rss = 0.0
        for f in self._pids.values():
            if f.first is None or f.last is None:
                continue
            u = (f.last.utime - f.first.utime) / CLK_TCK
            s = (f.last.stime - f.first.stime) / CLK_TCK
            out[f"guest.{f.label}.cpu_user_s"] = round(u, 3)
            out[f"guest.{f.label}.cpu_sys_s"] = round(s, 3)
            out[f"guest.{f.label}.rss_peak_mb"] = round(f.hwm_kb / 1024, 1)
            user, sys_, rss = user + u, sys_ + s, rss + f.hwm_kb / 1024
        if self._pids:
            out["qemu.cpu_user_s"] = round(user, 3)
            out["qemu.cpu_sys_s"] = round(sys_, 3)
            out["qemu.rss_peak_mb"] = round(rss, 1)
            out["qemu.count"] = float(len(self._pids))
        if self._mem_used:
            out["host.mem_used_mb"] = round(sum(self._mem_used) / len(self._mem_used), 1)
            out["host.mem_used_peak_mb"] = round(max(self._mem_used), 1)
            out["host.mem_with_cache_peak_mb"] = round(max(self._mem_with_cache), 1)
        for name, v in self._ksm.items():
            out[f"host.ksm_{name}"] = v
        return out

    @staticmethod
    def _pid_stat(pid: int) -> procfs.PidStat | None:
        text = read_text(f"/proc/{pid}/stat", strip=False)
        if not text:
            return None
        try:
            return procfs.parse_pid_stat(text)
        except (ValueError, IndexError):
            return None

    @staticmethod
    def _cpu() -> procfs.CpuTimes | None:
        text = read_text("/proc/stat", strip=False)
        return procfs.parse_proc_stat(text) if text else None

    def _disk(self) -> dict[str, procfs.DiskStats]:
        if not self.devices:
            return {}
        return procfs.parse_diskstats(
            read_text("/proc/diskstats", strip=False) or "", frozenset(self.devices)
        )
