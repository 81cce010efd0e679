"""Damaged content of a results database, found when it is opened, before any report or sweep reads
it.

A file can be damaged by a disk, a copy cut short or a hand edit: pages SQLite cannot read, a stored
sample that is not a number (`'garbage'`, an infinity, a negative figure), text where an integer
belongs, bytes that are not UTF-8, a JSON column that is not JSON. Each would otherwise surface deep
in a report as a traceback or as a figure no measurement produced. `find_damage` looks once, by
reading only, and lists every damaged row by its place (table, row, column), so that a sweep or a
merge refuses the file in one line, and a report skips those rows and says how many (store/db.py).

What each column must hold is not listed by hand: it is read from the schema itself
(:func:`column_types`, the declared type and NOT NULL of every column of every table, at each schema
version), so a column a migration adds is checked from the day it exists. On top of the types: the
measurement columns are finite and ≥ 0 (:data:`MEASUREMENTS`, iomatrix.metrics: every metric is),
and the JSON columns hold JSON of their shape.

The cost is one pass over the file (`PRAGMA quick_check`: every page, without the index cross-checks
of `integrity_check`) and a few over each table (its columns' types checked in one, their text in
another); all are linear in the file's size."""

from __future__ import annotations

import functools
import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field

from iomatrix.store.schema import COLUMNS, MIGRATIONS, SCHEMA_1

# The largest finite double: SQLite stores 1e999 as +Inf, which compares above it.
_MAX = "1.7976931348623157e308"

# Columns that hold a measurement (or a host sample's value, or its time): a finite number ≥ 0.
# Anything else is a figure no run produced. (monitor values may be any finite number: a sampler's
# delta can go below 0.)
MEASUREMENTS = frozenset({("samples", "value"), ("run_clients", "value"), ("monitor", "t")})

# What each JSON column holds at its top level ('object' or 'array'), as the store writes it and
# reports read it.
_JSON_TYPES = {
    "plan_json": "object",
    "pruned_json": "array",
    "notes_json": "array",
    "metric_registry": "object",
    "extra_json": "object",
    "backing_json": "object",
    "phases_json": "object",
    "meta_json": "object",
    "disturbance_json": "array",
}
# JSON objects whose values a report turns into numbers.
_JSON_NUMBERS = ("phases_json",)

# SQLite's words for a file it cannot read (damaged pages, not a database, an I/O error of the
# device below): the user's file, not iomatrix's code. Any other SQLite error (a missing column, a
# syntax error) is a bug.
_DAMAGE_WORDS = (
    "malformed",
    "not a database",
    "disk i/o error",
    "database corrupt",
    "file is encrypted",
    "could not decode to utf-8",
)


def is_file_damage(err: sqlite3.DatabaseError) -> bool:
    """Whether SQLite raised `err` because of the file's content or device (not because of a query's
    code)."""
    return any(w in str(err).lower() for w in _DAMAGE_WORDS)


@dataclass(frozen=True)
class Column:
    """What a column of the schema holds: its declared type (INTEGER, REAL or TEXT) and whether NULL
    is allowed."""

    type: str
    nullable: bool
    key: bool = False  # part of the table's primary key


@functools.cache
def column_types(version: int) -> dict[str, dict[str, Column]]:
    """table → column → its declared type, at schema `version`: read from a database made in memory
    by the store's own steps (schema 1, then the migrations), so the checks follow the schema
    without a hand-kept list."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA_1)
        db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        for v in range(1, version):
            for stmt in MIGRATIONS[v]:
                db.execute(stmt)
        return {
            t: {
                r[1]: Column(str(r[2]).upper(), not r[3] and not r[5], bool(r[5]))
                for r in db.execute(f"PRAGMA table_info({t})")
            }
            for t in COLUMNS[version]
        }
    finally:
        db.close()


@dataclass(frozen=True)
class Damage:
    """One damaged value: where it is and why it is no value of its column."""

    table: str
    # "5"; "(run 3, metric 'read.iops')" by its key where the table has no id; "17 (run 3)" by its
    # rowid
    row: str
    column: str
    value: str  # as SQLite quotes it, cut to 40 characters
    why: str

    def __str__(self) -> str:
        return f"{self.table} row {self.row} holds {self.value} in column {self.column}, {self.why}"


@dataclass
class DamageReport:
    """What `find_damage` found: a file SQLite cannot read (`unreadable`), or damaged rows by table
    (rowids)."""

    unreadable: str | None = None
    rows: dict[str, set[int]] = field(default_factory=dict)
    first: Damage | None = None

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def add(self, rowid: int, damage: Damage) -> None:
        self.rows.setdefault(damage.table, set()).add(rowid)
        if self.first is None:
            self.first = damage

    def __str__(self) -> str:
        if self.unreadable is not None:
            return self.unreadable
        more = self.count - 1
        return f"{self.first}" + (
            f" (and {more} more damaged row{'s' if more > 1 else ''})" if more > 0 else ""
        )

    def __bool__(self) -> bool:
        return self.unreadable is not None or self.count > 0


def _text(raw: bytes | None) -> str:
    """Bytes SQLite returned (read as BLOB: damaged text must not stop the reading), as text to
    show."""
    return "NULL" if raw is None else bytes(raw).decode("utf-8", "replace")


def _row_label(table: str, cols: dict[str, Column]) -> str:
    """SQL naming a row: its id; else its primary key ("(run 3, metric 'read.iops')"); else its
    rowid with the run it belongs to."""
    if "id" in cols:
        return "id"
    key = [c for c, col in cols.items() if col.key]
    if key:
        return (
            "'(' || "
            + " || ', ' || ".join(f"'{c.removesuffix('_id')} ' || quote({c})" for c in key)
            + " || ')'"
        )
    owner = next((c for c in ("run_id", "cell_id") if c in cols), None)
    return (
        "rowid"
        if owner is None
        else f"rowid || ' ({owner.removesuffix('_id')} ' || quote({owner}) || ')'"
    )


def _bad_value_sql(table: str, name: str, col: Column) -> tuple[str, str] | None:
    """(SQL condition true for a value column `name` may not hold, why), or None for a column not
    checked."""
    if name == "id" and col.type == "INTEGER":
        return None  # the rowid itself: always an integer
    nulls = "" if col.nullable else f"{name} IS NULL OR "
    present = f"{name} IS NOT NULL AND " if col.nullable else ""
    if col.type == "INTEGER":
        return f"{nulls}({present}typeof({name}) != 'integer')", "not an integer"
    if col.type == "REAL":
        negative = f" OR {name} < 0" if (table, name) in MEASUREMENTS else ""
        what = "not a measurement (a finite number ≥ 0)" if negative else "not a finite number"
        return (
            f"{nulls}({present}(typeof({name}) NOT IN ('integer', 'real') OR abs({name}) "
            f"> {_MAX}{negative}))",
            what,
        )
    if col.type == "TEXT":
        return f"{nulls}({present}typeof({name}) != 'text')", "not text"
    return None


def _typed(db: sqlite3.Connection, version: int, report: DamageReport) -> None:
    for table, cols in column_types(version).items():
        checks = {n: c for n, col in cols.items() if (c := _bad_value_sql(table, n, col))}
        # One pass over the table for all its columns, the rows named column by column only where
        # it finds one: a pass per column was a third of opening a 100-host file (issue 52).
        anywhere = " OR ".join(f"({cond})" for cond, _ in checks.values())
        if (
            not checks
            or db.execute(f"SELECT 1 FROM {table} WHERE {anywhere} LIMIT 1").fetchone() is None
        ):
            continue
        label = _row_label(table, cols)
        for name, (cond, why) in checks.items():
            shown = f"CAST(substr(quote({name}), 1, 40) AS BLOB)"
            for rowid, row, value in db.execute(
                f"SELECT rowid, CAST({label} AS BLOB), {shown} FROM {table} WHERE {cond}"
            ):
                report.add(int(rowid), Damage(table, _text(row), name, _text(value), why))


def _utf8_columns(db: sqlite3.Connection, table: str, names: list[str]) -> dict[str, bool]:
    """Whether every text value of each column is UTF-8, decoded at once: a column's values joined
    by a newline in SQL (group_concat copies their bytes, unchecked) are UTF-8 exactly when each
    value is, since an ASCII byte between them can neither complete a cut sequence nor follow one. A
    row at a time in Python was most of opening a 100-host file (issue 52), and so was a pass over
    the table per column: every column is joined in one pass. The rows are named one by one only
    where this finds bad bytes."""
    if not names:
        return {}
    joined = ", ".join(
        f"CAST(group_concat(CASE WHEN typeof({n}) = 'text' THEN {n} END, char(10)) AS BLOB)"
        for n in names
    )
    sound = {}
    for name, raw in zip(
        names, db.execute(f"SELECT {joined} FROM {table}").fetchone(), strict=True
    ):
        try:
            bytes(raw or b"").decode("utf-8")
        except UnicodeDecodeError:
            sound[name] = False
        else:
            sound[name] = True
    return sound


def _utf8(db: sqlite3.Connection, version: int, report: DamageReport) -> None:
    """Text that is not UTF-8 (random bytes written over a row): Python could not even decode it."""
    for table, cols in column_types(version).items():
        label = _row_label(table, cols)
        sound = _utf8_columns(db, table, [n for n, col in cols.items() if col.type == "TEXT"])
        for name, col in cols.items():
            if col.type != "TEXT" or sound[name]:
                continue
            for rowid, row, raw in db.execute(
                f"SELECT rowid, CAST({label} AS BLOB), CAST({name} AS BLOB) "
                f"FROM {table} WHERE typeof({name}) = 'text'"
            ):
                try:
                    bytes(raw).decode("utf-8")
                except UnicodeDecodeError as err:
                    shown = bytes(raw)[max(0, err.start - 8) : err.start + 8].hex()
                    report.add(
                        int(rowid),
                        Damage(table, _text(row), name, f"bytes …{shown}…", "not UTF-8 text"),
                    )


def _json(db: sqlite3.Connection, version: int, report: DamageReport) -> None:
    for table, cols in column_types(version).items():
        label = _row_label(table, cols)
        for name in cols:
            want = _JSON_TYPES.get(name)
            if want is None:
                continue
            for rowid, row, value, valid in db.execute(
                f"SELECT rowid, CAST({label} AS BLOB), CAST(substr({name}, 1, 40) AS "
                f"BLOB), json_valid({name}) "
                f"FROM {table} WHERE typeof({name}) = 'text' AND (NOT json_valid({name}) "
                f"OR json_type({name}) != '{want}')"
            ):
                why = "not JSON" if not valid else f"not a JSON {want}"
                report.add(int(rowid), Damage(table, _text(row), name, repr(_text(value)), why))
            if name in _JSON_NUMBERS:
                _json_numbers(db, table, label, name, report)


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _all_numbers(db: sqlite3.Connection, table: str, name: str) -> bool:
    """Whether every JSON object of the column holds finite numbers only, asked of SQLite's own JSON
    reader in one query (parsing each row's text in Python was a third of opening a 100-host file,
    issue 52). True only where no value of any object is other than an integer or a finite real; a
    doubt (a bool, null, text, a nested value, a number SQLite reads as infinite or NaN) answers
    False, and the rows are then read one by one in Python as before."""
    # ±DBL_MAX: SQLite reads a JSON number beyond it as ±Inf, and NaN as NULL (ifnull: a doubt)
    doubt = db.execute(
        f"SELECT EXISTS (SELECT 1 FROM {table}, json_each({table}.{name}) j "
        f"WHERE json_valid({table}.{name}) AND json_type({table}.{name}) = 'object' "
        "AND NOT (j.type IN ('integer', 'real') "
        "AND ifnull(j.value BETWEEN -1.7976931348623157e308 AND 1.7976931348623157e308, 0)))"
    ).fetchone()[0]
    return not doubt


def _json_numbers(
    db: sqlite3.Connection, table: str, label: str, name: str, report: DamageReport
) -> None:
    if _all_numbers(db, table, name):
        return
    for rowid, row, text in db.execute(
        f"SELECT rowid, CAST({label} AS BLOB), CAST({name} AS BLOB) FROM {table} "
        f"WHERE json_valid({name}) AND json_type({name}) = 'object'"
    ):
        for key, value in json.loads(_text(text)).items():
            if not _is_number(value):
                report.add(
                    int(rowid),
                    Damage(
                        table, _text(row), name, f"{str(value)[:40]} for {key!r}", "not a number"
                    ),
                )
                break


def _pages(db: sqlite3.Connection) -> Iterator[str]:
    yield from (str(r[0]) for r in db.execute("PRAGMA quick_check(3)"))


def find_damage(db: sqlite3.Connection, version: int) -> DamageReport:
    """Every damaged place of the iomatrix database `db` of schema `version` (reads only); false
    when sound."""
    report = DamageReport()
    try:
        problems = list(_pages(db))
        if problems != ["ok"]:
            said = " ".join("; ".join(problems).split())  # quick_check's lines, as one line
            report.unreadable = "SQLite finds damaged pages (" + said[:200] + ")"
            return report
        _typed(db, version, report)
        _utf8(db, version, report)
        _json(db, version, report)
    except sqlite3.DatabaseError as err:
        if not is_file_damage(err):
            raise
        report.unreadable = f"SQLite cannot read it ({err})"
    return report
