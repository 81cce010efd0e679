"""The results store: one SQLite file.

Every completed run is committed in its own transaction, so an interrupted
sweep loses at most the run in flight, and `iomatrix run` on the same file
resumes where it stopped. Reports read only from here.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iomatrix.errors import UserError

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    hostname TEXT, kernel TEXT, os TEXT, cpu_model TEXT, cpu_count INTEGER, mem_bytes INTEGER,
    fio_version TEXT, qemu_version TEXT, qemu_img_version TEXT, python_version TEXT, iomatrix_version TEXT,
    extra_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY,
    host_id INTEGER NOT NULL REFERENCES hosts(id),
    plan_name TEXT NOT NULL,
    plan_fingerprint TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL DEFAULT 'running',   -- running | finished | interrupted
    pruned_json TEXT NOT NULL DEFAULT '[]',
    notes_json TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY,
    sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
    key TEXT NOT NULL,
    tier TEXT, format TEXT, preallocation TEXT, cache TEXT, aio TEXT, bus TEXT, backing TEXT, modifier TEXT,
    backing_json TEXT NOT NULL DEFAULT '{}',
    UNIQUE (sweep_id, key)
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    cell_id INTEGER NOT NULL REFERENCES cells(id),
    workload TEXT NOT NULL,
    attempt INTEGER NOT NULL,            -- 1, 2, … per cell × workload, failed attempts included
    status TEXT NOT NULL,                -- ok | failed
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    wall_s REAL NOT NULL,
    accel TEXT NOT NULL,                 -- 'none (bare metal)', 'kvm', 'tcg'
    cache_state TEXT NOT NULL,           -- host page cache at start: dropped | warm-by-request | not-dropped: why
    page_cache_method TEXT NOT NULL,     -- how reads were kept out of the page cache
    phases_json TEXT NOT NULL DEFAULT '{}',
    job_text TEXT NOT NULL DEFAULT '',
    raw_output TEXT NOT NULL DEFAULT '',  -- fio's JSON as it printed it
    console_tail TEXT NOT NULL DEFAULT '',
    error TEXT,
    meta_json TEXT NOT NULL DEFAULT '{}',
    UNIQUE (cell_id, workload, attempt)
);
CREATE TABLE IF NOT EXISTS samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, metric)
);
CREATE TABLE IF NOT EXISTS monitor (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    t REAL NOT NULL,
    field TEXT NOT NULL,
    value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS monitor_run ON monitor(run_id);
CREATE INDEX IF NOT EXISTS runs_cell ON runs(cell_id, workload);
"""


@dataclass(frozen=True)
class RunRecord:
    """A finished run, as the runner hands it to the store."""

    cell_id: int
    workload: str
    status: str
    started_at: float
    finished_at: float
    accel: str
    cache_state: str
    page_cache_method: str
    metrics: Mapping[str, float]
    phases: Mapping[str, float]
    job_text: str = ""
    raw_output: str = ""
    console_tail: str = ""
    error: str | None = None
    meta: Mapping[str, Any] | None = None
    monitor: Iterable[tuple[float, Mapping[str, float]]] = ()


class Store:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.db = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as err:
            raise UserError(f"cannot open results database {self.path}: {err}",
                            hint="choose a writable path with --db") from None
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as err:
            raise UserError(f"{self.path} is not an iomatrix results database ({err})",
                            hint="point --db at another file") from None
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row["value"]) != SCHEMA_VERSION:
            raise UserError(f"{self.path} has schema version {row['value']}, this iomatrix reads "
                            f"{SCHEMA_VERSION}", hint="use a matching iomatrix version or a new --db")

    @classmethod
    def open_existing(cls, path: Path) -> Store:
        if not Path(path).is_file():
            raise UserError(f"results database {path} does not exist",
                            hint="run 'iomatrix run' first, or point --db at its file")
        return cls(path)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        with self.db:
            yield self.db

    # -- hosts and sweeps -------------------------------------------------
    def host_id(self, host: Mapping[str, Any]) -> int:
        cols = ("hostname", "kernel", "os", "cpu_model", "cpu_count", "mem_bytes", "fio_version",
                "qemu_version", "qemu_img_version", "python_version", "iomatrix_version")
        fingerprint = json.dumps({k: host.get(k) for k in cols}, sort_keys=True)
        extra = {k: v for k, v in host.items() if k not in cols}
        with self.tx() as db:
            row = db.execute("SELECT id FROM hosts WHERE fingerprint=?", (fingerprint,)).fetchone()
            if row:
                db.execute("UPDATE hosts SET extra_json=? WHERE id=?", (json.dumps(extra), row["id"]))
                return int(row["id"])
            cur = db.execute(
                f"INSERT INTO hosts (fingerprint, {', '.join(cols)}, extra_json) "
                f"VALUES (?, {', '.join('?' * len(cols))}, ?)",
                (fingerprint, *(host.get(k) for k in cols), json.dumps(extra)))
            return int(cur.lastrowid or 0)

    def resumable_sweep(self, plan_fingerprint: str) -> sqlite3.Row | None:
        """The latest unfinished sweep of the same plan, if any."""
        return self.db.execute(
            "SELECT * FROM sweeps WHERE plan_fingerprint=? AND status != 'finished' ORDER BY id DESC LIMIT 1",
            (plan_fingerprint,)).fetchone()

    def create_sweep(self, host_id: int, plan_name: str, fingerprint: str, plan_json: str,
                     pruned: list[dict[str, str]], notes: list[str]) -> int:
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO sweeps (host_id, plan_name, plan_fingerprint, plan_json, started_at, pruned_json,"
                " notes_json) VALUES (?,?,?,?,?,?,?)",
                (host_id, plan_name, fingerprint, plan_json, time.time(), json.dumps(pruned), json.dumps(notes)))
            return int(cur.lastrowid or 0)

    def set_sweep_status(self, sweep_id: int, status: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE sweeps SET status=?, finished_at=? WHERE id=?", (status, time.time(), sweep_id))

    def cell_id(self, sweep_id: int, key: str, axes: Mapping[str, str], backing: Mapping[str, Any]) -> int:
        with self.tx() as db:
            row = db.execute("SELECT id FROM cells WHERE sweep_id=? AND key=?", (sweep_id, key)).fetchone()
            if row:
                db.execute("UPDATE cells SET backing_json=? WHERE id=?", (json.dumps(backing), row["id"]))
                return int(row["id"])
            cur = db.execute(
                "INSERT INTO cells (sweep_id, key, tier, format, preallocation, cache, aio, bus, backing, modifier,"
                " backing_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (sweep_id, key, *(axes[a] for a in ("tier", "format", "preallocation", "cache", "aio", "bus",
                                                    "backing", "modifier")), json.dumps(backing)))
            return int(cur.lastrowid or 0)

    # -- runs ---------------------------------------------------------------
    def record_run(self, rec: RunRecord) -> int:
        """Commit one finished run with its samples and monitor series, atomically."""
        with self.tx() as db:
            attempt = db.execute("SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs WHERE cell_id=? AND workload=?",
                                 (rec.cell_id, rec.workload)).fetchone()[0]
            cur = db.execute(
                "INSERT INTO runs (cell_id, workload, attempt, status, started_at, finished_at, wall_s, accel,"
                " cache_state, page_cache_method, phases_json, job_text, raw_output, console_tail, error, meta_json)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (rec.cell_id, rec.workload, attempt, rec.status, rec.started_at, rec.finished_at,
                 rec.finished_at - rec.started_at, rec.accel, rec.cache_state, rec.page_cache_method,
                 json.dumps(dict(rec.phases)), rec.job_text, rec.raw_output, rec.console_tail, rec.error,
                 json.dumps(dict(rec.meta or {}))))
            run_id = int(cur.lastrowid or 0)
            db.executemany("INSERT INTO samples VALUES (?,?,?)",
                           [(run_id, k, float(v)) for k, v in rec.metrics.items()])
            db.executemany("INSERT INTO monitor VALUES (?,?,?,?)",
                           [(run_id, t, k, float(v)) for t, values in rec.monitor for k, v in values.items()])
            return run_id

    def run_counts(self, sweep_id: int) -> dict[tuple[int, str], tuple[int, int]]:
        """(cell_id, workload) → (ok runs, failed runs)."""
        rows = self.db.execute(
            "SELECT r.cell_id, r.workload, SUM(r.status='ok') ok, SUM(r.status!='ok') bad FROM runs r "
            "JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? GROUP BY r.cell_id, r.workload", (sweep_id,))
        return {(r["cell_id"], r["workload"]): (int(r["ok"]), int(r["bad"])) for r in rows}

    def metric_series(self, cell_id: int, workload: str, metric: str) -> list[float]:
        """A metric's values over the ok runs of a cell × workload, in run order."""
        rows = self.db.execute(
            "SELECT s.value FROM samples s JOIN runs r ON r.id=s.run_id WHERE r.cell_id=? AND r.workload=? "
            "AND r.status='ok' AND s.metric=? ORDER BY r.attempt", (cell_id, workload, metric))
        return [float(r[0]) for r in rows]

    def metric_points(self, cell_id: int, workload: str, metric: str) -> list[tuple[int, float]]:
        """(round, value) of a metric over the ok runs of a cell × workload; a run stored before rounds were
        recorded counts its attempt number as its round."""
        rows = self.db.execute(
            "SELECT COALESCE(json_extract(r.meta_json, '$.round'), r.attempt) rnd, s.value FROM samples s "
            "JOIN runs r ON r.id=s.run_id WHERE r.cell_id=? AND r.workload=? AND r.status='ok' AND s.metric=? "
            "ORDER BY r.attempt", (cell_id, workload, metric))
        return [(int(r[0]), float(r[1])) for r in rows]

    def run_rounds(self, sweep_id: int) -> dict[tuple[int, str], set[int]]:
        """(cell_id, workload) → the rounds of the randomised-block design its runs belong to."""
        rows = self.db.execute(
            "SELECT r.cell_id, r.workload, json_extract(r.meta_json, '$.round') rnd FROM runs r "
            "JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? AND rnd IS NOT NULL", (sweep_id,))
        out: dict[tuple[int, str], set[int]] = {}
        for r in rows:
            out.setdefault((r["cell_id"], r["workload"]), set()).add(int(r["rnd"]))
        return out

    def sweep_elapsed(self, sweep_id: int) -> float:
        """Seconds spent in runs of this sweep (resumes add up; idle time between them does not)."""
        row = self.db.execute("SELECT COALESCE(SUM(r.wall_s), 0) FROM runs r JOIN cells c ON c.id=r.cell_id "
                              "WHERE c.sweep_id=?", (sweep_id,)).fetchone()
        return float(row[0])
