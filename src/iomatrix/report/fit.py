"""Tables that fit the terminal: columns are left out, least needed first, until the rest fits the width; what
was left out is said in one line (the JSON and CSV formats keep every column). The last kept column of free
text (notes, flags) wraps inside its cell. Pure layout: no figure is computed here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

PADDING = 2  # rich's default: one space either side of a cell


@dataclass(frozen=True)
class Column:
    heading: str
    keep: int  # lower is kept longer; 0: never left out
    wraps: bool = False  # free text: may wrap in its cell instead of setting the table's width


def _natural(col: Column, values: Sequence[str]) -> int:
    longest = max([len(col.heading), *(Text.from_markup(v).cell_len for v in values)])
    return min(longest, 24) if col.wraps else longest


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Indexes of the columns to show: every column if they fit `width`, else without the least needed ones."""
    shown = list(range(len(columns)))
    widths = [_natural(c, [r[i] for r in rows]) + PADDING for i, c in enumerate(columns)]
    for i in sorted(range(len(columns)), key=lambda i: (-columns[i].keep, -i)):
        if sum(widths[j] for j in shown) <= width or columns[i].keep == 0:
            break
        shown.remove(i)
    return shown


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> tuple[Table, str]:
    """A rich table of the columns that fit, and the line naming those left out ('' when none was)."""
    shown = fit_columns(columns, rows, width)
    t = Table(box=None)
    for i in shown:
        c = columns[i]
        t.add_column(c.heading, overflow="fold", no_wrap=not c.wraps)
    for r in rows:
        t.add_row(*(r[i] for i in shown))
    left = [columns[i].heading for i in range(len(columns)) if i not in shown]
    note = f"left out to fit {width} columns: {', '.join(left)} (--format csv or json has them)" if left else ""
    return t, note
