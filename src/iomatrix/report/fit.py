"""Tables that fit the terminal: columns are left out, least needed first, until the rest fits the
width; what was left out is said in one line (the JSON and CSV formats keep every column). The last
kept column of free text (notes, flags) wraps inside its cell. Pure layout: no figure is computed
here."""

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
    # A cell's name: wraps at its spaces (a word longer than the column folds) where the table is
    # too wide, so that the figures beside it keep their width instead of being squeezed out of
    # sight.
    name: bool = False


# A name column counts at most this wide when choosing which columns fit: beyond it the name wraps.
NAME_WIDTH = 40

# A cell is plain text (a host, workload or plan name is shown as written, '[bold]' included) or a
# `Text` carrying its own style.
Cell = str | Text


def _text(value: Cell) -> Text:
    return value if isinstance(value, Text) else Text(value)


def _natural(col: Column, values: Sequence[Cell]) -> int:
    longest = max([len(col.heading), *(_text(v).cell_len for v in values)])
    return min(longest, 24) if col.wraps else min(longest, NAME_WIDTH) if col.name else longest


# A word longer than this is no figure (a version string, a path in a note): it may fold.
FIGURE_MAX = 24


def figure_width(values: Sequence[Cell]) -> int:
    """The longest word holding a digit ('4,673', '(1.20–3.00)'): a column's narrowest width that
    splits no figure across lines (0 for a column of words)."""
    return max(
        (
            len(w)
            for v in values
            for w in _text(v).plain.split()
            if any(ch.isdigit() for ch in w) and len(w) <= FIGURE_MAX
        ),
        default=0,
    )


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> list[int]:
    """Indexes of the columns to show: every column if they fit `width`, else without the least
    needed ones."""
    shown = list(range(len(columns)))
    widths = [_natural(c, [r[i] for r in rows]) + PADDING for i, c in enumerate(columns)]
    for i in sorted(range(len(columns)), key=lambda i: (-columns[i].keep, -i)):
        if sum(widths[j] for j in shown) <= width or columns[i].keep == 0:
            break
        shown.remove(i)
    return shown


def fitted_table(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int
) -> tuple[Table, str]:
    """A rich table of the columns that fit, and the line naming those left out ('' when none
    was)."""
    shown = fit_columns(columns, rows, width)
    t = Table(box=None)
    for i in shown:
        c = columns[i]
        wraps = c.wraps or c.name
        # a column of figures is never narrower than its longest figure; free text and names wrap
        # instead
        t.add_column(
            c.heading,
            overflow="fold",
            no_wrap=not wraps,
            min_width=None if wraps else figure_width([r[i] for r in rows]) or None,
        )
    for r in rows:
        t.add_row(*(_text(r[i]) for i in shown))
    left = [columns[i].heading for i in range(len(columns)) if i not in shown]
    note = (
        f"left out to fit {width} columns: {', '.join(left)} (--format csv or json has them)"
        if left
        else ""
    )
    return t, note
