"""`iomatrix monitor`: a run's host time series, one row per sample."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from iomatrix.commands.common import open_store
from iomatrix.commands.options import DEFAULT_DB, ReadDbOpt, format_option
from iomatrix.errors import UserError
from iomatrix.report.formats import ALL_FORMATS, OutputFormat
from iomatrix.ui import console

NAME = "monitor"
FORMATS = ALL_FORMATS
FormatOpt = format_option(*FORMATS)
# A run sampled on a host without a block device to watch (tmpfs, a guest's disk on a pipe) has no
# disk.* field, and a bare-metal run has no proc.*: the default asks for these only where they were
# recorded.
DEFAULT_FIELDS = "cpu.,disk.,mem.,proc."


def monitor(
    run_id: Annotated[
        int, typer.Option("--run", help="Run id (see 'iomatrix results --format json').")
    ],
    db: ReadDbOpt = DEFAULT_DB,
    fields: Annotated[
        str | None,
        typer.Option(
            metavar="PREFIXES",
            help="Comma-separated field prefixes to show "
            f"(default: those of {DEFAULT_FIELDS} the run recorded).",
        ),
    ] = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Print a run's host time series (one row per sample)."""
    store = open_store(db)  # before the reports: a missing --db is refused at once
    from iomatrix.report.query import monitor_series

    series = monitor_series(store, run_id)
    prefixes = (
        field_prefixes(series, fields, run_id) if fields is not None else default_prefixes(series)
    )
    names = sorted(n for n in series if n.startswith(prefixes))
    if format != OutputFormat.table:
        from iomatrix.report.export import render_tables
        from iomatrix.report.exports import monitor_table

        sys.stdout.write(render_tables([monitor_table(series, prefixes)], format))
        return
    if not names:
        console.print(
            f"run {run_id} has no monitor samples" + (f" matching {fields}" if fields else ""),
            markup=False,
        )
        return
    from iomatrix.report.terminal import print_monitor

    print_monitor(console, series, names)


def default_prefixes(series: dict[str, list[tuple[float, float]]]) -> tuple[str, ...]:
    """The default prefixes the run recorded (every recorded group when it recorded none of
    them)."""
    wanted = tuple(x for x in DEFAULT_FIELDS.split(",") if any(n.startswith(x) for n in series))
    return wanted or tuple(sorted({n.split(".")[0] + "." for n in series}))


def field_prefixes(
    series: dict[str, list[tuple[float, float]]], fields: str, run_id: int
) -> tuple[str, ...]:
    """The prefixes of `--fields`, each matching a recorded field (a run without samples matches
    none)."""
    prefixes = tuple(x.strip() for x in fields.split(",") if x.strip())
    groups = sorted({n.split(".")[0] + "." for n in series})
    unknown = [x for x in prefixes if not any(n.startswith(x) for n in series)]
    if not prefixes or (series and unknown):
        raise UserError(
            f"--fields {fields!r} matches no monitor field of run {run_id}"
            if not unknown
            else f"--fields: no monitor field of run {run_id} starts with "
            + ", ".join(repr(u) for u in unknown),
            hint=f"field prefixes: {', '.join(groups) or 'none recorded'}",
        )
    return prefixes


def register(app: typer.Typer) -> None:
    app.command(NAME)(monitor)
