"""What the user optimises (`--objective` of rank, recommend and report): which metric a workload is
ranked by.

* ``throughput`` — I/O operations or bytes per second, higher is better: the workload's primary
  metric when it is a throughput (every speed preset), else its IOPS (the latency presets
  rand-*-4k-qd1 and rand-*-4k-rateN).
* ``p99-latency`` — fio's 99th percentile completion latency, lower is better: the write side for
  write-only workloads, the read side for anything that reads (a 70/30 mix is judged by its reads).
* ``cpu-per-io`` — host CPU time of the I/O path per I/O completed (``cost.cpu_us_per_io``), lower
  is better.

Each run's value is one sample (a run's p99 is that run's percentile of its own I/Os); the
statistics run over runs, never over pooled I/Os or averaged histograms (docs/statistics.md,
"Latency percentiles and costs")."""

from __future__ import annotations

from enum import StrEnum

from iomatrix.errors import UserError
from iomatrix.metrics import metric_info
from iomatrix.workloads import preset


class Objective(StrEnum):
    throughput = "throughput"
    p99_latency = "p99-latency"
    cpu_per_io = "cpu-per-io"


_THROUGHPUT_UNITS = ("IOPS", "MB/s")


def objective_metric(objective: Objective, workload: str) -> str:
    """The metric ``workload`` is ranked by under ``objective`` (its direction comes from the metric
    registry)."""
    if objective == Objective.cpu_per_io:
        return "cost.cpu_us_per_io"
    w = preset(workload)
    side = "write" if w is not None and w.writes and not w.reads else "read"
    if objective == Objective.p99_latency:
        return f"{side}.clat_p99_us"
    if w is None:  # a custom job file: its primary metric, the total
        return "total.iops"
    if w.kind != "fio" or metric_info(w.primary_metric).unit in _THROUGHPUT_UNITS:
        return w.primary_metric
    return "total.iops" if w.rw in ("randrw", "rw") else f"{side}.iops"


def parse_objective(text: str | None) -> Objective | None:
    """`--objective` as given (None: not given, each workload's own primary metric as before)."""
    if text is None:
        return None
    try:
        return Objective(text)
    except ValueError:
        raise UserError(
            f"unknown objective '{text}'", hint=f"use {', '.join(o.value for o in Objective)}"
        ) from None


def objective_line(objective: Objective) -> str:
    """What a report prints to say which objective ranked it."""
    how = {
        Objective.throughput: "I/O operations or bytes per second, higher is better",
        Objective.p99_latency: "99th percentile completion latency, lower is better; each run's "
        "p99 is one sample",
        Objective.cpu_per_io: "host CPU time of the I/O path per I/O, lower is better",
    }[objective]
    return f"objective: {objective.value} ({how})"
