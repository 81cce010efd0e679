"""Sweeps, cells and per-run samples as reports need them, read through the store's typed
queries."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from iomatrix.domain import axes as axis_registry
from iomatrix.errors import UserError
from iomatrix.matrix import complete
from iomatrix.metrics import load_not_reached
from iomatrix.monitor.sample import MonitorSample
from iomatrix.report.quality import STEADY_PREFIX, steady_state_samples
from iomatrix.store import Store
from iomatrix.store.queries import RunRow


@dataclass
class SeriesKey:
    cell_key: str
    workload: str


@dataclass
class CellWorkload:
    """One cell × workload of a sweep with every ok run's metrics, in run order."""

    cell_id: int
    cell_key: str
    axes: dict[str, str]
    backing: dict[str, Any]
    workload: str
    accel: list[str]
    runs: list[int] = field(default_factory=list)  # run ids, ok only, in attempt order
    failed: int = 0
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    phases: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    cache_states: list[str] = field(default_factory=list)
    page_cache: list[str] = field(default_factory=list)
    # Interference: run id → reasons, for the ok runs the host disturbed (analysed or replaced), and
    # the ok runs a clean retry replaced (not in `runs`, `samples` or `phases`).
    disturbed: dict[int, tuple[str, ...]] = field(default_factory=dict)
    replaced: list[int] = field(default_factory=list)
    # Offered load not reached: ok runs of a rate-limited workload that achieved less than
    # LOAD_REACHED_FRACTION of their offered IOPS (run id → achieved share). Their latency is not at
    # the asked load, so they are not in `runs`, `samples` or `phases` either: never ranked, listed
    # apart.
    unreached: dict[int, float] = field(default_factory=dict)
    # Stored values no measurement can produce (negative, infinite, NaN: a damaged or hand-edited
    # database): (run id, metric, value), left out of `samples` so that they never become a figure;
    # reports name them.
    damaged: list[tuple[int, str, float]] = field(default_factory=list)

    def label(self) -> str:
        """The axes that distinguish this cell (tier is shown apart; modifier only when set)."""
        return _label(frozenset(self.axes.items()))


@functools.lru_cache(maxsize=4096)
def _label(axes: frozenset[tuple[str, str]]) -> str:
    """`CellWorkload.label` of these axes, made once per configuration: a ranking names its cells
    many times, and a fleet answer's 100 hosts run the same few configurations (issue 52)."""
    return " ".join(
        f"{a}={v}"
        for a, v in axis_registry.named(dict(axes))
        if v != "-" and a != "tier" and not (a == "modifier" and v == "none")
    )


def shown_axes(cws: Iterable[CellWorkload]) -> list[str]:
    """The axes a sweep's reports name: the first release's always, and a later axis
    (iomatrix.domain.axes) where some cell sets it away from its default ("-" and the default are
    what cells recorded before the axis existed read, so they name nothing new)."""
    cws = list(cws)
    return [
        a.name
        for a in axis_registry.axes()
        if a.always_named or any(cw.axes.get(a.name, "-") not in ("-", a.default) for cw in cws)
    ]


def sweep_ids(store: Store) -> list[int]:
    return store.sweep_ids()


def pick_sweep(store: Store, sweep_id: int | None) -> int:
    ids = sweep_ids(store)
    # every sweep was a damaged row, or stood on one (the warning named it)
    if not ids and store.damage:
        raise UserError(
            f"{store.path} holds no sweep left once its damaged rows are skipped",
            hint="restore it from a copy",
        )
    if not ids:
        raise UserError(f"{store.path} holds no sweep yet", hint="run 'iomatrix run' first")
    if sweep_id is None:
        return ids[-1]
    if sweep_id not in ids:
        raise UserError(
            f"{store.path} has no sweep {sweep_id}", hint=f"sweeps: {', '.join(map(str, ids))}"
        )
    return sweep_id


def sweep_info(store: Store, sweep_id: int) -> dict[str, Any]:
    s = store.sweep(sweep_id)
    if s is None:
        raise UserError(f"{store.path} has no sweep {sweep_id}")
    return {
        "id": s.id,
        "plan": s.plan_name,
        "plan_fingerprint": s.plan_fingerprint,
        "plan_definition": s.plan_definition,
        "status": s.status,
        "started_at": s.started_at,
        "finished_at": s.finished_at,
        "host": s.host,
        "pruned": s.pruned,
        "notes": s.notes,
    }


def cell_workloads(
    store: Store, sweep_id: int, runs: Sequence[RunRow] | None = None
) -> list[CellWorkload]:
    """Every cell × workload of a sweep that has at least one run (`runs`: the sweep's `store.runs`,
    when the caller has read them already: a fleet answer reads 100 hosts' runs once each, issue
    52)."""
    out: dict[tuple[int, str], CellWorkload] = {}
    per_run = _run_metrics(store, sweep_id)
    for r in store.runs(sweep_id) if runs is None else runs:
        k = (r.cell_id, r.workload)
        cw = out.get(k)
        if cw is None:
            cw = out[k] = CellWorkload(
                r.cell_id, r.cell_key, dict(complete(r.axes)), r.backing, r.workload, []
            )
        _count_run(cw, r, per_run.get(r.run_id, {}))
    if not out:
        return []
    # A later axis is named only where some cell of the sweep sets it (the rest read the same as
    # before it).
    shown = shown_axes(out.values())
    for cw in out.values():
        cw.axes = {a: v for a, v in cw.axes.items() if a in shown}
    for cw in out.values():
        for rid in cw.runs:
            for metric, value in per_run.get(rid, {}).items():
                # every stored metric is ≥ 0 (iomatrix.metrics)
                if math.isfinite(value) and value >= 0:
                    cw.samples[metric].append(value)
                else:
                    cw.damaged.append((rid, metric, value))
    return list(out.values())


def _run_metrics(store: Store, sweep_id: int) -> dict[int, dict[str, float]]:
    """Per run, the stored metrics plus those computed here from the run's raw series: steady state
    is a statistic, so it is derived at report time from the per-interval IOPS (a sweep stored
    before this carries ss.* samples too; where its run kept the series they are recomputed, with
    the same result)."""
    series = store.ok_run_series(sweep_id, "iops_series")
    per_run: dict[int, dict[str, float]] = defaultdict(dict)
    for s in store.ok_samples(sweep_id):
        if not (s.run_id in series and s.metric.startswith(STEADY_PREFIX)):
            per_run[s.run_id][s.metric] = s.value
    for rid, values in series.items():
        per_run[rid].update(steady_state_samples(values))
    return per_run


def _count_run(cw: CellWorkload, r: RunRow, metrics: dict[str, float]) -> None:
    """One run of the cell × workload: failed, replaced, short of its offered load, or counted
    (its cache state, page-cache method and phases; a phase that cannot be a time is damage)."""
    if r.accel not in cw.accel:
        cw.accel.append(r.accel)
    if r.status != "ok":
        cw.failed += 1
        return
    if r.disturbed:
        cw.disturbed[r.run_id] = r.disturbance
    if r.replaced:
        cw.replaced.append(r.run_id)
        return
    if load_not_reached(metrics):
        cw.unreached[r.run_id] = metrics.get("load.achieved_frac", 0.0)
        return
    cw.runs.append(r.run_id)
    cw.cache_states.append(r.cache_state)
    cw.page_cache.append(r.page_cache_method)
    for name, value in r.phases.items():
        if math.isfinite(value) and value >= 0:
            cw.phases[name].append(value)
        else:
            cw.damaged.append((r.run_id, name, value))


def failures(store: Store, sweep_id: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f.run_id,
            "key": f.cell_key,
            "workload": f.workload,
            "attempt": f.attempt,
            "error": f.error,
        }
        for f in store.failed_runs(sweep_id)
    ]


def monitor_series(store: Store, run_id: int) -> dict[str, list[tuple[float, float]]]:
    if not store.run_exists(run_id):
        raise UserError(
            f"{store.path} has no run {run_id}",
            hint="run ids are listed as run_ids in 'iomatrix results --format json'",
        )
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for p in store.monitor_points(run_id):
        series[p.field].append((p.t, p.value))
    return dict(series)


def run_monitor_samples(store: Store, run_id: int) -> list[MonitorSample]:
    """A run's sampler output as the sampler produced it (one sample per tick)."""
    ticks: dict[float, dict[str, float]] = {}
    for p in store.monitor_points(run_id):
        ticks.setdefault(p.t, {})[p.field] = p.value
    return [MonitorSample(t, values) for t, values in ticks.items()]


def unit_stops(store: Store, sweep_id: int) -> dict[tuple[int, str], dict[str, Any]]:
    """(cell id, workload) → why and when the scheduler stopped repeating it (empty before schema
    3); an elimination's ``against`` (the key of the cell it was eliminated against, schema 8) only
    where the stop has one, so an older sweep's documents read as before."""
    return {
        (u.cell_id, u.workload): {
            "kind": u.kind,
            "reason": u.reason,
            "round": u.round,
            "ok_runs": u.ok_runs,
            "stopped_at": u.stopped_at,
            **({"against": u.against} if u.against is not None else {}),
        }
        for u in store.unit_stops(sweep_id)
    }


def run_table(store: Store, sweep_id: int) -> list[dict[str, Any]]:
    """Every run of a sweep (ok and failed) with its cell axes, its cell's label and every metric
    it produced, in run order; with its interference verdict (``disturbance``: reasons,
    ``replaced``: a clean retry replaced it)."""
    judged = {r.run_id: r for r in store.runs(sweep_id)}
    out = []
    for run in store.run_listing(sweep_id):
        j = judged.get(run.run_id)
        out.append(
            {
                "id": run.run_id,
                "cell_id": run.cell_id,
                "key": run.cell_key,
                **run.axes,
                # its settings as the rankings name them ('format=raw cache=none …'), the later
                # axes a cell sets included ("lun_type=blockio"); not the store key's slash form
                "label": _label(frozenset((a, v) for a, v in run.axes.items() if v is not None)),
                "workload": run.workload,
                "attempt": run.attempt,
                "status": run.status,
                "accel": run.accel,
                "wall_s": run.wall_s,
                "started_at": run.started_at,
                "error": run.error,
                "metrics": dict(run.metrics),
                "disturbed": j.disturbed if j else None,
                "disturbance": list(j.disturbance) if j else [],
                "retry_of": j.retry_of if j else None,
                "replaced": bool(j and j.replaced),
            }
        )
    return out


def run_raw_output(store: Store, run_id: int) -> str:
    """The tool's output of one run exactly as it printed it (fio's JSON for fio runs)."""
    raw = store.run_raw_output(run_id)
    if raw is None:
        raise UserError(
            f"{store.path} has no run {run_id}",
            hint="run ids are listed as run_ids in 'iomatrix results --format json'",
        )
    return raw
