"""Many clients, one backend: per-client and aggregate figures against the number of clients (the
`clients` axis).

One curve per configuration (the cell's axes other than `clients`) and workload measured at two or
more numbers of clients N. Each point's figures are the mean and 95% CI over the cell's runs
(stats/summary.py), from one value per run:

* aggregate throughput: the run's primary metric, the sum over its clients (tiers/contention.py);
* per-client throughput: the mean over the run's clients (the run's own metric when N = 1);
* per-client p99: the mean over the run's clients of each one's p99 completion latency; worst-client
  p99: the highest (the run's own p99 when N = 1);
* fairness: Jain's index of the run's clients' throughputs (stats/fairness.py; 1 by definition when
  N = 1).

The saturation point is where the aggregate stops scaling with N (stats/saturation.py). Built from
the cells the store's typed queries give (report/query.cell_workloads) and the per-client rows
(`Store.run_client_metrics`)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from iomatrix.report.query import CellWorkload, cell_workloads
from iomatrix.report.rank import primary_metric
from iomatrix.stats.fairness import jain_index
from iomatrix.stats.saturation import AggregatePoint, saturation
from iomatrix.stats.summary import Summary, summarize
from iomatrix.store import Store
from iomatrix.tiers import tier_order

FAIRNESS_METRIC = "clients.fairness"  # as tiers/contention.py stores it


@dataclass(frozen=True)
class ContentionPoint:
    clients: int
    aggregate: Summary
    per_client: Summary
    per_client_p99_us: Summary | None
    worst_p99_us: Summary | None
    fairness: Summary | None  # None where N = 1


@dataclass(frozen=True)
class ContentionCurve:
    workload: str
    tier: str
    label: str  # the configuration without `clients`
    # the configuration's axes, `clients` at its default (the tables' axis columns)
    axes: dict[str, str]
    metric: str  # the throughput metric (the workload's primary)
    latency_metric: str | None
    points: list[ContentionPoint]  # in order of N
    # N from which adding clients stops adding aggregate throughput (None: kept scaling)
    saturation: int | None
    # The hosts client 1, 2, … ran on (`[[backing.client_host]]`); empty: on the sweep's own host.
    client_hosts: tuple[str, ...] = ()
    # N from which the intervals could not tell scaling from saturation (stats/saturation.py); None:
    # decided.
    undecided: int | None = None

    def as_rows(self) -> list[dict[str, Any]]:
        """One row per N: what the terminal, JSON and CSV carry (the client hosts only where there
        were some)."""
        hosts = {"client_hosts": ", ".join(self.client_hosts)} if self.client_hosts else {}
        return [
            {
                **{a: v for a, v in self.axes.items() if a != "clients"},
                **hosts,
                "workload": self.workload,
                "tier": self.tier,
                "config": self.label,
                "clients": p.clients,
                "n": p.aggregate.n,
                "metric": self.metric,
                **_figure("aggregate", p.aggregate),
                **_figure("per_client", p.per_client),
                **_figure("per_client_p99_us", p.per_client_p99_us),
                **_figure("worst_p99_us", p.worst_p99_us),
                **_figure("fairness", p.fairness),
                "saturation": p.clients == self.saturation,
                **({"saturation_undecided": True} if p.clients == self.undecided else {}),
            }
            for p in self.points
        ]


def _figure(name: str, s: Summary | None) -> dict[str, float | None]:
    if s is None:
        return {name: None, f"{name}_ci95_low": None, f"{name}_ci95_high": None}
    return {name: s.mean, f"{name}_ci95_low": s.ci_low, f"{name}_ci95_high": s.ci_high}


def latency_metric_of(metric: str) -> str | None:
    """The p99 completion latency that goes with a throughput metric (read.iops →
    read.clat_p99_us)."""
    side = metric.split(".", 1)[0]
    return f"{side}.clat_p99_us" if side in ("read", "write", "trim") else None


def _clients(c: CellWorkload) -> int:
    value = c.axes.get("clients", "1")
    return int(value) if value.isdigit() else 1


def _per_run(
    c: CellWorkload, metric: str | None, per_client: Mapping[int, list[float]], pick: str
) -> list[float]:
    """One value per ok run of `c`: the clients' mean or max of `metric` (the run's own value for
    one client)."""
    if metric is None or metric not in c.samples:
        return []
    out = []
    for rid, own in zip(c.runs, c.samples[metric], strict=False):
        values = per_client.get(rid)
        if not values:
            out.append(own)
        else:
            out.append(statistics.fmean(values) if pick == "mean" else max(values))
    return out


def _summary(values: Sequence[float]) -> Summary | None:
    return summarize(values) if values else None


def _point(
    c: CellWorkload, metric: str, latency: str | None, rows: Mapping[str, Mapping[int, list[float]]]
) -> ContentionPoint | None:
    aggregate = c.samples.get(metric)
    if not aggregate:
        return None
    n = _clients(c)
    mine = rows.get(metric, {})
    fair = [jain_index(mine[rid]) for rid in c.runs if rid in mine] if n > 1 else []
    lat_rows = rows.get(latency or "", {})
    return ContentionPoint(
        n,
        summarize(aggregate),
        summarize(_per_run(c, metric, mine, "mean")),
        _summary(_per_run(c, latency, lat_rows, "mean")),
        _summary(_per_run(c, latency, lat_rows, "max")),
        summarize([f for f in fair if f is not None], scale="proportion") if fair else None,
    )


def saturation_word(row: Mapping[str, Any]) -> str | None:
    """What a contention row says of saturation: "saturated" at the saturation point, "not decided"
    where the intervals from this N on could not tell scaling from saturation
    (stats/saturation.py)."""
    if row["saturation"]:
        return "saturated"
    return "not decided" if row.get("saturation_undecided") else None


def client_host_lines(curves: Sequence[ContentionCurve]) -> list[str]:
    """One line per backing whose clients ran on other hosts: "BACKING: client 1, 2, … on HOST1,
    HOST2"."""
    return sorted(
        {
            f"{c.axes.get('backing', '?')}: client 1, 2, … on {', '.join(c.client_hosts)}"
            for c in curves
            if c.client_hosts
        }
    )


def client_hosts_of(backing: Mapping[str, Any]) -> tuple[str, ...]:
    """The host names of the client hosts a recorded backing named (its spec's `client_host`
    tables), in order."""
    spec = backing.get("backing_spec")
    hosts = spec.get("client_host") if isinstance(spec, dict) else None
    if not isinstance(hosts, list):
        return ()
    return tuple(str(h.get("ssh", "?")).rsplit("@", 1)[-1] for h in hosts if isinstance(h, dict))


def contention_curves(
    cws: Sequence[CellWorkload], rows: Mapping[str, Mapping[int, list[float]]]
) -> list[ContentionCurve]:
    """Every configuration's curve over N, for the configurations measured at two or more N. `rows`:
    metric → run id → the clients' values (Store.run_client_metrics) for every metric the curves
    read."""
    members: dict[tuple[str, str, str], list[CellWorkload]] = defaultdict(list)
    for c in cws:
        if c.axes.get("clients", "-") != "-":
            members[
                (c.workload, c.axes["tier"], replace(c, axes={**c.axes, "clients": "1"}).label())
            ].append(c)
    out = []
    for (workload, tier, label), found in members.items():
        config = {**found[0].axes, "clients": "1"}
        if len({_clients(c) for c in found}) < 2:
            continue
        metric = primary_metric(workload)[0]
        latency = latency_metric_of(metric)
        points = sorted(
            (p for c in found if (p := _point(c, metric, latency, rows)) is not None),
            key=lambda p: p.clients,
        )
        if len(points) < 2:
            continue
        decided = saturation(
            [
                AggregatePoint(p.clients, p.aggregate.mean, p.aggregate.ci_low, p.aggregate.ci_high)
                for p in points
            ]
        )
        out.append(
            ContentionCurve(
                workload=workload,
                tier=tier,
                label=label,
                axes=config,
                metric=metric,
                latency_metric=latency,
                points=points,
                saturation=decided.clients,
                client_hosts=client_hosts_of(found[0].backing),
                undecided=decided.undecided,
            )
        )
    return sorted(out, key=lambda c: (c.workload, tier_order(c.tier), c.label))


def sweep_contention(
    store: Store, sweep_id: int, workload: str | None = None
) -> list[ContentionCurve]:
    """The sweep's curves over the number of clients (those of `workload` when given); none for a
    sweep without runs of several clients (every sweep recorded before the `clients` axis)."""
    cws = [c for c in cell_workloads(store, sweep_id) if workload is None or c.workload == workload]
    if not any(_clients(c) > 1 for c in cws):
        return []
    metrics = {primary_metric(c.workload)[0] for c in cws}
    metrics |= {m for m in map(latency_metric_of, list(metrics)) if m is not None}
    rows = {m: store.run_client_metrics(sweep_id, m) for m in metrics}
    return contention_curves(cws, rows)
