from __future__ import annotations

import pytest

from iomatrix.monitor.sampler import MonitorSample
from iomatrix.monitor.summary import (
    FieldSummary,
    cell_summary,
    host_questions_view,
    summarize_samples,
)


def test_summarize_time_weighted_mean_peak_n():
    # intervals: (0, 1], (1, 2], (2, 2.5]  -> weights 1, 1, 0.5
    samples = [
        MonitorSample(1.0, {"disk.write_mbps": 100.0, "mem.used_mb": 10.0}),
        MonitorSample(2.0, {"disk.write_mbps": 50.0, "mem.used_mb": 20.0, "disk.await_ms": 4.0}),
        MonitorSample(2.5, {"disk.write_mbps": 200.0, "mem.used_mb": 30.0}),
    ]
    s = summarize_samples(samples)
    # MiB written = 100 + 50 + 100 = 250 over 2.5 s
    assert s["disk.write_mbps"] == FieldSummary(mean=pytest.approx(100.0), peak=200.0, n=3)
    assert s["mem.used_mb"].mean == pytest.approx((10 + 20 + 15) / 2.5)
    assert s["disk.await_ms"] == FieldSummary(mean=4.0, peak=4.0, n=1)  # only where present
    u = summarize_samples(samples, time_weighted=False)
    assert u["disk.write_mbps"].mean == pytest.approx(350 / 3)


def test_summarize_empty():
    assert summarize_samples([]) == {}


def test_cell_summary_mean_of_means_max_of_peaks():
    runs = [
        {"cpu.usr_pct": FieldSummary(10.0, 30.0, 5), "proc.cpu_pct": FieldSummary(80.0, 90.0, 4)},
        {"cpu.usr_pct": FieldSummary(20.0, 25.0, 7)},
    ]
    c = cell_summary(runs)
    assert c["cpu.usr_pct"] == FieldSummary(15.0, 30.0, 2)
    assert c["proc.cpu_pct"] == FieldSummary(80.0, 90.0, 1)
    assert cell_summary([]) == {}


def test_host_questions_view():
    f = FieldSummary
    summary = {
        "cpu.usr_pct": f(10.0, 20.0, 3),
        "cpu.sys_pct": f(5.0, 8.0, 3),
        "cpu.iowait_pct": f(30.0, 50.0, 3),
        "disk.util_pct": f(60.0, 95.0, 3),
        "disk.await_ms": f(4.0, 12.0, 3),
        "mem.used_mb": f(500.0, 520.0, 3),
        "mem.cached_mb": f(2000.0, 2100.0, 3),
        "mem.buffers_mb": f(100.0, 100.0, 3),
    }
    v = host_questions_view(summary)
    assert v["cpu_busy_pct"] == 15.0
    assert v["cpu_iowait_pct"] == 30.0
    assert v["cpu_busy_plus_iowait_pct"] == 45.0
    assert (
        v["disk_util_pct"],
        v["disk_util_peak_pct"],
        v["disk_await_ms"],
        v["disk_await_peak_ms"],
    ) == (60.0, 95.0, 4.0, 12.0)
    assert v["mem_used_mb"] == 500.0
    assert v["mem_used_with_cache_mb"] == 2600.0
    assert v["mem_cache_mb"] == 2100.0
    assert v["proc_cpu_pct"] is None and v["disk_write_mbps"] is None
    assert host_questions_view({})["cpu_busy_pct"] is None
