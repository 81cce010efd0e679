"""Markdown: a heading and a pipe table per table; constant axes go into one line above it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from iomatrix.report.export.table import DataTable, cell_text


def _escape(v: Any) -> str:
    return cell_text(v).replace("|", "\\|").replace("\n", " ")


def table_markdown(t: DataTable) -> str:
    const = t.constant_axes()
    cols = t.shown_columns()
    out = [f"### {t.title}", ""] if t.title else []
    if const:
        out += [
            "Constant across rows: " + ", ".join(f"`{k}={cell_text(v)}`" for k, v in const.items()),
            "",
        ]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join("---" for _ in cols) + "|")
    out += ["| " + " | ".join(_escape(r.get(c)) for c in cols) + " |" for r in t.rows]
    out += [""] + [f"*{n}*" for n in t.notes] if t.notes else []
    return "\n".join(out) + "\n"


def export(tables: Sequence[DataTable]) -> str:
    return "\n".join(table_markdown(t) for t in tables)
