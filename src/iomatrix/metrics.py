"""Every metric the tiers emit: its unit, which direction is better, and what it means.

One registry instead of guessing a direction from a metric's name at each
call site.  The names come from ``fio/parse.py`` (``job_metrics``,
``report_metrics``), ``tiers/guest.py`` (``fs.*``, ``phase.*``, ``workload.seconds``) and
``report/quality.py`` (``ss.*``, derived at report time from each run's stored IOPS series).
``registry_json()`` is what the store saves with a sweep, so a later reader knows the direction that
ranked it.

Metrics not in the registry (custom job files, new tiers) get a stated default,
``infer_rule``: a name ending in a time unit (``_ns``, ``_us``, ``_ms``, ``_s``,
``.seconds``) or ``_pct`` (a share of CPU) is a cost → lower is better;
anything else is taken as a rate or an amount of work → higher is better.  The
returned ``MetricInfo`` says ``known=False`` and carries that rule, so a report
can print why it chose the direction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

# Lower-is-better metrics that are a whole job's time, not an I/O's latency.
JOB_DURATIONS = frozenset({"workload.seconds"})


@dataclass(frozen=True)
class MetricInfo:
    name: str
    unit: str
    higher_is_better: bool
    description: str
    known: bool = True  # False: not in the registry, direction from ``infer_rule``
    rule: str = "registry"

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"

    @property
    def lower_words(self) -> tuple[str, str]:
        """How a ratio of this lower-is-better metric reads, better first (report/recommend/
        grammar.py): a job's time to complete (a guest filesystem job's) "faster"/"slower", which a
        "lower latency" would misname; any other "lower latency"/"higher latency"."""
        if self.name in JOB_DURATIONS:
            return "faster", "slower"
        return "lower latency", "higher latency"


def _m(name: str, unit: str, higher: bool, description: str) -> MetricInfo:
    return MetricInfo(name, unit, higher, description)


def _directional() -> list[MetricInfo]:
    out = []
    for d in ("read", "write", "trim"):
        out += [
            _m(
                f"{d}.bw_mbps",
                "MB/s",
                True,
                f"{d} throughput, 10^6 bytes per second (fio bw_bytes / 1e6)",
            ),
            _m(f"{d}.iops", "IOPS", True, f"{d} I/O operations per second (fio iops)"),
            _m(
                f"{d}.clat_mean_us",
                "µs",
                False,
                f"mean {d} completion latency (fio clat_ns mean / 1000)",
            ),
            _m(f"{d}.clat_p50_us", "µs", False, f"median {d} completion latency"),
            _m(f"{d}.clat_p99_us", "µs", False, f"99th percentile {d} completion latency"),
            _m(f"{d}.clat_p999_us", "µs", False, f"99.9th percentile {d} completion latency"),
        ]
    return out


def _durability() -> list[MetricInfo]:
    """The durability tier's per-trial evidence (tiers/durability.py); 'lost' counts are 4 KiB
    records."""
    out = []
    for s, what in (
        ("power_loss", "after a simulated power loss (the volatile cache under QEMU killed)"),
        ("qemu_crash", "after QEMU was killed with SIGKILL (host page cache kept)"),
    ):
        out += [
            _m(
                f"{s}.acked_lost",
                "records",
                False,
                f"acknowledged (flushed) records missing or torn {what}",
            ),
            _m(
                f"{s}.unacked_lost",
                "records",
                False,
                f"written but unacknowledged records gone {what} (allowed)",
            ),
            _m(
                f"{s}.unacked_kept", "records", True, f"unacknowledged records that survived {what}"
            ),
            _m(
                f"{s}.fs_clean",
                "0/1",
                True,
                f"1 when the guest filesystem checked clean (after journal replay: "
                f"e2fsck -fn for ext4, xfs_repair -n for xfs) {what}",
            ),
            _m(f"{s}.image_readable", "0/1", True, f"1 when the image could still be read {what}"),
        ]
    out += [
        _m(
            "fs.clean",
            "0/1",
            True,
            "1 when the guest filesystem checked clean after both cuts of the trial",
        ),
        _m(
            "durability.acked_records",
            "records",
            True,
            "records per stream acknowledged before the cut",
        ),
        _m(
            "durability.cut_delay_ms",
            "ms",
            False,
            "seeded delay between the chosen acknowledgement and the cut",
        ),
        _m(
            "phase.verify_s",
            "s",
            False,
            "host-side verification after the cuts (convert, e2fsck, read records)",
        ),
    ]
    return out


def _costs() -> list[MetricInfo]:
    """What a run cost the host (io_cost_metrics) and whether it ran at the load it was offered
    (offered_load_metrics); docs/metrics.md says how each tier measures them."""
    return [
        _m(
            "cost.cpu_s",
            "s",
            False,
            "CPU time (user + system) of the I/O path's processes over the run: QEMU or "
            "qemu-storage-daemon with all its threads (bare metal: fio itself)",
        ),
        _m("cost.cpu_us_per_io", "µs", False, "host CPU time of the I/O path per I/O completed"),
        _m("cost.cpu_ms_per_mib", "ms", False, "host CPU time of the I/O path per MiB moved"),
        _m(
            "cost.ctx_switches_per_io",
            "switches",
            False,
            "context switches of the I/O path's threads per I/O",
        ),
        _m(
            "load.target_iops",
            "IOPS",
            True,
            "the offered load: the IOPS the rate-limited workload asked for",
        ),
        _m(
            "load.achieved_frac",
            "fraction",
            True,
            "IOPS achieved / IOPS offered (rate-limited workloads)",
        ),
        _m(
            "load.reached",
            "0/1",
            True,
            f"1 when the achieved IOPS were at least {LOAD_REACHED_FRACTION:.0%} of the "
            "offered load; 0: offered load not reached, the run's latency is not at the asked load",
        ),
    ]


# A rate-limited run that achieved less than this share of its offered IOPS did not run at the asked
# load.
LOAD_REACHED_FRACTION = 0.95
MIB = 1024 * 1024


def io_cost_metrics(
    metrics: dict[str, float], cpu_s: float | None, ctx_switches: float | None
) -> dict[str, float]:
    """A run's host cost per unit of work, from the I/O path's CPU seconds and context switches
    summed over the run (monitor.summary.field_total of iopath.cpu_s / iopath.ctx_switches) and
    fio's own counts:

        I/Os  = total.iops × job.runtime_s            (fio's iops is total_ios / runtime)
        MiB   = total.bw_mbps × 10^6 × job.runtime_s / 2^20
        cost.cpu_us_per_io       = cpu_s × 10^6 / I/Os
        cost.cpu_ms_per_mib      = cpu_s × 10^3 / MiB
        cost.ctx_switches_per_io = ctx_switches / I/Os

    Absent, never zero, where an input is missing (no I/O path sampled, no I/O completed)."""
    if cpu_s is None:
        return {}
    out = {"cost.cpu_s": cpu_s}
    runtime = metrics.get("job.runtime_s", 0.0)
    ios = metrics.get("total.iops", 0.0) * runtime
    mib = metrics.get("total.bw_mbps", 0.0) * 1e6 * runtime / MIB
    if ios > 0:
        out["cost.cpu_us_per_io"] = cpu_s * 1e6 / ios
        if ctx_switches is not None:
            out["cost.ctx_switches_per_io"] = ctx_switches / ios
    if mib > 0:
        out["cost.cpu_ms_per_mib"] = cpu_s * 1e3 / mib
    return out


def offered_load_metrics(
    metrics: dict[str, float], rate_iops: int | None, poisson: bool = False
) -> dict[str, float]:
    """For a rate-limited workload (fio rate_iops): the offered load, the share achieved (total.iops
    / rate_iops) and whether it was reached (share ≥ LOAD_REACHED_FRACTION). {} otherwise.

    With Poisson arrivals (fio rate_process=poisson: the role profiles, docs/roles.md) the number of
    I/Os a run is offered is itself random: λT expected, standard deviation √(λT). A run is then
    also counted as at its load when it did at least λT − 3√(λT) I/Os (a shortfall a Poisson process
    alone gives in 0.1 % of runs). Example: 130 IOPS for 1 s offers 130 ± 11.4 I/Os; 100 done (77 %)
    still reached it (≥ 130 − 34.2 = 95.8), 90 did not."""
    if not rate_iops:
        return {}
    frac = metrics.get("total.iops", 0.0) / rate_iops
    reached = frac >= LOAD_REACHED_FRACTION
    seconds = metrics.get("job.runtime_s", 0.0)
    if poisson and not reached and seconds > 0:
        offered = rate_iops * seconds
        reached = frac * offered >= offered - 3 * offered**0.5
    return {
        "load.target_iops": float(rate_iops),
        "load.achieved_frac": frac,
        "load.reached": 1.0 if reached else 0.0,
    }


def load_not_reached(metrics: Mapping[str, float]) -> bool:
    """Whether a run missed its offered load (``load.reached`` = 0, see offered_load_metrics): its
    latency and cost are not at the asked load, so nothing that compares runs counts it — the
    reports (report/query.py) and the sweep's racing and precision decisions (runner → scheduler)
    ask this one predicate. False for a run with no offered load (no ``load.reached``)."""
    return metrics.get("load.reached") == 0.0


_PHASES = {
    "wall_s": "wall time of the whole run, QEMU start to exit (guest) or fio start to exit (bare "
    "metal)",
    "qemu_start_s": "QEMU process start until the guest kernel runs",
    "guest_init_s": "guest kernel start until /init",
    "module_load_s": "guest module loading",
    "boot_to_workload_s": "guest boot until the workload starts",
    "workload_s": "the workload itself",
    "shutdown_s": "workload end until QEMU exits",
    "overhead_s": "wall time not spent in the workload (bare metal: fio start-up and teardown)",
}

REGISTRY: dict[str, MetricInfo] = {
    m.name: m
    for m in [
        *_directional(),
        _m("total.iops", "IOPS", True, "read + write I/O operations per second"),
        _m("total.bw_mbps", "MB/s", True, "read + write throughput"),
        _m("cpu.usr_pct", "%", False, "fio's user CPU share (of one CPU) while the job ran"),
        _m("cpu.sys_pct", "%", False, "fio's system CPU share (of one CPU) while the job ran"),
        _m(
            "job.runtime_s", "s", False, "fio job runtime (time-based jobs: the configured runtime)"
        ),
        _m(
            "sync.count",
            "syncs",
            True,
            "number of fsync/fdatasync calls completed (time-based: more is faster)",
        ),
        _m(
            "clients.fairness",
            "",
            True,
            "Jain's fairness index (Σx)²/(n·Σx²) of the primary metric of the clients that "
            "ran at once against one shared backing (1 = equal shares, 1/n = one client "
            "got everything)",
        ),
        _m(
            "clients.count",
            "clients",
            True,
            "how many clients ran at once against one shared backing",
        ),
        _m("sync.lat_mean_us", "µs", False, "mean fsync/fdatasync latency"),
        _m("sync.lat_p99_us", "µs", False, "99th percentile fsync/fdatasync latency"),
        *_costs(),
        _m(
            "ss.attained",
            "0/1",
            True,
            "1 when the SNIA steady-state window rule held at the end of the run",
        ),
        _m(
            "ss.range_frac",
            "fraction",
            False,
            "(max − min)/mean of IOPS over the steady-state window",
        ),
        _m(
            "ss.slope_frac",
            "fraction",
            False,
            "least-squares slope excursion/mean of IOPS over the window",
        ),
        _m(
            "workload.seconds",
            "s",
            False,
            "time the guest workload took (file-system workloads: the timed steps)",
        ),
        _m("fs.timed_s", "s", False, "sum of the timed file-system steps in the guest"),
        _m(
            "fs.untimed_s",
            "s",
            False,
            "sum of the untimed preparation steps (mkfs, mount, populate, drop caches)",
        ),
        *(_m(f"phase.{k}", "s", False, v) for k, v in _PHASES.items()),
        *_durability(),
        # Consolidation tier (tiers/consolidation.py): one run is a sweep point of N tiles of
        # guests.
        _m(
            "point.wall_s",
            "s",
            False,
            "consolidation point: first QEMU start until the last guest powered off",
        ),
        _m(
            "point.start_window_s",
            "s",
            False,
            "consolidation point: first QEMU start until the last one started",
        ),
        _m("point.guests", "guests", True, "consolidation point: guests run at once"),
        _m("point.tiles", "tiles", True, "consolidation point: tiles run at once"),
        _m(
            "role.*.seconds",
            "s",
            False,
            "a role's own time (guest workload start to end), mean over the tiles",
        ),
        _m(
            "role.*.seconds_max",
            "s",
            False,
            "a role's own time in its slowest tile (what the answer compares)",
        ),
        _m("role.*.there_s", "s", False, "file copy: sending the tree to the peer"),
        _m("role.*.back_s", "s", False, "file copy: the peer's idle pause and the copy back"),
        _m("role.*.files", "files", True, "file copy: files in the tree"),
        _m("role.*.kib", "KiB", True, "file copy: size of the tree"),
        _m(
            "qemu.cpu_user_s",
            "s",
            False,
            "user CPU of every QEMU of the point, summed (/proc/<pid>/stat)",
        ),
        _m("qemu.cpu_sys_s", "s", False, "system CPU of every QEMU of the point, summed"),
        _m(
            "qemu.rss_peak_mb",
            "MiB",
            False,
            "peak resident memory (VmHWM) of every QEMU of the point, summed",
        ),
        _m("qemu.count", "processes", True, "QEMU processes followed in the point"),
        _m("guest.*.cpu_user_s", "s", False, "user CPU of one guest's QEMU"),
        _m("guest.*.cpu_sys_s", "s", False, "system CPU of one guest's QEMU"),
        _m("guest.*.rss_peak_mb", "MiB", False, "peak resident memory (VmHWM) of one guest's QEMU"),
        _m(
            "host.cpu_usr_pct",
            "%",
            False,
            "host CPU in user mode over the point, % of all CPUs (guest time included)",
        ),
        _m("host.cpu_sys_pct", "%", False, "host CPU in the kernel over the point, % of all CPUs"),
        _m(
            "host.cpu_iowait_pct",
            "%",
            False,
            "host CPU idle with I/O outstanding over the point, % of all CPUs",
        ),
        _m("host.cpu_idle_pct", "%", True, "host CPU idle over the point, % of all CPUs"),
        _m(
            "host.cpu_steal_pct",
            "%",
            False,
            "host CPU stolen by the hypervisor below, % of all CPUs",
        ),
        _m(
            "host.disk_util_pct",
            "%",
            False,
            "physical disk busy time over the point (/proc/diskstats io_ticks)",
        ),
        _m(
            "host.disk_await_ms",
            "ms",
            False,
            "mean time a disk request took over the point (queue + service)",
        ),
        _m("host.disk_read_mbps", "MiB/s", True, "physical disk reads over the point"),
        _m("host.disk_write_mbps", "MiB/s", True, "physical disk writes over the point"),
        _m(
            "host.mem_used_mb",
            "MiB",
            False,
            "host memory used without page cache and buffers, mean over the point",
        ),
        _m(
            "host.mem_used_peak_mb",
            "MiB",
            False,
            "host memory used without cache, peak over the point",
        ),
        _m(
            "host.mem_with_cache_peak_mb",
            "MiB",
            False,
            "host memory used including page cache and buffers, peak",
        ),
        _m(
            "host.ksm_pages_shared", "pages", True, "KSM: shared pages in use (peak over the point)"
        ),
        _m(
            "host.ksm_pages_sharing",
            "pages",
            True,
            "KSM: sites sharing them, i.e. pages saved (peak over the point)",
        ),
    ]
}

# Metrics with a role or guest name in the middle (role.db.write.iops, guest.t1-db.cpu_user_s) are
# looked up as role.*.<rest> / guest.*.<rest>, then (roles) as <rest> itself: a role's fio metrics
# mean what fio's do.
_NAMED = re.compile(r"^(role|guest)\.([A-Za-z0-9_-]+)\.(.+)$")

_COST_SUFFIXES = ("_ns", "_us", "_ms", "_s", ".seconds", "_pct")
infer_rule = (
    "not in the registry: names ending in _ns/_us/_ms/_s/.seconds (a time) or _pct (a CPU share) "
    "are lower-is-better, anything else higher-is-better"
)


def metric_info(name: str) -> MetricInfo:
    """The registry entry, or an inferred one (``known=False``) following ``infer_rule``."""
    if name in REGISTRY:
        return REGISTRY[name]
    m = _NAMED.match(name)
    if m:
        kind, who, rest = m.groups()
        base = REGISTRY.get(f"{kind}.*.{rest}") or (REGISTRY.get(rest) if kind == "role" else None)
        if base is not None:
            return MetricInfo(
                name, base.unit, base.higher_is_better, f"{base.description} ({kind} {who})"
            )
    cost = name.endswith(_COST_SUFFIXES)
    unit = "s" if name.endswith(("_s", ".seconds")) else name.rsplit("_", 1)[-1] if cost else ""
    return MetricInfo(name, unit, not cost, "custom metric", known=False, rule=infer_rule)


def higher_is_better(name: str) -> bool:
    return metric_info(name).higher_is_better


def registry_json() -> str:
    """The registry as a JSON object {name: {unit, direction, description}} plus the rule for
    unknown names."""
    return json.dumps(
        {
            "metrics": {
                n: {"unit": m.unit, "direction": m.direction, "description": m.description}
                for n, m in sorted(REGISTRY.items())
            },
            "unknown_rule": infer_rule,
        },
        sort_keys=True,
    )


__all__ = [
    "LOAD_REACHED_FRACTION",
    "REGISTRY",
    "MetricInfo",
    "higher_is_better",
    "infer_rule",
    "io_cost_metrics",
    "load_not_reached",
    "metric_info",
    "offered_load_metrics",
    "registry_json",
]
