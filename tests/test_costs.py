"""What a configuration costs (issue 25): the I/O path's CPU and context switches per I/O, the
offered load of rate-limited workloads, and the presets that hold the load constant.

Parser expectations are worked out by hand from the captured files quoted in the comments
(tests/data/proc/task_status: the status files of the three tasks of one Python process, captured on
the 2-core development VM), never by calling the function under test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.fio.jobs import JobShape, baremetal_job
from iomatrix.metrics import (
    LOAD_REACHED_FRACTION,
    io_cost_metrics,
    metric_info,
    offered_load_metrics,
)
from iomatrix.monitor import procfs
from iomatrix.monitor.sampler import HostSampler, MonitorSample
from iomatrix.monitor.summary import field_total
from iomatrix.workloads import PRESETS, QD_SWEEP, preset, qd_point, rate_workload, resolve

TASKS = Path(__file__).parent / "data" / "proc" / "task_status"


# -----------------------------------------------------------------------------
# /proc/<pid>/task/*/status


# 0.status: voluntary_ctxt_switches: 25, nonvoluntary_ctxt_switches: 18 (the main thread)
# 1.status: 1 and 1; 2.status: 1 and 0 (two threads waiting on an event)
def test_context_switches_of_one_task_are_voluntary_plus_involuntary():
    assert procfs.parse_status_ctx_switches((TASKS / "0.status").read_text()) == 43
    assert procfs.parse_status_ctx_switches((TASKS / "1.status").read_text()) == 2
    assert procfs.parse_status_ctx_switches((TASKS / "2.status").read_text()) == 1


def test_a_process_context_switches_are_summed_over_its_tasks():
    texts = [(TASKS / f"{i}.status").read_text() for i in range(3)]
    assert procfs.process_ctx_switches(texts) == 43 + 2 + 1


def test_context_switches_absent_when_the_kernel_does_not_print_them():
    assert procfs.parse_status_ctx_switches("Name:\tqemu\nPid:\t1\n") is None
    assert procfs.process_ctx_switches(["Name:\tqemu\n"]) is None
    assert procfs.process_ctx_switches([]) is None


# ----------------------------------------------------------------------------- the sampler's I/O
# path

BUSY = (
    "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: time.sleep(0) "
    "or None\n"
)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (from /proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_io_path_counts_only_processes_attached_as_io():
    """A busy process attached as the I/O path is in iopath.*, one attached as load (fio beside the
    block layer) only in proc.*; both are listed with their role."""
    io = subprocess.Popen([sys.executable, "-c", BUSY])
    load = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        with HostSampler([], interval=0.1) as s:
            s.attach_pid(io.pid)
            s.attach_pid(load.pid, role="load")
            # Wait for CPU the busy loop has used, not for wall time: on a loaded host 0.8 s of wall
            # time gave it 0.05 CPU-s once. Bounded: a host too busy to give it 0.3 CPU-s in 120 s
            # fails here.
            used_at_attach = _cpu_s(io.pid)
            deadline = time.monotonic() + 120
            while _cpu_s(io.pid) - used_at_attach < 0.3 and time.monotonic() < deadline:
                time.sleep(0.05)
            used_while_sampled = _cpu_s(io.pid) - used_at_attach
            time.sleep(0.25)  # at least one more sampling interval after the CPU used above
        used_in_total = _cpu_s(io.pid)
    finally:
        for p in (io, load):
            p.kill()
            p.wait()
    with_io = [x for x in s.samples if "iopath.cpu_s" in x.values]
    assert with_io
    assert all(x.values["iopath.count"] == 1 for x in with_io)  # the load process is not counted
    assert max(x.values["proc.count"] for x in s.samples) == 2
    io_cpu = field_total(s.samples, "iopath.cpu_s")
    # the sampler saw at least most of what the loop used while it sampled, and no more than it ever
    # used
    assert used_while_sampled >= 0.3
    assert io_cpu is not None and 0.5 * used_while_sampled < io_cpu <= used_in_total + 0.05
    # busy-yielding in a loop on a shared host switches context (sched_yield is voluntary when
    # another runs)
    assert field_total(s.samples, "iopath.ctx_switches") is not None
    roles = {p["pid"]: p["role"] for p in s.followed_processes()}
    assert roles == {io.pid: "io", load.pid: "load"}


def test_unknown_role_is_refused():
    with pytest.raises(ValueError, match="role"):
        HostSampler([], interval=1.0).attach_pid(1, role="guest")


def test_no_io_path_means_no_iopath_fields():
    with HostSampler([], interval=0.1) as s:
        time.sleep(0.25)
    assert not any(k.startswith("iopath.") for x in s.samples for k in x.values)
    assert field_total(s.samples, "iopath.cpu_s") is None


def test_field_total_sums_per_interval_amounts_where_present():
    samples = [
        MonitorSample(1.0, {"iopath.cpu_s": 0.25}),
        MonitorSample(2.0, {}),
        MonitorSample(2.5, {"iopath.cpu_s": 0.5}),
    ]
    assert field_total(samples, "iopath.cpu_s") == 0.75


# ----------------------------------------------------------------------------- cost per I/O


def test_cost_per_io_from_cpu_seconds_and_fio_counts():
    # 2000 IOPS for 5 s = 10000 I/Os; 8.192 MB/s for 5 s = 40.96e6 B = 39.0625 MiB; 0.5 s of CPU.
    m = {"total.iops": 2000.0, "total.bw_mbps": 8.192, "job.runtime_s": 5.0}
    cost = io_cost_metrics(m, 0.5, 30000.0)
    assert cost["cost.cpu_s"] == 0.5
    assert cost["cost.cpu_us_per_io"] == pytest.approx(50.0)  # 0.5e6 µs / 10000
    assert cost["cost.cpu_ms_per_mib"] == pytest.approx(500 / 39.0625)
    assert cost["cost.ctx_switches_per_io"] == pytest.approx(3.0)


def test_cost_is_absent_not_zero_without_its_inputs():
    assert io_cost_metrics({"total.iops": 100.0, "job.runtime_s": 1.0}, None, 5.0) == {}
    no_io = io_cost_metrics(
        {"total.iops": 0.0, "total.bw_mbps": 0.0, "job.runtime_s": 1.0}, 0.2, 5.0
    )
    assert no_io == {"cost.cpu_s": 0.2}
    no_ctx = io_cost_metrics(
        {"total.iops": 100.0, "total.bw_mbps": 0.4, "job.runtime_s": 1.0}, 0.01, None
    )
    assert "cost.ctx_switches_per_io" not in no_ctx and no_ctx[
        "cost.cpu_us_per_io"
    ] == pytest.approx(100.0)


def test_cost_and_latency_metrics_are_lower_is_better_in_the_registry():
    for name in (
        "cost.cpu_us_per_io",
        "cost.cpu_ms_per_mib",
        "cost.ctx_switches_per_io",
        "read.clat_p50_us",
        "read.clat_p99_us",
        "write.clat_p999_us",
    ):
        info = metric_info(name)
        assert info.known and info.direction == "lower", name
    assert metric_info("load.reached").direction == "higher"


# ----------------------------------------------------------------------------- offered load


def test_offered_load_reached_or_not():
    assert offered_load_metrics({"total.iops": 1990.0}, 2000) == {
        "load.target_iops": 2000.0,
        "load.achieved_frac": 0.995,
        "load.reached": 1.0,
    }
    short = offered_load_metrics({"total.iops": 1800.0}, 2000)  # 90 % < 95 %
    assert short["load.reached"] == 0.0 and short["load.achieved_frac"] == pytest.approx(0.9)
    assert (
        offered_load_metrics({"total.iops": 2000 * LOAD_REACHED_FRACTION}, 2000)["load.reached"]
        == 1.0
    )
    assert offered_load_metrics({"total.iops": 5.0}, None) == {}


def test_rate_preset_puts_the_rate_in_the_job_and_ranks_by_p99():
    w = resolve("rand-write-4k-rate2000")
    assert (w.rw, w.bs, w.rate_iops, w.primary_metric, w.higher_is_better) == (
        "randwrite",
        "4k",
        2000,
        "write.clat_p99_us",
        False,
    )
    job = baremetal_job(
        w, cache="none", aio="io_uring", target="/tmp/x", shape=JobShape(1 << 20, 1.0)
    )
    assert "rate_iops=2000" in job.splitlines()
    assert preset("rand-read-4k-rate500") == rate_workload("rand-read-4k-rate500")
    assert "rate_iops" not in baremetal_job(
        PRESETS["rand-read-4k"],
        cache="none",
        aio="io_uring",
        target="/tmp/x",
        shape=JobShape(1 << 20, 1.0),
    )


def test_bad_rate_is_one_line_naming_the_fix():
    with pytest.raises(UserError, match="out of range"):
        resolve("rand-read-4k-rate0")
    assert preset("rand-read-4k-rate0") is None
    assert rate_workload("rand-read-4k") is None


def test_queue_depth_family():
    assert [qd_point(f"rand-read-4k-qd{q}") for q in QD_SWEEP] == [
        ("rand-read-4k", q) for q in QD_SWEEP
    ]
    assert [PRESETS[f"rand-write-4k-qd{q}"].iodepth for q in QD_SWEEP] == list(QD_SWEEP)
    assert PRESETS["rand-read-4k-qd1"].primary_metric == "read.clat_p99_us"
    assert qd_point("rand-read-4k") is None
