"""Pure summaries of sampler output: per run, per cell, and the consolidation article's view.

summarize_samples() weights each sample by the length of the interval it
covers (sample i covers (t[i-1], t[i]] with t[-1] = 0, see sampler.py), so the
mean of a rate field is the average rate over the run (mean disk.write_mbps x
duration = MiB written) even when the final partial interval is short, and the
mean of a gauge (mem.*) is its time average. Fields absent from a sample (e.g.
proc.* before attach_pid, disk.await_ms in an interval with no completed I/O)
are averaged over the samples that have them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.monitor.sample import MonitorSample


@dataclass(frozen=True, slots=True)
class FieldSummary:
    """mean and peak of one field; n = samples (per run) or runs (per cell) contributing."""

    mean: float
    peak: float
    n: int


def summarize_samples(
    samples: Sequence[MonitorSample], *, time_weighted: bool = True
) -> dict[str, FieldSummary]:
    """{field: FieldSummary} over one run's samples (time-weighted mean by default)."""
    acc: dict[str, list[float]] = {}  # field -> [weighted sum, weight, peak, n]
    prev_t = 0.0
    for s in samples:
        w = s.t - prev_t if time_weighted else 1.0
        prev_t = s.t
        if w <= 0:
            w = 0.0
        for k, v in s.values.items():
            a = acc.get(k)
            if a is None:
                acc[k] = [v * w, w, v, 1]
            else:
                a[0] += v * w
                a[1] += w
                if v > a[2]:
                    a[2] = v
                a[3] += 1
    out: dict[str, FieldSummary] = {}
    for k, (sw, w, peak, n) in acc.items():
        out[k] = FieldSummary(mean=sw / w if w > 0 else peak, peak=peak, n=int(n))
    return out


def cell_summary(runs: Iterable[Mapping[str, FieldSummary]]) -> dict[str, FieldSummary]:
    """Combine repeated runs of one cell: mean of the run means, max of the run
    peaks, n = number of runs that reported the field."""
    acc: dict[str, list[float]] = {}  # field -> [sum of means, max peak, runs]
    for run in runs:
        for k, fs in run.items():
            a = acc.get(k)
            if a is None:
                acc[k] = [fs.mean, fs.peak, 1]
            else:
                a[0] += fs.mean
                a[1] = max(a[1], fs.peak)
                a[2] += 1
    return {k: FieldSummary(mean=s / n, peak=p, n=int(n)) for k, (s, p, n) in acc.items()}


def _mean(summary: Mapping[str, FieldSummary], key: str) -> float | None:
    fs = summary.get(key)
    return None if fs is None else fs.mean


def _peak(summary: Mapping[str, FieldSummary], key: str) -> float | None:
    fs = summary.get(key)
    return None if fs is None else fs.peak


def _add(*xs: float | None) -> float | None:
    return None if any(x is None for x in xs) else sum(x for x in xs if x is not None)


def host_questions_view(summary: Mapping[str, FieldSummary]) -> dict[str, float | None]:
    """The host questions of the consolidation article (KVM cache modes under consolidation), from
    a run or cell summary. Values are means unless the key says peak; None when
    the sampler did not report the inputs.

    * CPU: real CPU cost is usr+sys (`cpu_busy_pct`); iowait is CPU idle while
      I/O is outstanding and is reported apart (`cpu_iowait_pct`), as is
      `cpu_busy_plus_iowait_pct` (what a naive "CPU load" graph shows).
    * Disk: utilisation and await of the physical disk; a write-back cache can
      raise throughput *and* await together (more I/O in flight), so queue depth
      and throughput are given beside them.
    * Memory: used without cache (`mem_used_mb`, real memory) and with cache
      (`mem_used_with_cache_mb` = used + cached + buffers), plus dirty/writeback.
    """
    usr, sys_ = _mean(summary, "cpu.usr_pct"), _mean(summary, "cpu.sys_pct")
    iowait = _mean(summary, "cpu.iowait_pct")
    busy = _add(usr, sys_)
    used, cached, buffers = (_mean(summary, f"mem.{k}_mb") for k in ("used", "cached", "buffers"))
    return {
        "cpu_usr_pct": usr,
        "cpu_sys_pct": sys_,
        "cpu_busy_pct": busy,
        "cpu_iowait_pct": iowait,
        "cpu_busy_plus_iowait_pct": _add(busy, iowait),
        "cpu_steal_pct": _mean(summary, "cpu.steal_pct"),
        "proc_cpu_pct": _mean(summary, "proc.cpu_pct"),
        "disk_util_pct": _mean(summary, "disk.util_pct"),
        "disk_util_peak_pct": _peak(summary, "disk.util_pct"),
        "disk_await_ms": _mean(summary, "disk.await_ms"),
        "disk_await_peak_ms": _peak(summary, "disk.await_ms"),
        "disk_queue_depth": _mean(summary, "disk.queue_depth"),
        "disk_read_mbps": _mean(summary, "disk.read_mbps"),
        "disk_write_mbps": _mean(summary, "disk.write_mbps"),
        "mem_used_mb": used,
        "mem_used_peak_mb": _peak(summary, "mem.used_mb"),
        "mem_used_with_cache_mb": _add(used, cached, buffers),
        "mem_cache_mb": _add(cached, buffers),
        "mem_dirty_mb": _mean(summary, "mem.dirty_mb"),
        "mem_writeback_mb": _mean(summary, "mem.writeback_mb"),
        "psi_io_some_pct": _mean(summary, "psi.io_some_pct"),
        "ksm_pages_sharing": _mean(summary, "ksm.pages_sharing"),
    }


def field_total(samples: Sequence[MonitorSample], name: str) -> float | None:
    """The sum of a per-interval amount (iopath.cpu_s, iopath.ctx_switches: what was spent in each
    interval, not a rate) over the samples that have it; None when none has it (absent, not
    zero)."""
    values = [s.values[name] for s in samples if name in s.values]
    return sum(values) if values else None
