"""Latency against load: one curve per configuration from the points of a queue-depth family
(rand-read-4k-qd1, -qd4, -qd16, -qd64: workloads.QD_SWEEP), IOPS against p99 completion latency,
with the knee marked (stats/knee.py).  Built from the cells the store's typed queries give
(report/query.cell_workloads).

Each point's figures are the mean and 95% CI over the cell's runs of that workload: a run's p99 is
one sample (the 99th percentile of that run's own I/Os), the interval is over runs
(docs/statistics.md)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from iomatrix.report.query import CellWorkload, cell_workloads
from iomatrix.stats.knee import knee_index
from iomatrix.stats.summary import Summary, summarize
from iomatrix.store import Store
from iomatrix.tiers import tier_order
from iomatrix.workloads import preset, qd_point


@dataclass(frozen=True)
class CurvePoint:
    queue_depth: int
    workload: str
    iops: Summary
    p99_us: Summary


@dataclass(frozen=True)
class LatencyCurve:
    family: str  # e.g. rand-read-4k
    tier: str
    label: str  # the configuration (report/query.CellWorkload.label)
    iops_metric: str
    latency_metric: str
    points: list[CurvePoint]  # in queue-depth order
    knee: int | None  # index into points (stats/knee.py), None: no knee in the measured range

    def as_rows(self) -> list[dict[str, Any]]:
        """One row per point: what the terminal, JSON and CSV carry."""
        return [
            {
                "family": self.family,
                "tier": self.tier,
                "config": self.label,
                "qd": p.queue_depth,
                "iops": p.iops.mean,
                "iops_ci95_low": p.iops.ci_low,
                "iops_ci95_high": p.iops.ci_high,
                "p99_us": p.p99_us.mean,
                "p99_ci95_low": p.p99_us.ci_low,
                "p99_ci95_high": p.p99_us.ci_high,
                "n": min(p.iops.n, p.p99_us.n),
                "knee": i == self.knee,
            }
            for i, p in enumerate(self.points)
        ]


def _side(workload: str) -> str:
    w = preset(workload)
    return "write" if w is not None and w.writes and not w.reads else "read"


def latency_curves(cws: Sequence[CellWorkload]) -> list[LatencyCurve]:
    """Every configuration's curve of every queue-depth family in the cells with at least two depths
    measured (a lone depth, e.g. the old rand-read-4k-qd32 preset, is a point, not a curve)."""
    members: dict[tuple[str, str, str], list[tuple[int, CellWorkload]]] = defaultdict(list)
    for c in cws:
        point = qd_point(c.workload)
        if point is not None:
            members[(point[0], c.axes["tier"], c.label())].append((point[1], c))
    out = []
    for (family, tier, label), found in members.items():
        side = _side(found[0][1].workload)
        iops_m, lat_m = f"{side}.iops", f"{side}.clat_p99_us"
        points = [
            CurvePoint(qd, c.workload, summarize(c.samples[iops_m]), summarize(c.samples[lat_m]))
            for qd, c in sorted(found, key=lambda x: x[0])
            if c.samples.get(iops_m) and c.samples.get(lat_m)
        ]
        if len(points) < 2:
            continue
        knee = knee_index([(p.iops.mean, p.p99_us.mean) for p in points])
        out.append(
            LatencyCurve(
                family=family,
                tier=tier,
                label=label,
                iops_metric=iops_m,
                latency_metric=lat_m,
                points=points,
                knee=knee,
            )
        )
    return sorted(out, key=lambda c: (c.family, tier_order(c.tier), c.label))


def sweep_curves(store: Store, sweep_id: int, workload: str | None = None) -> list[LatencyCurve]:
    """The sweep's latency-against-load curves (those through ``workload`` when given)."""
    curves = latency_curves(cell_workloads(store, sweep_id))
    return [c for c in curves if workload is None or any(p.workload == workload for p in c.points)]
