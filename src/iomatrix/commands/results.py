"""`iomatrix results`: per cell × workload × metric, n, mean, CI and the samples; or one run's raw
fio JSON.

`--format json|csv` write the results document (docs/results-json.md), every sweep unless `--sweep`;
`markdown` its table through the Markdown exporter; `table` the terminal view of one sweep.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from iomatrix.commands.common import open_store, warn_tcg
from iomatrix.commands.options import (
    DEFAULT_DB,
    ByHostOpt,
    FleetGroupOpt,
    ReadDbOpt,
    SweepOpt,
    format_option,
)
from iomatrix.errors import UserError
from iomatrix.report.formats import ALL_FORMATS, OutputFormat
from iomatrix.ui import console, report_width

if TYPE_CHECKING:
    from pathlib import Path

    from iomatrix.store import Store

NAME = "results"
FORMATS = ALL_FORMATS
FormatOpt = format_option(*FORMATS)


def results(
    db: ReadDbOpt = DEFAULT_DB,
    format: FormatOpt = OutputFormat.table,
    sweep: SweepOpt = None,
    metric: Annotated[
        str | None,
        typer.Option(
            help="Only this metric ('all' for every metric; default: "
            "each workload's primary metric)."
        ),
    ] = None,
    monitor: Annotated[
        bool, typer.Option("--monitor", help="Show host monitor summaries beside each cell.")
    ] = False,
    run_id: Annotated[
        int | None, typer.Option("--run", help="With --raw: the run whose tool output to print.")
    ] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="Print the raw fio JSON of the run given with --run.")
    ] = False,
    by_host: ByHostOpt = False,
    group: FleetGroupOpt = None,
) -> None:
    """Results per cell × workload × metric: n, mean, CI and the samples."""
    # The store first, the reports after (commands/__init__.py): a missing --db is refused at once.
    store = open_store(db)
    if raw or run_id is not None:
        _write_raw(store, run_id, raw)
        return
    from iomatrix.report.fleet import fleet_wanted
    from iomatrix.report.query import pick_sweep, sweep_ids
    from iomatrix.report.results import results_document

    # The fleet view: asked for, or the terminal table of a database holding several hosts (JSON and
    # CSV stay the results document of every sweep unless asked).
    asked = by_host or group is not None
    if (asked or format == OutputFormat.table) and fleet_wanted(store, sweep, by_host, group):
        from iomatrix.report.export import render_tables
        from iomatrix.report.fleet import results_by_host, select_fleet
        from iomatrix.report.fleet_render import fleet_heading

        fleet = select_fleet(store, group)
        if format in (OutputFormat.table, OutputFormat.markdown):
            from iomatrix.report.render import wrap

            sys.stdout.write("\n".join(wrap(fleet_heading(fleet), report_width())) + "\n\n")
        sys.stdout.write(
            render_tables(results_by_host(store, fleet, metric), format, report_width())
        )
        return
    ids = (
        sweep_ids(store)
        if (format != OutputFormat.table and sweep is None)
        else [pick_sweep(store, sweep)]
    )
    doc = results_document(store, ids)
    _check_metric(doc, metric, db)
    if format == OutputFormat.table:
        from iomatrix.report.contention import sweep_contention
        from iomatrix.report.export import render_tables
        from iomatrix.report.exports import contention_tables
        from iomatrix.report.terminal import print_results

        warn_tcg(print_results(console, doc, metric, monitor))
        # many clients on one backend
        if tables := contention_tables(sweep_contention(store, ids[0])):
            sys.stdout.write(render_tables(tables, OutputFormat.table, report_width()))
        return
    sys.stdout.write(_export(doc, metric, format))


def _write_raw(store: Store, run_id: int | None, raw: bool) -> None:
    from iomatrix.report.query import run_raw_output

    if not (raw and run_id is not None):
        raise UserError(
            "--raw and --run go together", hint="e.g. 'iomatrix results --run 12 --raw'"
        )
    sys.stdout.write(run_raw_output(store, run_id))


def _check_metric(doc: dict[str, Any], metric: str | None, db: Path) -> None:
    if metric in (None, "all"):
        return
    known = sorted({r["metric"] for sw in doc["sweeps"] for r in sw["results"]})
    if metric not in known:
        raise UserError(
            f"no metric '{metric}' in {db}",
            hint=f"metrics: {', '.join(known) or 'none yet'}, or 'all'",
        )


def _export(doc: dict[str, Any], metric: str | None, format: OutputFormat) -> str:
    """JSON and CSV are the results document's own formats (every field, every sample); Markdown is
    its table."""
    from iomatrix.report import results as document

    if format == OutputFormat.json:
        return document.to_json(doc) + "\n"
    if format == OutputFormat.csv:
        return document.to_csv(doc)
    from iomatrix.report.export import render_tables
    from iomatrix.report.exports import results_table

    return render_tables(results_table(doc, metric), format, report_width())


def register(app: typer.Typer) -> None:
    app.command(NAME)(results)
