"""`iomatrix rank`: cells ordered per tier, grouped when not significantly different, and a
decision; or the top cells by a block-size-weighted score (`--score`)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from iomatrix.commands.answer_options import RANKING, AnswerOptions, answer_command
from iomatrix.commands.common import open_store, parse_objective, warn_tcg
from iomatrix.commands.options import format_option
from iomatrix.errors import UserError
from iomatrix.report.formats import ALL_FORMATS, OutputFormat
from iomatrix.ui import console, report_width

NAME = "rank"
FORMATS = ALL_FORMATS
FormatOpt = format_option(*FORMATS)


@answer_command((*RANKING, "workload", "by_host"))
def rank_cmd(
    opts: AnswerOptions,
    metric: Annotated[
        str | None, typer.Option(help="Rank by this metric (default: the workload's primary).")
    ] = None,
    score: Annotated[
        str | None,
        typer.Option(
            help="Rank by a block-size-weighted bare-metal-relative score: "
            "weighted-read, weighted-write or weighted-mixed."
        ),
    ] = None,
    top: Annotated[int, typer.Option(help="Rows per table.")] = 20,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Order cells per tier, group those not significantly different, and decide: one answer, a tie,
    or what it would take to separate the leaders."""
    if top < 1:
        raise UserError(f"--top {top} is out of range", hint="use 1 or more rows per table")
    ranking = opts.ranking()
    goal = parse_objective(opts.objective)
    # The store first, the reports after (commands/__init__.py): a missing --db is refused at once.
    store = open_store(opts.db)
    sweep, workload, min_runs = opts.sweep, opts.workload, opts.min_runs
    from iomatrix.report.fleet import fleet_wanted
    from iomatrix.report.objective import objective_line
    from iomatrix.report.query import pick_sweep
    from iomatrix.report.rank import rank_sweep, weighted_scores
    from iomatrix.report.terminal import print_rankings, print_scores

    if score is None and fleet_wanted(store, sweep, opts.by_host, opts.group):
        from iomatrix.report.fleet import fleet_answers, select_fleet
        from iomatrix.report.fleet_render import render_fleet

        fleet = select_fleet(store, opts.group)
        answers = fleet_answers(store, fleet, workload, metric, objective=goal, **ranking)
        sys.stdout.write(render_fleet(fleet, answers, format, report_width()))
        return
    sid = pick_sweep(store, sweep)
    if score is not None:
        rows, factors = weighted_scores(store, sid, score)
        print_scores(console, score, rows, factors, top)
        return
    rankings = rank_sweep(store, sid, workload, metric, objective=goal, **ranking)
    from iomatrix.report.contention import sweep_contention
    from iomatrix.report.curves import sweep_curves
    from iomatrix.report.export import render_tables
    from iomatrix.report.exports import contention_tables, curve_tables, rank_tables

    # latency against load: queue-depth families only
    curves = curve_tables(sweep_curves(store, sid, workload))
    # many clients: sweeps with clients > 1
    curves += contention_tables(sweep_contention(store, sid, workload))
    if format != OutputFormat.table:
        sys.stdout.write(render_tables(rank_tables(rankings) + curves, format, report_width()))
        return
    if goal is not None:  # said only when asked: without it, rank reads as it always did
        console.print(objective_line(goal), markup=False, highlight=False)
    accels = print_rankings(console, rankings, top, min_runs)
    if curves:
        sys.stdout.write(render_tables(curves, OutputFormat.table, report_width()))
    from iomatrix.report.consolidation import consolidation_groups, consolidation_lines

    # consolidation tier: how many tiles
    for line in consolidation_lines(consolidation_groups(store, sid)):
        console.print(line, markup=False, highlight=False)
    from iomatrix.report.guests import guests_used

    # whose kernel and driver the guest tables went through (issue 51)
    for g in guests_used(store, sid):
        console.print(f"guest: {g.line()}", markup=False, highlight=False)
    warn_tcg(accels)


def register(app: typer.Typer) -> None:
    app.command(NAME)(rank_cmd)
