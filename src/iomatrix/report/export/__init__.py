"""Exporters: one module per output format, each rendering the same table data (`table.DataTable`).

    text.py      table     plain text for a terminal, 100 columns, constant axes in a header line
    json.py      json      every table with every field its rows carry
    csv.py       csv       one stream; a "table" column when there are several tables
    markdown.py  markdown  a heading and a pipe table per table

`render_tables` picks the exporter of a format. Nothing here computes a statistic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from iomatrix.report.export import csv, json, markdown, text
from iomatrix.report.export.table import DataTable
from iomatrix.report.formats import OutputFormat

EXPORTERS: dict[OutputFormat, Callable[[Sequence[DataTable]], str]] = {
    OutputFormat.table: text.export,
    OutputFormat.json: json.export,
    OutputFormat.csv: csv.export,
    OutputFormat.markdown: markdown.export,
}


def render_tables(
    tables: Sequence[DataTable], format: OutputFormat | str, width: int | None = None
) -> str:
    """The tables in `format`; the `table` format at `width` columns (the commands pass the
    terminal's: a DataTable is never wider than COLUMNS; 100 when not given)."""
    if OutputFormat(format) == OutputFormat.table and width is not None:
        return text.export(tables, width)
    return EXPORTERS[OutputFormat(format)](tables)


__all__ = ["EXPORTERS", "DataTable", "render_tables"]
