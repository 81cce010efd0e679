"""`iomatrix recommend`: the configuration to use per workload, how much faster it is than what you
run today, what it risks, and paste-ready snippets."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from iomatrix.commands.answer_options import ANSWERING, AnswerOptions, answer_command
from iomatrix.commands.common import check_target, open_store, parse_objective
from iomatrix.commands.options import MarginOpt, format_option
from iomatrix.errors import UserError
from iomatrix.report.formats import ALL_FORMATS, OutputFormat

if TYPE_CHECKING:
    from iomatrix.store import Store

NAME = "recommend"
FORMATS = ALL_FORMATS
FormatOpt = format_option(*FORMATS)


@answer_command((*ANSWERING, "workload", "by_host"))
def recommend(
    opts: AnswerOptions,
    score: Annotated[
        list[str],
        typer.Option(
            "--score",
            help="weighted-read, weighted-write or weighted-mixed (repeatable; default: all "
            "three when "
            "the sweep has guests).",
        ),
    ] = [],  # noqa: B006
    current_disk: Annotated[
        str | None,
        typer.Option(
            help="Which disk of the libvirt XML (target dev, e.g. vda) or "
            "of the qm config (scsi0); default: the first (Proxmox: "
            "the boot disk)."
        ),
    ] = None,
    format: FormatOpt = OutputFormat.table,
    margin: MarginOpt = None,
    detail: Annotated[
        bool,
        typer.Option(
            "--detail",
            help="After the answer: every workload's verdict, tie-breaks, comparisons, risks and "
            "snippets.",
        ),
    ] = False,
) -> None:
    """The answer first (what to use, how much faster it is, what it risks, the snippet), detail on
    request."""
    # What one host's answer alone needs (--current's parsers, the consolidation tier) is imported
    # after the fleet answer's return: a fleet answer does not pay for it (issue 52).
    from iomatrix.ui import report_width

    ranking = opts.ranking()
    sweep, workload, current, require, target = (
        opts.sweep,
        opts.workload,
        opts.current,
        opts.require,
        opts.target,
    )
    by_host, group, allow_data_loss = opts.by_host, opts.group, opts.allow_data_loss
    check_target(target)
    goal = parse_objective(opts.objective)
    if current_disk is not None and current is None:
        raise UserError(
            "--current-disk needs --current",
            hint="give the libvirt domain XML with --current vm.xml",
        )
    if current is not None:
        from iomatrix.current import parse_current

        cur = parse_current(current, current_disk)
    else:
        cur = None
    store = open_store(opts.db, fleet_sweeps_only(sweep, by_host, group, current))
    # the reports after the store: a missing --db is refused at once
    from iomatrix.report.fleet import fleet_wanted

    if (by_host or group is not None or current is None) and fleet_wanted(
        store, sweep, by_host, group
    ):
        if current is not None:
            raise UserError(
                "--current compares what one host runs today: give it with --sweep N",
                hint="or leave --current out for the fleet answer",
            )
        # the fleet answer decides at each sweep's own margins (its plan's, its roles')
        if margin is not None:
            raise UserError(
                "--margin decides one host's sweep: give it with --sweep N",
                hint="or leave --margin out for the fleet answer (each plan's own margin)",
            )
        from iomatrix.report.fleet import fleet_answers, select_fleet
        from iomatrix.report.fleet_render import render_fleet

        fleet = select_fleet(store, group)
        from iomatrix.report.recommend import parse_requirements

        answers = fleet_answers(
            store,
            fleet,
            workload,
            objective=goal,
            **ranking,
            requirements=parse_requirements(require, allow_data_loss),
        )
        sys.stdout.write(
            render_fleet(fleet, answers, format, report_width(), answer_first=True, target=target)
        )
        return
    from iomatrix.report.consolidation import (
        consolidation_groups,
        consolidation_json,
        consolidation_lines,
    )
    from iomatrix.report.headline import headline
    from iomatrix.report.query import pick_sweep, sweep_info
    from iomatrix.report.recommend import recommend as build
    from iomatrix.report.render import other_sweeps_lines, render_recommendation

    sid = pick_sweep(store, sweep)
    rec = build(
        store,
        sid,
        workload=workload,
        requirements=require,
        current=cur,
        scores=score or None,
        objective=goal,
        allow_data_loss=allow_data_loss,
        margin=margin,
        **ranking,
    )
    groups = consolidation_groups(store, sid)  # consolidation tier: how many tiles per mode
    head = headline(rec, sweep_info(store, sid)["host"]["hostname"], target)
    width = report_width()
    sys.stdout.write(
        render_recommendation(
            rec, format, consolidation_json(groups), headline=head, detail=detail, width=width
        )
    )
    if format in (OutputFormat.table, OutputFormat.markdown) and (
        lines := consolidation_lines(groups)
    ):
        from iomatrix.report.render import wrap

        sys.stdout.write("\n".join(x for line in lines for x in wrap(line, width)) + "\n")
    if format in (OutputFormat.table, OutputFormat.markdown) and (
        others := other_sweeps_lines(store, sid, width)
    ):
        sys.stdout.write("\n".join(others) + "\n")


def fleet_sweeps_only(
    sweep: int | None, by_host: bool, group: str | None, current: str | None
) -> Callable[[Store], set[int] | None] | None:
    """What a central store is read for: the fleet answer reads only the sweeps it answers from
    (each host's latest of a plan, report/fleet.py answer_sweeps); --sweep N and --current (one
    host's answer) read every sweep."""
    if sweep is not None or (current is not None and not by_host and group is None):
        return None

    def choose(meta: Store) -> set[int] | None:
        # imported when a central store is read: a missing --db file is refused before the fleet
        # answer's modules load
        from iomatrix.report.fleet import answer_sweeps

        return answer_sweeps(meta, by_host, group)

    return choose


def register(app: typer.Typer) -> None:
    app.command(NAME)(recommend)
