"""Read sweeps, cells and per-run samples back out of the store."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from iomatrix.errors import UserError
from iomatrix.monitor.sampler import MonitorSample
from iomatrix.plan.model import AXES
from iomatrix.store import Store


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

    def label(self) -> str:
        """The axes that distinguish this cell (tier is shown apart; modifier only when set)."""
        return " ".join(f"{a}={v}" for a, v in self.axes.items()
                        if v != "-" and a != "tier" and not (a == "modifier" and v == "none"))


def sweep_ids(store: Store) -> list[int]:
    return [int(r[0]) for r in store.db.execute("SELECT id FROM sweeps ORDER BY id")]


def pick_sweep(store: Store, sweep_id: int | None) -> int:
    ids = sweep_ids(store)
    if not ids:
        raise UserError(f"{store.path} holds no sweep yet", hint="run 'iomatrix run' first")
    if sweep_id is None:
        return ids[-1]
    if sweep_id not in ids:
        raise UserError(f"{store.path} has no sweep {sweep_id}", hint=f"sweeps: {', '.join(map(str, ids))}")
    return sweep_id


def sweep_info(store: Store, sweep_id: int) -> dict[str, Any]:
    row = store.db.execute("SELECT s.*, h.* , s.id AS sid FROM sweeps s JOIN hosts h ON h.id=s.host_id "
                           "WHERE s.id=?", (sweep_id,)).fetchone()
    host_cols = ("hostname", "kernel", "os", "cpu_model", "cpu_count", "mem_bytes", "fio_version", "qemu_version",
                 "qemu_img_version", "python_version", "iomatrix_version")
    host = {k: row[k] for k in host_cols}
    host.update(json.loads(row["extra_json"]))
    return {
        "id": int(row["sid"]),
        "plan": row["plan_name"],
        "plan_fingerprint": row["plan_fingerprint"],
        "plan_definition": json.loads(row["plan_json"]),
        "status": row["status"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "host": host,
        "pruned": json.loads(row["pruned_json"]),
        "notes": json.loads(row["notes_json"]),
    }


def cell_workloads(store: Store, sweep_id: int) -> list[CellWorkload]:
    """Every cell × workload of a sweep that has at least one run."""
    out: dict[tuple[int, str], CellWorkload] = {}
    rows = store.db.execute(
        "SELECT c.id cid, c.key, c.backing_json, c.tier, c.format, c.preallocation, c.cache, c.aio, c.bus, "
        "c.backing, c.modifier, r.id rid, r.workload, r.status, r.accel, r.phases_json, r.cache_state, "
        "r.page_cache_method FROM runs r JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? "
        "ORDER BY c.id, r.workload, r.attempt", (sweep_id,))
    for r in rows:
        k = (int(r["cid"]), r["workload"])
        cw = out.get(k)
        if cw is None:
            cw = out[k] = CellWorkload(int(r["cid"]), r["key"], {a: r[a] for a in AXES},
                                       json.loads(r["backing_json"]), r["workload"], [])
        if r["accel"] not in cw.accel:
            cw.accel.append(r["accel"])
        if r["status"] != "ok":
            cw.failed += 1
            continue
        cw.runs.append(int(r["rid"]))
        cw.cache_states.append(r["cache_state"])
        cw.page_cache.append(r["page_cache_method"])
        for name, value in json.loads(r["phases_json"]).items():
            cw.phases[name].append(float(value))
    if not out:
        return []
    by_run = {rid: cw for cw in out.values() for rid in cw.runs}
    for s in store.db.execute(
            "SELECT s.run_id, s.metric, s.value FROM samples s JOIN runs r ON r.id=s.run_id JOIN cells c "
            "ON c.id=r.cell_id WHERE c.sweep_id=? AND r.status='ok' ORDER BY r.attempt", (sweep_id,)):
        by_run[int(s["run_id"])].samples[s["metric"]].append(float(s["value"]))
    return list(out.values())


def failures(store: Store, sweep_id: int) -> list[dict[str, Any]]:
    rows = store.db.execute(
        "SELECT r.id, c.key, r.workload, r.attempt, r.error FROM runs r JOIN cells c ON c.id=r.cell_id "
        "WHERE c.sweep_id=? AND r.status!='ok' ORDER BY r.id", (sweep_id,))
    return [dict(r) for r in rows]


def monitor_series(store: Store, run_id: int) -> dict[str, list[tuple[float, float]]]:
    if store.db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is None:
        raise UserError(f"{store.path} has no run {run_id}",
                        hint="run ids are listed as run_ids in 'iomatrix results --format json'")
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in store.db.execute("SELECT t, field, value FROM monitor WHERE run_id=? ORDER BY t", (run_id,)):
        series[r["field"]].append((float(r["t"]), float(r["value"])))
    return dict(series)


def run_monitor_samples(store: Store, run_id: int) -> list[MonitorSample]:
    """A run's sampler output as the sampler produced it (one sample per tick)."""
    ticks: dict[float, dict[str, float]] = {}
    for r in store.db.execute("SELECT t, field, value FROM monitor WHERE run_id=? ORDER BY t", (run_id,)):
        ticks.setdefault(float(r["t"]), {})[r["field"]] = float(r["value"])
    return [MonitorSample(t, values) for t, values in ticks.items()]
