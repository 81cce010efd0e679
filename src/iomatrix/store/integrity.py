"""Damaged content of a results database, found when it is opened, before any report or sweep reads it.

A file can be damaged by a disk, a copy cut short or a hand edit: pages SQLite cannot read, a stored sample that is
not a number (`'garbage'`, an infinity), a JSON column that is not JSON. Each would otherwise surface deep in a
report as a traceback. `find_damage` looks once, by reading only, and names the first damaged place (table, row,
column), so the error is one line the user can act on.

The cost is one pass over the file (`PRAGMA quick_check`: every page, without the index cross-checks of
`integrity_check`) and one over the samples and JSON columns; both are linear in the file's size.
"""

from __future__ import annotations

import sqlite3

from iomatrix.store.schema import COLUMNS

# The numeric columns whose rows a report turns into numbers: (table, column, what names a row).
_NUMBERS: tuple[tuple[str, str, str], ...] = (
    ("samples", "value", "'run ' || run_id || ', metric ' || quote(metric)"),
    ("monitor", "value", "'run ' || run_id || ', field ' || quote(field) || ', t=' || t"),
    ("monitor", "t", "'run ' || run_id || ', field ' || quote(field)"),
)
# The largest finite double: SQLite stores 1e999 as +Inf, which compares above it.
_MAX = "1.7976931348623157e308"


# What each JSON column holds at its top level ('object' or 'array'), as the store writes it and reports read it.
_JSON_TYPES = {"plan_json": "object", "pruned_json": "array", "notes_json": "array", "metric_registry": "object",
               "extra_json": "object", "backing_json": "object", "phases_json": "object", "meta_json": "object",
               "disturbance_json": "array"}
# JSON objects whose values a report turns into numbers.
_JSON_NUMBERS = ("phases_json",)


# SQLite's words for a file it cannot read (damaged pages, not a database, an I/O error of the device below):
# the user's file, not iomatrix's code. Any other SQLite error (a missing column, a syntax error) is a bug.
_DAMAGE_WORDS = ("malformed", "not a database", "disk i/o error", "database corrupt", "file is encrypted")


def is_file_damage(err: sqlite3.DatabaseError) -> bool:
    """Whether SQLite raised `err` because of the file's content or device (not because of a query's code)."""
    return any(w in str(err).lower() for w in _DAMAGE_WORDS)


def _json_columns(version: int) -> list[tuple[str, str]]:
    cols = COLUMNS[version]
    return [(table, col) for table in sorted(cols) for col in sorted(cols[table]) if col in _JSON_TYPES]


def find_damage(db: sqlite3.Connection, version: int) -> str | None:
    """The first damaged place in the iomatrix database `db` of schema `version`, in words; None when sound."""
    try:
        problems = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as err:
        if not is_file_damage(err):
            raise
        return f"SQLite cannot read it ({err})"
    if problems != ["ok"]:
        return "SQLite finds damaged pages (" + "; ".join(problems)[:200] + ")"
    try:
        for table, col, where in _NUMBERS:
            row = db.execute(
                f"SELECT {where}, quote({col}) FROM {table} WHERE typeof({col}) NOT IN ('integer', 'real') "
                f"OR abs({col}) > {_MAX} LIMIT 1").fetchone()
            if row is not None:
                return f"{table} row ({row[0]}) holds {str(row[1])[:40]} in column {col}, not a finite number"
        for table, col in _json_columns(version):
            key = "id" if "id" in COLUMNS[version][table] else "rowid"
            row = db.execute(f"SELECT {key}, substr({col}, 1, 40) FROM {table} "
                             f"WHERE {col} IS NOT NULL AND NOT json_valid({col}) LIMIT 1").fetchone()
            if row is not None:
                return f"{table} row {row[0]} holds {row[1]!r} in column {col}, not JSON"
            want = _JSON_TYPES[col]
            row = db.execute(f"SELECT {key}, substr({col}, 1, 40) FROM {table} "
                             f"WHERE {col} IS NOT NULL AND json_type({col}) != '{want}' LIMIT 1").fetchone()
            if row is not None:
                return f"{table} row {row[0]} holds {row[1]!r} in column {col}, not a JSON {want}"
            if col in _JSON_NUMBERS:
                row = db.execute(f"SELECT {table}.{key}, j.key, quote(j.value) FROM {table}, "
                                 f"json_each({table}.{col}) j WHERE j.type NOT IN ('integer', 'real') "
                                 "LIMIT 1").fetchone()
                if row is not None:
                    return (f"{table} row {row[0]} holds {str(row[2])[:40]} for {row[1]!r} in column {col}, "
                            "not a number")
    except sqlite3.DatabaseError as err:
        if not is_file_damage(err):
            raise
        return f"SQLite cannot read it ({err})"
    return None
