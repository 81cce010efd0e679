"""The output formats of the report commands (`--format`): one type for every command and every
exporter.

Each command says which members it accepts (`commands.options.format_option`); each member has one
exporter of a `DataTable` in `report/export/`."""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    table = "table"  # for people: the terminal
    json = "json"
    csv = "csv"
    markdown = "markdown"


ALL_FORMATS = (OutputFormat.table, OutputFormat.json, OutputFormat.csv, OutputFormat.markdown)
