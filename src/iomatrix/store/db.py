"""The results store: one SQLite file.

Every completed run is committed in its own transaction, so an interrupted
sweep loses at most the run in flight, and `iomatrix run` on the same file
resumes where it stopped. Reports read only from here.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from iomatrix.errors import UserError, no_results_database
from iomatrix.locks import db_lock_path, identity_held, is_held
from iomatrix.store import wal_names
from iomatrix.store.integrity import DamageReport, find_damage
from iomatrix.store.queries import REPLACED_RUNS_SQL, StoreQueries
from iomatrix.store.schema import (
    CELL_AXIS_COLUMNS,
    COLUMNS,
    HOST_COLUMNS,
    MIGRATIONS,
    SCHEMA_1,
    SCHEMA_VERSION,
    NotOurs,
    SchemaDamaged,
    TooNew,
    check_file,
    inspect,
    schema_damage,
)

# Every database file this process opened, in order: an error SQLite raises later (a damaged page
# met by a query) is reported naming them (cli.py).
OPENED: list[Path] = []

# Connections to a database that became unwritable mid-sweep: kept open until the process ends.
_ABANDONED: list[sqlite3.Connection] = []

_NOT_OURS_HINT = "point --db at an iomatrix results database, or at a path where no file exists yet"


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
    # Randomised block designs: the sweep's round and the run's position in it (None: plan order).
    round: int | None = None
    round_position: int | None = None
    # Interference judged from the run's host samples (None: not judged), and the run it retries.
    disturbed: bool | None = None
    disturbance: Sequence[str] = ()
    retry_of: int | None = None
    # Runs sharing one guest boot: the boot's id and the run's position in it (0 = cold first run).
    boot_id: str | None = None
    boot_position: int | None = None
    # A run of several clients at once: each client's metrics, in client order (the metrics above:
    # the aggregate).
    clients: Sequence[Mapping[str, float]] = ()


# Facts kept in extra_json that join the identity when recorded: a fleet host's inventory name, and
# the machine id (/etc/machine-id), so that two machines sharing a hostname and their facts stay two
# hosts through a merge. Without either, the identity is what it always was.
HOST_IDENTITY_EXTRAS = ("host_label", "machine_id")


def host_fingerprint(host: Mapping[str, Any]) -> str:
    """What makes a host the same host: its identifying facts, as JSON (the hosts table's unique
    key)."""
    identity = {k: host.get(k) for k in HOST_COLUMNS}
    identity.update({k: host[k] for k in HOST_IDENTITY_EXTRAS if host.get(k)})
    return json.dumps(identity, sort_keys=True)


def current_host_fingerprint(fingerprint: str, extra_json: str) -> str:
    """A stored fingerprint as `host_fingerprint` computes it today: a database written before the
    machine id joined the identity recorded it in extra_json only (merge uses this to tell such
    hosts apart)."""
    try:
        identity, extra = json.loads(fingerprint), json.loads(extra_json or "{}")
    except ValueError:
        return fingerprint  # not ours to rewrite: compared as it is
    if not isinstance(identity, dict) or not isinstance(extra, dict):
        return fingerprint
    missing = {k: extra[k] for k in HOST_IDENTITY_EXTRAS if k not in identity and extra.get(k)}
    return json.dumps({**identity, **missing}, sort_keys=True) if missing else fingerprint


class Store(StoreQueries):
    """The results database.

    `Store(path)` opens it for a sweep: it creates a new file, or checks that an existing one is
    iomatrix's and migrates it to the current schema (after a backup copy).
    `Store.open_existing(path)` opens it read-only (SQLite `mode=ro`, `query_only`) for reports: no
    table is created, no journal mode is switched, an older schema is read as it is."""

    def __init__(self, path: Path, *, read_only: bool = False, skip_damaged: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        OPENED.append(self.path)
        # Damaged rows a report skips (see open_existing); none for a sweep, which refuses a damaged
        # file.
        self.damage = DamageReport()
        if read_only:
            self.db, self.schema_version, self.damage = _open_read_only(self.path, skip_damaged)
        else:
            self.db, self.schema_version = _open_for_writing(self.path)

    @staticmethod
    def preflight(path: Path) -> None:
        """Refuse, before anything is created, a --db that a sweep could not use (reads only)."""
        preflight_write(Path(path))

    @classmethod
    def open_existing(cls, path: Path, *, skip_damaged: bool = False) -> Store:
        """Open for reading only; the file must exist and be iomatrix's. A file with damaged rows
        (integrity.py) is refused in one line naming the first, unless `skip_damaged` (reports):
        then every query reads the file without those rows, nor the rows that belong to them (a
        damaged run's samples), and `self.damage` says how many and which was first. A file SQLite
        cannot read is refused either way."""
        return cls(path, read_only=True, skip_damaged=skip_damaged)

    @classmethod
    def in_memory(cls, label: object) -> Store:
        """An empty database of the current schema in this process's memory, named `label` in
        messages (a PostgreSQL store's rows are read into one: store/pg.py). Written by the caller,
        then used read-only."""
        store = cls.__new__(cls)
        store.path, store.read_only, store.damage = label, True, DamageReport()  # type: ignore[assignment]
        store.db = sqlite3.connect(":memory:", isolation_level=None)
        store.db.row_factory = sqlite3.Row
        _create(store.db)
        store.schema_version = SCHEMA_VERSION
        return store

    def close(self) -> None:
        if not getattr(self, "abandoned", False):
            if not self.read_only:
                # SQLite checkpoints on closing only the last connection to the file: a read
                # connection still open elsewhere in this process (an answer read at the end of a
                # run) left every write of the sweep in the -wal, and a copy of the .sqlite file
                # alone held nothing (issue 50). So here, explicitly; a reader in a transaction
                # makes it partial, never wrong.
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            self.db.close()
            if not self.read_only and isinstance(self.path, Path):
                # closed: SQLite checkpointed and removed this name's -wal
                wal_names.forget(self.path)

    def _files(self) -> list[Path]:
        return [self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))]

    def _abandon_if_unwritable(self) -> None:
        """Stop writing, with one line, when the file became unwritable during a sweep (chattr +i, a
        read-only remount).

        SQLite writes its WAL index (-shm) through a shared memory mapping: a write to that mapping
        once the file is immutable kills the process with SIGBUS, not an error. So every write
        transaction first asks the kernel whether the files are still writable (access(2) says no
        for an immutable file even to root), and a connection found unwritable is never closed:
        closing checkpoints through the mapping. Every run committed before is in the -wal or the
        main file, and the next writer recovers the WAL."""
        bad = [p for p in self._files() if p.exists() and not os.access(p, os.W_OK)]
        if not bad:
            return
        self.abandoned = True
        _ABANDONED.append(self.db)
        # never freed: freeing closes it (see above)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.db))
        raise UserError(
            f"results database {self.path} became unwritable during the sweep "
            f"({', '.join(p.name for p in bad)}: read-only, immutable or on a read-only "
            "filesystem); "
            "the runs recorded so far are kept",
            hint="make it writable again (e.g. chattr -i) and run the same command: the sweep "
            "resumes",
        )

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; a database that cannot be written is a UserError, not a
        traceback."""
        if self.read_only:
            raise RuntimeError(f"{self.path} was opened read-only")  # a bug in the caller
        if getattr(self, "abandoned", False):
            raise UserError(f"results database {self.path} is no longer written by this sweep")
        self._abandon_if_unwritable()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as err:
            raise self._failed(err) from None
        try:
            yield self.db
        except sqlite3.OperationalError as err:
            raise self._failed(err) from None
        except BaseException:
            _rollback(self.db)
            raise
        try:
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as err:
            raise self._failed(err) from None

    def _failed(self, err: sqlite3.Error) -> UserError:
        # Unwritable files first: then the transaction is left open, as ending it would write the
        # -shm.
        self._abandon_if_unwritable()
        _rollback(self.db)
        return _write_error(self.path, err)

    # -- hosts and sweeps -------------------------------------------------
    def host_id(self, host: Mapping[str, Any]) -> int:
        cols = HOST_COLUMNS
        fingerprint = host_fingerprint(host)
        extra = {k: v for k, v in host.items() if k not in cols}
        with self.tx() as db:
            row = db.execute("SELECT id FROM hosts WHERE fingerprint=?", (fingerprint,)).fetchone()
            if row:
                db.execute(
                    "UPDATE hosts SET extra_json=? WHERE id=?", (json.dumps(extra), row["id"])
                )
                return int(row["id"])
            cur = db.execute(
                f"INSERT INTO hosts (fingerprint, {', '.join(cols)}, extra_json) "
                f"VALUES (?, {', '.join('?' * len(cols))}, ?)",
                (fingerprint, *(host.get(k) for k in cols), json.dumps(extra)),
            )
            return int(cur.lastrowid or 0)

    def resumable_sweep(self, plan_fingerprint: str) -> sqlite3.Row | None:
        """The latest unfinished sweep of the same plan, if any."""
        return self.db.execute(
            "SELECT * FROM sweeps WHERE plan_fingerprint=? AND status != 'finished' "
            "ORDER BY id DESC LIMIT 1",
            (plan_fingerprint,),
        ).fetchone()

    def create_sweep(
        self,
        host_id: int,
        plan_name: str,
        fingerprint: str,
        plan_json: str,
        pruned: list[dict[str, str]],
        notes: list[str],
        metric_registry: Mapping[str, Mapping[str, str]] | None = None,
    ) -> int:
        """A new sweep. `metric_registry`: metric → {"unit": …, "direction": "higher"|"lower"}."""
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO sweeps (host_id, plan_name, plan_fingerprint, plan_json, "
                "started_at, pruned_json,"
                " notes_json, metric_registry) VALUES (?,?,?,?,?,?,?,?)",
                (
                    host_id,
                    plan_name,
                    fingerprint,
                    plan_json,
                    time.time(),
                    json.dumps(pruned),
                    json.dumps(notes),
                    json.dumps(
                        {k: dict(v) for k, v in (metric_registry or {}).items()}, sort_keys=True
                    ),
                ),
            )
            return int(cur.lastrowid or 0)

    def set_sweep_group(self, sweep_id: int, group: str) -> None:
        """Record the host group the sweep answers for (a fleet's inventory group; the latest given
        wins)."""
        with self.tx() as db:
            db.execute("UPDATE sweeps SET host_group=? WHERE id=?", (group, sweep_id))

    def set_sweep_status(self, sweep_id: int, status: str) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE sweeps SET status=?, finished_at=? WHERE id=?",
                (status, time.time(), sweep_id),
            )

    def cell_id(
        self, sweep_id: int, key: str, axes: Mapping[str, str], backing: Mapping[str, Any]
    ) -> int:
        """The cell's id in the sweep, created with its axes (every axis a row of cell_axes; the
        first release's axes in the cells table's own columns too) the first time."""
        with self.tx() as db:
            row = db.execute(
                "SELECT id FROM cells WHERE sweep_id=? AND key=?", (sweep_id, key)
            ).fetchone()
            if row:
                db.execute(
                    "UPDATE cells SET backing_json=? WHERE id=?", (json.dumps(backing), row["id"])
                )
                return int(row["id"])
            cur = db.execute(
                f"INSERT INTO cells (sweep_id, key, {', '.join(CELL_AXIS_COLUMNS)}, backing_json) "
                f"VALUES (?,?,{','.join('?' * len(CELL_AXIS_COLUMNS))},?)",
                (sweep_id, key, *(axes.get(a) for a in CELL_AXIS_COLUMNS), json.dumps(backing)),
            )
            cid = int(cur.lastrowid or 0)
            db.executemany(
                "INSERT INTO cell_axes (cell_id, axis, value) VALUES (?,?,?)",
                [(cid, a, str(v)) for a, v in axes.items()],
            )
            return cid

    # -- runs ---------------------------------------------------------------
    def record_run(self, rec: RunRecord) -> int:
        """Commit one finished run with its samples and monitor series, atomically."""
        with self.tx() as db:
            attempt = db.execute(
                "SELECT COALESCE(MAX(attempt), 0) + 1 FROM runs WHERE cell_id=? AND workload=?",
                (rec.cell_id, rec.workload),
            ).fetchone()[0]
            cur = db.execute(
                "INSERT INTO runs (cell_id, workload, attempt, status, started_at, "
                "finished_at, wall_s, accel,"
                " cache_state, page_cache_method, phases_json, job_text, raw_output, "
                "console_tail, error, meta_json,"
                " round, round_position, disturbed, disturbance_json, retry_of, boot_id, "
                "boot_position)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    rec.cell_id,
                    rec.workload,
                    attempt,
                    rec.status,
                    rec.started_at,
                    rec.finished_at,
                    rec.finished_at - rec.started_at,
                    rec.accel,
                    rec.cache_state,
                    rec.page_cache_method,
                    json.dumps(dict(rec.phases)),
                    rec.job_text,
                    rec.raw_output,
                    rec.console_tail,
                    rec.error,
                    json.dumps(dict(rec.meta or {})),
                    rec.round,
                    rec.round_position,
                    None if rec.disturbed is None else int(rec.disturbed),
                    json.dumps(list(rec.disturbance)),
                    rec.retry_of,
                    rec.boot_id,
                    rec.boot_position,
                ),
            )
            run_id = int(cur.lastrowid or 0)
            db.executemany(
                "INSERT INTO samples VALUES (?,?,?)",
                [(run_id, k, float(v)) for k, v in rec.metrics.items()],
            )
            db.executemany(
                "INSERT INTO monitor VALUES (?,?,?,?)",
                [(run_id, t, k, float(v)) for t, values in rec.monitor for k, v in values.items()],
            )
            db.executemany(
                "INSERT INTO run_clients VALUES (?,?,?,?)",
                [
                    (run_id, i, k, float(v))
                    for i, values in enumerate(rec.clients)
                    for k, v in values.items()
                ],
            )
            return run_id

    def record_unit_stop(
        self,
        cell_id: int,
        workload: str,
        kind: str,
        reason: str,
        round_no: int | None,
        ok_runs: int,
        against: str | None = None,
    ) -> None:
        """Why a cell × workload stopped being repeated (a resumed sweep's later decision replaces
        it); ``against``: an elimination's reference cell, by its key."""
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO unit_stops (cell_id, workload, kind, reason, "
                "round, ok_runs, stopped_at, against)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (cell_id, workload, kind, reason, round_no, ok_runs, time.time(), against),
            )

    def run_counts(
        self, sweep_id: int, *, replaced_too: bool = False
    ) -> dict[tuple[int, str], tuple[int, int]]:
        """(cell_id, workload) → (ok runs, failed runs); an ok run a clean retry replaced counts
        only with ``replaced_too``."""
        ok = (
            "r.status='ok'"
            if replaced_too
            else "r.status='ok' AND r.id NOT IN (" + REPLACED_RUNS_SQL + ")"
        )
        rows = self.db.execute(
            f"SELECT r.cell_id, r.workload, SUM({ok}) ok, "
            "SUM(r.status!='ok') bad FROM runs r JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? "
            "GROUP BY r.cell_id, r.workload",
            (sweep_id,) if replaced_too else (sweep_id, sweep_id),
        )
        return {(r["cell_id"], r["workload"]): (int(r["ok"]), int(r["bad"])) for r in rows}

    def workloads_run(self) -> dict[int, set[str]]:
        """Sweep id → the workloads its runs ran (any status, replaced or not): in one pass over the
        runs, for a question asked of every sweep of a fleet's store (report/durability.py)."""
        out: dict[int, set[str]] = {}
        for sweep_id, workload in self.db.execute(
            "SELECT DISTINCT c.sweep_id, r.workload FROM runs r JOIN cells c ON c.id=r.cell_id"
        ):
            out.setdefault(int(sweep_id), set()).add(workload)
        return out

    def metric_series(self, cell_id: int, workload: str, metric: str) -> list[float]:
        """A metric's values over the ok runs of a cell × workload, in run order."""
        rows = self.db.execute(
            "SELECT s.value FROM samples s JOIN runs r ON r.id=s.run_id WHERE "
            "r.cell_id=? AND r.workload=? "
            "AND r.status='ok' AND s.metric=? ORDER BY r.attempt",
            (cell_id, workload, metric),
        )
        return [float(r[0]) for r in rows]

    def metric_points(self, cell_id: int, workload: str, metric: str) -> list[tuple[int, float]]:
        """(round, value) of a metric over the ok runs of a cell × workload; a run stored before
        rounds were recorded counts its attempt number as its round."""
        # Without the runs a clean retry replaced (one value per round, as the scheduler keeps it).
        rows = self.db.execute(
            "SELECT COALESCE(r.round, json_extract(r.meta_json, '$.round'), r.attempt) "
            "rnd, s.value FROM samples s "
            "JOIN runs r ON r.id=s.run_id WHERE r.cell_id=? AND r.workload=? "
            "AND r.status='ok' AND s.metric=? AND r.id NOT IN ("
            + REPLACED_RUNS_SQL
            + ") ORDER BY r.attempt",
            (cell_id, workload, metric, _sweep_of(self.db, cell_id)),
        )
        return [(int(r[0]), float(r[1])) for r in rows]

    def run_rounds(self, sweep_id: int) -> dict[tuple[int, str], set[int]]:
        """(cell_id, workload) → the rounds of the randomised-block design its runs belong to."""
        # The round is in runs.round (schema 2) when the runner passes it, else in the run's meta.
        rows = self.db.execute(
            "SELECT r.cell_id, r.workload, COALESCE(r.round, json_extract(r.meta_json, "
            "'$.round')) rnd FROM runs r "
            "JOIN cells c ON c.id=r.cell_id WHERE c.sweep_id=? AND rnd IS NOT NULL",
            (sweep_id,),
        )
        out: dict[tuple[int, str], set[int]] = {}
        for r in rows:
            out.setdefault((r["cell_id"], r["workload"]), set()).add(int(r["rnd"]))
        return out

    def sweep_elapsed(self, sweep_id: int) -> float:
        """Seconds spent in runs of this sweep (resumes add up; idle time between them does not)."""
        row = self.db.execute(
            "SELECT COALESCE(SUM(r.wall_s), 0) FROM runs r JOIN cells c ON c.id=r.cell_id "
            "WHERE c.sweep_id=?",
            (sweep_id,),
        ).fetchone()
        return float(row[0])


def _sweep_of(db: sqlite3.Connection, cell_id: int) -> int:
    row = db.execute("SELECT sweep_id FROM cells WHERE id=?", (cell_id,)).fetchone()
    return int(row[0]) if row else -1


# -- opening ---------------------------------------------------------------------------------------


def _refuse(path: Path, why: NotOurs | str) -> UserError:
    if isinstance(why, SchemaDamaged):
        return UserError(f"results database {path} is damaged: {why}", hint=_RESTORE_HINT)
    if isinstance(why, TooNew):
        return UserError(f"{path} {why}", hint="use that iomatrix version, or a new --db")
    return UserError(f"{path} is not an iomatrix results database ({why})", hint=_NOT_OURS_HINT)


def _write_error(path: Path, err: sqlite3.Error) -> UserError:
    return UserError(
        f"cannot write results database {path}: {err}",
        hint="check that the file and its directory are writable and not immutable, "
        "and that the disk has space",
    )


def _rollback(db: sqlite3.Connection) -> None:
    # The transaction may already be gone (SQLite rolls back by itself on some errors).
    with contextlib.suppress(sqlite3.Error):
        db.execute("ROLLBACK")


def _connect_ro(path: Path) -> sqlite3.Connection:
    """A read-only connection that has read the schema once (so open errors surface here) and that
    creates no file beside the database.

    SQLite's `mode=ro` still creates the write-ahead log's index (-shm) and an empty -wal when the
    file is in WAL mode, and leaves them behind. So:
    - no sweep holds the file and no -wal with pages nor rollback journal is beside it: every
      committed transaction is in the main file, which is read as `immutable` (no locks, no -shm, no
      -wal);
    - a -wal with pages but no -shm (a copied database, a full disk that stopped the last
      checkpoint): the pages in that -wal are part of the database, and reading them needs an index;
      the two files are copied into a private temporary directory and read there;
    - otherwise (a sweep writing it, or a -wal with its -shm): plain `mode=ro`, which creates
      nothing new.
    """
    wal_names.refuse_if_written_elsewhere(path)
    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    wal, shm, journal = (path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))
    wal_pages = wal.is_file() and wal.stat().st_size > 0
    live = is_held(db_lock_path(path)) or identity_held(path)  # a sweep writing it, under any name

    def connect(u: str) -> sqlite3.Connection:
        db = sqlite3.connect(u, uri=True, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
            db.close()
            damaged = schema_damage(err)
            if damaged is not None:
                raise damaged from None
            raise
        return db

    try:
        if not live and not wal_pages and not journal.exists():
            return connect(uri + "&immutable=1")
        if not live and wal_pages and not shm.exists():
            return _connect_private_copy(path, wal, connect)
        return connect(uri)
    except sqlite3.OperationalError as err:
        if wal_pages:
            try:
                return _connect_private_copy(path, wal, connect)
            except (OSError, sqlite3.DatabaseError):
                raise UserError(
                    f"cannot read results database {path}: {err}; it has a write-ahead log "
                    f"({wal.name}) that needs a writable directory",
                    hint="let the sweep writing it finish, or read a copy of the file",
                ) from None
        raise UserError(
            f"cannot read results database {path}: {err}", hint="check the file's permissions"
        ) from None
    except sqlite3.DatabaseError as err:
        raise _refuse(path, f"not a readable SQLite file: {err}") from None
    except SchemaDamaged as why:
        raise _refuse(path, why) from None


def _connect_private_copy(
    path: Path, wal: Path, connect: Callable[[str], sqlite3.Connection]
) -> sqlite3.Connection:
    """Read `path` and its -wal from copies in a temporary directory (removed when the process
    ends)."""
    tmp = Path(tempfile.mkdtemp(prefix="iomatrix-read-"))
    atexit.register(shutil.rmtree, tmp, True)
    copy = tmp / path.name
    shutil.copyfile(path, copy)
    shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
    return connect("file:" + quote(str(copy)) + "?mode=ro")


def _open_read_only(path: Path, skip_damaged: bool) -> tuple[sqlite3.Connection, int, DamageReport]:
    try:
        exists = check_file(path)
    except NotOurs as why:
        raise _refuse(path, why) from None
    if not exists:
        raise no_results_database(path)
    db = _connect_ro(path)
    try:
        found = inspect(db)
    except NotOurs as why:
        db.close()
        raise _refuse(path, why) from None
    if found.version is None:
        db.close()
        raise _refuse(path, "it holds no iomatrix tables")
    damage = find_damage(db, found.version)
    if damage and (damage.unreadable is not None or not skip_damaged):
        db.close()
        raise _damaged(path, damage)
    if damage:
        _hide_damaged(db, damage, found.version)
    db.execute("PRAGMA query_only=ON")  # belt and braces: this connection never writes (its file)
    return db, found.version, damage


_RESTORE_HINT = (
    "restore it from a copy (sqlite3's .recover may save the rest into a new file); a sweep or a "
    "merge needs a sound file or a new --db"
)


def _damaged(path: Path, damage: DamageReport) -> UserError:
    return UserError(f"results database {path} is damaged: {damage}", hint=_RESTORE_HINT)


def _refuse_damaged(path: Path, db: sqlite3.Connection, version: int) -> None:
    damage = find_damage(db, version)
    if damage:
        db.close()
        raise _damaged(path, damage)


# What each table's rows belong to: a row whose owner is damaged (skipped) is skipped with it.
_OWNERS = {
    "sweeps": ("host_id", "hosts"),
    "cells": ("sweep_id", "sweeps"),
    "runs": ("cell_id", "cells"),
    "samples": ("run_id", "runs"),
    "monitor": ("run_id", "runs"),
    "run_clients": ("run_id", "runs"),
    "unit_stops": ("cell_id", "cells"),
    "cell_axes": ("cell_id", "cells"),
}


def _hide_damaged(db: sqlite3.Connection, damage: DamageReport, version: int) -> None:
    """Make every query of this connection read the file without its damaged rows, nor the rows they
    own.

    SQLite looks an unqualified table name up in the connection's TEMP schema first, so a temporary
    view named `runs` over `main.runs` without the damaged rowids stands in for the table in every
    query of the read API; it lives in this connection's memory and writes nothing to the file."""
    db.execute("CREATE TEMP TABLE iomatrix_damaged (tbl TEXT NOT NULL, rid INTEGER NOT NULL)")
    db.executemany(
        "INSERT INTO temp.iomatrix_damaged VALUES (?, ?)",
        [(t, r) for t, rows in damage.rows.items() for r in rows],
    )
    for table in COLUMNS[version]:
        owner = _OWNERS.get(table)
        belongs = (
            f" AND {owner[0]} IN (SELECT id FROM {owner[1]})"
            if owner and owner[1] in COLUMNS[version]
            else ""
        )
        db.execute(
            f"CREATE TEMP VIEW {table} AS SELECT * FROM main.{table} WHERE rowid NOT IN "
            f"(SELECT rid FROM temp.iomatrix_damaged WHERE tbl = '{table}'){belongs}"
        )


def preflight_write(path: Path) -> int | None:
    """Check, by reading only, that a sweep may write `path`: the schema version of an existing
    iomatrix database, or None when a new one will be created. Raises UserError otherwise."""
    try:
        exists = check_file(path)
    except NotOurs as why:
        raise _refuse(path, why) from None
    version: int | None = None
    if exists:
        wal_names.refuse_if_written_elsewhere(path)
        if not os.access(path, os.W_OK):
            raise UserError(
                f"cannot write results database {path}: the file is read-only, immutable or on a "
                "read-only filesystem",
                hint="choose a writable path with --db",
            )
        probe = _connect_ro(path)
        try:
            version = inspect(probe).version
        except NotOurs as why:
            probe.close()
            raise _refuse(path, why) from None
        if version is None:
            probe.close()
            raise _refuse(path, "an SQLite file without iomatrix tables")
        _refuse_damaged(path, probe, version)  # a sweep never adds runs to a damaged file
        probe.close()
    else:
        parent = path.absolute().parent
        if not parent.is_dir():
            raise UserError(
                f"cannot create results database {path}: directory {parent} does not exist",
                hint="create it, or choose another path with --db",
            )
        if not os.access(parent, os.W_OK):
            raise UserError(
                f"cannot create results database {path}: directory {parent} is not writable",
                hint="choose a writable path with --db",
            )
    return version


def _open_for_writing(path: Path) -> tuple[sqlite3.Connection, int]:
    version = preflight_write(path)
    try:
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys=ON")
        if version is None:
            db.execute("PRAGMA journal_mode=WAL")
        # before the first write: a kill from here on leaves writes in this name's -wal
        wal_names.record(path)
        if version is None:
            _create(db)
        elif version < SCHEMA_VERSION:
            _migrate(db, path, version)
    except sqlite3.Error as err:
        raise _write_error(path, err) from None
    return db, SCHEMA_VERSION


def _apply(db: sqlite3.Connection, statements: Iterable[str]) -> None:
    """Run `statements` in one transaction: all or none."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for stmt in statements:
            db.execute(stmt)
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def _create(db: sqlite3.Connection) -> None:
    # Schema 1 and then every migration, so a new file is the same as a migrated one.
    steps = [s.strip() for s in SCHEMA_1.split(";") if s.strip()]
    steps.append("INSERT INTO meta VALUES ('schema_version', '1')")
    for v in range(1, SCHEMA_VERSION):
        steps += MIGRATIONS[v]
    _apply(db, steps)


def _migrate(db: sqlite3.Connection, path: Path, version: int) -> None:
    """Bring a database of an older schema to the current one, after a backup copy beside it."""
    backup = path.with_name(f"{path.name}.schema{version}.bak")
    # a backup from an earlier, interrupted attempt is the older copy: keep it
    if not backup.exists():
        staged = backup.with_name(backup.name + ".partial")
        copy = sqlite3.connect(staged)
        try:
            db.backup(copy)  # SQLite's online backup: a consistent copy even of a WAL database
        finally:
            copy.close()
        os.chmod(staged, stat.S_IMODE(path.stat().st_mode))
        os.replace(staged, backup)
    steps: list[str] = []
    for v in range(version, SCHEMA_VERSION):
        steps += MIGRATIONS[v]
    _apply(db, steps)
