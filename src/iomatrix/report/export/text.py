"""Plain text for a terminal (the `table` format of a `DataTable`).

Tables fit 100 columns: an axis with one value across every shown row moves into a header line
("constant: tier=guest backing=dir"), and long cells wrap instead of being cut.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from iomatrix.report.export.table import DataTable, cell_text

WIDTH = 100


def table_text(t: DataTable, width: int = WIDTH) -> str:
    const = t.constant_axes()
    cols = t.shown_columns()
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False)
    if t.title:
        con.print(t.title, markup=False)
    if const:
        con.print("constant: " + " ".join(f"{k}={cell_text(v)}" for k, v in const.items()), markup=False)
    table = Table(*cols, box=None, pad_edge=False, show_edge=False)
    for c in table.columns:
        c.overflow = "fold"  # wrap, never truncate a cell name
    for r in t.rows:
        table.add_row(*(cell_text(r.get(c)) for c in cols))
    con.print(table)
    for n in t.notes:
        con.print(n, markup=False)
    return buf.getvalue()


def export(tables: Sequence[DataTable]) -> str:
    return "\n".join(table_text(t) for t in tables)
