"""Plain text for a terminal (the `table` format of a `DataTable`).

Tables fit the terminal (100 columns when piped; COLUMNS): an axis with one value across every shown
row moves into a header line ("constant: tier=guest backing=dir"), long cells wrap instead of being
cut, and a figure is never split across lines."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from iomatrix.report.export.table import DataTable, cell_text
from iomatrix.report.fit import figure_width

WIDTH = 100


def table_text(t: DataTable, width: int = WIDTH) -> str:
    const = t.constant_axes()
    cols = t.shown_columns()
    buf = io.StringIO()
    # plain text: a cell's '[bold]' or ':x:' is written as it is, not as markup or an emoji
    con = Console(
        file=buf,
        width=width,
        force_terminal=False,
        color_system=None,
        highlight=False,
        markup=False,
        emoji=False,
    )
    if t.title:
        con.print(t.title, markup=False)
    if const:
        con.print(
            "constant: " + " ".join(f"{k}={cell_text(v)}" for k, v in const.items()), markup=False
        )
    table = Table(*cols, box=None, pad_edge=False, show_edge=False)
    texts = [[cell_text(r.get(c)) for c in cols] for r in t.rows]
    for i, c in enumerate(table.columns):
        c.overflow = "fold"  # wrap, never truncate a cell name
        # a figure never splits across lines ('4,673' is not '4,67' and '3'): the names beside it
        # wrap instead
        c.min_width = figure_width([row[i] for row in texts]) or None
    for row in texts:
        table.add_row(*row)
    con.print(table)
    for n in t.notes:
        con.print(n, markup=False)
    return buf.getvalue()


def export(tables: Sequence[DataTable], width: int = WIDTH) -> str:
    return "\n".join(table_text(t, width) for t in tables)
