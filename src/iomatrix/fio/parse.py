"""Parse fio's JSON output into flat, named metrics.

fio sometimes prints warnings or log lines before (or after) its JSON
(axboe/fio#731), so the JSON object is located rather than assumed to be the
whole output.
"""

from __future__ import annotations

import json
import os
from typing import Any

from iomatrix.fio.jobs import PREFILL_JOB


class FioOutputError(ValueError):
    """fio's output held no parseable JSON report."""


def extract_json(text: str) -> dict[str, Any]:
    """The fio JSON report inside `text`, ignoring anything printed around it."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict) and "jobs" in obj:
            return obj
        start = text.find("{", start + 1)
    raise FioOutputError("no fio JSON report found in output")


def _pct(clat: dict[str, Any], key: str) -> float | None:
    value = clat.get("percentile", {}).get(key)
    return None if value is None else float(value) / 1000.0


def _direction(job: dict[str, Any], d: str) -> dict[str, float]:
    side = job.get(d) or {}
    if not side.get("total_ios"):
        return {}
    clat = side.get("clat_ns") or {}
    out = {
        f"{d}.bw_mbps": float(side["bw_bytes"]) / 1e6,
        f"{d}.iops": float(side["iops"]),
        f"{d}.clat_mean_us": float(clat.get("mean", 0.0)) / 1000.0,
    }
    for name, key in (("p50", "50.000000"), ("p99", "99.000000"), ("p999", "99.900000")):
        v = _pct(clat, key)
        if v is not None:
            out[f"{d}.clat_{name}_us"] = v
    return out


def _sync(job: dict[str, Any]) -> dict[str, float]:
    lat = (job.get("sync") or {}).get("lat_ns") or {}
    # fio 3.33 leaves sync.total_ios at 0 but counts the syncs in lat_ns.N.
    if not lat.get("N"):
        return {}
    out = {"sync.count": float(lat["N"]), "sync.lat_mean_us": float(lat["mean"]) / 1000.0}
    v = _pct(lat, "99.000000")
    if v is not None:
        out["sync.lat_p99_us"] = v
    return out


def job_metrics(job: dict[str, Any]) -> dict[str, float]:
    """Flat metrics for one fio job."""
    m: dict[str, float] = {}
    m.update(_direction(job, "read"))
    m.update(_direction(job, "write"))
    # trim workloads (rw=trim/randtrim); absent from every other job
    m.update(_direction(job, "trim"))
    m.update(_sync(job))
    m["total.iops"] = m.get("read.iops", 0.0) + m.get("write.iops", 0.0)
    m["total.bw_mbps"] = m.get("read.bw_mbps", 0.0) + m.get("write.bw_mbps", 0.0)
    m["cpu.usr_pct"] = float(job.get("usr_cpu", 0.0))
    m["cpu.sys_pct"] = float(job.get("sys_cpu", 0.0))
    m["job.runtime_s"] = float(job.get("job_runtime", 0.0)) / 1000.0
    return m


ENOSPC = 28
ENOSPC_HINT = (
    'the backing ran out of space (ENOSPC, "No space left on device"): give the backing more room '
    "(a bigger loopfs/tmpfs size, a roomier dir) or make the plan's size smaller"
)

# Lines fio prints (stderr, or around its JSON) when a job did not do what the report seems to say:
# fio may still exit 0 and write a report with zeros (issue #14: 1,772 such runs stored as "ok").
_FATAL_MARKERS = (
    ("got signal", "a fio worker was killed by a signal"),
    (
        "failed allocating random map",
        "fio could not allocate its random map (the region is too large; "
        "use a smaller size, or norandommap in a custom job)",
    ),
    ("No space left on device", ENOSPC_HINT),
)


def _error_text(code: int) -> str:
    if code == ENOSPC:
        return ENOSPC_HINT
    try:
        return f"error {code}: {os.strerror(code)}"
    except ValueError:
        return f"error {code}"


def measured_jobs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The jobs a run is measured by (all but the prefill); a job fio marks as failed fails the
    run."""
    jobs = [
        j for j in report.get("jobs", []) if isinstance(j, dict) and j.get("jobname") != PREFILL_JOB
    ]
    if not jobs:
        raise FioOutputError("fio report has no measured job")
    # a failed prefill leaves the measured job reading holes: also a failure
    for j in report.get("jobs", []):
        code = j.get("error") if isinstance(j, dict) else None
        if code:
            raise FioOutputError(
                f"fio job '{j.get('jobname')}' failed: "
                f"{_error_text(code) if isinstance(code, int) else code}"
            )
    return jobs


def fatal_message(text: str) -> str | None:
    """What went wrong, if fio's messages say a job did not complete (even when it exited 0)."""
    for line in text.splitlines():
        for marker, meaning in _FATAL_MARKERS:
            if marker in line:
                return f"{meaning} (fio: {line.strip()[:160]})"
    return None


def checked_metrics(report: dict[str, Any], messages: str, primary_metric: str) -> dict[str, float]:
    """Metrics of a run that really happened; FioOutputError otherwise.

    A run counts only if every job completed without error (`error` 0), fio printed no
    sign of a killed worker / failed allocation / full disk (`messages`: its stderr and
    anything around its JSON), and the measured jobs produced the workload's primary
    metric with a value above zero.
    """
    metrics = report_metrics(report)
    fatal = fatal_message(messages)
    if fatal is not None:
        raise FioOutputError(fatal)
    value = metrics.get(primary_metric)
    if not value:
        raise FioOutputError(
            f"fio reported no {primary_metric} (the measured job did no I/O"
            f"{'' if value is None else ': 0'}); the run is not counted"
        )
    return metrics


def report_metrics(report: dict[str, Any]) -> dict[str, float]:
    """Metrics of a whole report: one measured job, or the sum over several.

    With several jobs (custom job files) throughput and IOPS add up; latency
    figures are taken from the job that did the most I/O, and CPU is summed.
    """
    jobs = measured_jobs(report)
    per_job = [job_metrics(j) for j in jobs]
    if len(per_job) == 1:
        return per_job[0]
    merged = dict(max(per_job, key=lambda m: m["total.iops"]))
    for key in (
        "read.bw_mbps",
        "read.iops",
        "write.bw_mbps",
        "write.iops",
        "total.iops",
        "total.bw_mbps",
        "cpu.usr_pct",
        "cpu.sys_pct",
        "sync.count",
    ):
        vals = [m[key] for m in per_job if key in m]
        if vals:
            merged[key] = sum(vals)
    merged["job.runtime_s"] = max(m["job.runtime_s"] for m in per_job)
    return merged


def steadystate(report: dict[str, Any]) -> dict[str, Any] | None:
    for j in measured_jobs(report):
        if "steadystate" in j:
            return j["steadystate"]
    return None


def parse_iops_log(text: str) -> list[float]:
    """fio's averaged IOPS log ("time_ms, value, direction, bs, offset, …") as one series:
    IOPS per interval, read and write added up."""
    per_time: dict[int, float] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            t, value = int(parts[0]), float(parts[1])
        except ValueError:
            continue
        per_time[t] = per_time.get(t, 0.0) + value
    return [per_time[t] for t in sorted(per_time)]
