"""`iomatrix history`: each host's answer and figures sweep by sweep, with the versions that changed
in between and the changes the statistics call real (report/history.py)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.markup import escape

from iomatrix.commands.common import open_store
from iomatrix.commands.options import DEFAULT_DB, ReadDbOpt, format_option
from iomatrix.commands.thresholds import parse_fraction
from iomatrix.report.formats import OutputFormat
from iomatrix.ui import console, fmt

NAME = "history"


def history(
    db: ReadDbOpt = DEFAULT_DB,
    host: Annotated[
        str | None, typer.Option("--host", help="Only this host (inventory name or hostname).")
    ] = None,
    workload: Annotated[str | None, typer.Option("--workload", help="Only this workload.")] = None,
    metric: Annotated[
        str | None, typer.Option("--metric", help="Metric (default: each workload's primary).")
    ] = None,
    threshold: Annotated[
        str,
        typer.Option(
            "--threshold",
            help="Flag a change only when significant and larger than this (e.g. 5%).",
        ),
    ] = "5%",
    output: format_option(OutputFormat.table, OutputFormat.json) = OutputFormat.table,  # type: ignore[valid-type]
) -> None:
    """Each host's answer sweep by sweep: the best configuration per workload and its figure, the
    versions that changed since the host's previous sweep of the plan (kernel, QEMU, fio, OS), and
    the figures significantly slower or faster by more than --threshold (Welch per figure, Holm
    across them, as 'compare --fail-above'), and the lasting steps over each host's whole series (a
    level that moved and held for two sweeps or more)."""
    from iomatrix.report.history import as_json
    from iomatrix.report.history import history as host_history

    theta = parse_fraction(threshold, "--threshold")
    steps = host_history(open_store(db), host, workload, metric, theta)
    if output == OutputFormat.json:
        print(json.dumps(as_json(steps), indent=1))
        return
    last = None
    for s in steps:
        if s.host != last:
            console.print(f"[bold]{escape(s.host)}[/]", highlight=False)
            last = s.host
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.started_at))
        answers = "; ".join(f"{w}: {a[0]} {fmt(a[1])} {a[2]}" for w, a in sorted(s.answers.items()))
        console.print(
            f"  {when} sweep {s.sweep_id} ({s.plan}): {answers or 'no figures'}",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
        if s.versions_changed:
            console.print(
                f"    changed: {', '.join(s.versions_changed)}",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
        for word, changes in (("slower", s.slower), ("faster", s.faster)):
            for c in changes[:5]:
                console.print(
                    f"    {word}: {c.key} {fmt(c.a.mean)} → {fmt(c.b.mean)} "
                    f"(×{c.ratio.ratio:.3g}, Holm p={c.p_adjusted:.2g})",
                    soft_wrap=True,
                    highlight=False,
                    markup=False,
                )
        for key, st, p in s.lasting[:5]:
            console.print(
                f"    lasting step from here: {key} {fmt(st.before)} → {fmt(st.after)} "
                f"(×{st.ratio:.3g} "
                f"over {st.sweeps_before} sweeps before and {st.sweeps_after} from here, "
                f"Holm p={p:.2g})",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
        if s.compared and not (s.slower or s.faster):
            console.print(
                f"    no real change in {s.compared} figure(s) (threshold {theta:.0%})",
                highlight=False,
            )


def register(app: typer.Typer) -> None:
    app.command(NAME)(history)
