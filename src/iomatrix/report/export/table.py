"""The table data every exporter renders: rows of named values, the columns shown, the axes that
fold into a header when constant, and notes. Report modules build it (`report/exports.py`); nothing
here formats it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iomatrix.ui import cut_long, fmt


@dataclass
class DataTable:
    """Rows of named values; `axes` columns are the ones folded into a header when constant."""

    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    axes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def constant_axes(self) -> dict[str, Any]:
        if len(self.rows) < 2:
            return {}
        return {
            a: self.rows[0].get(a)
            for a in self.axes
            if len({str(r.get(a)) for r in self.rows}) == 1
        }

    def shown_columns(self) -> list[str]:
        """The columns shown to people: those of `columns` that are not a constant axis."""
        const = self.constant_axes()
        return [c for c in self.columns if c not in const]

    def machine_columns(self) -> list[str]:
        """The shown columns, then every other field the rows carry (numeric CI ends, raw
        ratios)."""
        return list(dict.fromkeys([*self.columns, *(k for r in self.rows for k in r)]))

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": self.columns,
            "rows": self.rows,
            "notes": self.notes,
        }


def cell_text(v: Any) -> str:
    """A value as people read it: '–' for none, floats to 3 significant digits."""
    if v is None:
        return "–"
    if isinstance(v, float):
        return fmt(v)
    # a megabyte string of a damaged database is cut here, not laid out (the JSON keeps it)
    return cut_long(str(v))
