"""`iomatrix recommend` and `iomatrix report`: registered on the main CLI app (iomatrix.cli imports this)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from iomatrix.cli import (
    DEFAULT_DB,
    DbOpt,
    MaxNoiseOpt,
    MinRunsOpt,
    SweepOpt,
    ThresholdOpt,
    TieBreakOpt,
    app,
    check_ranking_options,
)
from iomatrix.errors import UserError
from iomatrix.report.formats import OutputFormat
from iomatrix.ui import console


@app.command()
def recommend(
    db: DbOpt = DEFAULT_DB,
    sweep: SweepOpt = None,
    workload: Annotated[str | None, typer.Option(help="Only this workload.")] = None,
    score: Annotated[list[str], typer.Option(
        "--score", help="weighted-read, weighted-write or weighted-mixed (repeatable; default: all three when "
                        "the sweep has guests).")] = [],  # noqa: B006
    current: Annotated[str | None, typer.Option(
        help="What you run today: a libvirt domain XML file, a QEMU -drive/-blockdev string, or axes "
             "'cache=none,aio=threads,format=qcow2,bus=virtio-blk'.")] = None,
    current_disk: Annotated[str | None, typer.Option(help="Which disk of the libvirt XML (target dev, e.g. vda); "
                                                          "default: the first.")] = None,
    require: Annotated[list[str], typer.Option(
        "--require", help="power-loss-safe, every-write-durable, migratable or snapshots (repeatable).")] = [],  # noqa: B006
    format: Annotated[OutputFormat, typer.Option("--format", help="table, json, csv or markdown.")] \
    = OutputFormat.table,
    min_runs: MinRunsOpt = 3,
    max_noise: MaxNoiseOpt = 0.10,
    threshold: ThresholdOpt = 0.05,
    tie_break: TieBreakOpt = "safety,simplicity",
) -> None:
    """The configuration to use per workload, how much faster it is, what it risks, and paste-ready snippets."""
    from iomatrix.current import parse_current
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.recommend import recommend as build
    from iomatrix.report.render import render_recommendation
    from iomatrix.store import Store

    check_ranking_options(min_runs, max_noise)
    if current_disk is not None and current is None:
        raise UserError("--current-disk needs --current", hint="give the libvirt domain XML with --current vm.xml")
    cur = parse_current(current, current_disk) if current is not None else None
    store = Store.open_existing(db)
    sid = pick_sweep(store, sweep)
    rec = build(store, sid, workload=workload, requirements=require, current=cur,
                scores=score or None, min_n=min_runs, max_noise=max_noise, threshold=threshold,
                tie_break=_keys(tie_break))
    from iomatrix.report.consolidation import consolidation_groups, consolidation_json, consolidation_lines

    groups = consolidation_groups(store, sid)  # consolidation tier: how many tiles per mode
    sys.stdout.write(render_recommendation(rec, format.value, consolidation_json(groups)))
    if format in (OutputFormat.table, OutputFormat.markdown) and (lines := consolidation_lines(groups)):
        sys.stdout.write("\n".join(lines) + "\n")


@app.command()
def report(
    html: Annotated[Path, typer.Option("--html", help="Write the report to this HTML file.")],
    db: DbOpt = DEFAULT_DB,
    sweep: SweepOpt = None,
    current: Annotated[str | None, typer.Option(help="What you run today (as for 'recommend').")] = None,
    require: Annotated[list[str], typer.Option("--require", help="As for 'recommend' (repeatable).")] = [],  # noqa: B006
    min_runs: MinRunsOpt = 3,
    max_noise: MaxNoiseOpt = 0.10,
    threshold: ThresholdOpt = 0.05,
    tie_break: TieBreakOpt = "safety,simplicity",
) -> None:
    """One self-contained HTML file: recommendation and risks, rankings with error bars, block-size bars,
    host panels over time, sweep metadata and every run."""
    from iomatrix.current import parse_current
    from iomatrix.report.html import write_report
    from iomatrix.report.query import pick_sweep
    from iomatrix.store import Store

    check_ranking_options(min_runs, max_noise)
    cur = parse_current(current) if current is not None else None
    store = Store.open_existing(db)
    size = write_report(store, pick_sweep(store, sweep), html, current=cur, requirements=require,
                        min_n=min_runs, max_noise=max_noise, threshold=threshold, tie_break=_keys(tie_break))
    console.print(f"wrote {html} ({size / 1024:.0f} KiB): open it in a browser, it needs no network")


def _keys(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]
