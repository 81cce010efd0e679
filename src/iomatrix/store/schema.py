"""The results database's schema, its versions, and the migrations between them.

A new database is created as schema 1 and migrated forward through the same steps
an old database takes, so a fresh file and a migrated file are identical by
construction. The version lives in `meta.schema_version` (what schema 1 wrote) and,
from schema 2 on, also in SQLite's `PRAGMA user_version`.

`inspect` tells whether a file is iomatrix's, and which version, using reads only:
nothing is written to a file before it is known to be ours.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 8

# The host facts the hosts table keeps as columns, in schema 1's order (its CREATE TABLE below
# spells them as the first release did); a host's other facts go to its extra_json.
HOST_COLUMNS = (
    "hostname",
    "kernel",
    "os",
    "cpu_model",
    "cpu_count",
    "mem_bytes",
    "fio_version",
    "qemu_version",
    "qemu_img_version",
    "python_version",
    "iomatrix_version",
)

# Schema 1, exactly as the first release created it. Never edit: new columns go in a migration.
SCHEMA_1 = """
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
"""  # noqa: E501

# migrations[v] takes a database from schema v to v + 1. Each runs inside one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # The metric registry of the sweep (metric → {"unit": …, "direction": "higher"|"lower"}), so
        # a report never has to guess from a metric's name which way is better. '{}' for sweeps of
        # schema 1.
        "ALTER TABLE sweeps ADD COLUMN metric_registry TEXT NOT NULL DEFAULT '{}'",
        # Randomised block designs: which round of the sweep a run belongs to and its position in
        # it. NULL for runs recorded before schema 2 (they ran in plan order).
        "ALTER TABLE runs ADD COLUMN round INTEGER",
        "ALTER TABLE runs ADD COLUMN round_position INTEGER",
        "UPDATE meta SET value='2' WHERE key='schema_version'",
        "PRAGMA user_version = 2",
    ),
    2: (
        # Interference (stats/interference.py), judged by the runner from the run's host samples:
        # NULL = not judged (runs before schema 3), 0 = clean, 1 = disturbed; the reasons as a JSON
        # list.
        "ALTER TABLE runs ADD COLUMN disturbed INTEGER",
        "ALTER TABLE runs ADD COLUMN disturbance_json TEXT NOT NULL DEFAULT '[]'",
        # A run started again because run `retry_of` was disturbed (same unit, same round).
        "ALTER TABLE runs ADD COLUMN retry_of INTEGER REFERENCES runs(id)",
        # Why and when each cell × workload stopped being repeated: the scheduler's decision. Kinds
        # added later (no migration needed, the column is free text): equivalent, unresolved
        # (stop_kinds.StopKind).
        """CREATE TABLE IF NOT EXISTS unit_stops (
    cell_id INTEGER NOT NULL REFERENCES cells(id),
    workload TEXT NOT NULL,
    kind TEXT NOT NULL,      -- eliminated | settled | baseline | converged | max-runs | budget | gave-up
    reason TEXT NOT NULL,    -- the scheduler's sentence, e.g. 'eliminated: 2.1× worse than cache=unsafe, p=0.003'
    round INTEGER,           -- the last round the unit had run in when it stopped
    ok_runs INTEGER NOT NULL,
    stopped_at REAL NOT NULL,
    PRIMARY KEY (cell_id, workload)
)""",  # noqa: E501
        "UPDATE meta SET value='3' WHERE key='schema_version'",
        "PRAGMA user_version = 3",
    ),
    3: (
        # Runs that shared one guest boot: the boot (unique within the sweep) and the run's position
        # in it (0 = the cold first run), for the two-level (between-boot / within-boot) statistics.
        # NULL for a run that had its own boot or process, and for runs recorded before schema 4.
        "ALTER TABLE runs ADD COLUMN boot_id TEXT",
        "ALTER TABLE runs ADD COLUMN boot_position INTEGER",
        "UPDATE meta SET value='4' WHERE key='schema_version'",
        "PRAGMA user_version = 4",
    ),
    4: (
        # A cell's axes as key/value rows (iomatrix.domain.axes), so a new axis needs no migration:
        # a cell recorded before an axis existed has no row for it and reads it as its default. The
        # cells table's axis columns (schema 1) are still written for the axes they name.
        """CREATE TABLE IF NOT EXISTS cell_axes (
    cell_id INTEGER NOT NULL REFERENCES cells(id),
    axis TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (cell_id, axis)
)""",
        *(
            f"INSERT OR IGNORE INTO cell_axes SELECT id, '{a}', {a} FROM cells WHERE {a} "
            "IS NOT NULL"
            for a in (
                "tier",
                "format",
                "preallocation",
                "cache",
                "aio",
                "bus",
                "backing",
                "modifier",
            )
        ),
        "UPDATE meta SET value='5' WHERE key='schema_version'",
        "PRAGMA user_version = 5",
    ),
    5: (
        # The host group a sweep answers for (`iomatrix run --group`, the Ansible role's inventory
        # group): the fleet answers choose one configuration per group. NULL for sweeps recorded
        # without one (and before 6).
        "ALTER TABLE sweeps ADD COLUMN host_group TEXT",
        "UPDATE meta SET value='6' WHERE key='schema_version'",
        "PRAGMA user_version = 6",
    ),
    6: (
        # A run of several clients against one shared backing at once (the `clients` axis): each
        # client's own metrics (client = 0 … N−1, in the order fio reported them); the run's samples
        # hold the aggregate. No rows for a run of one client, and none for runs recorded before
        # schema 7.
        """CREATE TABLE IF NOT EXISTS run_clients (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    client INTEGER NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, client, metric)
)""",
        "UPDATE meta SET value='7' WHERE key='schema_version'",
        "PRAGMA user_version = 7",
    ),
    7: (
        # An elimination's reference: the key (cells.key, unique within the sweep) of the cell that
        # was the best of the race's look when this unit was eliminated against it. The decision at
        # the end keeps the elimination while that cell is still a candidate (stats/decision.py).
        # A key, not an id, so a merge or a publish carries it unchanged. NULL for the other kinds
        # and for stops recorded before schema 8.
        "ALTER TABLE unit_stops ADD COLUMN against TEXT",
        "UPDATE meta SET value='8' WHERE key='schema_version'",
        "PRAGMA user_version = 8",
    ),
}

# The columns each table has at each version (a subset check: SQLite adds none by itself).
COLUMNS_1: dict[str, frozenset[str]] = {
    "meta": frozenset({"key", "value"}),
    "hosts": frozenset({"id", "fingerprint", *HOST_COLUMNS, "extra_json"}),
    "sweeps": frozenset(
        {
            "id",
            "host_id",
            "plan_name",
            "plan_fingerprint",
            "plan_json",
            "started_at",
            "finished_at",
            "status",
            "pruned_json",
            "notes_json",
        }
    ),
    "cells": frozenset(
        {
            "id",
            "sweep_id",
            "key",
            "tier",
            "format",
            "preallocation",
            "cache",
            "aio",
            "bus",
            "backing",
            "modifier",
            "backing_json",
        }
    ),
    "runs": frozenset(
        {
            "id",
            "cell_id",
            "workload",
            "attempt",
            "status",
            "started_at",
            "finished_at",
            "wall_s",
            "accel",
            "cache_state",
            "page_cache_method",
            "phases_json",
            "job_text",
            "raw_output",
            "console_tail",
            "error",
            "meta_json",
        }
    ),
    "samples": frozenset({"run_id", "metric", "value"}),
    "monitor": frozenset({"run_id", "t", "field", "value"}),
}
COLUMNS_2: dict[str, frozenset[str]] = {
    **COLUMNS_1,
    "sweeps": COLUMNS_1["sweeps"] | {"metric_registry"},
    "runs": COLUMNS_1["runs"] | {"round", "round_position"},
}
COLUMNS: dict[int, dict[str, frozenset[str]]] = {
    1: COLUMNS_1,
    2: COLUMNS_2,
    3: {
        **COLUMNS_2,
        "runs": COLUMNS_2["runs"] | {"disturbed", "disturbance_json", "retry_of"},
        "unit_stops": frozenset(
            {"cell_id", "workload", "kind", "reason", "round", "ok_runs", "stopped_at"}
        ),
    },
}
COLUMNS[4] = {**COLUMNS[3], "runs": COLUMNS[3]["runs"] | {"boot_id", "boot_position"}}
COLUMNS[5] = {**COLUMNS[4], "cell_axes": frozenset({"cell_id", "axis", "value"})}
COLUMNS[6] = {**COLUMNS[5], "sweeps": COLUMNS[5]["sweeps"] | {"host_group"}}
COLUMNS[7] = {**COLUMNS[6], "run_clients": frozenset({"run_id", "client", "metric", "value"})}
COLUMNS[8] = {**COLUMNS[7], "unit_stops": COLUMNS[7]["unit_stops"] | {"against"}}
# The axis columns of the cells table (schema 1): written for these axes, read where cell_axes has
# no row.
CELL_AXIS_COLUMNS = (
    "tier",
    "format",
    "preallocation",
    "cache",
    "aio",
    "bus",
    "backing",
    "modifier",
)
# Every table some version of iomatrix created: anything else in a file means it is not ours.
KNOWN_TABLES = frozenset(t for cols in COLUMNS.values() for t in cols)

SQLITE_MAGIC = b"SQLite format 3\x00"


class NotOurs(Exception):
    """The file is not an iomatrix results database; the message says why."""


class TooNew(NotOurs):
    """An iomatrix database of a schema newer than this version knows."""


class SchemaDamaged(NotOurs):
    """SQLite's schema table (sqlite_master, on the file's first page) is damaged: the file cannot
    be read."""


# SQLite's words for a schema it cannot parse, and Python's for schema text that is not UTF-8.
_SCHEMA_DAMAGE = ("malformed", "could not decode to utf-8", "disk image")


def schema_damage(err: Exception) -> SchemaDamaged | None:
    """A SchemaDamaged for an error reading sqlite_master that comes from a damaged file, else None.

    Random bytes on the schema page make SQLite's own error message hold bytes that are not UTF-8,
    which Python raises as UnicodeDecodeError, not as an SQLite error."""
    if isinstance(err, UnicodeDecodeError):
        return SchemaDamaged("its schema page (sqlite_master) holds bytes that are not UTF-8 text")
    if isinstance(err, sqlite3.DatabaseError) and any(
        w in str(err).lower() for w in _SCHEMA_DAMAGE
    ):
        return SchemaDamaged(f"SQLite cannot read its schema page ({str(err)[:120]})")
    return None


@dataclass(frozen=True)
class Inspection:
    version: int | None  # None: a valid SQLite file with no tables at all (a new database)
    journal_mode_wal: bool


def check_file(path: Path) -> bool:
    """Whether `path` exists, after making sure it is a file that may be an SQLite database (reads
    16 bytes)."""
    if not path.exists():
        return False
    if path.is_dir():
        raise NotOurs(f"a directory; give a file path, e.g. {path / 'iomatrix.sqlite'}")
    if not path.is_file():
        raise NotOurs("not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as err:
        raise NotOurs(f"cannot be read: {err.strerror}") from None
    if not head:
        raise NotOurs("an empty file")
    if not head.startswith(SQLITE_MAGIC):
        raise NotOurs("not an SQLite file")
    wal = path.with_name(path.name + "-wal")
    if len(head) == 100 and not (wal.is_file() and wal.stat().st_size > 0):
        # Pages may live in the write-ahead log only (a checkpoint that a full disk cut short leaves
        # the main file shorter than its header says): with a -wal beside it, SQLite's own reading
        # judges the file. The header's page count is valid when its change counter matches
        # "version-valid-for".
        page_size = int.from_bytes(head[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(head[28:32], "big")
        if head[24:28] == head[92:96] and path.stat().st_size < pages * page_size:
            raise NotOurs(
                f"truncated: its header promises {pages * page_size} bytes, the file has "
                f"{path.stat().st_size}"
            )
    return True


def inspect(db: sqlite3.Connection) -> Inspection:
    """Which schema version `db` holds, by reading only. Raises NotOurs for anything else."""
    try:
        return _inspect(db)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
        damaged = schema_damage(err)
        if damaged is None:
            raise
        raise damaged from None


def _inspect(db: sqlite3.Connection) -> Inspection:
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        # a read: no argument, no switch
        wal = db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    except sqlite3.DatabaseError as err:
        if schema_damage(err) is not None:
            raise
        raise NotOurs(f"not a readable SQLite file: {err}") from None
    tables = {t for t in tables if not t.startswith("sqlite_")}
    if not tables:
        return Inspection(None, wal)
    foreign = sorted(tables - KNOWN_TABLES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" (+{len(foreign) - 5} more)" if len(foreign) > 5 else ""
        )
        raise NotOurs(f"it holds tables iomatrix does not use: {shown}")
    if "meta" not in tables:
        raise NotOurs("it has no iomatrix 'meta' table")
    try:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.DatabaseError as err:
        raise NotOurs(f"its 'meta' table is not iomatrix's: {err}") from None
    if row is None:
        raise NotOurs("it has no iomatrix schema version")
    try:
        version = int(str(row[0]))
    except ValueError:
        raise NotOurs(f"its schema version '{str(row[0])[:40]}' is not a number") from None
    if version > SCHEMA_VERSION:
        raise TooNew(
            f"has schema version {version}, written by a newer iomatrix (this one reads up to "
            f"{SCHEMA_VERSION})"
        )
    if version not in COLUMNS:
        raise NotOurs(f"iomatrix never wrote schema version {version}")
    missing_tables = sorted(set(COLUMNS[version]) - tables)
    if missing_tables:
        raise NotOurs(
            f"it lacks the tables {', '.join(missing_tables)} of iomatrix schema {version}"
        )
    for table, expected in COLUMNS[version].items():
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        lacking = sorted(expected - have)
        if lacking:
            raise NotOurs(
                f"its '{table}' table lacks the columns {', '.join(lacking[:5])} of iomatrix "
                f"schema {version}"
            )
    return Inspection(version, wal)
