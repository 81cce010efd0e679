"""`iomatrix compare`: the cells that changed significantly between two sweeps, and a regression gate for CI
(`--fail-above`: exit 1)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from iomatrix.commands.common import open_store
from iomatrix.commands.options import ByHostOpt, format_option
from iomatrix.errors import UserError
from iomatrix.report.formats import ALL_FORMATS, OutputFormat
from iomatrix.ui import console, err_console

NAME = "compare"
FORMATS = ALL_FORMATS
FormatOpt = format_option(*FORMATS)


def compare(
    db_a: Annotated[Path, typer.Argument(help="Before (or host A).")],
    db_b: Annotated[Path, typer.Argument(help="After (or host B).")],
    sweep_a: Annotated[int | None, typer.Option(help="Sweep in DB_A (default: latest).")] = None,
    sweep_b: Annotated[int | None, typer.Option(help="Sweep in DB_B (default: latest).")] = None,
    metric: Annotated[str | None, typer.Option(help="Metric (default: each workload's primary).")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Also list cells that did not change.")] = False,
    format: FormatOpt = OutputFormat.table,
    fail_above: Annotated[float | None, typer.Option(
        help="Exit 1 when any figure got significantly worse by more than this many percent (a CI gate).")]
    = None,
    by_host: ByHostOpt = False,
) -> None:
    """Cells that changed significantly between two sweeps (Welch, Holm-corrected), and by how much."""
    from iomatrix.report.export import render_tables
    from iomatrix.report.exports import compare_table, regressions
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.rank import compare_stores
    from iomatrix.report.terminal import print_changes

    if fail_above is not None and not (math.isfinite(fail_above) and fail_above >= 0):
        raise UserError(f"--fail-above {fail_above} is out of range", hint="use a percentage ≥ 0, e.g. 5")
    a, b = open_store(db_a), open_store(db_b)
    from iomatrix.report.fleet import compare_by_host, is_fleet

    # Two fleets (merged databases) compare host by host, by hostname: each host's latest sweep of the plan.
    if by_host or (sweep_a is None and sweep_b is None and is_fleet(a) and is_fleet(b)):
        if sweep_a is not None or sweep_b is not None:
            raise UserError("--sweep-a/--sweep-b select one sweep; --by-host compares every host's",
                            hint="give the sweeps alone, or --by-host alone")
        changes = compare_by_host(a, b, metric)
    else:
        changes = compare_stores(a, pick_sweep(a, sweep_a), b, pick_sweep(b, sweep_b), metric)
    worse = regressions(changes, fail_above) if fail_above is not None else []
    if format != OutputFormat.table:
        sys.stdout.write(render_tables([compare_table(changes, show_all)], format))
        if worse:
            raise typer.Exit(1)
        return
    print_changes(console, changes, show_all)
    if worse:
        err_console.print(f"[red]regression:[/] {len(worse)} figure(s) significantly worse by more than "
                          f"{fail_above:g}%: " + ", ".join(c.key for c in worse[:5]), soft_wrap=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(NAME)(compare)
