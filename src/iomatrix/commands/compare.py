"""`iomatrix compare`: the cells that changed significantly between two sweeps, and a regression
gate for CI.

Exit statuses of the gate (`--fail-above θ`; README, "Exit status"): 0 no figure got worse by more
than θ and the data could have seen it; 4 regression (a figure significantly worse by more than θ);
5 cannot tell (no regression found, but some figure's runs are too few or too noisy to see a change
of θ: the power and the runs per side needed are printed); 2 a mistake the user can fix; 1 an
internal error (a bug)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from iomatrix.commands.common import open_store
from iomatrix.commands.options import ByHostOpt, format_option
from iomatrix.commands.thresholds import parse_fraction
from iomatrix.dburl import parse_db
from iomatrix.errors import UserError
from iomatrix.report.formats import ALL_FORMATS, OutputFormat
from iomatrix.ui import console, err_console, fmt

if TYPE_CHECKING:
    from iomatrix.stats import Change

NAME = "compare"
FORMATS = ALL_FORMATS
FormatOpt = format_option(*FORMATS)

# Distinct from 1 (an internal error, cli.EXIT_INTERNAL), 2 (a user's mistake) and 3 (a sweep that
# gave up): a CI job can tell "the change is real" from "the data cannot say" from "the tool broke".
EXIT_REGRESSION = 4
EXIT_CANNOT_TELL = 5


def compare(
    db_a: Annotated[
        Path, typer.Argument(help="Before (or host A).", metavar="DB_A", parser=parse_db)
    ],
    db_b: Annotated[
        Path, typer.Argument(help="After (or host B).", metavar="DB_B", parser=parse_db)
    ],
    sweep_a: Annotated[int | None, typer.Option(help="Sweep in DB_A (default: latest).")] = None,
    sweep_b: Annotated[int | None, typer.Option(help="Sweep in DB_B (default: latest).")] = None,
    metric: Annotated[
        str | None, typer.Option(help="Metric (default: each workload's primary).")
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Also list cells that did not change.")
    ] = False,
    format: FormatOpt = OutputFormat.table,
    fail_above: Annotated[
        float | None,
        typer.Option(
            help="A CI gate: exit 4 when a figure got significantly worse by more than this "
            "(5% or 0.05), exit 5 "
            "when the runs cannot tell (too few or too noisy to see such a change).",
            metavar="PCT%|FRACTION",
            parser=lambda v: parse_fraction(v, "--fail-above"),
        ),
    ] = None,
    by_host: ByHostOpt = False,
) -> None:
    """Cells that changed significantly between two sweeps (Welch, Holm-corrected), and by how
    much."""
    changes, same_sweep, notes = _changes(db_a, db_b, sweep_a, sweep_b, metric, by_host)
    from iomatrix.report.export import render_tables
    from iomatrix.report.exports import compare_table
    from iomatrix.report.terminal import print_changes

    # A sweep against itself (or a copy of its runs): nothing can have changed, and a table of 1.00×
    # rows, or an empty one, would only hide that the wrong file was given. same n, mean, SD, median
    # and CI everywhere
    identical = same_sweep or all(c.a == c.b for c in changes)
    for note in notes:  # beside a table on the terminal; on stderr beside a machine-readable format
        (console if format == OutputFormat.table else err_console).print(
            f"[yellow]note:[/] {escape(note)}"
        )
    if format != OutputFormat.table:
        sys.stdout.write(render_tables([compare_table(changes, show_all)], format))
    else:
        if identical:
            console.print(
                f"identical sweeps: the {len(changes)} cell × workload figure(s) of A "
                "and B hold the "
                "same runs, so nothing changed (did you mean another database or --sweep-b?)"
            )
        if show_all or not identical:
            print_changes(console, changes, show_all)
    if fail_above is None or identical:
        if identical and format != OutputFormat.table:
            err_console.print("identical sweeps: A and B hold the same runs")
        return
    _gate(changes, fail_above)


def _changes(
    db_a: Path,
    db_b: Path,
    sweep_a: int | None,
    sweep_b: int | None,
    metric: str | None,
    by_host: bool,
) -> tuple[list[Change], bool, list[str]]:
    """The figures of A and B compared, whether they are one sweep, and what to say first about what
    is compared (different plans, few figures in common)."""
    # The stores first, the reports after (commands/__init__.py): a missing database is refused at
    # once.
    a, b = open_store(db_a), open_store(db_b)
    from iomatrix.report.fleet import compare_by_host, is_fleet
    from iomatrix.report.query import pick_sweep, sweep_info
    from iomatrix.report.rank import compare_series, figure_series
    from iomatrix.report.terminal import compare_notes

    # Two fleets (merged databases) compare host by host, by hostname: each host's latest sweep of
    # the plan.
    if by_host or (sweep_a is None and sweep_b is None and is_fleet(a) and is_fleet(b)):
        if sweep_a is not None or sweep_b is not None:
            raise UserError(
                "--sweep-a/--sweep-b select one sweep; --by-host compares every host's",
                hint="give the sweeps alone, or --by-host alone",
            )
        return compare_by_host(a, b, metric), db_a.resolve() == db_b.resolve(), []
    sid_a, sid_b = pick_sweep(a, sweep_a), pick_sweep(b, sweep_b)
    sa, sb = figure_series(a, sid_a, metric), figure_series(b, sid_b, metric)
    changes = compare_series(sa, sb)
    plans = [
        (i["plan"], i["plan_fingerprint"]) for i in (sweep_info(a, sid_a), sweep_info(b, sid_b))
    ]
    return (
        changes,
        db_a.resolve() == db_b.resolve() and sid_a == sid_b,
        compare_notes(sa, sb, len(changes), *plans),
    )


def _higher_is_better(key: str) -> bool:
    """The direction of a compare key's metric ('cell · workload · metric'), from the metric
    registry."""
    from iomatrix.metrics import metric_info

    return metric_info(key.rsplit(" · ", 1)[-1]).higher_is_better


def _gate(changes: Sequence[Change], threshold: float) -> None:
    """Judge the changes against θ (stats.regression_gate), say why, and exit with the gate's
    status."""
    from iomatrix.stats.gate import POWER_TARGET, regression_gate

    v = regression_gate(changes, threshold, _higher_is_better)
    pct = f"{threshold * 100:g}%"
    if v.regressions:
        err_console.print(
            f"[red]regression:[/] {len(v.regressions)} figure(s) significantly worse by more than "
            f"{pct}: " + ", ".join(c.key for c in v.regressions[:5])
        )
        raise typer.Exit(EXIT_REGRESSION)
    if v.undetectable:
        err_console.print(
            f"[yellow]cannot tell:[/] no figure is significantly worse by more than {pct}, but "
            f"{len(v.undetectable)} of {len(changes)} could not show it (power < "
            f"{POWER_TARGET:.0%} at their noise, α={0.05:g}/{max(v.tested, 1)} per figure):"
        )
        for u in v.undetectable[:5]:
            c, p = u.change, u.power
            need = (
                f"about {p.n_needed} runs per side would"
                if p.n_needed is not None
                else "no feasible number of runs would"
            )
            ratio = f"{c.ratio.ratio:.3g}×" if c.ratio.ratio is not None else "–"
            err_console.print(
                f"  {c.key}: {fmt(c.a.mean)} → {fmt(c.b.mean)} ({ratio}, n = {c.a.n}/{c.b.n}); "
                f"power to see a {pct} change {p.power:.0%}; {need} reach {POWER_TARGET:.0%}"
            )
        if len(v.undetectable) > 5:
            err_console.print(f"  … and {len(v.undetectable) - 5} more")
        raise typer.Exit(EXIT_CANNOT_TELL)
    err_console.print(
        f"no regression: no figure is significantly worse by more than {pct}, and the runs could "
        f"have shown one (power ≥ {POWER_TARGET:.0%}, or the interval rules it out)"
    )


def register(app: typer.Typer) -> None:
    app.command(NAME)(compare)
