"""The store's read API: typed queries that reports use instead of SQL.

Every query works on each schema version the store can open: columns a version
lacks are read as their neutral value (e.g. `round` is None for schema-1 runs), so
read-only commands never need to migrate, and therefore never write.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from iomatrix.stop_kinds import StopKind
from iomatrix.store.schema import CELL_AXIS_COLUMNS, HOST_COLUMNS
from iomatrix.textfile import escape_controls_in as _shown


@dataclass(frozen=True)
class SweepRow:
    id: int
    plan_name: str
    plan_fingerprint: str
    plan_definition: dict[str, Any]
    status: str
    started_at: float
    finished_at: float | None
    host: dict[str, Any]
    pruned: list[dict[str, str]]
    notes: list[str]
    metric_registry: dict[str, dict[str, str]]  # {} for sweeps recorded before schema 2
    # the host group recorded with the sweep (schema 6, `run --group`); None without one
    group: str | None = None


@dataclass(frozen=True)
class FleetSweep:
    """One sweep as the fleet answers see it: which host ran which plan, in which group."""

    id: int
    plan_name: str
    plan_fingerprint: str
    status: str
    started_at: float
    host_id: int
    # the host's inventory name when a fleet recorded one, else its hostname ("host N" without)
    hostname: str
    group: str | None  # `run --group` / the inventory group; None without one


@dataclass(frozen=True)
class RunRow:
    """One run with its cell's axes, in (cell, workload, attempt) order."""

    run_id: int
    cell_id: int
    cell_key: str
    axes: dict[str, str]
    backing: dict[str, Any]
    workload: str
    attempt: int
    status: str
    accel: str
    phases: dict[str, float]
    cache_state: str
    page_cache_method: str
    round: int | None
    round_position: int | None
    # Interference (schema 3): None = not judged (older runs); the reasons when disturbed.
    disturbed: bool | None = None
    disturbance: tuple[str, ...] = ()
    retry_of: int | None = None  # the disturbed run this run was started again for
    replaced: bool = False  # an ok run that a clean retry in the same round replaced: not analysed
    boot_id: str | None = None  # runs that shared a guest boot (schema 4); None otherwise
    boot_position: int | None = None  # 0 = the cold first run of its boot


@dataclass(frozen=True)
class RunListing:
    """One run as a listing of every run shows it (the HTML report's "Every run" table): its cell's
    key and the cells table's axis columns, its outcome, and every metric it produced; ok and failed
    runs alike."""

    run_id: int
    cell_id: int
    cell_key: str
    # every axis of the cell: the cells table's columns (schema.CELL_AXIS_COLUMNS) first, in that
    # order, then the later axes the cell_axes rows hold (lun_type, rbd_cache_policy, clients, ...)
    axes: dict[str, str]
    workload: str
    attempt: int
    status: str
    accel: str
    wall_s: float
    started_at: float
    error: str | None
    metrics: dict[str, float]  # metric → value, as the run recorded them


@dataclass(frozen=True)
class UnitStop:
    """Why and when the scheduler stopped repeating one cell × workload (schema 3)."""

    cell_id: int
    cell_key: str
    workload: str
    kind: StopKind
    reason: str
    round: int | None
    ok_runs: int
    stopped_at: float
    # an elimination's reference: the key of the cell it was eliminated against (schema 8)
    against: str | None = None


# The ok runs a disturbed run's clean retry replaced: per cell × workload × round the analysis uses
# one run, the latest clean one, else the latest one (runs without a round stand alone). Same rule
# as the scheduler's.
REPLACED_RUNS_SQL = """
SELECT id FROM (
  SELECT r.id, ROW_NUMBER() OVER (PARTITION BY r.cell_id, r.workload, COALESCE(r.round, -r.id)
                                  ORDER BY COALESCE(r.disturbed, 0), r.id DESC) AS pick
  FROM runs r JOIN cells c ON c.id = r.cell_id WHERE c.sweep_id = ? AND r.status = 'ok'
) WHERE pick > 1
"""


@dataclass(frozen=True)
class Sample:
    run_id: int
    metric: str
    value: float


@dataclass(frozen=True)
class FailedRun:
    run_id: int
    cell_key: str
    workload: str
    attempt: int
    error: str | None


@dataclass(frozen=True)
class MonitorPoint:
    t: float
    field: str
    value: float


class RunBoot(NamedTuple):
    """The guest boot a run shared with other runs (schema 4), as a (boot id, position) pair."""

    boot_id: str
    position: int | None  # 0 = the cold first run of its boot


# SQLite's default limit of host parameters in one statement was 999 before 3.32: ask in chunks
# below it.
ID_CHUNK = 500


def _chunks(ids: Sequence[int]) -> Iterator[list[int]]:
    ids = list(ids)
    for i in range(0, len(ids), ID_CHUNK):
        yield ids[i : i + ID_CHUNK]


def _marks(chunk: Sequence[int]) -> str:
    return ",".join("?" * len(chunk))


class StoreQueries:
    """Mixed into `Store`: `self.db` is its connection, `self.schema_version` the file's schema."""

    db: sqlite3.Connection
    schema_version: int

    def sweep_ids(self) -> list[int]:
        return [int(r[0]) for r in self.db.execute("SELECT id FROM sweeps ORDER BY id")]

    def sweep(self, sweep_id: int) -> SweepRow | None:
        registry = "s.metric_registry" if self.schema_version >= 2 else "'{}'"
        group = "s.host_group" if self.schema_version >= 6 else "NULL"
        row = self.db.execute(
            "SELECT s.id sid, s.plan_name, s.plan_fingerprint, s.plan_json, s.status, "
            "s.started_at, s.finished_at,"
            f" s.pruned_json, s.notes_json, {registry} AS metric_registry, {group} AS "
            "host_group, h.extra_json, "
            + ", ".join(f"h.{c}" for c in HOST_COLUMNS)
            + " FROM sweeps s JOIN hosts h ON h.id=s.host_id WHERE s.id=?",
            (sweep_id,),
        ).fetchone()
        if row is None:
            return None
        host = {k: row[k] for k in HOST_COLUMNS}
        host.update(json.loads(row["extra_json"]))
        # Text a plan or a host wrote is returned with its terminal control characters escaped (as
        # everywhere below): reports print it, and a description holding ESC [2J must not clear the
        # reader's screen.
        return SweepRow(
            id=int(row["sid"]),
            plan_name=_shown(row["plan_name"]),
            plan_fingerprint=row["plan_fingerprint"],
            plan_definition=_shown(json.loads(row["plan_json"])),
            status=_shown(row["status"]),
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            host=_shown(host),
            pruned=_shown(json.loads(row["pruned_json"])),
            notes=_shown(json.loads(row["notes_json"])),
            metric_registry=json.loads(row["metric_registry"]),
            group=_shown(row["host_group"]),
        )

    def fleet_sweeps(self) -> list[FleetSweep]:
        """Every sweep with its host and group, for the fleet answers (the hosts of a merged
        database), by id.

        A host is named by its inventory name, else its hostname; where machines with different
        machine ids share that name (cloned hosts without an inventory name), each is named with the
        start of its machine id, so that they stay apart (the same machine recorded under several
        host rows — a kernel update — keeps one name)."""
        group = "s.host_group" if self.schema_version >= 6 else "NULL"
        rows = self.db.execute(
            "SELECT s.id, s.plan_name, s.plan_fingerprint, s.status, s.started_at, "
            f"{group} AS host_group, "
            "h.id AS host_id, COALESCE(json_extract(h.extra_json, '$.host_label'), "
            "h.hostname) AS hostname, "
            "json_extract(h.extra_json, '$.machine_id') AS machine_id "
            "FROM sweeps s JOIN hosts h ON h.id=s.host_id ORDER BY s.id"
        ).fetchall()
        names = {int(r["id"]): _shown(r["hostname"]) or f"host {r['host_id']}" for r in rows}
        machines: dict[str, set[str]] = {}
        for r in rows:
            if isinstance(r["machine_id"], str) and r["machine_id"]:
                machines.setdefault(names[int(r["id"])], set()).add(r["machine_id"])
        for r in rows:
            name, machine = names[int(r["id"])], r["machine_id"]
            if len(machines.get(name, ())) > 1 and isinstance(machine, str) and machine:
                names[int(r["id"])] = f"{name} (machine {_shown(machine[:8])})"
        return [
            FleetSweep(
                id=int(r["id"]),
                plan_name=_shown(r["plan_name"]),
                plan_fingerprint=r["plan_fingerprint"],
                status=_shown(r["status"]),
                started_at=float(r["started_at"]),
                host_id=int(r["host_id"]),
                hostname=names[int(r["id"])],
                group=_shown(r["host_group"]),
            )
            for r in rows
        ]

    def sweeps_naming_no_host(self) -> int:
        """How many sweeps not running name a host the database does not hold (a damaged
        sweeps.host_id): such sweeps have no history (report/history.py says why)."""
        return int(
            self.db.execute(
                "SELECT count(*) FROM sweeps s LEFT JOIN hosts h ON h.id = s.host_id "
                "WHERE s.status != 'running' AND h.id IS NULL"
            ).fetchone()[0]
        )

    def finished_sweeps_with_versions(self, facts: Sequence[str]) -> list[dict[str, Any]]:
        """Every sweep not running, in start order, with its plan and the host's `facts` (columns of
        `hosts`: kernel, qemu_version, …), for the history of each host's answers
        (report/history.py)."""
        rows = self.db.execute(
            f"SELECT s.id, s.plan_name, s.plan_fingerprint, s.started_at, "
            f"{', '.join('h.' + c for c in facts)} FROM sweeps s JOIN hosts h ON h.id=s.host_id "
            "WHERE s.status != 'running' ORDER BY s.started_at, s.id"
        ).fetchall()
        return [dict(r) for r in rows]

    def run_window(self, sweep_id: int) -> tuple[float | None, float, float] | None:
        """(the start time the sweep was given with `run --start-at`, or None; its first ok run's
        start; its last ok run's end), or None for a sweep without an ok run: which hosts ran
        together, and when (report/fleet.py)."""
        row = self.db.execute(
            "SELECT max(json_extract(r.meta_json, '$.started_together.at')) at, "
            "min(r.started_at) first, "
            "max(r.finished_at) last FROM runs r JOIN cells c ON c.id = r.cell_id "
            "WHERE c.sweep_id = ? AND r.status = 'ok'",
            (sweep_id,),
        ).fetchone()
        if row is None or row["first"] is None:
            return None
        return (
            (None if row["at"] is None else float(row["at"])),
            float(row["first"]),
            float(row["last"]),
        )

    def replaced_runs(self, sweep_id: int) -> set[int]:
        """Ok runs of the sweep that a clean retry replaced (none before schema 3: nothing was
        retried)."""
        if self.schema_version < 3:
            return set()
        return {int(r[0]) for r in self.db.execute(REPLACED_RUNS_SQL, (sweep_id,))}

    def cell_axes(self, sweep_id: int) -> dict[int, dict[str, str]]:
        """Cell id → its stored axes (schema 5: one row per axis; older files: the cells table's
        columns, read by `runs`). Only what was recorded: an axis added since has no row (see
        matrix.complete)."""
        if self.schema_version < 5:
            return {}
        out: dict[int, dict[str, str]] = {}
        for cid, axis, value in self.db.execute(
            "SELECT a.cell_id, a.axis, a.value FROM cell_axes a JOIN cells c ON c.id=a.cell_id "
            "WHERE c.sweep_id=? ORDER BY a.cell_id",
            (sweep_id,),
        ):
            out.setdefault(int(cid), {})[_shown(axis)] = _shown(value)
        return out

    def runs(self, sweep_id: int) -> list[RunRow]:
        """Every run of a sweep (ok and failed) with its cell, in cell, workload, attempt order."""
        rounds = (
            "r.round, r.round_position"
            if self.schema_version >= 2
            else "NULL AS round, NULL AS round_position"
        )
        interference = (
            "r.disturbed, r.disturbance_json, r.retry_of"
            if self.schema_version >= 3
            else "NULL AS disturbed, '[]' AS disturbance_json, NULL AS retry_of"
        )
        boots = (
            "r.boot_id, r.boot_position"
            if self.schema_version >= 4
            else "NULL AS boot_id, NULL AS boot_position"
        )
        rows = self.db.execute(
            "SELECT c.id cid, c.key, c.backing_json, "
            + ", ".join(f"c.{a}" for a in CELL_AXIS_COLUMNS)
            + ", r.id rid, r.workload, r.attempt, r.status, r.accel, r.phases_json, r.cache_state, "
            f"r.page_cache_method, {rounds}, {interference}, {boots} FROM runs r JOIN "
            "cells c ON c.id=r.cell_id "
            "WHERE c.sweep_id=? ORDER BY c.id, r.workload, r.attempt",
            (sweep_id,),
        )
        replaced = self.replaced_runs(sweep_id)
        cell_axes = self.cell_axes(sweep_id)
        # a cell's backing decoded once, not once per run of it (a row per run carries it)
        backings: dict[int, Any] = {}
        return [
            RunRow(
                run_id=int(r["rid"]),
                cell_id=int(r["cid"]),
                cell_key=_shown(r["key"]),
                axes=cell_axes.get(int(r["cid"])) or {a: _shown(r[a]) for a in CELL_AXIS_COLUMNS},
                backing=backings.get(int(r["cid"]))
                or backings.setdefault(int(r["cid"]), _shown(json.loads(r["backing_json"]))),
                workload=_shown(r["workload"]),
                attempt=int(r["attempt"]),
                status=r["status"],
                accel=_shown(r["accel"]),
                phases={k: float(v) for k, v in json.loads(r["phases_json"]).items()},
                cache_state=r["cache_state"],
                page_cache_method=r["page_cache_method"],
                round=r["round"],
                round_position=r["round_position"],
                disturbed=None if r["disturbed"] is None else bool(r["disturbed"]),
                disturbance=tuple(json.loads(r["disturbance_json"])),
                retry_of=r["retry_of"],
                replaced=int(r["rid"]) in replaced,
                boot_id=r["boot_id"],
                boot_position=r["boot_position"],
            )
            for r in rows
        ]

    def run_listing(self, sweep_id: int) -> list[RunListing]:
        """Every run of a sweep (ok and failed) with its cell's axis columns and all its metrics, in
        run order."""
        rows = self.db.execute(
            "SELECT r.id, r.cell_id, c.key, "
            + ", ".join(f"c.{a}" for a in CELL_AXIS_COLUMNS)
            + ", r.workload, r.attempt, r.status, r.accel, r.wall_s, r.started_at, r.error "
            "FROM runs r "
            "JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? ORDER BY r.id",
            (sweep_id,),
        ).fetchall()
        metrics: dict[int, dict[str, float]] = {int(r["id"]): {} for r in rows}
        for s in self.db.execute(
            "SELECT s.run_id, s.metric, s.value FROM samples s JOIN runs r ON r.id=s.run_id "
            "JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=?",
            (sweep_id,),
        ):
            metrics[int(s["run_id"])][s["metric"]] = float(s["value"])
        later = self.cell_axes(sweep_id)
        return [
            RunListing(
                run_id=int(r["id"]),
                cell_id=int(r["cell_id"]),
                cell_key=_shown(r["key"]),
                axes={
                    **{a: _shown(r[a]) for a in CELL_AXIS_COLUMNS},
                    **{
                        a: v
                        for a, v in later.get(int(r["cell_id"]), {}).items()
                        if a not in CELL_AXIS_COLUMNS
                    },
                },
                workload=_shown(r["workload"]),
                attempt=int(r["attempt"]),
                status=r["status"],
                accel=_shown(r["accel"]),
                wall_s=float(r["wall_s"]),
                started_at=float(r["started_at"]),
                error=_shown(r["error"]),
                metrics=metrics[int(r["id"])],
            )
            for r in rows
        ]

    def run_raw_output(self, run_id: int) -> str | None:
        """The tool's output of one run exactly as it printed it (fio's JSON for fio runs); None: no
        such run."""
        row = self.db.execute("SELECT raw_output FROM runs WHERE id=?", (run_id,)).fetchone()
        return None if row is None else str(row["raw_output"])

    def run_job_text(self, run_id: int) -> str | None:
        """The job text one run gave its tool (fio's job file for fio runs); None: no such run."""
        row = self.db.execute("SELECT job_text FROM runs WHERE id=?", (run_id,)).fetchone()
        return None if row is None else str(row["job_text"])

    def unit_stops(self, sweep_id: int) -> list[UnitStop]:
        """Why each cell × workload of the sweep stopped ([] before schema 3, or while none has
        stopped)."""
        if self.schema_version < 3:
            return []
        against = "u.against" if self.schema_version >= 8 else "NULL AS against"
        rows = self.db.execute(
            "SELECT u.cell_id, c.key, u.workload, u.kind, u.reason, u.round, u.ok_runs, "
            f"u.stopped_at, {against} FROM unit_stops u "
            "JOIN cells c ON c.id=u.cell_id WHERE c.sweep_id=? ORDER BY u.stopped_at, "
            "c.id, u.workload",
            (sweep_id,),
        )
        return [
            UnitStop(
                cell_id=int(r["cell_id"]),
                cell_key=_shown(r["key"]),
                workload=_shown(r["workload"]),
                kind=StopKind.stored(r["kind"]),
                reason=_shown(r["reason"]),
                round=r["round"],
                ok_runs=int(r["ok_runs"]),
                stopped_at=float(r["stopped_at"]),
                against=None if r["against"] is None else _shown(r["against"]),
            )
            for r in rows
        ]

    def ok_samples(self, sweep_id: int) -> list[Sample]:
        """The metric samples of a sweep's ok runs, in attempt order."""
        rows = self.db.execute(
            "SELECT s.run_id, s.metric, s.value FROM samples s JOIN runs r ON "
            "r.id=s.run_id JOIN cells c "
            "ON c.id=r.cell_id WHERE c.sweep_id=? AND r.status='ok' ORDER BY r.attempt",
            (sweep_id,),
        )
        return [Sample(int(r["run_id"]), r["metric"], float(r["value"])) for r in rows]

    def failed_runs(self, sweep_id: int) -> list[FailedRun]:
        rows = self.db.execute(
            "SELECT r.id, c.key, r.workload, r.attempt, r.error FROM runs r JOIN cells c "
            "ON c.id=r.cell_id "
            "WHERE c.sweep_id=? AND r.status!='ok' ORDER BY r.id",
            (sweep_id,),
        )
        return [
            FailedRun(
                int(r["id"]),
                _shown(r["key"]),
                _shown(r["workload"]),
                int(r["attempt"]),
                _shown(r["error"]),
            )
            for r in rows
        ]

    def ok_run_series(self, sweep_id: int, name: str = "iops_series") -> dict[int, list[float]]:
        """A per-interval series each ok run of a sweep recorded in its meta (e.g. fio's IOPS per
        interval), by run id; runs without one are absent."""
        rows = self.db.execute(
            "SELECT r.id, json_extract(r.meta_json, '$.' || ?) series FROM runs r JOIN "
            "cells c ON c.id=r.cell_id "
            "WHERE c.sweep_id=? AND r.status='ok'",
            (name, sweep_id),
        )
        out = {}
        for r in rows:
            series = json.loads(r["series"]) if r["series"] else None
            if isinstance(series, list):
                out[int(r["id"])] = [float(v) for v in series]
        return out

    def ok_run_objects(self, sweep_id: int, name: str) -> dict[int, dict[str, Any]]:
        """An object each ok run of a sweep recorded in its meta under `name` (e.g. guest_image: the
        real guest's image, digest and kernel), by run id; runs without one are absent."""
        rows = self.db.execute(
            "SELECT r.id, json_extract(r.meta_json, '$.' || ?) value FROM runs r "
            "JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? AND r.status='ok'",
            (name, sweep_id),
        )
        out = {}
        for r in rows:
            value = json.loads(r["value"]) if isinstance(r["value"], str) and r["value"] else None
            if isinstance(value, dict):
                out[int(r["id"])] = value
        return out

    def ok_run_numbers(self, sweep_id: int, name: str) -> dict[int, float]:
        """A number each ok run of a sweep recorded in its meta under `name` (e.g. rtt_measured_ms),
        by run id; runs without one are absent."""
        rows = self.db.execute(
            "SELECT r.id, json_extract(r.meta_json, '$.' || ?) value FROM runs r JOIN "
            "cells c ON c.id=r.cell_id "
            "WHERE c.sweep_id=? AND r.status='ok'",
            (name, sweep_id),
        )
        return {
            int(r["id"]): float(r["value"])
            for r in rows
            if isinstance(r["value"], (int, float)) and not isinstance(r["value"], bool)
        }

    def run_exists(self, run_id: int) -> bool:
        return self.db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def run_round_numbers(self, run_ids: Sequence[int]) -> dict[int, int]:
        """run id → its round, for the given runs that have one. Schema 1 has no rounds, only the
        attempt number, which is the round of a sweep that ran uninterrupted (each round runs every
        unit once), so it stands in there — and for the runs of a schema-1 file migrated since
        (their round is NULL)."""
        column = "COALESCE(round, attempt)" if self.schema_version >= 2 else "attempt"
        out: dict[int, int] = {}
        for chunk in _chunks(run_ids):
            for rid, rnd in self.db.execute(
                f"SELECT id, {column} FROM runs WHERE id IN ({_marks(chunk)})", chunk
            ):
                if rnd is not None:
                    out[int(rid)] = int(rnd)
        return out

    def run_boots(self, run_ids: Sequence[int]) -> dict[int, RunBoot]:
        """run id → the boot it shared, for the given runs that shared one ({} before schema 4)."""
        if self.schema_version < 4:
            return {}
        out: dict[int, RunBoot] = {}
        for chunk in _chunks(run_ids):
            q = (
                "SELECT id, boot_id, boot_position FROM runs WHERE boot_id IS NOT NULL AND "
                f"id IN ({_marks(chunk)})"
            )
            for rid, boot, pos in self.db.execute(q, chunk):
                out[int(rid)] = RunBoot(str(boot), None if pos is None else int(pos))
        return out

    def run_metric_values(self, run_ids: Sequence[int], metric: str) -> dict[int, float]:
        """run id → the value of `metric`, for the given runs that recorded it."""
        out: dict[int, float] = {}
        for chunk in _chunks(run_ids):
            q = f"SELECT run_id, value FROM samples WHERE metric=? AND run_id IN ({_marks(chunk)})"
            for rid, v in self.db.execute(q, [metric, *chunk]):
                out[int(rid)] = float(v)
        return out

    def monitor_points(self, run_id: int) -> list[MonitorPoint]:
        """A run's host sampler values, in time order."""
        rows = self.db.execute(
            "SELECT t, field, value FROM monitor WHERE run_id=? ORDER BY t", (run_id,)
        )
        return [MonitorPoint(float(r["t"]), r["field"], float(r["value"])) for r in rows]

    def run_client_metrics(self, sweep_id: int, metric: str) -> dict[int, list[float]]:
        """ok run id → each client's value of `metric`, in client order, for the runs of several
        clients at once (the `clients` axis; {} before schema 7 and for sweeps without such
        runs)."""
        if self.schema_version < 7:
            return {}
        rows = self.db.execute(
            "SELECT rc.run_id, rc.client, rc.value FROM run_clients rc JOIN runs r ON "
            "r.id=rc.run_id JOIN cells c "
            "ON c.id=r.cell_id WHERE c.sweep_id=? AND r.status='ok' AND rc.metric=? "
            "ORDER BY rc.run_id, rc.client",
            (sweep_id, metric),
        )
        out: dict[int, list[float]] = {}
        for r in rows:
            out.setdefault(int(r["run_id"]), []).append(float(r["value"]))
        return out
