"""Merging results databases: the per-host files of a fleet sweep into one.

Every table is copied generically from one declared list, `TABLES`: each entry names a table, the
columns that identify one of its rows across databases (its natural key, after its references are
remapped), the columns that hold another table's `id`, and the reference to the row it belongs to. A
new table in the schema needs one entry here (the tests check that every table and every
`REFERENCES` clause of the schema is declared).

What a merge is:
- hosts are shared: a host is the same host when its fingerprint is (its identifying facts); its
  other facts (`extra_json`: governor, KSM, …) are kept from the first database that brought it.
- a sweep is the unit of merging, identified by its host's fingerprint, its plan fingerprint and its
  start time. A sweep not yet in the output is copied whole (its cells, runs, samples, monitor
  points, stops, …), with every id remapped. A sweep already there must be identical, row for row:
  then it adds nothing (merging the same database twice, or in another order, gives the same
  output).

What is refused (a conflict: one line, nothing is written):
- a sweep that is still `running` in an input (a sweep is writing it, or was killed before it could
  say so);
- the same sweep with different contents in two databases, e.g. merged once while interrupted and
  again after it was resumed (merge the newer file into a new output instead);
- a row that refers to a row its database does not hold (a damaged file).

Inputs are never modified: each is read through a read-only connection into a temporary copy, and a
copy of an older schema is migrated there. The output is built in a temporary file beside it (from a
copy of the existing output, so merging is incremental) and renamed over it only when every input
merged; an existing output of an older schema is kept first as `<out>.schemaN.bak`, as `iomatrix
run` keeps it before migrating."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.errors import UserError
from iomatrix.locks import db_lock_path, exclusive, refuse_if_held, refuse_if_identity_held
from iomatrix.store.db import HOST_IDENTITY_EXTRAS, Store, current_host_fingerprint
from iomatrix.store.schema import SCHEMA_VERSION


@dataclass(frozen=True)
class TableSpec:
    """How one table's rows are merged."""

    name: str
    # The columns that identify a row across databases, after its references are remapped; () for a
    # table whose rows have no identity of their own (monitor points): they are compared as a whole,
    # per owner row.
    key: tuple[str, ...]
    # column -> the table whose `id` it holds.
    refs: Mapping[str, str] = field(default_factory=dict)
    # The reference to the row this row belongs to: the rows of an owner already merged must be the
    # same rows.
    owner: str | None = None
    # Rows shared by many sweeps (hosts, meta): an existing row is reused as it is, even when other
    # columns differ.
    shared: bool = False


# In dependency order: a table comes after every table it refers to.
TABLES: tuple[TableSpec, ...] = (
    TableSpec("meta", key=("key",), shared=True),
    TableSpec("hosts", key=("fingerprint",), shared=True),
    TableSpec(
        "sweeps", key=("host_id", "plan_fingerprint", "started_at"), refs={"host_id": "hosts"}
    ),
    TableSpec("cells", key=("sweep_id", "key"), refs={"sweep_id": "sweeps"}, owner="sweep_id"),
    TableSpec("cell_axes", key=("cell_id", "axis"), refs={"cell_id": "cells"}, owner="cell_id"),
    TableSpec(
        "runs",
        key=("cell_id", "workload", "attempt"),
        refs={"cell_id": "cells", "retry_of": "runs"},
        owner="cell_id",
    ),
    TableSpec("samples", key=("run_id", "metric"), refs={"run_id": "runs"}, owner="run_id"),
    TableSpec("monitor", key=(), refs={"run_id": "runs"}, owner="run_id"),
    TableSpec(
        "run_clients", key=("run_id", "client", "metric"), refs={"run_id": "runs"}, owner="run_id"
    ),
    TableSpec(
        "unit_stops", key=("cell_id", "workload"), refs={"cell_id": "cells"}, owner="cell_id"
    ),
)


class MergeConflict(UserError):
    """Two databases disagree about one sweep, or an input cannot be merged as it is; nothing was
    written."""


@dataclass
class InputReport:
    """What one input brought."""

    path: Path
    schema_version: int
    sweeps_added: int = 0
    sweeps_present: int = 0
    runs_added: int = 0
    hosts_added: int = 0


@dataclass(frozen=True)
class MergeResult:
    out: Path
    created: bool
    inputs: list[InputReport]
    hosts: int
    sweeps: int
    runs: int
    # Machines among the hosts rows: a host row is one machine *with its software* (fio, QEMU,
    # iomatrix versions), so one machine swept before and after an upgrade has two rows; a user
    # asking "how many hosts" means machines.
    machines: int = 0


def merge(out: Path, inputs: Sequence[Path]) -> MergeResult:
    """Merge `inputs` into `out` (created when missing), atomically and under the output's lock."""
    out = Path(out)
    if not inputs:
        raise UserError(
            "no database to merge", hint="name one or more input databases after the output"
        )
    Store.preflight(out)  # a bad output path is refused before anything is read or created
    # A symlinked output is locked and written through to the file it names: the link stays a link,
    # and a merge into the link and one into its target take the same lock.
    real = out.resolve()
    with exclusive(db_lock_path(real), f"results database {out}"):
        # A sweep writing the output or an input under another name (a hard link, a bind mount)
        # holds the file itself by its inode (locks.exclusive_identity).
        refuse_if_identity_held(real, f"results database {out}")
        for path in inputs:
            if Path(path).resolve() != real:  # the output's lock is ours
                refuse_if_held(db_lock_path(Path(path)), f"results database {path}")
                refuse_if_identity_held(Path(path), f"results database {path}")
        with tempfile.TemporaryDirectory(prefix=f".{real.name}.merge-", dir=real.parent) as tmp:
            staged = Path(tmp) / real.name
            created = not real.exists()
            out_version = SCHEMA_VERSION
            if created:
                Store(staged).close()
            else:
                out_version = _copy_current(real, staged)
            db = _connect(staged)
            try:
                _check_declared(db)
                _refresh_host_identity(db)
                reports = [
                    _merge_one(db, Path(path), Path(tmp), i) for i, path in enumerate(inputs)
                ]
                totals = [
                    db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                    for t in ("hosts", "sweeps", "runs")
                ]
                machines = _machines(db)
                # one self-contained file, no -wal to carry along
                db.execute("PRAGMA journal_mode=DELETE")
            finally:
                db.close()
            if out_version < SCHEMA_VERSION:
                # as `iomatrix run` does before it migrates a database
                _keep_backup(real, out_version)
            _publish(staged, real)
    hosts, sweeps, runs = totals
    return MergeResult(out, created, reports, hosts, sweeps, runs, machines=machines)


def _machines(db: sqlite3.Connection) -> int:
    """How many machines the hosts rows describe: rows that differ only in software versions or
    memory size (what an upgrade changes) are one machine, named by its hostname, its fleet
    inventory name and its machine id where recorded (`HOST_IDENTITY_EXTRAS`)."""
    rows = db.execute("SELECT fingerprint, hostname, extra_json FROM hosts").fetchall()
    seen: set[tuple[object, ...]] = set()
    for row in rows:
        try:
            facts = {**json.loads(row["extra_json"] or "{}"), **json.loads(row["fingerprint"])}
        except (ValueError, TypeError):
            facts = {}
        if not isinstance(facts, dict):
            facts = {}
        seen.add((row["hostname"], *(facts.get(k) for k in HOST_IDENTITY_EXTRAS)))
    return len(seen)


# -- files -----------------------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.row_factory = sqlite3.Row
    return db


def _copy_current(src: Path, dest: Path) -> int:
    """A copy of the iomatrix database `src` at `dest`, migrated to the current schema; its original
    version.

    The source is read through a read-only connection (it checks the file is iomatrix's); the
    migration runs on the copy, whose backup file (`<copy>.schemaN.bak`) lives and dies in the
    temporary directory."""
    version = _copy_database(src, dest)
    # migrates an older schema (Store's own steps); a current one is left as it is
    Store(dest).close()
    return version


def _keep_backup(path: Path, version: int) -> None:
    """A copy of the database `path` of schema `version` at `<path>.schema<version>.bak`, unless one
    is there."""
    backup = path.with_name(f"{path.name}.schema{version}.bak")
    if backup.exists():
        return
    staged = backup.with_name(backup.name + ".partial")
    _copy_database(path, staged)
    os.replace(staged, backup)


def _copy_database(src: Path, dest: Path) -> int:
    """SQLite's online backup of the iomatrix database `src` (opened read-only, so it is checked
    first) into `dest`; its schema version."""
    reader = Store.open_existing(src)
    try:
        copy = sqlite3.connect(dest)
        try:
            reader.db.backup(copy)
        finally:
            copy.close()
        return reader.schema_version
    finally:
        reader.close()


def _publish(staged: Path, out: Path) -> None:
    """Rename the finished output over `out`, durably."""
    with open(staged, "rb") as f:
        os.fsync(f.fileno())
    if out.exists():
        with contextlib.suppress(OSError):
            os.chmod(staged, out.stat().st_mode & 0o7777)
    os.replace(staged, out)
    dir_fd = os.open(out.absolute().parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# -- host identity ---------------------------------------------------------------------------------


def _refresh_host_identity(db: sqlite3.Connection, schema: str = "main") -> None:
    """The hosts of a temporary copy (an input, or the output being built) identified as
    `Store.host_id` identifies them today (`current_host_fingerprint`): a host recorded before its
    machine id joined its identity gets it from its recorded facts, so that two machines sharing a
    hostname and their other facts, merged from two databases, stay two hosts. A host recorded both
    ways (a database written by two versions) becomes one row, its sweeps pointing at it."""
    rows = db.execute(
        f"SELECT id, fingerprint, extra_json FROM {schema}.hosts ORDER BY id"
    ).fetchall()
    db.execute("BEGIN IMMEDIATE")
    try:
        for row in rows:
            new = current_host_fingerprint(row["fingerprint"], row["extra_json"])
            if new == row["fingerprint"]:
                continue
            same = db.execute(
                f"SELECT id FROM {schema}.hosts WHERE fingerprint=?", (new,)
            ).fetchone()
            if same is None:
                db.execute(f"UPDATE {schema}.hosts SET fingerprint=? WHERE id=?", (new, row["id"]))
            else:
                db.execute(
                    f"UPDATE {schema}.sweeps SET host_id=? WHERE host_id=?", (same["id"], row["id"])
                )
                db.execute(f"DELETE FROM {schema}.hosts WHERE id=?", (row["id"],))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


# -- the declared tables against the schema --------------------------------------------------------


def _tables(db: sqlite3.Connection, schema: str = "main") -> set[str]:
    rows = db.execute(
        f"SELECT name FROM {schema}.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
    )
    return {r[0] for r in rows}


def _columns(db: sqlite3.Connection, table: str, schema: str = "main") -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA {schema}.table_info({table})")]


def _has_id(db: sqlite3.Connection, table: str) -> bool:
    return any(r[1] == "id" and r[5] == 1 for r in db.execute(f"PRAGMA table_info({table})"))


def declared_references(db: sqlite3.Connection, table: str) -> dict[str, str]:
    """column -> referenced table, as the schema's REFERENCES clauses say."""
    return {r[3]: r[2] for r in db.execute(f"PRAGMA foreign_key_list({table})")}


def _check_declared(db: sqlite3.Connection) -> None:
    """TABLES must cover the schema exactly: a table or reference it lacks would be lost or left
    unmapped."""
    declared = {t.name: t for t in TABLES}
    missing = sorted(_tables(db) - set(declared))
    if missing:
        raise RuntimeError(f"store/merge.py TABLES lacks the tables {', '.join(missing)}")
    for spec in TABLES:
        if spec.name in _tables(db) and declared_references(db, spec.name) != dict(spec.refs):
            raise RuntimeError(
                f"store/merge.py TABLES declares the references of {spec.name} as "
                f"{dict(spec.refs)}, "
                f"the schema as {declared_references(db, spec.name)}"
            )


# -- merging one input -----------------------------------------------------------------------------


@dataclass
class _State:
    """Id maps of one input: its ids -> the output's, and which output ids this input created."""

    ids: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    fresh: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))


def _merge_one(db: sqlite3.Connection, path: Path, tmp: Path, index: int) -> InputReport:
    copy = tmp / f"input-{index}.sqlite"
    version = _copy_current(path, copy)
    report = InputReport(path, version)
    db.execute("ATTACH DATABASE ? AS src", (str(copy),))
    try:
        _refresh_host_identity(db, "src")
        running = db.execute(
            "SELECT id, plan_name FROM src.sweeps WHERE status='running' ORDER BY id"
        ).fetchone()
        if running is not None:
            raise MergeConflict(
                f"{path}: sweep {running['id']} ({running['plan_name']}) is still running",
                hint="let it finish, or resume a killed one with the same 'iomatrix run' command, "
                "then merge; nothing was merged",
            )
        state = _State()
        db.execute("BEGIN IMMEDIATE")
        try:
            for spec in TABLES:
                if spec.name in _tables(db):
                    _TableMerge(db, spec, state, path).run()
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        report.sweeps_added = len(state.fresh["sweeps"])
        report.sweeps_present = len(state.ids["sweeps"]) - report.sweeps_added
        report.runs_added = len(state.fresh["runs"])
        report.hosts_added = len(state.fresh["hosts"])
    finally:
        db.execute("DETACH DATABASE src")
    return report


class _TableMerge:
    """The rows of one table of one input, merged into the output: remapped, then inserted or
    matched."""

    def __init__(self, db: sqlite3.Connection, spec: TableSpec, state: _State, path: Path) -> None:
        self.db, self.spec, self.state, self.path = db, spec, state, path
        self.cols = _columns(db, spec.name)
        # both are at the current schema: a mismatch is a bug
        if _columns(db, spec.name, "src") != self.cols:
            raise RuntimeError(
                f"{path}: table {spec.name} has columns {_columns(db, spec.name, 'src')}, "
                f"expected {self.cols}"
            )
        self.has_id = _has_id(db, spec.name)
        self.data_cols = [c for c in self.cols if c != "id"]
        self.owner_table = spec.refs.get(spec.owner) if spec.owner else None
        # Self references to rows not copied yet: (output id, column, input id it refers to, row was
        # inserted).
        self.later: list[tuple[int, str, int, bool]] = []
        # rows without a key, by existing owner
        self.owned: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
        self.seen_per_owner: dict[int, int] = defaultdict(int)  # rows matched, by existing owner

    def run(self) -> None:
        rows = self.db.execute(
            f"SELECT {', '.join(self.cols)} FROM src.{self.spec.name} ORDER BY rowid"
        ).fetchall()
        for row in rows:
            self._row(dict(zip(self.cols, row, strict=True)))
        self._resolve_later()
        if self.owner_table is not None:
            self._check_same_rows(self.owner_table)

    def _row(self, values: dict[str, Any]) -> None:
        if self.spec.name == "samples":
            self._check_sample(values)
        old_id = values.pop("id", None)
        deferred = self._remap(values, old_id)
        owner_id = values[self.spec.owner] if self.spec.owner else None
        owner_is_new = (
            self.owner_table is not None and owner_id in self.state.fresh[self.owner_table]
        )
        if not self.spec.key and not owner_is_new:
            # compared per owner, later
            self.owned[owner_id].append(tuple(values[c] for c in self.data_cols))
            return
        existing = None if owner_is_new else _find(self.db, self.spec, values, self.has_id)
        if existing is not None:
            self._match(values, old_id, deferred, owner_id, dict(existing))
        elif owner_id is not None and not owner_is_new:
            raise self._differs(
                owner_id,
                f"has a {self.spec.name} row ({_describe_key(self.spec, values)}) that "
                "the merged copy of it lacks",
            )
        else:
            self._insert(values, old_id, deferred)

    def _check_sample(self, values: Mapping[str, Any]) -> None:
        """A measurement is a finite number, and none iomatrix records is below zero (a rate, a
        time, a share): anything else is damage, refused with its row rather than copied into the
        fleet's database."""
        v = values["value"]
        if isinstance(v, int | float) and math.isfinite(v) and v >= 0:
            return
        shown = "Inf" if isinstance(v, float) and math.isinf(v) else repr(v)[:40]
        raise MergeConflict(
            f"{self.path}: samples row (run {values['run_id']}, metric {values['metric']!r}) holds "
            f"{shown}, not a measurement (a finite number ≥ 0): a damaged file",
            hint="merge the other databases without it; nothing was merged",
        )

    def _insert(
        self, values: Mapping[str, Any], old_id: int | None, deferred: Mapping[str, int]
    ) -> None:
        cur = self.db.execute(
            f"INSERT INTO main.{self.spec.name} ({', '.join(self.data_cols)}) "
            f"VALUES ({', '.join('?' * len(self.data_cols))})",
            [values[c] for c in self.data_cols],
        )
        new_id = int(cur.lastrowid or 0)
        if self.has_id and old_id is not None:
            self.state.ids[self.spec.name][old_id] = new_id
            self.state.fresh[self.spec.name].add(new_id)
        self.later += [(new_id, c, r, True) for c, r in deferred.items()]

    def _remap(self, values: dict[str, Any], old_id: int | None) -> dict[str, int]:
        """Replace the input's ids in `values` by the output's; the self references not copied yet,
        returned."""
        deferred: dict[str, int] = {}
        for col, target in self.spec.refs.items():
            ref = values[col]
            if ref is None:
                continue
            mapped = self.state.ids[target].get(ref)
            if mapped is None and target == self.spec.name:
                deferred[col] = ref  # a row of this table not copied yet: set once every row is
                values[col] = None
                continue
            if mapped is None:
                raise self._damaged(
                    f"{self.spec.name} row {old_id if old_id is not None else ''}", target, ref
                )
            values[col] = mapped
        return deferred

    def _match(
        self,
        values: Mapping[str, Any],
        old_id: int | None,
        deferred: Mapping[str, int],
        owner_id: int | None,
        existing: dict[str, Any],
    ) -> None:
        """A row whose key the output already has: the same row (or a shared one), mapped to it."""
        out_id = existing.pop("id", None)
        if owner_id is not None:
            self.seen_per_owner[owner_id] += 1
        diff = (
            [] if self.spec.shared else _differing(self.data_cols, values, existing, skip=deferred)
        )
        if diff and self.spec.name == "sweeps":
            raise _sweep_differs(self.db, self.path, out_id, f"its {', '.join(diff[:3])} differ")
        if diff:
            raise self._differs(
                owner_id,
                f"its {self.spec.name} row ({_describe_key(self.spec, values)}) differs "
                f"in {', '.join(diff[:3])}",
            )
        if self.has_id and old_id is not None and out_id is not None:
            self.state.ids[self.spec.name][old_id] = int(out_id)
            self.later += [(int(out_id), c, r, False) for c, r in deferred.items()]

    def _resolve_later(self) -> None:
        for out_id, col, ref, inserted in self.later:
            mapped = self.state.ids[self.spec.name].get(ref)
            if mapped is None:
                raise self._damaged(f"{self.spec.name} row", self.spec.name, ref)
            if inserted:
                self.db.execute(
                    f"UPDATE main.{self.spec.name} SET {col}=? WHERE id=?", (mapped, out_id)
                )
            elif (
                self.db.execute(
                    f"SELECT {col} FROM main.{self.spec.name} WHERE id=?", (out_id,)
                ).fetchone()[0]
                != mapped
            ):
                raise self._differs(None, f"its {self.spec.name} row {out_id} differs in {col}")

    def _check_same_rows(self, owner_table: str) -> None:
        """An owner row that was already in the output must own the same rows there as in the
        input."""
        existing_owners = set(self.state.ids[owner_table].values()) - self.state.fresh[owner_table]
        if not existing_owners:
            return
        counts = _owned_counts(self.db, self.spec, existing_owners)
        for owner_id in sorted(existing_owners):
            if self.spec.key:
                have, mine = counts.get(owner_id, 0), self.seen_per_owner.get(owner_id, 0)
                if have != mine:
                    raise self._differs(
                        owner_id,
                        f"the merged copy has {have} {self.spec.name} rows of a "
                        f"{owner_table[:-1]} where this database has {mine}",
                    )
                continue
            rows = sorted(self.owned.get(owner_id, []), key=_sort_key)
            theirs = sorted(
                (
                    tuple(r)
                    for r in self.db.execute(
                        f"SELECT {', '.join(self.data_cols)} FROM main.{self.spec.name} "
                        f"WHERE {self.spec.owner}=?",
                        (owner_id,),
                    )
                ),
                key=_sort_key,
            )
            if rows != theirs:
                raise self._differs(
                    owner_id,
                    f"its {self.spec.name} rows differ ({len(rows)} here, {len(theirs)} "
                    "in the merged copy)",
                )

    def _differs(self, owner_id: int | None, what: str) -> MergeConflict:
        return _differs(self.db, self.path, self.owner_table, owner_id, what)

    def _damaged(self, row: str, target: str, ref: int) -> MergeConflict:
        return MergeConflict(
            f"{self.path}: {row} refers to {target} row {ref}, which the database does not hold "
            "(a damaged file)",
            hint="merge the other databases without it; nothing was merged",
        )


def _differing(
    cols: Sequence[str],
    mine: Mapping[str, Any],
    theirs: Mapping[str, Any],
    *,
    skip: Mapping[str, Any],
) -> list[str]:
    return [c for c in cols if c not in skip and mine[c] != theirs[c]]


def _sort_key(row: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    # NULLs and mixed types sort without comparing across types.
    return tuple(
        (0, "") if v is None else (1, v) if isinstance(v, int | float) else (2, str(v)) for v in row
    )


def _owned_counts(db: sqlite3.Connection, spec: TableSpec, owners: set[int]) -> dict[int, int]:
    db.execute("CREATE TEMP TABLE IF NOT EXISTS merge_owners (id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM temp.merge_owners")
    db.executemany("INSERT INTO temp.merge_owners VALUES (?)", [(o,) for o in owners])
    rows = db.execute(
        f"SELECT {spec.owner}, COUNT(*) FROM main.{spec.name} "
        f"WHERE {spec.owner} IN (SELECT id FROM temp.merge_owners) GROUP BY {spec.owner}"
    )
    return {int(r[0]): int(r[1]) for r in rows}


def _find(
    db: sqlite3.Connection, spec: TableSpec, values: Mapping[str, Any], has_id: bool
) -> sqlite3.Row | None:
    cols = ["id", *values] if has_id else list(values)
    where = " AND ".join(f"{c} IS ?" for c in spec.key)
    return db.execute(
        f"SELECT {', '.join(cols)} FROM main.{spec.name} WHERE {where} LIMIT 1",
        [values[c] for c in spec.key],
    ).fetchone()


def _describe_key(spec: TableSpec, values: Mapping[str, Any]) -> str:
    return ", ".join(f"{c}={values[c]!r}" for c in spec.key if c not in spec.refs) or "one row"


# -- messages --------------------------------------------------------------------------------------


def _sweep_of(db: sqlite3.Connection, table: str, row_id: int | None) -> int | None:
    """The output sweep a row of `table` belongs to, following the owner references."""
    specs = {t.name: t for t in TABLES}
    while table != "sweeps" and row_id is not None:
        spec = specs[table]
        if spec.owner is None:
            return None
        row = db.execute(f"SELECT {spec.owner} FROM main.{table} WHERE id=?", (row_id,)).fetchone()
        table, row_id = spec.refs[spec.owner], (row[0] if row else None)
    return row_id


def _sweep_label(db: sqlite3.Connection, sweep_id: int | None) -> str:
    row = (
        None
        if sweep_id is None
        else db.execute(
            "SELECT s.plan_name, s.started_at, h.hostname FROM main.sweeps s JOIN "
            "main.hosts h ON h.id=s.host_id "
            "WHERE s.id=?",
            (sweep_id,),
        ).fetchone()
    )
    if row is None:
        return "a sweep"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["started_at"]))
    return f"the sweep of plan {row['plan_name']} on host {row['hostname']} started {started}"


def _sweep_differs(
    db: sqlite3.Connection, path: Path, sweep_id: int | None, what: str
) -> MergeConflict:
    return MergeConflict(
        f"{path}: {_sweep_label(db, sweep_id)} is already merged with other contents ({what})",
        hint="a sweep resumed since it was merged: merge the newest databases into a new output; "
        "nothing was merged",
    )


def _differs(
    db: sqlite3.Connection, path: Path, owner_table: str | None, owner_id: int | None, what: str
) -> MergeConflict:
    sweep = _sweep_of(db, owner_table, owner_id) if owner_table else None
    return _sweep_differs(db, path, sweep, what)
