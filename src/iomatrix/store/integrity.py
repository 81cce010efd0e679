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


def _json_columns(version: int) -> list[tuple[str, str]]:
    cols = COLUMNS[version]
    return [(table, col) for table in sorted(cols) for col in sorted(cols[table])
            if col.endswith("_json") or col == "metric_registry"]


def find_damage(db: sqlite3.Connection, version: int) -> str | None:
    """The first damaged place in the iomatrix database `db` of schema `version`, in words; None when sound."""
    try:
        problems = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as err:
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
    except sqlite3.DatabaseError as err:
        return f"SQLite cannot read it ({err})"
    return None
