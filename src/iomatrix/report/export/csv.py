"""CSV: one stream with every field the rows carry (the machine columns), empty for none."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from iomatrix.report.export.table import DataTable


def table_csv(t: DataTable) -> str:
    cols = t.machine_columns()
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in t.rows:
        w.writerow({c: _cell(r.get(c)) for c in cols})
    return buf.getvalue()


def _cell(v: object) -> object:
    """One CSV field: empty for none, a list or mapping (a fleet answer's hosts, risks) as JSON
    text."""
    if v is None:
        return ""
    return json.dumps(v, ensure_ascii=False) if isinstance(v, list | tuple | dict) else v


def export(tables: Sequence[DataTable]) -> str:
    # One CSV stream: a "table" column says which table each row belongs to when there are several.
    if len(tables) == 1:
        return table_csv(tables[0])
    merged = DataTable(
        "",
        ["table", *dict.fromkeys(c for t in tables for c in t.columns)],
        [{"table": t.title, **r} for t in tables for r in t.rows],
    )
    return table_csv(merged)
